-- t/gather_scatter.lua: kiln.gather_scatter (message passing in one op,
-- out = base or 0; out[dst[e]] += h[src[e]] * w[e]) on the CPU against a
-- float64 reference computed here in plain Lua on fresh random inputs
-- (repeated indices, rows no edge reaches, every float dtype, feature
-- widths 1, 7, 16, 33, 128); its errors; the gather_scatter pass (which
-- chains become one op, what KILN_LOGS=fusion says about those that do
-- not); and samples/gcn.lua compiled against eager in every mode.
-- This is the CPU side: on a machine with a GPU, run it with the CUDA
-- backend off (t/cuda_gather_scatter.lua is the GPU side).
local T = dofile("t/lib/tap.lua")
T.cpu_only("t/gather_scatter.lua")

local nextseed = T.seeds()

-- unit roundoff of each dtype: each rounding step errs by at most u * |value|
local U = { f64 = 2 ^ -53, f32 = 2 ^ -24, bf16 = 2 ^ -8, f16 = 2 ^ -11 }

-- random 1-based indices in 1..n, as i64 (or i32)
local function indices(e, n, dt)
  return kiln.randint(1, n + 1, { e }, { seed = nextseed() }):to(dt or "i64")
end

-- the reference in plain Lua doubles on the (dtype-rounded) inputs; also,
-- per element, the sum of the magnitudes that went in (for the error bound)
local function reference(h, src, dst, w, base, rows)
  local H = h:to("f64"):tolist()
  local S, D = src:tolist(), dst:tolist()
  local W = w and w:to("f64"):reshape({ -1 }):tolist()
  local B = base and base:to("f64"):tolist()
  local one_d = h.ndim == 1
  local width = one_d and 1 or h:shape()[2]
  local ref, mag = {}, {}
  for r = 1, rows do
    ref[r], mag[r] = {}, {}
    for f = 1, width do
      local b = B and (one_d and B[r] or B[r][f]) or 0
      ref[r][f], mag[r][f] = b, math.abs(b)
    end
  end
  for e = 1, #S do
    local s, d = S[e], D[e]
    for f = 1, width do
      local m = (one_d and H[s] or H[s][f]) * (W and W[e] or 1)
      ref[d][f] = ref[d][f] + m
      mag[d][f] = mag[d][f] + math.abs(m)
    end
  end
  return ref, mag
end

-- max over elements of |got - ref| / bound, bound = (edges into the row + 2)
-- roundings of u * the magnitudes summed; NaN anywhere fails (math.huge)
local function scaled_err(got, ref, mag, degree, u)
  local G = got:to("f64"):tolist()
  local worst = 0
  for r = 1, #ref do
    for f = 1, #ref[r] do
      local g = type(G[r]) == "table" and G[r][f] or G[r]
      if g ~= g then return math.huge end
      local bound = (2 * (degree[r] or 0) + 2) * u * mag[r][f] + 1e-300
      local e = math.abs(g - ref[r][f]) / bound
      if e > worst then worst = e end
    end
  end
  return worst
end

local function degrees(dst)
  local deg = {}
  for _, d in ipairs(dst:tolist()) do deg[d] = (deg[d] or 0) + 1 end
  return deg
end

local function max_abs_diff(a, b)
  return (a:to("f64") - b:to("f64")):abs():amax():item()
end

