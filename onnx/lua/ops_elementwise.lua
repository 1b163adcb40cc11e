-- kiln.onnx ops: arithmetic, comparisons, logic, activations, softmax, matmul, reductions and losses.
-- Each op takes (inputs, attrs, node) and returns its outputs; import.lua
-- holds the loader, the graph walk and the helpers the op files share
-- (kiln.onnx._shared).
local kiln = ...
local S = kiln.onnx._shared
local ops = S.ops
local ctx = S.ctx -- the run in progress
local FLOAT, unsupported, is_known, to_tensor, ints, scalar = S.FLOAT, S.unsupported, S.is_known, S.to_tensor, S.ints, S.scalar
local shape_of, norm_axis, INT, known_map, KNOWN_BINARY, KNOWN_COMPARE = S.shape_of, S.norm_axis, S.INT, S.known_map, S.KNOWN_BINARY, S.KNOWN_COMPARE
local full_like_shape = S.full_like_shape

local function unary(f) return function(i) return f(to_tensor(i[1])) end end

-- An operand beside tensor `other`: a known one-element value that does not
-- widen other's shape is a Lua number (a constant of the graph, as in a Lua
-- model's `x * 0.5`); anything else a tensor.
local function operand(x, other)
  if is_known(x) and #x.v == 1 and x.dtype ~= "bool" and not is_known(other) and #x.shape <= other:dim()
    and (FLOAT[other.dtype] == (FLOAT[x.dtype] or false)) then
    return x.v[1]
  end
  return to_tensor(x)
end

local function binary(name, f)
  return function(i, _, node)
    local a, b = i[1], i[2]
    if is_known(a) and is_known(b) and KNOWN_BINARY[name] and (INT[a.dtype] or FLOAT[a.dtype]) then
      return known_map({ a, b }, a.dtype, KNOWN_BINARY[name])
    end
    local ta, tb
    if is_known(a) and not is_known(b) then tb = b; ta = operand(a, b)
    elseif is_known(b) and not is_known(a) then ta = a; tb = operand(b, a)
    else ta, tb = to_tensor(a), to_tensor(b) end
    local r = f(ta, tb)
    local dt = type(ta) == "number" and tb.dtype or ta.dtype
    if name == "Div" and INT[dt] then r = r:to(dt) end
    return r
  end
end

-- The arithmetic ops, each one Lua operator on tensors.
local TENSOR_BINARY = {
  Add = function(a, b) return a + b end,
  Sub = function(a, b) return a - b end,
  Mul = function(a, b) return a * b end,
  Div = function(a, b) return a / b end,
}
for name, f in pairs(TENSOR_BINARY) do ops[name] = binary(name, f) end
ops.Pow = function(i)
  local a = to_tensor(i[1])
  local b = i[2]
  if is_known(b) and #b.v == 1 and #b.shape <= a:dim() and FLOAT[a.dtype] then b = b.v[1] else b = to_tensor(b) end
  local r = a:pow(b)
  if r.dtype ~= a.dtype then r = r:to(a.dtype) end
  return r
end
local function compare(name, method)
  return function(i)
    local a, b = i[1], i[2]
    if is_known(a) and is_known(b) then return known_map({ a, b }, "bool", KNOWN_COMPARE[name]) end
    return to_tensor(a)[method](to_tensor(a), to_tensor(b))
  end
end
-- The comparisons and the tensor method each one is.
local COMPARE_METHODS = { Equal = "eq", Greater = "gt", Less = "lt", GreaterOrEqual = "ge", LessOrEqual = "le" }
for name, method in pairs(COMPARE_METHODS) do ops[name] = compare(name, method) end
ops.Not = function(i) return to_tensor(i[1]):logical_not() end
ops.And = function(i) return (to_tensor(i[1]):to("i32") * to_tensor(i[2]):to("i32")):ne(0) end
ops.Or = function(i) return (to_tensor(i[1]):to("i32") + to_tensor(i[2]):to("i32")):ne(0) end
ops.Xor = function(i) return to_tensor(i[1]):ne(to_tensor(i[2])) end

