-- fold_once.lua: values that depend only on shapes and constants (a causal
-- mask, arange position ids) are computed once per compiled version, not on
-- every call (kn_pass_fold_once): they leave cm:kernels()'s per-call list
-- and appear in its `once` list; results equal eager over several calls and
-- for a second shape (a new version computes its own); random ops and
-- anything reading an argument are never folded; values of parameters and
-- kept tensors are, once per version of them. On the CPU.
local T = dofile("t/lib/tap.lua")

local seed = 500
local function rnd(shape)
  seed = seed + 1
  return kiln.randn(shape, { seed = seed })
end

-- max |a - b| in f64; NaN anywhere or a shape mismatch gives math.huge
local function maxdiff(a, b)
  if table.concat(a:shape(), "x") ~= table.concat(b:shape(), "x") then return math.huge end
  local d = (a:to("f64") - b:to("f64")):abs():amax():item()
  return d == d and d or math.huge
end

local function has_kernel_with(list, op)
  for _, k in ipairs(list) do
    for _, o in ipairs(k.ops or {}) do
      if o == op then return true end
    end
  end
  return false
end

-- causal attention scores with a mask built per call, as the samples do
local function causal(x)
  local T_ = x:shape()[2]
  local mask = kiln.ones({ T_, T_ }, { dtype = "bool" }):tril():logical_not()
  local pos = kiln.arange(T_):to("f32") -- position ids: shapes only
  local s = x:matmul(x:transpose(-2, -1)) + pos
  return s:masked_fill(mask, -math.huge):softmax(-1)
end

local cm = kiln.compile(causal, { mode = "default" })
for call = 1, 3 do
  local x = rnd({ 2, 7, 5 })
  T.ok(maxdiff(cm(x), causal(x)) <= 1e-6, "causal mask: call " .. call .. " equals eager")
end
local list = cm:kernels()
T.ok(not has_kernel_with(list, "tril") and not has_kernel_with(list, "full") and not has_kernel_with(list, "arange"),
  "the mask and the positions are not among the per-call kernels")