-- the op against the reference, and against the unfused eager chain (the
-- CPU op rounds as the chain does, in its order: the same bits)
for _, dt in ipairs({ "f32", "bf16", "f16", "f64" }) do
  for _, width in ipairs({ 1, 7, 16, 33, 128 }) do
    for _, variant in ipairs({ "weight, zeros", "no weight, base", "weight, base, i32" }) do
      local n, rows, e = 9, 12, 40 -- rows 10..12 and whatever randint misses get no edge
      local idt = variant:find("i32") and "i32" or "i64"
      local h = kiln.randn({ n, width }, { seed = nextseed(), dtype = dt })
      local src, dst = indices(e, n, idt), indices(e, rows - 3, idt)
      local w = not variant:find("no weight") and kiln.randn({ e, 1 }, { seed = nextseed(), dtype = dt }) or nil
      local base = variant:find("base") and kiln.randn({ rows, width }, { seed = nextseed(), dtype = dt }) or nil
      local opts = { weight = w, base = base }
      if not base then opts.rows = rows end
      local got = kiln.gather_scatter(h, src, dst, opts)
      local ref, mag = reference(h, src, dst, w, base, rows)
      local err = scaled_err(got, ref, mag, degrees(dst), U[dt])
      local name = string.format("%s width %d, %s", dt, width, variant)
      T.ok(got.dtype == dt and got:shape()[1] == rows and got:shape()[2] == width and err <= 1,
        string.format("%s: the f64 reference within the rounding bound (%.3g of it)", name, err))
      local msg = h:index_select(1, src)
      if w then msg = msg * w end
      local chain = (base or kiln.zeros({ rows, width }, { dtype = dt })):index_add(1, dst, msg)
      T.is(max_abs_diff(got, chain), 0, name .. ": the eager chain's bits")
    end
  end
end

-- 1-D h (one number a row), a weight of shape {E}, no edges, no rows
do
  local h = kiln.randn({ 6 }, { seed = nextseed(), dtype = "f64" })
  local src, dst = indices(15, 6), indices(15, 4)
  local w = kiln.randn({ 15 }, { seed = nextseed(), dtype = "f64" })
  local got = kiln.gather_scatter(h, src, dst, { weight = w, rows = 4 })
  local ref, mag = reference(h, src, dst, w, nil, 4)
  T.ok(got.ndim == 1 and scaled_err(got, ref, mag, degrees(dst), U.f64) <= 1, "1-D h with a {E} weight")
  local none = kiln.gather_scatter(h, kiln.zeros({ 0 }, { dtype = "i64" }), kiln.zeros({ 0 }, { dtype = "i64" }),
    { rows = 3 })
  T.ok(none:shape()[1] == 3 and none:abs():sum():item() == 0, "no edges: zero rows")
  local base = kiln.randn({ 3 }, { seed = nextseed(), dtype = "f64" })
  local kept = kiln.gather_scatter(h, kiln.zeros({ 0 }, { dtype = "i64" }), kiln.zeros({ 0 }, { dtype = "i64" }),
    { base = base })
  T.is(max_abs_diff(kept, base), 0, "no edges: the base")
  local h0 = kiln.randn({ 0, 5 }, { seed = nextseed() })
  local z = kiln.gather_scatter(h0, kiln.zeros({ 0 }, { dtype = "i64" }), kiln.zeros({ 0 }, { dtype = "i64" }))
  T.ok(z:shape()[1] == 0 and z:shape()[2] == 5, "no rows at all (rows default to h's)")
end