ops.Where = function(i)
  local c, a, b = i[1], i[2], i[3]
  if is_known(c) and is_known(a) and is_known(b) then
    return known_map({ c, a, b }, a.dtype, function(x, y, z) return x ~= 0 and y or z end)
  end
  -- Where(c, v, x) with v one known number and x a float tensor of the
  -- result's shape is x:masked_fill(c, v), and Where(c, x, v) fills where c
  -- is false: the ops a Lua model writes for a masked softmax, which the
  -- attention pass fuses (a causal mask included).
  for _, p in ipairs({ { b, a, true }, { a, b, false } }) do
    local x, v, fill_where_true = p[1], p[2], p[3]
    if is_known(v) and #v.v == 1 and v.dtype ~= "bool" and not is_known(x) and FLOAT[x.dtype]
      and #v.shape <= x:dim() and table.concat(S.broadcast_shapes(shape_of(c), x:shape()), ",") == table.concat(x:shape(), ",") then
      local m = to_tensor(c)
      if not fill_where_true then m = m:logical_not() end
      return x:masked_fill(m, v.v[1])
    end
  end
  return kiln.where(to_tensor(c), to_tensor(a), to_tensor(b))
end

-- The unary ops that are one kiln tensor method of the same meaning.
local UNARY_METHODS = {
  Relu = "relu", Sigmoid = "sigmoid", Tanh = "tanh", Exp = "exp", Log = "log", Sqrt = "sqrt", Abs = "abs",
  Floor = "floor", Ceil = "ceil", Round = "round", Sin = "sin", Cos = "cos", Erf = "erf",
}
for name, method in pairs(UNARY_METHODS) do ops[name] = unary(function(x) return x[method](x) end) end
ops.Neg = function(i)
  if is_known(i[1]) then return known_map({ i[1] }, i[1].dtype, function(a) return -a end) end
  return -i[1]
end
ops.Tan = unary(function(x) return x:sin() / x:cos() end)
ops.Reciprocal = unary(function(x) return 1 / x end)
ops.Softplus = unary(function(x) return (x:exp() + 1):log() end)
ops.Softsign = unary(function(x) return x / (x:abs() + 1) end)
ops.Identity = function(i) return i[1] end
ops.Dropout = function(i, a, node)
  if (a.training_mode or 0) ~= 0 or (i[3] and scalar(i[3]) ~= 0) then unsupported("Dropout in training mode") end
  if #node.outputs > 1 and node.outputs[2] ~= "" then
    -- inference: nothing is dropped, the mask is all true
    return i[1], full_like_shape(shape_of(i[1]), 1, "bool")
  end
  return i[1]
end
ops.LeakyRelu = function(i, a)
  local x = to_tensor(i[1])
  return kiln.where(x:ge(0), x, x * (a.alpha or 0.01))
end
ops.Elu = function(i, a)
  local x = to_tensor(i[1])
  return kiln.where(x:gt(0), x, (x:exp() - 1) * (a.alpha or 1.0))
end
ops.Selu = function(i, a)
  local x = to_tensor(i[1])
  local alpha, gamma = a.alpha or 1.67326319217681884765625, a.gamma or 1.05070102214813232421875
  return kiln.where(x:gt(0), x * gamma, (x:exp() - 1) * (alpha * gamma))
end
ops.HardSigmoid = function(i, a)
  local x = to_tensor(i[1])
  return (x * (a.alpha or 0.2) + (a.beta or 0.5)):maximum(0):minimum(1)
end
ops.HardSwish = function(i)
  local x = to_tensor(i[1])
  return x * (x * (1 / 6) + 0.5):maximum(0):minimum(1)
end
ops.Gelu = function(i, a)
  local x = to_tensor(i[1])
  local approximate = a.approximate or "none"
  if approximate == "tanh" then return x:gelu_tanh() end
  if approximate ~= "none" then
    error("Gelu's approximate must be 'none' or 'tanh', got '" .. tostring(approximate) .. "'", 0)
  end
  return x:gelu()
end
ops.Clip = function(i, a)
  local x = to_tensor(i[1])
  local lo, hi
  if ctx.opset < 11 then
    lo, hi = a.min, a.max
  else
    lo = i[2] and scalar(i[2]) or nil
    hi = i[3] and scalar(i[3]) or nil
  end
  if lo then x = x:maximum(lo) end
  if hi then x = x:minimum(hi) end
  return x
end

