-- t/cuda_gather_scatter.lua: kiln.gather_scatter on the GPU in both of its
-- variants (atomics, segments: picked through the KILN_GATHER_SCATTER test
-- hook in child processes), against a float64 reference on the same
-- inputs (the CPU op in f64, which t/gather_scatter.lua checks against a
-- plain-Lua reference), with repeated indices, rows no edge reaches,
-- misaligned views (the scalar path) and every float dtype; out-of-range
-- indices (the CPU's message); the segments variant is deterministic and
-- gives the CPU op's bits (the same rounding steps in the same order); the
-- fused epilogues (relu, gelu, silu, sigmoid, tanh, softmax, log_softmax and
-- chains of them, compiled from the unfused ops) against the CPU float64
-- reference, rows of 7 to 64 columns, both variants (atomics run the
-- epilogue as a second kernel in the same call); and samples/gcn.lua
-- compiled against GPU eager in every mode, its props and their relu and
-- log_softmax fused.
local T = dofile("t/lib/tap.lua")

if not pcall(kiln.zeros, { 1 }, { device = "cuda" }) then T.skip_all("no CUDA device") end

local KILN = os.getenv("KILN") or "build/kiln"
local variant = os.getenv("KILN_GATHER_SCATTER")
if not variant then
  -- the parent: each variant in a child, then the default pick here
  -- the child's TAP lines come back as comments (its own numbering would
  -- break this file's): one check per variant, every child check passing
  for _, v in ipairs({ "atomics", "segments" }) do
    local p = io.popen("KILN_GATHER_SCATTER=" .. v .. " " .. KILN .. " t/cuda_gather_scatter.lua 2>&1")
    local passed, failed = 0, {}
    for line in p:lines() do
      print("# " .. v .. ": " .. line)
      if line:match("^ok ") then passed = passed + 1 end
      if line:match("^not ok ") then failed[#failed + 1] = line end
    end
    local ok = p:close()
    T.ok(ok and #failed == 0 and passed > 0,
      string.format("the %s variant's checks pass (%d passed, %d failed: the child's output above)", v, passed,
        #failed))
  end
end
local tag = variant or "default"

local nextseed = T.seeds(", variant " .. tag)

local U = { f64 = 2 ^ -53, f32 = 2 ^ -24, bf16 = 2 ^ -8, f16 = 2 ^ -11 }

local function indices(e, n, dt)
  return kiln.randint(1, n + 1, { e }, { seed = nextseed() }):to(dt or "i64")
end

-- the op on the CPU in f64 on the same (rounded) inputs, and the magnitudes
-- summed (|base| + sum |h * w|) for a rounding bound
local function reference(h, src, dst, opts)
  local o = {}
  for k, v in pairs(opts) do o[k] = type(v) == "userdata" and v:to("cpu"):to("f64") or v end
  local ref = kiln.gather_scatter(h:to("cpu"):to("f64"), src:to("cpu"), dst:to("cpu"), o)
  local a = {}
  for k, v in pairs(o) do a[k] = type(v) == "userdata" and v:abs() or v end
  local mag = kiln.gather_scatter(h:to("cpu"):to("f64"):abs(), src:to("cpu"), dst:to("cpu"), a)
  return ref, mag
end

local function max_degree(dst)
  local deg, m = {}, 0
  for _, d in ipairs(dst:to("cpu"):tolist()) do
    deg[d] = (deg[d] or 0) + 1
    if deg[d] > m then m = deg[d] end
  end
  return m
end

-- max |got - ref| / ((2 * degree + 2) * u * mag); NaN fails
local function scaled_err(got, ref, mag, degree, u)
  local g = got:to("cpu"):to("f64")
  if g:ne(g):sum():item() > 0 then return math.huge end
  local bound = mag * ((2 * degree + 2) * u) + 1e-300
  return ((g - ref):abs() / bound):amax():item()
end

local function same_bits(a, b)
  local x, y = a:to("cpu"):to("f64"), b:to("cpu"):to("f64")
  return x:ne(y):sum():item() == 0
end

for _, dt in ipairs({ "f32", "bf16", "f16", "f64" }) do
  for _, width in ipairs({ 1, 7, 16, 33, 128 }) do
    for _, case in ipairs({ "weight, zeros", "no weight, base", "weight, base, i32", "misaligned h" }) do
      local n, rows, e = 300, 260, 3000 -- repeated indices; rows 251..260 get no edge
      local idt = case:find("i32") and "i32" or "i64"
      local h = kiln.randn({ n, width + 1 }, { seed = nextseed(), dtype = dt, device = "cuda" })
      if case:find("misaligned") then h = h:slice(2, 2, width + 1) else h = h:slice(2, 1, width) end
      if not case:find("misaligned") then h = h:contiguous() end
      local src, dst = indices(e, n, idt):to("cuda"), indices(e, rows - 10, idt):to("cuda")
      local opts = {}
      if not case:find("no weight") then opts.weight = kiln.randn({ e, 1 }, { seed = nextseed(), dtype = dt, device = "cuda" }) end
      if case:find("base") then
        opts.base = kiln.randn({ rows, width }, { seed = nextseed(), dtype = dt, device = "cuda" })
      else
        opts.rows = rows
      end
      local got = kiln.gather_scatter(h, src, dst, opts)
      local ref, mag = reference(h, src, dst, opts)
      local err = scaled_err(got, ref, mag, max_degree(dst), U[dt])
      local name = string.format("%s: %s width %d, %s", tag, dt, width, case)
      T.ok(got.device == "cuda" and got.dtype == dt and err <= 1,
        string.format("%s: the f64 reference within the rounding bound (%.3g of it)", name, err))
      if variant == "segments" then
        local cpu = {}
        for k, v in pairs(opts) do cpu[k] = type(v) == "userdata" and v:to("cpu") or v end
        T.ok(same_bits(got, kiln.gather_scatter(h:to("cpu"), src:to("cpu"), dst:to("cpu"), cpu)),
          name .. ": the CPU op's bits")
        T.ok(same_bits(got, kiln.gather_scatter(h, src, dst, opts)), name .. ": deterministic (a second call, same bits)")
      end
    end
  end
end

-- dst written in place between calls: the kept CSR and the kept range check follow its version
do
  local h = kiln.randn({ 50, 16 }, { seed = nextseed(), device = "cuda" })
  local src, dst = indices(400, 50):to("cuda"), indices(400, 40):to("cuda")
  local a = kiln.gather_scatter(h, src, dst, { rows = 40 })
  local dst2 = indices(400, 40)
  dst:copy_(dst2:to("cuda"))
  local b = kiln.gather_scatter(h, src, dst, { rows = 40 })
  local want = kiln.gather_scatter(h:to("cpu"), src:to("cpu"), dst2:to("cpu"), { rows = 40 })
  T.ok((b:to("cpu") - want):abs():amax():item() <= 1e-4 and (a - b):abs():amax():item() > 0,
    tag .. ": dst rewritten in place: the new edges are used")
  dst:copy_(kiln.full({ 400 }, 41, { dtype = "i64" }):to("cuda"))
  local ok, e = pcall(kiln.gather_scatter, h, src, dst, { rows = 40 })
  T.like(ok and "(no error)" or tostring(e), "gather_scatter: dst index 41 at position 1 is out of range 1%.%.40",
    tag .. ": dst rewritten out of range: the error, not the kept check")
end

-- out-of-range indices: the CPU's messages
do
  local h = kiln.randn({ 5, 8 }, { seed = nextseed(), device = "cuda" })
  local src = kiln.tensor({ 1, 2, 6, 3 }):to("i64"):to("cuda")
  local dst = kiln.tensor({ 2, 2, 1, 4 }):to("i64"):to("cuda")
  local ok, e = pcall(kiln.gather_scatter, h, src, dst, { rows = 4 })
  T.like(ok and "(no error)" or tostring(e), "gather_scatter: src index 6 at position 3 is out of range 1%.%.5",
    tag .. ": a src index out of range")
  ok, e = pcall(kiln.gather_scatter, h, dst, kiln.tensor({ 1, 0, 1, 1 }):to("i32"):to("cuda"), { rows = 4 })
  T.like(ok and "(no error)" or tostring(e), "gather_scatter: dst index 0 at position 2 is out of range 1%.%.4",
    tag .. ": a dst index 0")
end

-- the epilogues: compiled zeros:index_add(...) then the chain, one kernel,
-- against the chain on the CPU in f64 over the f64 sums; each op can at
-- most double the error it is handed and adds its own, in u of the row's
-- largest value: 4 for an activation (the rounding to the dtype and the
-- f32 math functions' ulps), 4 + width for a row op (its sum of exps, in
-- any order)
do
  local E = dofile("t/lib/epilogue_chains.lua")
  local CHAINS, run_chain = E.CHAINS, E.run
  for _, dt in ipairs({ "f32", "bf16", "f64" }) do
    for _, width in ipairs({ 7, 16, 33, 64 }) do
      for _, chain in ipairs(CHAINS) do
        for _, with_base in ipairs({ false, true }) do
          local n, rows, e = 300, 260, 3000 -- rows 251..260 get no edge
          local h = kiln.randn({ n, width }, { seed = nextseed(), dtype = dt, device = "cuda" })
          local src, dst = indices(e, n):to("cuda"), indices(e, rows - 10):to("cuda")
          local w = kiln.randn({ e, 1 }, { seed = nextseed(), dtype = dt, device = "cuda" })
          local base = with_base and kiln.randn({ rows, width }, { seed = nextseed(), dtype = dt, device = "cuda" }) or nil
          local function f(h, src, dst, w, b)
            local start = b or kiln.zeros({ rows, width }, { dtype = dt, device = "cuda" })
            return run_chain(start:index_add(1, dst, h:index_select(1, src) * w), chain)
          end
          local cm = kiln.compile(f)
          local got = cm(h, src, dst, w, base)
          local name = string.format("%s: %s width %d, %s%s", tag, dt, width, table.concat(chain, "+"),
            with_base and ", a base" or "")
          local names = {}
          for _, k in ipairs(cm:kernels()) do names[#names + 1] = k.name end
          T.ok(#names == 1 and names[1]:find("gather_scatter_" .. table.concat(chain, "_") .. "_" .. dt, 1, true),
            name .. ": one kernel, " .. table.concat(names, ", "))
          local opts = { weight = w, base = base }
          if not base then opts.rows = rows end
          local ref, mag = reference(h, src, dst, opts)
          local u = U[dt]
          local err = mag * ((2 * max_degree(dst) + 2) * u)
          err = err:amax(2, { keepdim = true }) -- a row op mixes a row's errors
          local out = ref
          for _, op in ipairs(chain) do
            out = run_chain(out, { op })
            local own = (op == "softmax" or op == "log_softmax") and 4 + width or 4
            err = err * 2 + out:abs():amax(2, { keepdim = true }) * (own * u) + 1e-300
          end
          local g = got:to("cpu"):to("f64")
          local s = g:ne(g):sum():item() > 0 and math.huge or ((g - out):abs() / err):amax():item()
          T.ok(got.dtype == dt and s <= 1, string.format("%s: the f64 reference within the bound (%.3g of it)", name, s))
          if variant == "segments" then
            T.ok(same_bits(got, cm(h, src, dst, w, base)), name .. ": deterministic (a second call, same bits)")
          end
        end
      end
    end
  end
end

-- samples/gcn.lua on the GPU: both props fused, compiled against GPU eager in every mode
do
  local S = assert(loadfile("samples/gcn.lua"))()
  local TOL = { f32 = 1e-4, bf16 = 3e-2 }
  for _, dt in ipairs({ "f32", "bf16" }) do -- f32 first: :to changes the model in place
    local model = S.model:to({ device = "cuda", dtype = dt })
    local x = S.inputs({ dtype = dt, device = "cuda" })[1]
    local want = model(x):to("f64")
    for _, mode in ipairs({ "default", "reduce-overhead", "max-autotune" }) do
      local cm = kiln.compile(model, { mode = mode })
      cm(x)
      local got = cm(x):to("f64")
      local n, epilogues, apart = 0, {}, 0
      for _, k in ipairs(cm:kernels()) do
        for _, op in ipairs(k.ops) do
          n = n + (op == "gather_scatter" and 1 or 0)
          apart = apart + ((op == "relu" or op == "log_softmax") and 1 or 0)
        end
        if k.name:find("gather_scatter_relu_", 1, true) or k.name:find("gather_scatter_log_softmax_", 1, true) then
          epilogues[#epilogues + 1] = k.name
        end
      end
      T.is(n, 2, string.format("%s: gcn %s %s: both props are one gather_scatter each", tag, dt, mode))
      T.ok(#epilogues == 2 and apart == 0,
        string.format("%s: gcn %s %s: relu and log_softmax run inside them (%s)", tag, dt, mode, table.concat(epilogues, ", ")))
      local err = (got - want):abs():amax():item() / math.max(want:abs():amax():item(), 1e-30)
      T.ok(err <= TOL[dt], string.format("%s: gcn %s %s: compiled against eager, rel err %.3g <= %g", tag, dt, mode, err, TOL[dt]))
    end
  end
end

T.done()
