-- t/gather_scatter_epilogue.lua: the ops after message passing fused into
-- the gather_scatter kernel (kn_pass_gather_scatter's epilogue), on the CPU:
-- which chains are absorbed (relu, gelu, silu, sigmoid, tanh, then softmax
-- or log_softmax over the last dim) and what :kernels, KILN_LOGS=passes and
-- KILN_LOGS=fusion show; compiled against eager (the same bits: the CPU
-- reference runs each epilogue op through the eager kernel) and against a
-- float64 reference computed here in plain Lua on fresh random inputs, in f32
-- and bf16, with repeated indices, rows no edge reaches (relu(0), the
-- log_softmax of a zero row), a base, NaN and inf; and the chains that must
-- stay apart (the sums used twice or returned, a softmax over the rows, rows
-- longer than a fused row keeps), each with its reason.
local KILN = os.getenv("KILN") or "build/kiln"
local T = dofile("t/lib/tap.lua")
T.cpu_only("t/gather_scatter_epilogue.lua") -- the GPU side is t/cuda_gather_scatter.lua

local nextseed = T.seeds()

local U = { f32 = 2 ^ -24, bf16 = 2 ^ -8 }

-- ---- the float64 reference, in plain Lua ----

-- erf: its Taylor series where it converges well, else 1 - erfc's asymptotic series
local function erf(x)
  local ax = math.abs(x)
  if ax > 4 then
    local t = 1 / (2 * ax * ax)
    local erfc = math.exp(-ax * ax) / (ax * math.sqrt(math.pi)) * (1 - t + 3 * t * t)
    return x > 0 and 1 - erfc or erfc - 1
  end
  local sum, term, n = 0, x, 0
  repeat
    local add = term / (2 * n + 1)
    sum = sum + add
    n = n + 1
    term = -term * x * x / n
  until math.abs(add) < 1e-17 * math.abs(sum) or n > 200
  return 2 / math.sqrt(math.pi) * sum
end

local function tanh(x)
  if math.abs(x) > 20 then return x > 0 and 1 or -1 end
  local e = math.exp(2 * x)
  return (e - 1) / (e + 1)
end

local ACT = {
  relu = function(x) return x > 0 and x or 0 end,
  gelu = function(x) return 0.5 * x * (1 + erf(x / math.sqrt(2))) end,
  silu = function(x) return x / (1 + math.exp(-x)) end,
  sigmoid = function(x) return 1 / (1 + math.exp(-x)) end,
  tanh = tanh,
}

local function row_op(op, row)
  local mx = -math.huge
  for _, v in ipairs(row) do mx = math.max(mx, v) end
  local sum = 0
  for _, v in ipairs(row) do sum = sum + math.exp(v - mx) end
  local out = {}
  for j, v in ipairs(row) do out[j] = op == "softmax" and math.exp(v - mx) / sum or v - mx - math.log(sum) end
  return out
end

-- sums[r][f] = base + sum over edges into r of h[src] * w, and the rounding
-- bound of each row's sums ((2 * degree + 2) u * the magnitudes summed, its
-- largest element), as t/gather_scatter.lua bounds the op without epilogue
local function sums(h, src, dst, w, base, rows, u)
  local H, S, D, W = h:to("f64"):tolist(), src:tolist(), dst:tolist(), w:to("f64"):tolist()
  local B = base and base:to("f64"):tolist()
  local width = h:shape()[2]
  local ref, mag, deg = {}, {}, {}
  for r = 1, rows do
    ref[r], mag[r], deg[r] = {}, {}, 0
    for f = 1, width do
      ref[r][f] = B and B[r][f] or 0
      mag[r][f] = math.abs(ref[r][f])
    end
  end
  for e = 1, #S do
    local d = D[e]
    deg[d] = deg[d] + 1
    for f = 1, width do
      local m = H[S[e]][f] * W[e]
      ref[d][f] = ref[d][f] + m
      mag[d][f] = mag[d][f] + math.abs(m)
    end
  end
  local bound = {}
  for r = 1, rows do
    bound[r] = 0
    for f = 1, width do bound[r] = math.max(bound[r], (2 * deg[r] + 2) * u * mag[r][f]) end
  end
  return ref, bound
end