local function softmax_like(method)
  return function(i, a)
    local x = to_tensor(i[1])
    local r = x:dim()
    if ctx.opset < 13 then
      local axis = norm_axis(a.axis or 1, math.max(r, 1))
      local s = x:shape()
      local outer, inner = 1, 1
      for d = 1, r do if d <= axis then outer = outer * s[d] else inner = inner * s[d] end end
      return x:reshape({ outer, inner })[method](x:reshape({ outer, inner }), -1):reshape(s)
    end
    local axis = norm_axis(a.axis or -1, r)
    return x[method](x, axis + 1)
  end
end
ops.Softmax = softmax_like("softmax")
ops.LogSoftmax = softmax_like("log_softmax")

local function variadic(f)
  return function(i)
    local acc = to_tensor(i[1])
    for k = 2, #i do acc = f(acc, to_tensor(i[k])) end
    return acc
  end
end
local VARIADIC = {
  Max = function(a, b) return a:maximum(b) end,
  Min = function(a, b) return a:minimum(b) end,
  Sum = function(a, b) return a + b end,
}
for name, f in pairs(VARIADIC) do ops[name] = variadic(f) end
ops.Mean = function(i) return ops.Sum(i) / #i end

ops.MatMul = function(i)
  local a, b = to_tensor(i[1]), to_tensor(i[2])
  if not FLOAT[a.dtype] then unsupported("MatMul of %s tensors", a.dtype) end
  return a:matmul(b)
end
ops.Gemm = function(i, a)
  local A, B = to_tensor(i[1]), to_tensor(i[2])
  if (a.transA or 0) ~= 0 then A = A:transpose(1, 2) end
  if (a.transB or 0) ~= 0 then B = B:transpose(1, 2) end
  local y = A:matmul(B)
  local alpha, beta = a.alpha or 1.0, a.beta or 1.0
  if alpha ~= 1 then y = y * alpha end
  if i[3] then
    local c = to_tensor(i[3])
    if beta ~= 1 then c = c * beta end
    y = y + c
  end
  return y
end