T.is(#list.once, 2, "cm:kernels().once lists the two values computed once")
local ops = {}
for _, o in ipairs(list.once) do ops[#ops + 1] = o.ops end
table.sort(ops)
T.is(table.concat(ops, " | "), "arange, cast | full, tril, logical_not", "each once-value names its ops")
T.is(cm:stats().computed_once, 2, "cm:stats().computed_once counts them")
T.is(cm:stats().versions, 1, "three calls, one version")

-- a second shape: a new version with its own mask
local x9 = rnd({ 3, 9, 5 })
T.ok(maxdiff(cm(x9), causal(x9)) <= 1e-6, "a second shape (T = 9) equals eager: its mask was computed for it")
T.is(cm:stats().versions, 2, "the second shape made a second version")
local once9 = cm:kernels().once
T.ok(#once9 == 2 and once9[1].shape[1] == 9 and once9[2].shape[1] == 9, "the new version's once-values have T = 9")
local x7 = rnd({ 2, 7, 5 })
T.ok(maxdiff(cm(x7), causal(x7)) <= 1e-6, "back to T = 7: still equals eager")

-- random ops are never folded (nor what reads them)
local noise = kiln.compile(function(x) return x + kiln.rand({ 4, 4 }):tril() end, { mode = "default" })
local z = kiln.zeros({ 4, 4 })
noise(z)
T.ok(has_kernel_with(noise:kernels(), "rand") and has_kernel_with(noise:kernels(), "tril"),
  "rand and the tril that reads it stay per-call kernels")
T.is(#noise:kernels().once, 0, "nothing of it is computed once")

-- anything reading an input is never folded, even when it looks constant
local function reads(x)
  local n = x:shape()[1]
  return x:matmul((x * 0 + kiln.ones({ n, n })):tril())
end
local cr = kiln.compile(reads, { mode = "default" })
local xr = rnd({ 4, 4 })
T.ok(maxdiff(cr(xr), reads(xr)) <= 1e-6, "a tril of a value computed from the input equals eager")
local xr2 = rnd({ 4, 4 })
T.ok(maxdiff(cr(xr2), reads(xr2)) <= 1e-6, "and on new inputs")
T.ok(has_kernel_with(cr:kernels(), "tril") and #cr:kernels().once == 0, "it is computed per call")

-- a lone full is left to the kernel that reads it (free there)
local lone = kiln.compile(function(x) return x * kiln.full({ 3, 4 }, 2.5) end, { mode = "default" })
local xl = rnd({ 3, 4 })
T.ok(maxdiff(lone(xl), xl * 2.5) <= 1e-6 and #lone:kernels().once == 0, "a lone full is not folded")

-- a value computed from parameters alone (a weight, scaled) is computed
-- once per version of those parameters: a write into the parameter builds
-- the plan again, and the next call sees the new value. (A weight that
-- requires grad keeps its path per call: its backward needs it.)
local lin = { weight = rnd({ 3, 4 }) }
local function scaled(x) return x:matmul((lin.weight * 0.5 + 1):transpose(1, 2)) end
local cs = kiln.compile(scaled, { mode = "default" })
local xs = rnd({ 2, 4 })
T.ok(maxdiff(cs(xs), scaled(xs)) <= 1e-6, "a weight's scaled copy: equals eager")
T.ok(not has_kernel_with(cs:kernels(), "mul") and #cs:kernels().once == 1,
  "the weight's mul and add run once, not per call")
T.ok(maxdiff(cs(xs), scaled(xs)) <= 1e-6, "the second call equals eager too")
lin.weight:copy_(rnd({ 3, 4 }))
T.ok(maxdiff(cs(xs), scaled(xs)) <= 1e-6, "after a copy_ into the weight: the new weight's result")
lin.weight:copy_(rnd({ 3, 4 }))
local again = cs(xs)
T.ok(maxdiff(again, scaled(xs)) <= 1e-6, "and after a second write")
T.ok(maxdiff(again, (xs:matmul((lin.weight * 0.5 + 1):transpose(1, 2)))) <= 1e-6,
  "the check itself: the expected value is of the new weight")

-- a tensor the function makes but promises to hand out unchanged
-- (kiln._keep: an ONNX model's cached index constants) is folded like a
-- parameter; an index_select by a computed 1..n over all n rows reads its
-- input unchanged and runs no kernel
local cache = {}
local function gathered(x)
  local n = x:shape()[1]
  if not cache[n] then
    local ids = {}
    for i = 1, n do ids[i] = i end
    cache[n] = kiln._keep(kiln.tensor(ids, { dtype = "i64" }))
  end
  return x:index_select(1, (cache[n] + 1) - 1) * 2 + x:index_select(1, n + 1 - cache[n])
end
local cg = kiln.compile(gathered, { mode = "default" })
local xg = rnd({ 5, 3 })
T.ok(maxdiff(cg(xg), gathered(xg)) <= 1e-6, "gathers by a kept index: equals eager")
T.ok(maxdiff(cg(xg), gathered(xg)) <= 1e-6, "and at the second call")
local gk = cg:kernels()
local n_select = 0
for _, k in ipairs(gk) do
  for _, o in ipairs(k.ops or {}) do n_select = n_select + (o == "index_select" and 1 or 0) end
end
T.is(n_select, 1, "the identity gather is gone; the reversing one stays")
T.ok(#gk.once >= 1, "the reversed index is computed once")
local before_write = gathered(xg)
cache[5]:copy_(kiln.tensor({ 2, 1, 3, 5, 4 }, { dtype = "i64" }))
T.ok(maxdiff(cg(xg), gathered(xg)) <= 1e-6, "after a write into the kept index: the plan follows its new values")
T.ok(maxdiff(gathered(xg), before_write) > 0.1, "the check itself: the new index changes the result")
-- a padding mask multiplied by kept ones (an exporter's query-side mask):
-- the mul by ones is a broadcast, and the mask's ops run on B x T values,
-- not B x T x T; a write of a zero into the ones is followed
local ones = kiln._keep(kiln.ones({ 1, 6, 1 }, { dtype = "bool" }))
local function padding(ids, s)
  local m = (ids:ne(0):to("i32"):reshape({ 2, 1, 6 }) * ones:to("i32")):ne(0)
  return s + kiln.where(m, 0.0, -1e9)
end
local cp = kiln.compile(padding, { mode = "default" })
local ids = kiln.tensor({ { 5, 3, 0, 0, 1, 2 }, { 1, 0, 4, 4, 0, 7 } }, { dtype = "i64" })
local s6 = rnd({ 2, 6, 6 })
T.ok(maxdiff(cp(ids, s6), padding(ids, s6)) <= 1e-6, "a padding mask times kept ones: equals eager")
local pk = cp:kernels()
local mask_on_rows, mul_left = false, false
for _, k in ipairs(pk) do
  for _, o in ipairs(k.ops or {}) do
    if o == "where" and k.name:find("_2x6$") then mask_on_rows = true end
    if o == "mul" then mul_left = true end
  end
end
T.ok(mask_on_rows and not mul_left, "the mul by ones is gone and the mask's where runs on 2 x 6 values")
ones:copy_(kiln.tensor({ { { 1 }, { 0 }, { 1 }, { 1 }, { 1 }, { 1 } } }, { dtype = "bool" }))
T.ok(maxdiff(cp(ids, s6), padding(ids, s6)) <= 1e-6, "after a zero is written into the ones: equals eager again")

local ok, err = pcall(kiln._keep, 3)
T.ok(not ok and tostring(err):find("tensor"), "kiln._keep of a number is an error naming what it wants")

T.done()