-- errors: out-of-range indices (as eager index_select / index_add say it), bad shapes and options
do
  local h = kiln.randn({ 5, 3 }, { seed = nextseed() })
  local src = kiln.tensor({ 1, 2, 5, 3 }):to("i64")
  local dst = kiln.tensor({ 2, 2, 1, 4 }):to("i64")
  local function err(...)
    local ok, e = pcall(kiln.gather_scatter, ...)
    return ok and "(no error)" or tostring(e)
  end
  T.like(err(h, kiln.tensor({ 1, 2, 6, 3 }):to("i64"), dst, { rows = 4 }),
    "gather_scatter: src index 6 at position 3 is out of range 1%.%.5", "a src index past h's rows")
  T.like(err(h, kiln.tensor({ 1, 0, 5, 3 }):to("i32"), dst, { rows = 4 }),
    "gather_scatter: src index 0 at position 2 is out of range 1%.%.5", "a src index 0 (indices are 1-based)")
  T.like(err(h, src, kiln.tensor({ 2, 2, 1, 5 }):to("i64"), { rows = 4 }),
    "gather_scatter: dst index 5 at position 4 is out of range 1%.%.4", "a dst index past the output's rows")
  T.like(err(h, src, kiln.tensor({ -1, 2, 1, 4 }):to("i64"), { base = kiln.zeros({ 4, 3 }) }),
    "gather_scatter: dst index %-1 at position 1 is out of range 1%.%.4", "a negative dst index, with a base")
  T.like(err(h, src, dst:slice(1, 1, 3), { rows = 4 }),
    "src and dst must be 1%-D of one length %(one per edge%), got {4} and {3}", "src and dst of other lengths")
  T.like(err(h, src, dst, { rows = 4, weight = kiln.randn({ 1, 4 }) }),
    "weight must hold one number per edge %({4} or {4, 1, ...}%), got {1,4}", "a weight that is not per edge")
  T.like(err(h, src, dst, { rows = 4, weight = kiln.randn({ 4, 1 }, { dtype = "f64" }) }),
    "weight must have h's dtype f32, got f64", "a weight of another dtype")
  T.like(err(h, src, dst, { base = kiln.zeros({ 4, 2 }) }), "base must have h's shape {5,3} but for dim 1, got {4,2}",
    "a base of another row width")
  T.like(err(h, src, dst, { base = kiln.zeros({ 4, 3 }), rows = 4 }), "give rows or base, not both",
    "rows and base together")
  T.like(err(h, src, dst, { rwos = 4 }),
    "^t/gather_scatter%.lua:%d+: gather_scatter: unknown option 'rwos' %(known: weight, base, rows%); did you mean 'rows'%?$",
    "an unknown option is an error at the caller's line")
  T.like(err(h, src:to("f32"), dst), "gather_scatter: index must be i32 or i64, got f32", "a float index")
  T.like(err(h:to("i32"), src, dst), "gather_scatter: needs a float h, got i32", "an integer h")
  T.like(err(h, src, dst, { rows = -1 }), "rows must be a whole number >= 0", "negative rows")
end

-- ---------------------------------------------------------------------------
-- the gather_scatter pass

-- gather_scatter nodes in cm's kernels, what the last one covers, and
-- whether an index_add is left (the chain unfused)
local function fused(cm)
  local n, covers, left = 0, nil, false
  for _, k in ipairs(cm:kernels()) do
    for _, op in ipairs(k.ops) do
      if op == "gather_scatter" then
        n = n + 1
        covers = k.covers
      end
      if op == "index_add" then left = true end
    end
  end
  return n, covers, left
end