-- Reductions: axes from the attribute, or from input 2 (ReduceSum since
-- opset 13, the others since 18).
local function reduce(method, axes_input_opset)
  return function(i, a)
    local x = to_tensor(i[1])
    local axes
    if ctx.opset >= axes_input_opset then axes = i[2] and ints(i[2], "axes") or nil else axes = a.axes end
    local keep = (a.keepdims or 1) ~= 0
    if axes == nil or #axes == 0 then
      if (a.noop_with_empty_axes or 0) ~= 0 then return x end
      axes = {}
      for d = 0, x:dim() - 1 do axes[#axes + 1] = d end
    end
    if x:dim() == 0 then return x end
    local dims = {}
    for k, ax in ipairs(axes) do dims[k] = norm_axis(ax, x:dim()) + 1 end
    return method(x, dims, keep)
  end
end
-- The reductions that are one kiln tensor method (dims, keepdim).
local REDUCE_METHODS = { ReduceSum = "sum", ReduceMean = "mean", ReduceMax = "amax", ReduceMin = "amin" }
for name, method in pairs(REDUCE_METHODS) do
  ops[name] = reduce(function(x, d, k) return x[method](x, d, k) end, name == "ReduceSum" and 13 or 18)
end
ops.ReduceSumSquare = reduce(function(x, d, k) return (x * x):sum(d, k) end, 18)
ops.ReduceL2 = reduce(function(x, d, k) return (x * x):sum(d, k):sqrt() end, 18)
ops.ReduceL1 = reduce(function(x, d, k) return x:abs():sum(d, k) end, 18)
ops.ReduceLogSumExp = reduce(function(x, d, k)
  local m = x:amax(d, true)
  local r = (x - m):exp():sum(d, true):log() + m
  if not k then for j = #d, 1, -1 do r = r:squeeze(d[j]) end end
  return r
end, 18)
ops.ReduceLogSum = reduce(function(x, d, k) return x:sum(d, k):log() end, 18)
-- a product as exp(sum(log|x|)) with the sign from the count of negatives;
-- any zero gives 0 (floats; rtol-level exact)
ops.ReduceProd = reduce(function(x, d, k)
  if not FLOAT[x.dtype] then unsupported("ReduceProd of %s", x.dtype) end
  local mag = x:abs():log():sum(d, k):exp()
  local negatives = x:lt(0):to(x.dtype):sum(d, k)
  local odd = (negatives - (negatives * 0.5):floor() * 2):gt(0.5)
  local zero = x:eq(0):to(x.dtype):amax(d, k):gt(0)
  local r = kiln.where(odd, -mag, mag)
  return kiln.where(zero, 0, r)
end, 18)

ops.PRelu = function(i)
  local x, s = to_tensor(i[1]), to_tensor(i[2])
  if ctx.opset < 7 and s:dim() == 1 and x:dim() >= 2 and s:shape()[1] == x:shape()[2] then
    local sh = { s:shape()[1] } -- before opset 7 the slope is per channel (dim 2)
    for _ = 3, x:dim() do sh[#sh + 1] = 1 end
    s = s:reshape(sh)
  end
  return kiln.where(x:ge(0), x, x * s)
end

ops.ThresholdedRelu = function(i, a)
  local x = to_tensor(i[1])
  return kiln.where(x:gt(a.alpha or 1.0), x, 0)
end
ops.Celu = function(i, a)
  local x = to_tensor(i[1])
  local alpha = a.alpha or 1.0
  return x:maximum(0) + ((x / alpha):exp() - 1):minimum(0) * alpha
end
ops.Shrink = function(i, a)
  local x = to_tensor(i[1])
  local l, bias = a.lambd or 0.5, a.bias or 0.0
  return kiln.where(x:lt(-l), x + bias, kiln.where(x:gt(l), x - bias, 0))
end
ops.Sign = function(i)
  local x = to_tensor(i[1])
  return x:gt(0):to(x.dtype) - x:lt(0):to(x.dtype)
end
ops.IsNaN = function(i)
  local x = to_tensor(i[1])
  return x:ne(x)
end
ops.IsInf = function(i, a)
  local x = to_tensor(i[1])
  local pos, neg = (a.detect_positive or 1) ~= 0, (a.detect_negative or 1) ~= 0
  local r
  if pos then r = x:eq(math.huge) end
  if neg then
    local n = x:eq(-math.huge)
    r = r and (r:to("i32") + n:to("i32")):ne(0) or n
  end
  return r or full_like_shape(x:shape(), 0, "bool")
end

ops.Sinh = unary(function(x) return (x:exp() - (-x):exp()) * 0.5 end)
ops.Cosh = unary(function(x) return (x:exp() + (-x):exp()) * 0.5 end)

-- Mod: fmod=0 takes the divisor's sign (floor division), fmod=1 the
-- dividend's (truncation); integers compute in f64 (exact below 2^53).
ops.Mod = function(i, a)
  local x, y = to_tensor(i[1]), to_tensor(i[2])
  local dt = x.dtype
  local xf, yf = x:to("f64"), y:to("f64")
  local q = xf / yf
  if (a.fmod or 0) ~= 0 then
    q = kiln.where(q:lt(0), q:ceil(), q:floor())
  else
    if not INT[dt] then unsupported("Mod of floats with fmod=0") end
    q = q:floor()
  end
  return (xf - yf * q):to(dt)
end

-- NegativeLogLikelihoodLoss: input {N, C, d...}, target {N, d...}; the
-- picked -input at each target class, weighted, then reduced.
local function nll(x, target, weight, a)
  local ignore = a.ignore_index
  local reduction = a.reduction or "mean"
  local t = target:to("i64")
  local valid
  if ignore then
    valid = t:ne(ignore)
    t = kiln.where(valid, t, 0)
  end
  local picked = x:gather(2, (t + 1):unsqueeze(2)):squeeze(2)
  local w
  if weight then
    w = weight:index_select(1, (t + 1):reshape({ t:numel() })):reshape(t:shape())
  end
  if valid then
    local vm = valid:to(x.dtype)
    w = w and w * vm or vm
  end
  local loss = -picked
  if w then loss = loss * w end
  if reduction == "none" then return loss end
  if reduction == "sum" then return loss:sum() end
  if reduction ~= "mean" then error("reduction must be none, sum or mean, got " .. tostring(reduction), 0) end
  if w then return loss:sum() / w:sum() end
  return loss:mean()
end
ops.NegativeLogLikelihoodLoss = function(i, a)
  return nll(to_tensor(i[1]), to_tensor(i[2]), i[3] and to_tensor(i[3]) or nil, a)
end
ops.SoftmaxCrossEntropyLoss = function(i, a, node)
  local x = to_tensor(i[1])
  local lp = x:log_softmax(2)
  local loss = nll(lp, to_tensor(i[2]), i[3] and to_tensor(i[3]) or nil, a)
  if #node.outputs > 1 then return loss, lp end
  return loss
end