-- the chain's ops on the reference sums; each op can at most double an
-- error it is handed (the activations' slopes are at most 1.13, softmax's
-- and log_softmax's row-wise at most 2) and adds its own rounding of u * |value|
local function apply(chain, ref, bound, u)
  local out, err = {}, {}
  for r = 1, #ref do
    local row, e = ref[r], bound[r]
    for _, op in ipairs(chain) do
      local big = 0
      if ACT[op] then
        local nr = {}
        for f, v in ipairs(row) do nr[f] = ACT[op](v) end
        row = nr
      else
        row = row_op(op, row)
      end
      for _, v in ipairs(row) do big = math.max(big, math.abs(v)) end
      e = 2 * e + 2 * u * math.max(big, 1e-30)
    end
    out[r], err[r] = row, e
  end
  return out, err
end

-- max over elements of |got - ref| / (that row's bound); NaN fails
local function scaled_err(got, ref, err)
  local G = got:to("f64"):tolist()
  local worst = 0
  for r = 1, #ref do
    for f = 1, #ref[r] do
      local g = G[r][f]
      if g ~= g then return math.huge end
      worst = math.max(worst, math.abs(g - ref[r][f]) / (err[r] + 1e-300))
    end
  end
  return worst
end

-- the same bits, NaN where the other has NaN
local function same_bits(a, b)
  local x, y = a:to("f64"), b:to("f64")
  local nan_x, nan_y = x:ne(x), y:ne(y)
  if nan_x:ne(nan_y):sum():item() > 0 then return false end
  local fx, fy = x:masked_fill(nan_x, 0), y:masked_fill(nan_y, 0)
  return fx:ne(fy):sum():item() == 0
end

-- kernels of cm: the gather_scatter kernels' names, and whether an op of
-- `chain` is left as a kernel of its own
local function kernels_of(cm)
  local names, apart = {}, {}
  for _, k in ipairs(cm:kernels()) do
    for _, op in ipairs(k.ops) do
      if op == "gather_scatter" then names[#names + 1] = k.name else apart[op] = true end
    end
  end
  return names, apart
end

-- ---- absorbed chains: compiled vs eager and the f64 reference ----

local E = dofile("t/lib/epilogue_chains.lua")
local run_chain = E.run
local CHAINS = { table.unpack(E.CHAINS) }
CHAINS[#CHAINS + 1] = { "silu", "relu", "log_softmax" }

for _, dt in ipairs({ "f32", "bf16" }) do
  for _, width in ipairs({ 7, 16 }) do
    for _, chain in ipairs(CHAINS) do
      for _, with_base in ipairs({ false, true }) do
        local n, rows, e = 9, 13, 40 -- repeated indices; rows 11..13 (and what randint misses) get no edge
        local h = kiln.randn({ n, width }, { seed = nextseed(), dtype = dt })
        local src = kiln.randint(1, n + 1, { e }, { seed = nextseed() }):to("i64")
        local dst = kiln.randint(1, rows - 2, { e }, { seed = nextseed() }):to("i64")
        local w = kiln.randn({ e, 1 }, { seed = nextseed(), dtype = dt })
        local base = with_base and kiln.randn({ rows, width }, { seed = nextseed(), dtype = dt }) or nil
        local function f(h, src, dst, w, b)
          local start = b or kiln.zeros({ rows, width }, { dtype = dt })
          return run_chain(start:index_add(1, dst, h:index_select(1, src) * w), chain)
        end
        local cm = kiln.compile(f)
        local got = cm(h, src, dst, w, base)
        local want = f(h, src, dst, w, base)
        local name = string.format("%s width %d, %s%s", dt, width, table.concat(chain, "+"),
          with_base and ", a base" or "")
        local names, apart = kernels_of(cm)
        local want_name = "^k%d+_gather_scatter_" .. table.concat(chain, "_") .. "_" .. dt .. "_" .. rows .. "x" .. width .. "$"
        T.ok(#names == 1 and names[1]:match(want_name) and not next(apart),
          name .. ": one kernel, " .. tostring(names[1]) .. " (no op left apart)")
        T.ok(same_bits(got, want), name .. ": compiled gives eager's bits")
        local ref, bound = sums(h, src, dst, w:reshape({ -1 }), base, rows, U[dt])
        local out, err = apply(chain, ref, bound, U[dt])
        local s = scaled_err(got, out, err)
        T.ok(got.dtype == dt and s <= 1, string.format("%s: the f64 reference within the bound (%.3g of it)", name, s))
      end
    end
  end
end

-- rows no edge reaches, said outright: relu(0) = 0, log_softmax of a zero row = -log(width)
do
  local n, rows, width = 5, 6, 7
  local h = kiln.randn({ n, width }, { seed = nextseed() })
  local src = kiln.tensor({ 1, 2, 3, 2 }):to("i64")
  local dst = kiln.tensor({ 1, 1, 3, 3 }):to("i64") -- rows 2, 4, 5, 6: no edge
  local function prop(h) return kiln.zeros({ rows, width }):index_add(1, dst, h:index_select(1, src)) end
  local relu = kiln.compile(function(h) return prop(h):relu() end)(h)
  local lsm = kiln.compile(function(h) return prop(h):log_softmax(-1) end)(h)
  local r, l = relu:tolist(), lsm:tolist()
  local ok = true
  for _, row in ipairs({ 2, 4, 5, 6 }) do
    for f = 1, width do
      ok = ok and r[row][f] == 0 and math.abs(l[row][f] + math.log(width)) <= 2 ^ -22
    end
  end
  T.ok(ok, "empty rows: relu gives 0, log_softmax gives -log(width)")
end

-- NaN and inf in h: as eager (the same bits, NaN where eager has NaN)
do
  local n, rows, width = 6, 6, 5
  local hv = kiln.randn({ n, width }, { seed = nextseed() }):tolist()
  hv[2][3] = 0 / 0
  hv[4][1] = math.huge
  hv[5][2] = -math.huge
  local h = kiln.tensor(hv)
  local src = kiln.tensor({ 1, 2, 3, 4, 5, 6, 4, 1 }):to("i64")
  local dst = kiln.tensor({ 1, 2, 3, 4, 5, 6, 1, 6 }):to("i64")
  for _, chain in ipairs({ { "relu" }, { "sigmoid" }, { "log_softmax" }, { "relu", "softmax" } }) do
    local function f(h) return run_chain(kiln.zeros({ rows, width }):index_add(1, dst, h:index_select(1, src)), chain) end
    local cm = kiln.compile(f)
    local got, want = cm(h), f(h)
    local names = kernels_of(cm)
    T.ok(#names == 1 and same_bits(got, want) and got:ne(got):sum():item() > 0,
      "NaN and inf, " .. table.concat(chain, "+") .. ": fused, eager's bits (NaN where eager has NaN)")
  end
end

-- the cost model counts the epilogue's flops as the ops would
do
  local n, rows, width, e = 8, 8, 6, 30
  local h = kiln.randn({ n, width }, { seed = nextseed() })
  local src = kiln.randint(1, n + 1, { e }, { seed = nextseed() }):to("i64")
  local dst = kiln.randint(1, rows + 1, { e }, { seed = nextseed() }):to("i64")
  local cm = kiln.compile(function(h)
    return kiln.zeros({ rows, width }):index_add(1, dst, h:index_select(1, src)):relu():log_softmax(-1)
  end)
  local r = kiln.time(cm, h)
  T.is(r.kernels[1].flops, e * width + rows * width + 4 * rows * width,
    "cost: an add per gathered element, then relu (one flop an element) and log_softmax (four)")
end

-- ---- samples/gcn.lua: both activations fused, names and logs say so ----

do
  local S = assert(loadfile("samples/gcn.lua"))({ small = true })
  local cm = kiln.compile(S.model)
  local x = S.inputs()[1]
  local got = cm(x)
  T.ok(same_bits(got, S.model(x)), "gcn: compiled gives eager's bits")
  local names, apart = kernels_of(cm)
  T.ok(#names == 2 and names[1]:match("^k%d+_gather_scatter_relu_f32_200x16$") and
    names[2]:match("^k%d+_gather_scatter_log_softmax_f32_200x7$"),
    "gcn: the kernels are named gather_scatter_relu and gather_scatter_log_softmax: " .. table.concat(names, ", "))
  T.ok(not apart.relu and not apart.log_softmax, "gcn: no relu or log_softmax kernel of its own")
  local covers = {}
  for _, k in ipairs(cm:kernels()) do if k.covers then covers[#covers + 1] = k.covers end end
  T.like(covers[1] or "", "^index_select samples/gcn%.lua:%d+, mul :%d+, full :%d+, index_add :%d+, relu :%d+ %(zero fill folded%)$",
    "gcn: cm:kernels() covers name the relu and its line")
  T.like(covers[2] or "", ", index_add :%d+, log_softmax :%d+ %(zero fill folded%)$",
    "gcn: cm:kernels() covers name the log_softmax and its line")
  local out = T.output("KILN_LOGS=fusion,passes " .. KILN .. [[ -e 'local S = assert(loadfile("samples/gcn.lua"))({small = true}); kiln.compile(S.model)(S.inputs()[1])']])
  T.like(out, "\n%[passes:gather_scatter%] +%d+ +gather_scatter%+relu +%(", "KILN_LOGS=passes: the node is gather_scatter+relu")
  T.like(out, "\n%[passes:gather_scatter%] +%d+ +gather_scatter%+log_softmax +%(", "KILN_LOGS=passes: and gather_scatter+log_softmax")
  T.like(out, "k%d+_gather_scatter_relu_f32_200x16 %-> k%d+_matmul_f32_200x7: gather_scatter%+relu %(samples/gcn%.lua:%d+%) is a library call",
    "KILN_LOGS=fusion: the edges name gather_scatter+relu")
end

-- ---- chains left apart, each with its reason (KILN_LOGS=fusion) ----

do
  local out, _, _, script = T.child([[
local N, E, F = 7, 20, 4
local h, hw = kiln.randn({N, F}, {seed = 1}), kiln.randn({N, 80}, {seed = 5})
local src, dst = kiln.randint(1, N + 1, {E}, {seed = 2}), kiln.randint(1, N + 1, {E}, {seed = 3})
local function prop(h) return kiln.zeros(h:shape()):index_add(1, dst, h:index_select(1, src)) end
local function run(name, f) io.stderr:write("CASE " .. name .. "\n"); local cm = kiln.compile(f); cm(h, hw)
  for _, k in ipairs(cm:kernels()) do io.stderr:write("KERNEL " .. k.name .. "\n") end end
run("used twice", function(h)
  local s = prop(h)
  return s:relu(), s:sum()
end)
run("returned", function(h)
  local s = prop(h)
  return s, s:sigmoid()
end)
run("softmax over the rows", function(h) return prop(h):softmax(1) end)
run("long rows", function(h, hw) return prop(hw):log_softmax(-1) end)
run("not an activation", function(h) return prop(h):exp() end)
run("after the row op", function(h) return prop(h):log_softmax(-1):exp() end)
]], { env = "KILN_LOGS=fusion" })
  local by_case = T.sections(out, "^CASE (.*)$")
  local function L(n) return script:gsub("%p", "%%%0") .. ":" .. n end
  local head = "not fused into the gather_scatter at index_add %(" .. L(4) .. "%): "
  local expect = {
    { "used twice", "relu %(" .. L(9) .. "%) " .. head .. "the value it reads is used elsewhere too", "_relu_" },
    { "returned", "sigmoid %(" .. L(13) .. "%) " .. head .. "the value it reads is a result of the function", "_sigmoid_" },
    { "softmax over the rows", "softmax %(" .. L(15) .. "%) " .. head .. "it normalizes over dim 1 of a 2%-D value; the fused kernel normalizes the rows of a 2%-D value %(dim 2%)", "_softmax_" },
    { "long rows", "log_softmax %(" .. L(16) .. "%) " .. head .. "its rows hold 80 elements, more than the 64 a fused row keeps", "_log_softmax_" },
    { "not an activation", "exp %(" .. L(17) .. "%) " .. head .. "the epilogue applies relu, gelu, silu, sigmoid or tanh, then softmax or log_softmax", "_exp_" },
  }
  for _, e in ipairs(expect) do
    local text = by_case[e[1]] or "(no output)"
    T.like(text, e[2], "left apart, " .. e[1] .. ": the reason names the op and both lines")
    T.ok(text:find("KERNEL k%d+_gather_scatter_f32") and not text:find("gather_scatter" .. e[3]),
      "left apart, " .. e[1] .. ": the gather_scatter kernel has no epilogue")
  end
  T.like(by_case["after the row op"] or "(no output)", "exp %(" .. L(18) .. "%) " .. head .. "the epilogue ends at its softmax",
    "left apart, after the row op: the reason")
  T.like(by_case["after the row op"] or "", "KERNEL k%d+_gather_scatter_log_softmax_f32", "after the row op: the log_softmax is fused")
end

-- the chains left apart still compute what eager does
do
  local N, E, F = 7, 20, 4
  local h = kiln.randn({ N, F }, { seed = nextseed() })
  local src = kiln.randint(1, N + 1, { E }, { seed = nextseed() })
  local dst = kiln.randint(1, N + 1, { E }, { seed = nextseed() })
  local function prop(h) return kiln.zeros(h:shape()):index_add(1, dst, h:index_select(1, src)) end
  local cases = {
    { "used twice", function(h) local s = prop(h); return s:relu(), s:sum() end },
    { "returned", function(h) local s = prop(h); return s, s:sigmoid() end },
    { "softmax over the rows", function(h) return prop(h):softmax(1) end },
  }
  for _, c in ipairs(cases) do
    local got, want = { kiln.compile(c[2])(h) }, { c[2](h) }
    local ok = #got == #want
    for i = 1, #want do ok = ok and same_bits(got[i], want[i]) end
    T.ok(ok, "left apart, " .. c[1] .. ": compiled gives eager's bits")
  end
end

T.done()