do
  local N, E, F = 11, 37, 6
  local h = kiln.randn({ N, F }, { seed = nextseed() })
  local src, dst = indices(E, N), indices(E, N)
  local w = kiln.randn({ E }, { seed = nextseed() })
  local base = kiln.randn({ N, F }, { seed = nextseed() })
  local cases = {
    -- name, fused nodes wanted, function, what covers says
    { "gcn prop", 1, function(h, src, dst, w)
      local msg = h:index_select(1, src) * w:reshape({ -1, 1 })
      return kiln.zeros(h:shape()):index_add(1, dst, msg)
    end, "^index_select .-t/gather_scatter%.lua:%d+, mul :%d+, full :%d+, index_add :%d+ %(zero fill folded%)$" },
    { "weight first", 1, function(h, src, dst, w)
      return kiln.zeros({ N, F }):index_add(1, dst, w:reshape({ -1, 1 }) * h:index_select(1, src))
    end },
    { "no weight", 1, function(h, src, dst) return kiln.zeros({ N, F }):index_add(1, dst, h:index_select(1, src)) end,
      "^index_select .-, full :%d+, index_add :%d+ %(zero fill folded%)$" },
    { "a base", 1, function(h, src, dst, w, b)
      return b:index_add(1, dst, h:index_select(1, src) * w:reshape({ -1, 1 }))
    end, "^index_select .-, mul :%d+, index_add :%d+$" },
    { "ones base", 1, function(h, src, dst, w) -- not zeros: kept as the base input
      return kiln.ones({ N, F }):index_add(1, dst, h:index_select(1, src) * w:reshape({ -1, 1 }))
    end, "^index_select .-, mul :%d+, index_add :%d+$" },
    { "-0 base", 1, function(h, src, dst, w) -- not folded: rows no edge reaches stay -0
      return kiln.full({ N + 2, F }, -0.0):index_add(1, dst, h:index_select(1, src) * w:reshape({ -1, 1 }))
    end, "^index_select .-, mul :%d+, index_add :%d+$" },
    { "two layers", 2, function(h, src, dst, w)
      local function prop(x) return kiln.zeros(x:shape()):index_add(1, dst, x:index_select(1, src) * w:reshape({ -1, 1 })) end
      return prop(prop(h):relu())
    end },
    { "back to back", 2, function(h, src, dst, w) -- the second gathers the first's result
      local function prop(x) return kiln.zeros({ N, F }):index_add(1, dst, x:index_select(1, src) * w:reshape({ -1, 1 })) end
      return prop(prop(h))
    end },
    { "messages used elsewhere", 0, function(h, src, dst, w)
      local msg = h:index_select(1, src) * w:reshape({ -1, 1 })
      return kiln.zeros({ N, F }):index_add(1, dst, msg), msg:sum()
    end },
    { "per-feature weight", 0, function(h, src, dst, w)
      return kiln.zeros({ N, F }):index_add(1, dst, h:index_select(1, src) * h:slice(1, 1, 1))
    end },
    { "columns", 0, function(h, src, dst)
      return kiln.zeros({ N, F }):index_add(2, kiln.tensor({ 2, 1 }):to("i64"), h:index_select(2, kiln.tensor({ 3, 3 }):to("i64")))
    end },
    { "plain index_add", 0, function(h, src, dst) return kiln.zeros({ N, F }):index_add(1, dst:slice(1, 1, N), h) end },
  }
  for _, c in ipairs(cases) do
    local name, want, f, covers_want = c[1], c[2], c[3], c[4]
    local cm = kiln.compile(f)
    local got = { cm(h, src, dst, w, base) }
    local ref = { f(h, src, dst, w, base) }
    local n, covers, left = fused(cm)
    T.is(n, want, name .. ": " .. want .. " gather_scatter node(s)")
    T.is(left, want == 0, name .. (want == 0 and ": the index_add is left as it was" or ": no index_add is left"))
    local e = 0
    for i = 1, #ref do e = math.max(e, max_abs_diff(got[i], ref[i])) end
    T.is(e, 0, name .. ": compiled gives eager's bits")
    if covers_want then T.like(covers or "", covers_want, name .. ": cm:kernels() names the ops and lines") end
  end
  -- the traced op itself: one node, one kernel; its cost
  local cm = kiln.compile(function(h, src, dst, w) return kiln.gather_scatter(h, src, dst, { weight = w:reshape({ -1, 1 }) }) end)
  local got = cm(h, src, dst, w)
  T.ok(#cm:kernels() == 1 and fused(cm) == 1, "traced op: one node, one kernel")
  T.is(max_abs_diff(got, kiln.gather_scatter(h, src, dst, { weight = w:reshape({ -1, 1 }) })), 0, "traced op: eager's bits")
  local r = kiln.time(cm, h, src, dst, w)
  T.is(r.kernels[1].flops, 2 * E * F, "cost: a multiply and an add per gathered element")
  T.is(r.kernels[1].bytes, 4 * math.min(E, N) * F + 8 * E * 2 + 4 * E + 4 * N * F,
    "cost: bytes of h (a row at most once per edge), the indices, the weight and out")
end

-- KILN_LOGS=fusion: why each index_add was left alone (a child kiln, stderr)
do
  local out, _, _, script = T.child([[
local N, E, F = 7, 20, 4
local h = kiln.randn({N, F}, {seed = 1})
local src, dst = kiln.randint(1, N + 1, {E}, {seed = 2}), kiln.randint(1, N + 1, {E}, {seed = 3})
local w = kiln.randn({E, 1}, {seed = 4})
local function run(name, f) io.stderr:write("CASE " .. name .. "\n"); kiln.compile(f)(h, src, dst, w) end
run("used elsewhere", function(h, src, dst, w)
  local msg = h:index_select(1, src) * w
  return kiln.zeros({N, F}):index_add(1, dst, msg), msg
end)
run("per feature", function(h, src, dst, w) return kiln.zeros({N, F}):index_add(1, dst, h:index_select(1, src) * h:slice(1, 1, 1)) end)
run("columns", function(h, src, dst, w) return h:index_add(2, kiln.tensor({2, 1}):to("i64"), h:index_select(2, kiln.tensor({3, 3}):to("i64"))) end)
run("plain", function(h, src, dst, w) return kiln.zeros({N, F}):index_add(1, dst:slice(1, 1, N), h) end)
run("gathered twice", function(h, src, dst, w)
  local g = h:index_select(1, src)
  return kiln.zeros({N, F}):index_add(1, dst, g * w), g:sum()
end)
run("matched", function(h, src, dst, w) return kiln.zeros({N, F}):index_add(1, dst, h:index_select(1, src) * w) end)
]], { env = "KILN_LOGS=fusion" })
  local by_case = T.sections(out, "^CASE (.*)$")
  local function L(n) return script:gsub("%p", "%%%0") .. ":" .. n end
  local expect = {
    { "used elsewhere", "gather_scatter not matched at index_add %(" .. L(8) .. "%): the messages mul %(" .. L(7) .. "%) are used elsewhere too" },
    { "per feature", "gather_scatter not matched at index_add %(" .. L(10) .. "%): mul %(" .. L(10) .. "%) multiplies the gathered rows by a value of shape {1,4}, not one number per edge %({20, 1, %.%.%.}%)" },
    { "columns", "gather_scatter not matched at index_add %(" .. L(11) .. "%): it gathers or scatters along dim 2, not rows %(dim 1%)" },
    { "plain", "gather_scatter not matched at index_add %(" .. L(12) .. "%): its source is input %(" .. L(12) .. "%), not index_select" },
    { "gathered twice", "the gathered rows index_select %(" .. L(14) .. "%) are used elsewhere too" },
  }
  for _, e in ipairs(expect) do
    T.like(by_case[e[1]] or "(no output)", e[2], "KILN_LOGS=fusion, " .. e[1] .. ": the reason names the ops and lines")
  end
  T.ok(by_case["matched"] ~= nil and not by_case["matched"]:find("gather_scatter not matched"),
    "KILN_LOGS=fusion, matched: no reason given")
end

-- ---------------------------------------------------------------------------
-- samples/gcn.lua: both props fused, compiled gives eager's bits in every mode

do
  local S = assert(loadfile("samples/gcn.lua"))({ small = true })
  for _, dt in ipairs({ "f32", "bf16" }) do
    local model = S.model
    if dt == "bf16" then model = model:to({ dtype = "bf16" }) end
    local x = S.inputs({ dtype = dt })[1]
    local want = model(x)
    for _, mode in ipairs({ "default", "reduce-overhead", "max-autotune" }) do
      local cm = kiln.compile(model, { mode = mode })
      local got = cm(x)
      got = cm(x) -- a second call: the replayed or recorded path
      T.is(fused(cm), 2, string.format("gcn %s %s: both props are one gather_scatter each", dt, mode))
      T.ok(got.dtype == dt and max_abs_diff(got, want) == 0,
        string.format("gcn %s %s: compiled gives eager's bits (max diff %g)", dt, mode, max_abs_diff(got, want)))
    end
  end
end

T.done()
