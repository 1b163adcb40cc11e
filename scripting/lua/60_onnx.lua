-- kiln.onnx: ONNX models as kiln modules.
--
--   local m = kiln.onnx.load("model.onnx" [, {sizes = {N = 1, T = 128}}])
--   local y = m(x)                -- eager; kiln.compile(m) captures it
--
-- The C side (scripting/kn_lua_onnx.c, onnx/kn_onnx.c) reads and validates
-- the file; here the graph is interpreted node by node with kiln's own
-- tensor ops, so capture, compile, explain, render and time see the same
-- ops a Lua model would make. Small integer values computed from shapes
-- (Shape -> Gather -> Concat -> Reshape) and Constants are kept as Lua
-- "known" values and folded here, so they neither break a graph nor make
-- sizes dynamic; a tensor is made of one only where a tensor op needs it.
-- While a node runs, the ops it makes carry "FILE:node 'NAME' (OP)" as
-- their source location (kiln.onnx.where).
local kiln = ...
local onnx = kiln.onnx

local FLOAT = { f32 = true, f64 = true, bf16 = true, f16 = true }
local ONNX_TYPES = { [1] = "f32", [6] = "i32", [7] = "i64", [9] = "bool", [10] = "f16", [11] = "f64", [16] = "bf16" }
local ONNX_TYPE_NAMES = { "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING", "BOOL",
  "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16" }

-- An error raised for something kiln does not implement: the message says
-- "unsupported", which the conformance runner counts apart from failures.
local Unsupported = {}
local function unsupported(fmt, ...)
  error(setmetatable({ msg = "unsupported: " .. string.format(fmt, ...) }, Unsupported), 0)
end

local function is_tensor(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return mt and mt.__name == "kiln.Tensor" or false
end

---------------------------------------------------------------------------
-- Known values: {known = true, dtype =, shape = {...}, v = {flat values}}

local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

local function known(dtype, shape, v) return { known = true, dtype = dtype, shape = shape, v = v } end
local function is_known(x) return type(x) == "table" and x.known end

local function flatten_list(t, out)
  if type(t) ~= "table" then out[#out + 1] = t; return out end
  for _, e in ipairs(t) do flatten_list(e, out) end
  return out
end

-- The largest tensor kept as a known value when read back from a tensor.
local KNOWN_MAX = 64

-- A known value of x (tensor or known); reading a traced tensor is a graph
-- break, as :tolist() is anywhere.
local function to_known(x)
  if is_known(x) then return x end
  local list = x:tolist()
  local v = flatten_list(list, {})
  if x:dim() == 0 then v = { list } end
  local vals = {}
  for i, e in ipairs(v) do
    if e == true then e = 1 elseif e == false then e = 0 end
    vals[i] = e
  end
  return known(x.dtype, x:shape(), vals)
end

local ctx -- the run in progress: {device =, file =, opset =}

-- A tensor of Lua values (index lists, interpolation weights, known values
-- a tensor op needs). The same values give the same tensor object on every
-- call (cached in the module): while tracing, a new object per call would
-- be a new graph input each time, and the version's guards would not match.
local function const_tensor(vals, dtype, shape)
  local dev = ctx and ctx.device or nil
  local key = dtype .. "|" .. tostring(dev) .. "|" .. table.concat(shape, ",") .. "|" .. table.concat(vals, ",")
  local cache = ctx and ctx.consts
  local t = cache and cache[key]
  if t then return t end
  local v = vals
  if dtype == "bool" then
    v = {}
    for i, e in ipairs(vals) do v[i] = e ~= 0 end
  end
  if #shape == 0 then
    t = kiln.tensor(v[1], { dtype = dtype, device = dev })
  else
    t = kiln.tensor(v, { dtype = dtype, device = dev }):reshape(shape)
  end
  if cache then cache[key] = t end
  return t
end

local function to_tensor(x)
  if not is_known(x) then return x end
  if #x.shape == 0 then
    -- a scalar is a constant of the graph, not an input
    local v = x.v[1]
    if x.dtype == "bool" then v = v ~= 0 end
    return kiln.full({}, v, { dtype = x.dtype, device = ctx and ctx.device or nil })
  end
  return const_tensor(x.v, x.dtype, x.shape)
end

local function ints(x, what)
  if x == nil then return nil end
  local k = to_known(x)
  local out = {}
  for i, e in ipairs(k.v) do
    if math.type(e) ~= "integer" then
      local f = math.tointeger(e)
      if not f then error(string.format("%s: expected integers, got %s", what or "value", tostring(e)), 0) end
      e = f
    end
    out[i] = e
  end
  return out
end

local function scalar(x)
  local k = to_known(x)
  return k.v[1]
end

local function shape_of(x) return is_known(x) and x.shape or x:shape() end
local function dtype_of(x) return x.dtype end

local function norm_axis(a, rank, what)
  if a < 0 then a = a + rank end
  if a < 0 or a >= rank then error(string.format("%s: axis %d out of range for rank %d", what or "axis", a, rank), 0) end
  return a
end

---------------------------------------------------------------------------
-- Known-value arithmetic (shapes and small constants)

local function known_index(shape, flat)
  -- the multi-index of flat position flat (0-based)
  local idx = {}
  for d = #shape, 1, -1 do
    idx[d] = flat % shape[d]
    flat = flat // shape[d]
  end
  return idx
end

local function broadcast_shapes(a, b)
  local n = math.max(#a, #b)
  local out = {}
  for i = 1, n do
    local da = a[#a - n + i] or 1
    local db = b[#b - n + i] or 1
    if da ~= db and da ~= 1 and db ~= 1 then
      error(string.format("shapes {%s} and {%s} do not broadcast", table.concat(a, ","), table.concat(b, ",")), 0)
    end
    out[i] = da == 1 and db or da
  end
  return out
end

local function known_at(k, idx, out_rank)
  local off, stride = 0, 1
  for d = #k.shape, 1, -1 do
    local i = idx[out_rank - #k.shape + d]
    if k.shape[d] == 1 then i = 0 end
    off = off + i * stride
    stride = stride * k.shape[d]
  end
  return k.v[off + 1]
end

local INT = { i32 = true, i64 = true }

local function known_map(args, dtype, f)
  local shape = args[1].shape
  for i = 2, #args do shape = broadcast_shapes(shape, args[i].shape) end
  local n = numel(shape)
  local v = {}
  for p = 0, n - 1 do
    local idx = known_index(shape, p)
    local xs = {}
    for i, a in ipairs(args) do xs[i] = known_at(a, idx, #shape) end
    v[p + 1] = f(table.unpack(xs))
  end
  return known(dtype, shape, v)
end

local function trunc_div(a, b)
  if math.type(a) == "integer" and math.type(b) == "integer" then
    if b == 0 then error("integer division by zero", 0) end
    local q = a // b
    if q < 0 and q * b ~= a then q = q + 1 end
    return q
  end
  return a / b
end

local KNOWN_BINARY = {
  Add = function(a, b) return a + b end,
  Sub = function(a, b) return a - b end,
  Mul = function(a, b) return a * b end,
  Div = trunc_div,
}
local KNOWN_COMPARE = {
  Equal = function(a, b) return a == b and 1 or 0 end,
  Greater = function(a, b) return a > b and 1 or 0 end,
  Less = function(a, b) return a < b and 1 or 0 end,
  GreaterOrEqual = function(a, b) return a >= b and 1 or 0 end,
  LessOrEqual = function(a, b) return a <= b and 1 or 0 end,
}

---------------------------------------------------------------------------
-- Helpers on tensors

local function dims_1based(axes) local out = {}; for i, a in ipairs(axes) do out[i] = a + 1 end; return out end

local function full_like_shape(shape, value, dtype)
  return kiln.full(shape, value, { dtype = dtype, device = ctx.device })
end

local function cat(list, axis)
  local keep = {}
  for _, t in ipairs(list) do keep[#keep + 1] = t end
  if #keep == 1 then return keep[1] end
  return kiln.cat(keep, axis + 1)
end

-- Gather positions idx (0-based Lua list, each in range) along axis.
local function take(x, axis, idx)
  local n = x:shape()[axis + 1]
  -- a contiguous run is a slice (a view)
  local run = #idx > 0
  for i = 2, #idx do if idx[i] ~= idx[i - 1] + 1 then run = false; break end end
  if run then return x:slice(axis + 1, idx[1] + 1, idx[#idx] + 1) end
  if #idx == 0 then
    local s = x:shape(); s[axis + 1] = 0
    return full_like_shape(s, 0, x.dtype)
  end
  local one = {}
  for i, e in ipairs(idx) do
    if e < 0 or e >= n then error(string.format("index %d out of range for size %d", e, n), 0) end
    one[i] = e + 1
  end
  return x:index_select(axis + 1, const_tensor(one, "i64", { #one }))
end

-- Pad dims of x: begins[d], ends[d] (0-based dims; negative pads crop).
local function pad(x, begins, ends, mode, value)
  mode = mode or "constant"
  for d = 0, x:dim() - 1 do
    local b, e = begins[d + 1] or 0, ends[d + 1] or 0
    if b ~= 0 or e ~= 0 then
      local n = x:shape()[d + 1]
      if b < 0 or e < 0 then
        local lo, hi = math.max(0, -b), n - math.max(0, -e)
        local idx = {}
        for i = lo, hi - 1 do idx[#idx + 1] = i end
        x = take(x, d, idx)
        n = x:shape()[d + 1]
        b, e = math.max(b, 0), math.max(e, 0)
      end
      if b > 0 or e > 0 then
        if mode == "constant" then
          local parts = {}
          local s = x:shape()
          if b > 0 then s[d + 1] = b; parts[#parts + 1] = full_like_shape(s, value or 0, x.dtype) end
          parts[#parts + 1] = x
          if e > 0 then s = x:shape(); s[d + 1] = e; parts[#parts + 1] = full_like_shape(s, value or 0, x.dtype) end
          x = cat(parts, d)
        else
          local idx = {}
          for i = -b, n + e - 1 do
            local j = i
            if mode == "edge" then
              j = math.min(math.max(i, 0), n - 1)
            elseif mode == "reflect" then
              if n == 1 then j = 0 else
                local period = 2 * (n - 1)
                j = i % period
                if j >= n then j = period - j end
              end
            elseif mode == "wrap" then
              j = i % n
            else
              unsupported("Pad mode '%s'", mode)
            end
            idx[#idx + 1] = j
          end
          x = take(x, d, idx)
        end
      end
    end
  end
  return x
end

-- ONNX's auto_pad: the begin/end pads of each spatial dim.
local function window_pads(a, in_sizes, kernel, strides, dilations)
  local nd = #kernel
  local pads = a.pads or {}
  local begins, ends = {}, {}
  local auto = a.auto_pad or "NOTSET"
  for i = 1, nd do
    if auto == "SAME_UPPER" or auto == "SAME_LOWER" then
      local out = (in_sizes[i] + strides[i] - 1) // strides[i]
      local total = math.max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sizes[i])
      local small, big = total // 2, total - total // 2
      if auto == "SAME_UPPER" then begins[i], ends[i] = small, big else begins[i], ends[i] = big, small end
    elseif auto == "VALID" then
      begins[i], ends[i] = 0, 0
    else
      begins[i], ends[i] = pads[i] or 0, pads[i + nd] or 0
    end
  end
  return begins, ends
end

local function defaults(list, n, v)
  local out = {}
  for i = 1, n do out[i] = list and list[i] or v end
  return out
end

-- 1-D windows become 2-D with a height of 1; more than 2 spatial dims is not in kiln.
local function as_2d(x, what)
  local nd = x:dim() - 2
  if nd == 2 then return x, false end
  if nd == 1 then return x:unsqueeze(4), true end
  unsupported("%s with %d spatial dims (kiln has 2-D convolution and pooling)", what, nd)
end

---------------------------------------------------------------------------
-- The ops. Each takes (inputs, attrs, node) and returns its outputs.

local ops = {}

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

ops.Add = binary("Add", function(a, b) return a + b end)
ops.Sub = binary("Sub", function(a, b) return a - b end)
ops.Mul = binary("Mul", function(a, b) return a * b end)
ops.Div = binary("Div", function(a, b) return a / b end)
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
ops.Equal = compare("Equal", "eq")
ops.Greater = compare("Greater", "gt")
ops.Less = compare("Less", "lt")
ops.GreaterOrEqual = compare("GreaterOrEqual", "ge")
ops.LessOrEqual = compare("LessOrEqual", "le")
ops.Not = function(i) return to_tensor(i[1]):logical_not() end
ops.And = function(i) return (to_tensor(i[1]):to("i32") * to_tensor(i[2]):to("i32")):ne(0) end
ops.Or = function(i) return (to_tensor(i[1]):to("i32") + to_tensor(i[2]):to("i32")):ne(0) end
ops.Xor = function(i) return to_tensor(i[1]):ne(to_tensor(i[2])) end

ops.Where = function(i)
  local c, a, b = i[1], i[2], i[3]
  if is_known(c) and is_known(a) and is_known(b) then
    return known_map({ c, a, b }, a.dtype, function(x, y, z) return x ~= 0 and y or z end)
  end
  return kiln.where(to_tensor(c), to_tensor(a), to_tensor(b))
end

ops.Relu = unary(function(x) return x:relu() end)
ops.Sigmoid = unary(function(x) return x:sigmoid() end)
ops.Tanh = unary(function(x) return x:tanh() end)
ops.Exp = unary(function(x) return x:exp() end)
ops.Log = unary(function(x) return x:log() end)
ops.Sqrt = unary(function(x) return x:sqrt() end)
ops.Abs = unary(function(x) return x:abs() end)
ops.Neg = function(i)
  if is_known(i[1]) then return known_map({ i[1] }, i[1].dtype, function(a) return -a end) end
  return -i[1]
end
ops.Floor = unary(function(x) return x:floor() end)
ops.Ceil = unary(function(x) return x:ceil() end)
ops.Round = unary(function(x) return x:round() end)
ops.Sin = unary(function(x) return x:sin() end)
ops.Cos = unary(function(x) return x:cos() end)
ops.Tan = unary(function(x) return x:sin() / x:cos() end)
ops.Reciprocal = unary(function(x) return 1 / x end)
ops.Erf = unary(function(x) return x:erf() end)
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
  if (a.approximate or "none") == "tanh" then
    return x * 0.5 * (((x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)):tanh() + 1)
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
ops.Max = variadic(function(a, b) return a:maximum(b) end)
ops.Min = variadic(function(a, b) return a:minimum(b) end)
ops.Sum = variadic(function(a, b) return a + b end)
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
ops.ReduceSum = reduce(function(x, d, k) return x:sum(d, k) end, 13)
ops.ReduceMean = reduce(function(x, d, k) return x:mean(d, k) end, 18)
ops.ReduceMax = reduce(function(x, d, k) return x:amax(d, k) end, 18)
ops.ReduceMin = reduce(function(x, d, k) return x:amin(d, k) end, 18)
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

ops.Shape = function(i, a)
  local s = shape_of(i[1])
  local r = #s
  local lo, hi = a.start or 0, a["end"] or r
  if lo < 0 then lo = lo + r end
  if hi < 0 then hi = hi + r end
  lo, hi = math.max(0, math.min(lo, r)), math.max(0, math.min(hi, r))
  local v = {}
  for d = lo + 1, hi do v[#v + 1] = s[d] end
  return known("i64", { #v }, v)
end
ops.Size = function(i) return known("i64", {}, { numel(shape_of(i[1])) }) end

ops.Constant = function(_, a, node)
  if node.known_value then return node.known_value end
  if a.value then
    if type(a.value) == "table" and a.value.unsupported then unsupported("%s", a.value.unsupported) end
    local t = a.value
    if t:numel() <= KNOWN_MAX and t.dtype ~= "bf16" and t.dtype ~= "f16" then return to_known(t) end
    return ctx.device and t:to(ctx.device) or t
  end
  if a.value_float then return known("f32", {}, { a.value_float }) end
  if a.value_int then return known("i64", {}, { a.value_int }) end
  if a.value_floats then return known("f32", { #a.value_floats }, a.value_floats) end
  if a.value_ints then return known("i64", { #a.value_ints }, a.value_ints) end
  unsupported("Constant without a tensor, float or int value (sparse or string)")
end

ops.ConstantOfShape = function(i, a)
  local shape = ints(i[1], "shape")
  local dtype, v = "f32", 0
  if a.value then
    if type(a.value) == "table" and a.value.unsupported then unsupported("%s", a.value.unsupported) end
    local k = to_known(a.value)
    dtype, v = k.dtype, k.v[1]
  end
  if numel(shape) <= KNOWN_MAX then
    local vals = {}
    for j = 1, numel(shape) do vals[j] = v end
    return known(dtype, shape, vals)
  end
  if dtype == "bool" then v = v ~= 0 end
  return kiln.full(shape, v, { dtype = dtype, device = ctx.device })
end

ops.Range = function(i)
  local s, l, d = scalar(i[1]), scalar(i[2]), scalar(i[3])
  local n = math.max(math.ceil((l - s) / d), 0)
  local v = {}
  for k = 0, n - 1 do v[k + 1] = s + k * d end
  local dt = dtype_of(i[1])
  local r = known(dt, { n }, v)
  if n > KNOWN_MAX then return to_tensor(r) end
  return r
end

local TYPE_BY_NAME = {}
for n, name in ipairs(ONNX_TYPE_NAMES) do TYPE_BY_NAME[name] = n end

ops.Cast = function(i, a)
  -- before opset 6 the target type is a name ("FLOAT")
  local to = ONNX_TYPES[type(a.to) == "string" and TYPE_BY_NAME[a.to:upper()] or a.to]
  if not to then unsupported("Cast to %s", ONNX_TYPE_NAMES[a.to] or tostring(a.to)) end
  local x = i[1]
  if is_known(x) and (INT[to] or to == "bool" or to == "f32" or to == "f64") then
    return known_map({ x }, to, function(e)
      if to == "bool" then return e ~= 0 and 1 or 0 end
      if INT[to] then
        if e ~= e then return 0 end
        local t = e >= 0 and math.floor(e) or math.ceil(e)
        return math.tointeger(t) or t
      end
      return e + 0.0
    end)
  end
  x = to_tensor(x)
  if to == "bool" then return x:ne(0) end
  return x:to(to)
end
ops.CastLike = function(i, a) return ops.Cast({ i[1] }, { to = ({ f32 = 1, i32 = 6, i64 = 7, bool = 9, f16 = 10, f64 = 11, bf16 = 16 })[dtype_of(i[2])] }) end

local function reshape_known_or_tensor(x, shape)
  if is_known(x) then return known(x.dtype, shape, x.v) end
  return x:reshape(shape)
end

ops.Reshape = function(i, a)
  local x = i[1]
  local want = ints(i[2] or known("i64", { #a.shape }, a.shape), "shape")
  local s = shape_of(x)
  local out, infer = {}, nil
  for k, d in ipairs(want) do
    if d == 0 and (a.allowzero or 0) == 0 then d = s[k] end
    if d == -1 then infer = k; d = 1 end
    out[k] = d
  end
  if infer then
    local rest = numel(out)
    out[infer] = rest == 0 and 0 or numel(s) // rest
  end
  return reshape_known_or_tensor(x, out)
end

ops.Flatten = function(i, a)
  local x = i[1]
  local s = shape_of(x)
  local axis = a.axis or 1
  if axis < 0 then axis = axis + #s end
  local outer, inner = 1, 1
  for d = 1, #s do if d <= axis then outer = outer * s[d] else inner = inner * s[d] end end
  return reshape_known_or_tensor(x, { outer, inner })
end

ops.Transpose = function(i, a)
  local x = to_tensor(i[1])
  local perm = a.perm
  if not perm then
    perm = {}
    for d = x:dim() - 1, 0, -1 do perm[#perm + 1] = d end
  end
  if x:dim() < 2 then return x end
  return x:permute(dims_1based(perm))
end

local function axes_arg(i, a, idx, opset_input)
  if ctx.opset >= opset_input then return i[idx] and ints(i[idx], "axes") or nil end
  return a.axes
end

ops.Unsqueeze = function(i, a)
  local x = i[1]
  local axes = axes_arg(i, a, 2, 13)
  local s = shape_of(x)
  local r = #s + #axes
  local put = {}
  for _, ax in ipairs(axes) do put[norm_axis(ax, r) + 1] = true end
  local out, j = {}, 1
  for d = 1, r do
    if put[d] then out[d] = 1 else out[d] = s[j]; j = j + 1 end
  end
  return reshape_known_or_tensor(x, out)
end

ops.Squeeze = function(i, a)
  local x = i[1]
  local axes = axes_arg(i, a, 2, 13)
  local s = shape_of(x)
  local drop = {}
  if axes and #axes > 0 then
    for _, ax in ipairs(axes) do drop[norm_axis(ax, #s) + 1] = true end
  else
    for d = 1, #s do if s[d] == 1 then drop[d] = true end end
  end
  local out = {}
  for d = 1, #s do if not drop[d] then out[#out + 1] = s[d] end end
  return reshape_known_or_tensor(x, out)
end

ops.Concat = function(i, a)
  local all_known = true
  for _, v in ipairs(i) do if not is_known(v) then all_known = false end end
  local axis = a.axis or (ctx.opset < 4 and 1) or error("Concat needs an axis", 0)
  if all_known and #i[1].shape == 1 and (axis == 0 or axis == -1) then
    local v = {}
    for _, k in ipairs(i) do for _, e in ipairs(k.v) do v[#v + 1] = e end end
    return known(i[1].dtype, { #v }, v)
  end
  local list = {}
  for _, v in ipairs(i) do list[#list + 1] = to_tensor(v) end
  return cat(list, norm_axis(axis, list[1]:dim()))
end

ops.Split = function(i, a, node)
  local x = to_tensor(i[1])
  local axis = norm_axis(a.axis or 0, x:dim())
  local n = x:shape()[axis + 1]
  local sizes
  if ctx.opset >= 13 then sizes = i[2] and ints(i[2], "split") or nil else sizes = a.split end
  local nout = #node.outputs
  if not sizes or #sizes == 0 then
    local each = (n + nout - 1) // nout
    sizes = {}
    local left = n
    for k = 1, nout do sizes[k] = math.min(each, left); left = left - sizes[k] end
  end
  local outs, at = {}, 0
  for k, sz in ipairs(sizes) do
    local idx = {}
    for j = at, at + sz - 1 do idx[#idx + 1] = j end
    outs[k] = take(x, axis, idx)
    at = at + sz
  end
  return table.unpack(outs)
end

ops.Slice = function(i, a)
  local x = i[1]
  local starts, ends, axes, steps
  if ctx.opset < 10 then
    starts, ends, axes = a.starts, a.ends, a.axes
  else
    starts, ends = ints(i[2], "starts"), ints(i[3], "ends")
    axes = i[4] and ints(i[4], "axes") or nil
    steps = i[5] and ints(i[5], "steps") or nil
  end
  local s = shape_of(x)
  if not axes then axes = {}; for k = 1, #starts do axes[k] = k - 1 end end
  local known_x = is_known(x)
  if known_x and #s ~= 1 then x = to_tensor(x); known_x = false end
  for k, ax in ipairs(axes) do
    ax = norm_axis(ax, #s)
    local n = s[ax + 1]
    local st, en, step = starts[k], ends[k], steps and steps[k] or 1
    if step == 0 then error("Slice: step 0", 0) end
    if st < 0 then st = st + n end
    if en < 0 then en = en + n end
    local idx = {}
    if step > 0 then
      st, en = math.max(0, math.min(st, n)), math.max(0, math.min(en, n))
      for j = st, en - 1, step do idx[#idx + 1] = j end
    else
      st, en = math.max(-1, math.min(st, n - 1)), math.max(-1, math.min(en, n - 1))
      for j = st, en + 1, step do idx[#idx + 1] = j end
    end
    if known_x then
      local v = {}
      for j, p in ipairs(idx) do v[j] = x.v[p + 1] end
      x = known(x.dtype, { #v }, v)
    elseif step > 0 and #idx > 0 then
      x = x:slice(ax + 1, idx[1] + 1, idx[#idx] + 1, step)
    else
      x = take(x, ax, idx)
    end
    s = shape_of(x)
  end
  return x
end

ops.Gather = function(i, a)
  local x, idx = i[1], i[2]
  local s = shape_of(x)
  local axis = norm_axis(a.axis or 0, #s)
  local n = s[axis + 1]
  if is_known(x) and is_known(idx) and #s == 1 then
    local v = {}
    for k, p in ipairs(idx.v) do
      if p < 0 then p = p + n end
      if p < 0 or p >= n then error(string.format("Gather: index %d out of range for size %d", idx.v[k], n), 0) end
      v[k] = x.v[p + 1]
    end
    return known(x.dtype, idx.shape, v)
  end
  x = to_tensor(x)
  local ishape = shape_of(idx)
  local out_shape = {}
  for d = 1, axis do out_shape[#out_shape + 1] = s[d] end
  for _, d in ipairs(ishape) do out_shape[#out_shape + 1] = d end
  for d = axis + 2, #s do out_shape[#out_shape + 1] = s[d] end
  local r
  if is_known(idx) then
    local list = {}
    for k, p in ipairs(idx.v) do list[k] = p < 0 and p + n or p end
    r = take(x, axis, list)
  else
    local flat = idx:reshape({ numel(ishape) })
    flat = kiln.where(flat:lt(0), flat + n, flat) + 1
    r = x:index_select(axis + 1, flat:to("i64"))
  end
  return r:reshape(out_shape)
end

ops.Expand = function(i)
  local x = to_tensor(i[1])
  local want = ints(i[2], "shape")
  local out = broadcast_shapes(x:shape(), want)
  local s = x:shape()
  while #s < #out do table.insert(s, 1, 1) end
  return x:reshape(s):expand(out)
end

ops.Tile = function(i)
  local x = to_tensor(i[1])
  local reps = ints(i[2], "repeats")
  for d, r in ipairs(reps) do
    if r ~= 1 then
      local parts = {}
      for k = 1, r do parts[k] = x end
      x = r == 0 and take(x, d - 1, {}) or cat(parts, d - 1)
    end
  end
  return x
end

ops.Pad = function(i, a)
  local x = to_tensor(i[1])
  local pads, value, mode = a.pads, a.value or 0, a.mode or "constant"
  local axes
  if ctx.opset >= 11 then
    pads = ints(i[2], "pads")
    if i[3] then value = scalar(i[3]) end
    if i[4] then axes = ints(i[4], "axes") end
  end
  local r = x:dim()
  axes = axes or (function() local t = {}; for d = 0, r - 1 do t[#t + 1] = d end; return t end)()
  local begins, ends = {}, {}
  for k, ax in ipairs(axes) do
    ax = norm_axis(ax, r)
    begins[ax + 1], ends[ax + 1] = pads[k], pads[k + #axes]
  end
  return pad(x, begins, ends, mode, value)
end

-- 3-D windows as 2-D ones: for each kernel depth offset, the input's depth
-- positions that offset reads (a strided slice) fold into the batch, a 2-D
-- op runs on them, and the results combine (sum for conv, max or sum for
-- pools). kD two-dimensional ops, no new kernel.
local function fold_depth(xp, k, dil, stride, od)
  local start = k * dil
  local xs = xp:slice(3, start + 1, start + (od - 1) * stride + 1, stride) -- {N, C, OD, H, W}
  local sh = xs:shape()
  return xs:permute({ 1, 3, 2, 4, 5 }):reshape({ sh[1] * od, sh[2], sh[4], sh[5] })
end
local function unfold_depth(y, n, od)
  local sh = y:shape()
  return y:reshape({ n, od, sh[2], sh[3], sh[4] }):permute({ 1, 3, 2, 4, 5 })
end

local function conv3d(x, w, b, a)
  local ks = w:shape()
  local kernel = { ks[3], ks[4], ks[5] }
  local strides, dil = defaults(a.strides, 3, 1), defaults(a.dilations, 3, 1)
  local s = x:shape()
  local begins, ends = window_pads(a, { s[3], s[4], s[5] }, kernel, strides, dil)
  local xp = pad(x, { 0, 0, begins[1], begins[2], begins[3] }, { 0, 0, ends[1], ends[2], ends[3] })
  local od = (xp:shape()[3] - dil[1] * (kernel[1] - 1) - 1) // strides[1] + 1
  local acc
  for k = 0, kernel[1] - 1 do
    local wk = w:slice(3, k + 1, k + 1):squeeze(3)
    local y = kiln.conv2d(fold_depth(xp, k, dil[1], strides[1], od), wk:contiguous(), nil,
      { stride = { strides[2], strides[3] }, padding = { 0, 0 }, dilation = { dil[2], dil[3] }, groups = a.group or 1 })
    acc = acc and acc + y or y
  end
  local y = unfold_depth(acc, s[1], od)
  if b then y = y + b:reshape({ b:shape()[1], 1, 1, 1 }) end
  return y
end

-- Pools by their windows' offsets: the padded input sliced once per kernel
-- offset (strided), combined with maximum or sum. For what kiln's 2-D pools
-- do not take (dilations, 3-D).
local function pool_by_offsets(x, kind, a, want_indices)
  local nd = x:dim() - 2
  local kernel = a.kernel_shape
  local strides, dil = defaults(a.strides, nd, 1), defaults(a.dilations, nd, 1)
  local s = x:shape()
  local sizes = {}
  for d = 1, nd do sizes[d] = s[d + 2] end
  local begins, ends = window_pads(a, sizes, kernel, strides, dil)
  local ceil = (a.ceil_mode or 0) ~= 0
  local out = {}
  for d = 1, nd do
    local span = sizes[d] + begins[d] + ends[d] - dil[d] * (kernel[d] - 1) - 1
    out[d] = (ceil and -((-span) // strides[d]) or span // strides[d]) + 1
    -- a last window starting in the end padding is dropped (as ONNX and PyTorch)
    if ceil and (out[d] - 1) * strides[d] >= sizes[d] + begins[d] then out[d] = out[d] - 1 end
    -- room for the last window
    local need = (out[d] - 1) * strides[d] + dil[d] * (kernel[d] - 1) + 1
    ends[d] = ends[d] + math.max(0, need - (sizes[d] + begins[d] + ends[d]))
  end
  local fill = kind == "max" and -math.huge or 0
  local pb, pe = { 0, 0 }, { 0, 0 }
  for d = 1, nd do pb[d + 2], pe[d + 2] = begins[d], ends[d] end
  local xp = pad(x, pb, pe, "constant", fill)
  local include = (a.count_include_pad or 0) ~= 0
  local mask
  if kind == "avg" then
    local ms = { 1, 1 }
    for d = 1, nd do ms[d + 2] = sizes[d] end
    -- which positions count: the input, and with count_include_pad its pads
    -- (not the room added for ceil_mode)
    local ones = full_like_shape(ms, 1, x.dtype)
    if include then
      local pb0, pe0 = { 0, 0 }, { 0, 0 }
      local b2, e2 = window_pads(a, sizes, kernel, strides, dil)
      for d = 1, nd do pb0[d + 2], pe0[d + 2] = b2[d], e2[d] end
      ones = pad(ones, pb0, pe0, "constant", 1)
      local extra_b, extra_e = { 0, 0 }, { 0, 0 }
      for d = 1, nd do extra_b[d + 2], extra_e[d + 2] = 0, ends[d] - e2[d] end
      mask = pad(ones, extra_b, extra_e, "constant", 0)
    else
      mask = pad(ones, pb, pe, "constant", 0)
    end
  end
  local acc, cnt, where_idx
  -- MaxPool's Indices: each output's flat index into x (row-major, or with
  -- storage_order 1 the spatial dims column-major), from the offset that won
  local base
  if want_indices then
    local per = numel(sizes)
    local nc = {}
    for k = 0, s[1] * s[2] - 1 do nc[#nc + 1] = k * per end
    local bs = { s[1], s[2] }
    for _ = 1, nd do bs[#bs + 1] = 1 end
    base = const_tensor(nc, "i64", bs)
  end
  local function offset_index(off)
    local os = { 1, 1 }
    for d = 1, nd do os[d + 2] = out[d] end
    local vals = {}
    local pos = {}
    for d = 1, nd do pos[d] = 0 end
    for _ = 1, numel(out) do
      local flat, stride = 0, 1
      local order = {}
      for d = 1, nd do order[d] = d end
      if (a.storage_order or 0) == 1 then
        for d = 1, nd do order[d] = nd - d + 1 end
      end
      for k = nd, 1, -1 do
        local d = order[k]
        local coord = pos[d] * strides[d] - begins[d] + off[d] * dil[d]
        flat = flat + coord * stride
        stride = stride * sizes[d]
      end
      vals[#vals + 1] = flat
      for d = nd, 1, -1 do
        pos[d] = pos[d] + 1
        if pos[d] < out[d] then break end
        pos[d] = 0
      end
    end
    return const_tensor(vals, "i64", os)
  end
  local idx = {}
  for d = 1, nd do idx[d] = 0 end
  while true do
    local v, mv = xp, mask
    for d = 1, nd do
      local start = idx[d] * dil[d]
      v = v:slice(d + 2, start + 1, start + (out[d] - 1) * strides[d] + 1, strides[d])
      if mv then mv = mv:slice(d + 2, start + 1, start + (out[d] - 1) * strides[d] + 1, strides[d]) end
    end
    if want_indices then
      local oi = offset_index(idx)
      if acc then
        local better = v:gt(acc) -- strictly: the first offset keeps a tie
        where_idx = kiln.where(better, oi, where_idx)
        acc = kiln.where(better, v, acc)
      else
        acc, where_idx = v, oi
      end
    elseif kind == "max" then acc = acc and acc:maximum(v) or v
    else
      acc = acc and acc + v or v
      cnt = cnt and cnt + mv or mv
    end
    local d = nd
    while d >= 1 do
      idx[d] = idx[d] + 1
      if idx[d] < kernel[d] then break end
      idx[d] = 0
      d = d - 1
    end
    if d == 0 then break end
  end
  if kind == "avg" then acc = acc / cnt end
  if want_indices then return acc, where_idx + base end
  return acc
end

ops.Conv = function(i, a)
  local x, w = to_tensor(i[1]), to_tensor(i[2])
  local b = i[3] and to_tensor(i[3]) or nil
  if x:dim() == 5 then return conv3d(x, w, b, a) end
  local x2, one_d = as_2d(x, "Conv")
  if one_d then w = w:unsqueeze(4) end
  local nd = 2
  local kernel = {}
  for d = 1, nd do kernel[d] = w:shape()[d + 2] end
  local strides = defaults(a.strides, #kernel, 1)
  local dil = defaults(a.dilations, #kernel, 1)
  local begins, ends
  if one_d then
    local sp = x:shape()[3]
    local bb, ee = window_pads(a, { sp }, { kernel[1] }, { strides[1] }, { dil[1] })
    begins, ends = { bb[1], 0 }, { ee[1], 0 }
    strides, dil = { strides[1], 1 }, { dil[1], 1 }
  else
    local s = x:shape()
    begins, ends = window_pads(a, { s[3], s[4] }, kernel, strides, dil)
  end
  local padding = { 0, 0 }
  if begins[1] == ends[1] and begins[2] == ends[2] then
    padding = { begins[1], begins[2] }
  else
    x2 = pad(x2, { 0, 0, begins[1], begins[2] }, { 0, 0, ends[1], ends[2] })
  end
  local y = kiln.conv2d(x2, w, b, { stride = strides, padding = padding, dilation = dil, groups = a.group or 1 })
  if one_d then y = y:squeeze(4) end
  return y
end

-- ConvTranspose as a convolution: the input spread out by the stride
-- (zeros between elements), padded by dilation * (kernel - 1) less the
-- pads, and convolved with the kernel flipped and its channel dims swapped.
local function spread(x, dim, s)
  if s == 1 then return x end
  local sh = x:shape()
  local n = sh[dim + 1]
  local a, b = {}, {}
  for d = 1, #sh do a[#a + 1] = sh[d]; if d == dim + 1 then a[#a + 1] = 1 end end
  local xs = x:reshape(a)
  local zs = {}
  for d = 1, #a do zs[d] = a[d] end
  zs[dim + 2] = s - 1
  local z = full_like_shape(zs, 0, x.dtype)
  local both = kiln.cat({ xs, z }, dim + 2)
  for d = 1, #sh do b[d] = sh[d] end
  b[dim + 1] = n * s
  local flat = both:reshape(b)
  return flat:slice(dim + 1, 1, (n - 1) * s + 1)
end

-- The begin and end pads of a transposed convolution's nd spatial dims
-- (pads, auto_pad, or output_shape as ONNX's reference derives them).
local function transpose_pads(a, sizes, kernel, strides, dil, outpad, nd)
  local begins, ends = {}, {}
  local pads = a.pads or {}
  for d = 1, nd do
    local total_k = dil[d] * (kernel[d] - 1) + 1
    if a.output_shape or a.auto_pad == "SAME_UPPER" or a.auto_pad == "SAME_LOWER" then
      local out = a.output_shape and a.output_shape[#a.output_shape - nd + d] or sizes[d] * strides[d]
      local total = strides[d] * (sizes[d] - 1) + outpad[d] + total_k - out
      if a.auto_pad == "SAME_UPPER" then begins[d], ends[d] = total // 2, total - total // 2
      else begins[d], ends[d] = total - total // 2, total // 2 end
    elseif a.auto_pad == "VALID" then
      begins[d], ends[d] = 0, 0
    else
      begins[d], ends[d] = pads[d] or 0, pads[d + nd] or 0
    end
  end
  return begins, ends
end

-- 3-D: the same construction, convolved by conv3d (depth folded into the batch).
local function conv_transpose3d(x, w, b, a)
  local g = a.group or 1
  local ws = w:shape()
  local cin, cout_g = ws[1], ws[2]
  local kernel = { ws[3], ws[4], ws[5] }
  local strides, dil = defaults(a.strides, 3, 1), defaults(a.dilations, 3, 1)
  local outpad = defaults(a.output_padding, 3, 0)
  local s = x:shape()
  local begins, ends = transpose_pads(a, { s[3], s[4], s[5] }, kernel, strides, dil, outpad, 3)
  local xsp = x
  for d = 1, 3 do xsp = spread(xsp, d + 1, strides[d]) end
  local pb, pe = { 0, 0 }, { 0, 0 }
  for d = 1, 3 do
    local k = dil[d] * (kernel[d] - 1)
    pb[d + 2], pe[d + 2] = k - begins[d], k - ends[d] + outpad[d]
  end
  xsp = pad(xsp, pb, pe)
  local wt = w:reshape({ g, cin // g, cout_g, kernel[1], kernel[2], kernel[3] }):permute({ 1, 3, 2, 4, 5, 6 })
    :reshape({ g * cout_g, cin // g, kernel[1], kernel[2], kernel[3] })
  for d = 1, 3 do
    if kernel[d] > 1 then
      local rev = {}
      for k = kernel[d] - 1, 0, -1 do rev[#rev + 1] = k end
      wt = take(wt, d + 1, rev)
    end
  end
  return conv3d(xsp, wt:contiguous(), b, { strides = { 1, 1, 1 }, dilations = dil, group = g, pads = { 0, 0, 0, 0, 0, 0 } })
end

ops.ConvTranspose = function(i, a)
  local x, w = to_tensor(i[1]), to_tensor(i[2])
  local b = i[3] and to_tensor(i[3]) or nil
  if x:dim() == 5 then return conv_transpose3d(x, w, b, a) end
  local x2, one_d = as_2d(x, "ConvTranspose")
  if one_d then w = w:unsqueeze(4) end
  local g = a.group or 1
  local ws = w:shape()
  local cin, cout_g, kh, kw = ws[1], ws[2], ws[3], ws[4]
  local function pair2(list, v)
    local t = defaults(list, one_d and 1 or 2, v)
    if one_d then t[2] = v end
    return t
  end
  local strides, dil = pair2(a.strides, 1), pair2(a.dilations, 1)
  local outpad = pair2(a.output_padding, 0)
  local kernel = { kh, kw }
  local xs = x2:shape()
  local nd = one_d and 1 or 2
  local begins, ends = transpose_pads(a, { xs[3], xs[4] }, kernel, strides, dil, outpad, nd)
  if one_d then begins[2], ends[2] = 0, 0 end
  local xsp = spread(spread(x2, 2, strides[1]), 3, strides[2])
  local pb, pe = {}, {}
  for d = 1, 2 do
    local k = dil[d] * (kernel[d] - 1)
    pb[d], pe[d] = k - begins[d], k - ends[d] + outpad[d]
  end
  xsp = pad(xsp, { 0, 0, pb[1], pb[2] }, { 0, 0, pe[1], pe[2] })
  -- weight {Cin, Cout/g, kh, kw} -> {Cout, Cin/g, kh, kw}, spatially flipped
  local wt = w:reshape({ g, cin // g, cout_g, kh, kw }):permute({ 1, 3, 2, 4, 5 }):reshape({ g * cout_g, cin // g, kh, kw })
  local rev_h, rev_w = {}, {}
  for k = kh - 1, 0, -1 do rev_h[#rev_h + 1] = k end
  for k = kw - 1, 0, -1 do rev_w[#rev_w + 1] = k end
  if kh > 1 then wt = take(wt, 2, rev_h) end
  if kw > 1 then wt = take(wt, 3, rev_w) end
  local y = kiln.conv2d(xsp, wt:contiguous(), b, { stride = { 1, 1 }, padding = { 0, 0 }, dilation = dil, groups = g })
  if one_d then y = y:squeeze(4) end
  return y
end

local function pool(kind)
  return function(i, a, node)
    local x = to_tensor(i[1])
    if kind == "max" and #node.outputs > 1 and node.outputs[2] ~= "" then
      if x:dim() < 4 then unsupported("MaxPool's Indices output for 1-D pools") end
      return pool_by_offsets(x, "max", a, true)
    end
    local dilated = false
    for _, d in ipairs(a.dilations or {}) do if d ~= 1 then dilated = true end end
    if dilated or x:dim() == 5 then return pool_by_offsets(x, kind, a) end
    local x2, one_d = as_2d(x, kind == "max" and "MaxPool" or "AveragePool")
    local kernel = a.kernel_shape
    local strides = defaults(a.strides, #kernel, 1)
    local s = x:shape()
    local sizes = {}
    for d = 1, #kernel do sizes[d] = s[d + 2] end
    local begins, ends = window_pads(a, sizes, kernel, strides, defaults(nil, #kernel, 1))
    if one_d then
      kernel, strides = { kernel[1], 1 }, { strides[1], 1 }
      begins, ends = { begins[1], 0 }, { ends[1], 0 }
    end
    local ceil = (a.ceil_mode or 0) ~= 0
    local include = (a.count_include_pad or 0) ~= 0
    local same = (a.auto_pad == "SAME_UPPER" or a.auto_pad == "SAME_LOWER")
    local sym = begins[1] == ends[1] and begins[2] == ends[2]
    local fn = kind == "max" and kiln.max_pool2d or kiln.avg_pool2d
    local pads2 = { begins[1], begins[2] }
    local y
    if sym and not (kind == "avg" and same and not include) and pads2[1] * 2 <= kernel[1] and pads2[2] * 2 <= kernel[2] then
      y = fn(x2, kernel, { stride = strides, padding = pads2, ceil_mode = ceil, count_include_pad = include })
    else
      local fill = kind == "max" and -math.huge or 0
      local xp = pad(x2, { 0, 0, begins[1], begins[2] }, { 0, 0, ends[1], ends[2] }, "constant", fill)
      y = fn(xp, kernel, { stride = strides, padding = { 0, 0 }, ceil_mode = ceil, count_include_pad = true })
      if kind == "avg" and not include then
        local ones = full_like_shape({ 1, 1, x2:shape()[3], x2:shape()[4] }, 1, x.dtype)
        local mp = pad(ones, { 0, 0, begins[1], begins[2] }, { 0, 0, ends[1], ends[2] }, "constant", 0)
        local cnt = kiln.avg_pool2d(mp, kernel, { stride = strides, padding = { 0, 0 }, ceil_mode = ceil, count_include_pad = true })
        y = y / cnt
      end
    end
    if one_d then y = y:squeeze(4) end
    return y
  end
end
ops.MaxPool = pool("max")
ops.AveragePool = pool("avg")
ops.GlobalAveragePool = function(i)
  local x = to_tensor(i[1])
  local dims = {}
  for d = 3, x:dim() do dims[#dims + 1] = d end
  return x:mean(dims, true)
end
ops.GlobalMaxPool = function(i)
  local x = to_tensor(i[1])
  local dims = {}
  for d = 3, x:dim() do dims[#dims + 1] = d end
  return x:amax(dims, true)
end

ops.BatchNormalization = function(i, a, node)
  local x = to_tensor(i[1])
  local scale, bias, mean, var = to_tensor(i[2]), to_tensor(i[3]), to_tensor(i[4]), to_tensor(i[5])
  local eps = a.epsilon or 1e-5
  if (a.training_mode or 0) ~= 0 then
    -- the batch's statistics normalize; the running ones are updated with
    -- momentum (ONNX's reference: biased variance for both)
    local dims = { 1 }
    for d = 3, x:dim() do dims[#dims + 1] = d end
    local bm = x:mean(dims)
    local s = { x:shape()[2] }
    for _ = 3, x:dim() do s[#s + 1] = 1 end
    local c = x - bm:reshape(s)
    local bv = (c * c):mean(dims)
    local y = c / (bv:reshape(s) + eps):sqrt() * scale:reshape(s) + bias:reshape(s)
    local mom = a.momentum or 0.9
    return y, mean * mom + bm * (1 - mom), var * mom + bv * (1 - mom)
  end
  for k = 2, #node.outputs do if node.outputs[k] ~= "" then unsupported("BatchNormalization's running statistics outputs outside training mode") end end
  if x:dim() == 4 then
    return kiln.batch_norm(x, mean, var, scale, bias, eps)
  end
  local s = { x:shape()[2] }
  for _ = 3, x:dim() do s[#s + 1] = 1 end
  local function b(t) return t:reshape(s) end
  return (x - b(mean)) / (b(var) + eps):sqrt() * b(scale) + b(bias)
end

ops.InstanceNormalization = function(i, a)
  local x = to_tensor(i[1])
  local scale, bias = to_tensor(i[2]), to_tensor(i[3])
  local dims = {}
  for d = 3, x:dim() do dims[#dims + 1] = d end
  local m = x:mean(dims, true)
  local v = ((x - m) * (x - m)):mean(dims, true)
  local s = { x:shape()[2] }
  for _ = 3, x:dim() do s[#s + 1] = 1 end
  return (x - m) / (v + (a.epsilon or 1e-5)):sqrt() * scale:reshape(s) + bias:reshape(s)
end

ops.LayerNormalization = function(i, a, node)
  local x = to_tensor(i[1])
  local stats = false
  for k = 2, #node.outputs do if node.outputs[k] ~= "" then stats = true end end
  if stats then
    -- the saved statistics are asked for: the normalization composed, in f32
    -- (stash_type 1) at least
    local axis = norm_axis(a.axis or -1, x:dim())
    local dims = {}
    for d = axis + 1, x:dim() do dims[#dims + 1] = d end
    local xf = FLOAT[x.dtype] and (x.dtype == "f64" and x or x:to("f32")) or x:to("f32")
    local mean = xf:mean(dims, true)
    local c = xf - mean
    local inv = 1 / ((c * c):mean(dims, true) + (a.epsilon or 1e-5)):sqrt()
    local y = c * inv
    if i[2] then y = y * to_tensor(i[2]) end
    if i[3] then y = y + to_tensor(i[3]) end
    return y:to(x.dtype), mean, inv
  end
  local axis = norm_axis(a.axis or -1, x:dim())
  local ns = {}
  for d = axis + 1, x:dim() do ns[#ns + 1] = x:shape()[d] end
  local w = i[2] and to_tensor(i[2]) or nil
  local b = i[3] and to_tensor(i[3]) or nil
  local function fit(t)
    if t == nil then return nil end
    local ts = t:shape()
    local same = #ts == #ns
    for d = 1, #ns do if ts[d] ~= ns[d] then same = false end end
    if same then return t end
    return t:expand(ns)
  end
  return kiln.layer_norm(x, ns, fit(w), fit(b), a.epsilon or 1e-5)
end

ops.PRelu = function(i)
  local x, s = to_tensor(i[1]), to_tensor(i[2])
  if ctx.opset < 7 and s:dim() == 1 and x:dim() >= 2 and s:shape()[1] == x:shape()[2] then
    local sh = { s:shape()[1] } -- before opset 7 the slope is per channel (dim 2)
    for _ = 3, x:dim() do sh[#sh + 1] = 1 end
    s = s:reshape(sh)
  end
  return kiln.where(x:ge(0), x, x * s)
end

local function arg_extreme(sign)
  return function(i, a)
    local x = to_tensor(i[1])
    if sign < 0 then x = -x end
    local axis = norm_axis(a.axis or 0, x:dim())
    local n = x:shape()[axis + 1]
    local last = (a.select_last_index or 0) ~= 0
    if last then
      local rev = {}
      for k = n - 1, 0, -1 do rev[#rev + 1] = k end
      x = take(x, axis, rev)
    end
    local _, idx = x:max(axis + 1, (a.keepdims or 1) ~= 0)
    if last then return (idx - n) * -1 end
    return idx - 1
  end
end
ops.ArgMax = arg_extreme(1)
ops.ArgMin = arg_extreme(-1)

ops.GatherElements = function(i, a)
  local x, idx = to_tensor(i[1]), to_tensor(i[2])
  local axis = norm_axis(a.axis or 0, x:dim())
  local n = x:shape()[axis + 1]
  idx = kiln.where(idx:lt(0), idx + n, idx) + 1
  return x:gather(axis + 1, idx:to("i64"))
end

ops.Trilu = function(i, a)
  local x = to_tensor(i[1])
  local k = i[2] and scalar(i[2]) or 0
  if (a.upper or 1) ~= 0 then return x:triu(k) end
  return x:tril(k)
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

ops.Hardmax = function(i, a)
  local x = to_tensor(i[1])
  local s = x:shape()
  local flat = x
  local axis
  if ctx.opset < 13 then
    axis = norm_axis(a.axis or 1, #s)
    local outer, inner = 1, 1
    for d = 1, #s do if d <= axis then outer = outer * s[d] else inner = inner * s[d] end end
    flat = x:reshape({ outer, inner })
    axis = 1
  else
    axis = norm_axis(a.axis or -1, #s)
  end
  local _, idx = flat:max(axis + 1, true)
  local n = flat:shape()[axis + 1]
  local rs = {}
  for d = 1, flat:dim() do rs[d] = 1 end
  rs[axis + 1] = n
  local positions = kiln.arange(n, { dtype = "i64", device = ctx.device }):reshape(rs) + 1
  return positions:eq(idx):to(x.dtype):reshape(s)
end

ops.OneHot = function(i, a)
  local idx = to_tensor(i[1])
  local depth = scalar(i[2])
  local vals = to_tensor(i[3])
  depth = math.tointeger(depth) or math.floor(depth)
  local r = idx:dim() + 1
  local axis = norm_axis(a.axis or -1, r)
  local u = idx:unsqueeze(axis + 1)
  if not INT[u.dtype] then u = u:to("i64") end
  u = kiln.where(u:lt(0), u + depth, u)
  local rs = {}
  for d = 1, r do rs[d] = 1 end
  rs[axis + 1] = depth
  local positions = kiln.arange(depth, { dtype = u.dtype, device = ctx.device }):reshape(rs)
  local off, on = vals:slice(1, 1, 1):reshape({}), vals:slice(1, 2, 2):reshape({})
  return kiln.where(positions:eq(u), on, off)
end

ops.DepthToSpace = function(i, a)
  local x = to_tensor(i[1])
  local b = a.blocksize
  local n, c, h, w = table.unpack(x:shape())
  local y
  if (a.mode or "DCR") == "DCR" then
    y = x:reshape({ n, b, b, c // (b * b), h, w }):permute({ 1, 4, 5, 2, 6, 3 })
  else
    y = x:reshape({ n, c // (b * b), b, b, h, w }):permute({ 1, 2, 5, 3, 6, 4 })
  end
  return y:reshape({ n, c // (b * b), h * b, w * b })
end
ops.SpaceToDepth = function(i, a)
  local x = to_tensor(i[1])
  local b = a.blocksize
  local n, c, h, w = table.unpack(x:shape())
  return x:reshape({ n, c, h // b, b, w // b, b }):permute({ 1, 4, 6, 2, 3, 5 }):reshape({ n, c * b * b, h // b, w // b })
end

ops.MeanVarianceNormalization = function(i, a)
  local x = to_tensor(i[1])
  local axes = a.axes or { 0, 2, 3 }
  local dims = {}
  for k, ax in ipairs(axes) do dims[k] = norm_axis(ax, x:dim()) + 1 end
  local m = x:mean(dims, true)
  local c = x - m
  return c / (((c * c):mean(dims, true)):sqrt() + 1e-9)
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

-- CumSum along an axis: a matmul with a triangular matrix of ones (floats;
-- integers through f64, exact below 2^53).
ops.CumSum = function(i, a)
  local x = to_tensor(i[1])
  local axis = norm_axis(scalar(i[2]), x:dim())
  local n = x:shape()[axis + 1]
  local dt = x.dtype
  local work = (dt == "f32" or dt == "f64") and x or x:to("f64")
  local r = x:dim()
  local perm = {}
  for d = 1, r do perm[d] = d end
  perm[axis + 1], perm[r] = r, axis + 1
  local moved = r > 1 and work:permute(perm) or work
  -- m[j][k] = 1 where output k sums input j
  local vals = {}
  local excl, rev = (a.exclusive or 0) ~= 0, (a.reverse or 0) ~= 0
  for j = 0, n - 1 do
    for k = 0, n - 1 do
      local take_it
      if rev then take_it = excl and j > k or (not excl and j >= k)
      else take_it = excl and j < k or (not excl and j <= k) end
      vals[#vals + 1] = take_it and 1 or 0
    end
  end
  local m = const_tensor(vals, work.dtype, { n, n })
  local y = moved:matmul(m)
  if r > 1 then y = y:permute(perm) end
  return y:to(dt)
end

-- LRN: x / (bias + alpha/size * sum of squares over a window of channels)^beta
ops.LRN = function(i, a)
  local x = to_tensor(i[1])
  local size = a.size
  local alpha, beta, bias = a.alpha or 1e-4, a.beta or 0.75, a.bias or 1.0
  local sq = x * x
  local lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
  local c = x:shape()[2]
  local p = pad(sq, { 0, lo }, { 0, hi })
  local acc
  for k = 0, size - 1 do
    local s = p:slice(2, k + 1, k + c)
    acc = acc and acc + s or s
  end
  return x / (acc * (alpha / size) + bias):pow(beta)
end

ops.EyeLike = function(i, a)
  local x = i[1]
  local s = shape_of(x)
  local dt = a.dtype and ONNX_TYPES[a.dtype] or dtype_of(x)
  if not dt then unsupported("EyeLike to %s", ONNX_TYPE_NAMES[a.dtype] or "?") end
  local k = a.k or 0
  local vals = {}
  for r = 0, s[1] - 1 do
    for c = 0, s[2] - 1 do vals[#vals + 1] = (c - r == k) and 1 or 0 end
  end
  return const_tensor(vals, dt, s)
end

-- GatherND: the index's last dim addresses the leading dims of data (after
-- batch_dims); as one index_select over those dims flattened.
ops.GatherND = function(i, a)
  local x, idx = to_tensor(i[1]), to_tensor(i[2])
  local b = a.batch_dims or 0
  local xs, is = x:shape(), idx:shape()
  local m = is[#is]
  local bsize = 1
  for d = 1, b do bsize = bsize * xs[d] end
  -- x as {B, prod(indexed dims), rest...}
  local inner = 1
  for d = b + 1, b + m do inner = inner * xs[d] end
  local rest = {}
  for d = b + m + 1, #xs do rest[#rest + 1] = xs[d] end
  local flat_shape = { bsize * inner }
  for _, d in ipairs(rest) do flat_shape[#flat_shape + 1] = d end
  local xf = x:reshape(flat_shape)
  -- linear index into the indexed dims, plus the batch offset
  local lin
  local stride = 1
  for d = m, 1, -1 do
    local size = xs[b + d]
    local comp = idx:slice(#is, d, d):squeeze(#is):to("i64")
    comp = kiln.where(comp:lt(0), comp + size, comp)
    lin = lin and lin + comp * stride or comp * stride
    stride = stride * size
  end
  local ls = lin:shape()
  if b > 0 then
    local per = numel(ls) // bsize
    local boff = {}
    for bb = 0, bsize - 1 do for _ = 1, per do boff[#boff + 1] = bb * inner end end
    lin = lin + const_tensor(boff, "i64", ls)
  end
  local out = xf:index_select(1, (lin + 1):reshape({ numel(ls) }))
  local out_shape = {}
  for d = 1, #is - 1 do out_shape[#out_shape + 1] = is[d] end
  for _, d in ipairs(rest) do out_shape[#out_shape + 1] = d end
  return out:reshape(out_shape)
end

-- Scatters as index_add on the data flattened: positions are linear indices.
-- reduction none overwrites (the written positions are masked out of the
-- data first; repeated indices then add up, where ONNX leaves the order
-- undefined), add adds; mul, max and min are not in kiln.
local function scatter_flat(x, lin, upd, reduction)
  if reduction ~= "none" and reduction ~= "add" then unsupported("scatter reduction '%s'", reduction) end
  local flat_x = x
  local idx = (lin + 1):reshape({ lin:numel() })
  local added = flat_x:index_add(1, idx, upd)
  if reduction == "add" then return added end
  local zeros = full_like_shape(flat_x:shape(), 0, flat_x.dtype)
  local ones_shape = upd:shape()
  local hit = zeros:index_add(1, idx, full_like_shape(ones_shape, 1, flat_x.dtype)):gt(0)
  return kiln.where(hit, zeros:index_add(1, idx, upd), flat_x)
end

ops.ScatterElements = function(i, a)
  local x, idx, upd = to_tensor(i[1]), to_tensor(i[2]), to_tensor(i[3])
  local axis = norm_axis(a.axis or 0, x:dim())
  local xs, is = x:shape(), idx:shape()
  idx = idx:to("i64")
  idx = kiln.where(idx:lt(0), idx + xs[axis + 1], idx)
  -- the linear index of each update: its own position with the axis
  -- coordinate replaced by idx
  local lin = idx * 0
  local stride = 1
  for d = #xs, 1, -1 do
    local coord
    if d == axis + 1 then coord = idx
    else
      local rs = {}
      for k = 1, #is do rs[k] = 1 end
      rs[d] = is[d]
      coord = kiln.arange(is[d], { dtype = "i64", device = ctx.device }):reshape(rs)
    end
    lin = lin + coord * stride
    stride = stride * xs[d]
  end
  local y = scatter_flat(x:reshape({ x:numel() }), lin, upd:reshape({ upd:numel() }), a.reduction or "none")
  return y:reshape(xs)
end
ops.Scatter = ops.ScatterElements

ops.ScatterND = function(i, a)
  local x, idx, upd = to_tensor(i[1]), to_tensor(i[2]), to_tensor(i[3])
  local xs, is = x:shape(), idx:shape()
  local m = is[#is]
  local inner = 1
  for d = 1, m do inner = inner * xs[d] end
  local rest = {}
  for d = m + 1, #xs do rest[#rest + 1] = xs[d] end
  local lin
  local stride = 1
  for d = m, 1, -1 do
    local comp = idx:slice(#is, d, d):squeeze(#is):to("i64")
    comp = kiln.where(comp:lt(0), comp + xs[d], comp)
    lin = lin and lin + comp * stride or comp * stride
    stride = stride * xs[d]
  end
  local n = lin:numel()
  local flat_shape, upd_shape = { inner }, { n }
  for _, d in ipairs(rest) do flat_shape[#flat_shape + 1] = d; upd_shape[#upd_shape + 1] = d end
  local y = scatter_flat(x:reshape(flat_shape), lin:reshape({ n }), upd:reshape(upd_shape), a.reduction or "none")
  return y:reshape(xs)
end

-- TopK by k rounds of max along the axis, each taking the winner out
-- (ties: the lower index first, as ONNX).
ops.TopK = function(i, a)
  local x = to_tensor(i[1])
  local k = ints(i[2], "k")[1]
  local axis = norm_axis(a.axis or -1, x:dim())
  local largest = (a.largest or 1) ~= 0
  if (a.sorted or 1) == 0 then unsupported("TopK with sorted=0") end
  local work = largest and x or -x
  if not FLOAT[x.dtype] then work = work:to("f64") end
  local n = x:shape()[axis + 1]
  local rs = {}
  for d = 1, x:dim() do rs[d] = 1 end
  rs[axis + 1] = n
  local positions = kiln.arange(n, { dtype = "i64", device = ctx.device }):reshape(rs) + 1
  local vals, idxs = {}, {}
  for r = 1, k do
    local _, ix = work:max(axis + 1, true)
    idxs[r] = ix
    vals[r] = x:gather(axis + 1, ix)
    if r < k then work = kiln.where(positions:eq(ix), -math.huge, work) end
  end
  if k == 0 then
    local s = x:shape(); s[axis + 1] = 0
    return full_like_shape(s, 0, x.dtype), full_like_shape(s, 0, "i64")
  end
  return cat(vals, axis), cat(idxs, axis) - 1
end

-- RNN, GRU, LSTM: the recurrences of the ONNX spec unrolled over the
-- sequence with kiln's matmul and pointwise ops (default activations,
-- forward, reverse or bidirectional, layout 0 or 1; no sequence_lens, clip
-- or custom activations).
local function recurrent(kind)
  local gates = ({ RNN = 1, GRU = 3, LSTM = 4 })[kind]
  return function(i, a, node)
    local x, W, R = to_tensor(i[1]), to_tensor(i[2]), to_tensor(i[3])
    local B = i[4] and to_tensor(i[4]) or nil
    if i[5] then
      -- lengths that are all the full sequence change nothing
      local seq_len = (a.layout or 0) == 1 and x:shape()[2] or x:shape()[1]
      for _, l in ipairs(ints(i[5], "sequence_lens")) do
        if l ~= seq_len then unsupported("%s with sequence_lens shorter than the sequence", kind) end
      end
    end
    if a.activations then
      local default = ({ RNN = { "Tanh" }, GRU = { "Sigmoid", "Tanh" }, LSTM = { "Sigmoid", "Tanh", "Tanh" } })[kind]
      for k, act in ipairs(a.activations) do
        if act ~= default[(k - 1) % #default + 1] then unsupported("%s with activation %s", kind, act) end
      end
    end
    if a.clip then unsupported("%s with clip", kind) end
    if (a.input_forget or 0) ~= 0 then unsupported("LSTM with input_forget") end
    local layout = a.layout or 0
    if layout == 1 then x = x:transpose(1, 2) end -- {batch, seq, input} -> {seq, batch, input}
    local hidden = a.hidden_size or (W:shape()[2] // gates)
    local dir = a.direction or "forward"
    local ndir = W:shape()[1]
    local seq, batch = x:shape()[1], x:shape()[2]
    local h0 = i[6] and to_tensor(i[6]) or nil
    local c0 = i[7] and to_tensor(i[7]) or nil
    local P = i[8] and to_tensor(i[8]) or nil
    local ys, hs, cs = {}, {}, {}
    for d = 1, ndir do
      local reverse = dir == "reverse" or (dir == "bidirectional" and d == 2)
      local Wd, Rd = W:slice(1, d, d):squeeze(1), R:slice(1, d, d):squeeze(1)
      local function gate(m, g) return m:slice(1, g * hidden + 1, (g + 1) * hidden) end
      local Wg, Rg, Wb, Rb = {}, {}, {}, {}
      for g = 0, gates - 1 do
        Wg[g] = gate(Wd, g):transpose(1, 2)
        Rg[g] = gate(Rd, g):transpose(1, 2)
        if B then
          local Bd = B:slice(1, d, d):squeeze(1)
          Wb[g] = Bd:slice(1, g * hidden + 1, (g + 1) * hidden)
          Rb[g] = Bd:slice(1, (gates + g) * hidden + 1, (gates + g + 1) * hidden)
        end
      end
      local function lin(v, M, b) local r = v:matmul(M); if b then r = r + b end; return r end
      local h = h0 and h0:slice(1, d, d):squeeze(1) or full_like_shape({ batch, hidden }, 0, x.dtype)
      local c = c0 and c0:slice(1, d, d):squeeze(1) or full_like_shape({ batch, hidden }, 0, x.dtype)
      local Pd = P and P:slice(1, d, d):squeeze(1) or nil
      local out = {}
      for step = 1, seq do
        local t = reverse and seq - step + 1 or step
        local xt = x:slice(1, t, t):squeeze(1)
        if kind == "RNN" then
          h = (lin(xt, Wg[0], Wb[0]) + lin(h, Rg[0], Rb[0])):tanh()
        elseif kind == "GRU" then
          local z = (lin(xt, Wg[0], Wb[0]) + lin(h, Rg[0], Rb[0])):sigmoid()
          local r = (lin(xt, Wg[1], Wb[1]) + lin(h, Rg[1], Rb[1])):sigmoid()
          local hh
          if (a.linear_before_reset or 0) ~= 0 then
            hh = (lin(xt, Wg[2], Wb[2]) + r * lin(h, Rg[2], Rb[2])):tanh()
          else
            hh = (lin(xt, Wg[2], Wb[2]) + lin(r * h, Rg[2], Rb[2])):tanh()
          end
          h = (1 - z) * hh + z * h
        else
          -- gate order i, o, f, c; peepholes i, o, f
          local pi = lin(xt, Wg[0], Wb[0]) + lin(h, Rg[0], Rb[0])
          local pf = lin(xt, Wg[2], Wb[2]) + lin(h, Rg[2], Rb[2])
          if Pd then
            pi = pi + gate(Pd, 0) * c
            pf = pf + gate(Pd, 2) * c
          end
          local it, ft = pi:sigmoid(), pf:sigmoid()
          local ct = (lin(xt, Wg[3], Wb[3]) + lin(h, Rg[3], Rb[3])):tanh()
          c = ft * c + it * ct
          local po = lin(xt, Wg[1], Wb[1]) + lin(h, Rg[1], Rb[1])
          if Pd then po = po + gate(Pd, 1) * c end
          h = po:sigmoid() * c:tanh()
        end
        out[t] = h:unsqueeze(1)
      end
      ys[d] = cat(out, 0):unsqueeze(2) -- {seq, 1, batch, hidden}
      hs[d], cs[d] = h:unsqueeze(1), c:unsqueeze(1)
    end
    local Y, Yh, Yc = cat(ys, 1), cat(hs, 0), cat(cs, 0)
    if layout == 1 then
      Y = Y:permute({ 3, 1, 2, 4 }) -- {batch, seq, dir, hidden}
      Yh, Yc = Yh:transpose(1, 2), Yc:transpose(1, 2)
    end
    if kind == "LSTM" then return Y, Yh, Yc end
    return Y, Yh
  end
end
ops.RNN = recurrent("RNN")
ops.GRU = recurrent("GRU")
ops.LSTM = recurrent("LSTM")

-- Window functions: computed here from the size (a known value).
local function window(f)
  return function(i, a)
    local n = ints(i[1], "size")[1]
    local dt = ONNX_TYPES[a.output_datatype or 1]
    if not dt then unsupported("window of type %s", ONNX_TYPE_NAMES[a.output_datatype] or "?") end
    local denom = ((a.periodic or 1) ~= 0) and n or n - 1
    local v = {}
    for k = 0, n - 1 do v[k + 1] = f(2 * math.pi * k / denom) end
    if INT[dt] then for k = 1, n do v[k] = math.tointeger(math.floor(v[k])) or 0 end end
    return const_tensor(v, dt, { n })
  end
end
ops.HannWindow = window(function(t) return 0.5 - 0.5 * math.cos(t) end)
ops.HammingWindow = window(function(t) return 25 / 46 - (21 / 46) * math.cos(t) end)
ops.BlackmanWindow = window(function(t) return 0.42 - 0.5 * math.cos(t) + 0.08 * math.cos(2 * t) end)

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

-- Resize: nearest and linear, separably, one dim at a time, with index
-- lists (and weights) computed here from the sizes.
ops.Resize = function(i, a)
  local x = to_tensor(i[1])
  local mode = a.mode or "nearest"
  if mode ~= "nearest" and mode ~= "linear" and mode ~= "cubic" then unsupported("Resize mode '%s'", mode) end
  if (a.antialias or 0) ~= 0 then unsupported("Resize with antialias") end
  if a.axes then unsupported("Resize with axes") end
  if (a.keep_aspect_ratio_policy or "stretch") ~= "stretch" then unsupported("Resize keep_aspect_ratio_policy") end
  local s = x:shape()
  local scales, sizes
  if ctx.opset < 11 then
    -- Upsample before opset 9 has the scales as an attribute
    scales = a.scales or to_known(i[2]).v
  else
    if i[4] then sizes = ints(i[4], "sizes") end
    if not sizes and i[3] then scales = to_known(i[3]).v end
  end
  if scales and #scales == 0 then scales = nil end
  if sizes and #sizes == 0 then sizes = nil end
  local ctm = a.coordinate_transformation_mode or (ctx.opset < 11 and "asymmetric" or "half_pixel")
  if ctm == "tf_crop_and_resize" then unsupported("Resize coordinate_transformation_mode tf_crop_and_resize") end
  local nearest_mode = a.nearest_mode or (ctx.opset < 11 and "floor" or "round_prefer_floor")
  for d = 1, #s do
    local n = s[d]
    local out, scale, len
    if sizes then
      out = sizes[d]
      scale = out / n
      len = out
    else
      scale = scales[d]
      out = math.floor(n * scale)
      len = n * scale -- ONNX maps coordinates with the unrounded length
    end
    if out ~= n or scale ~= 1 then
      local function src(o)
        if ctm == "half_pixel" then return (o + 0.5) / scale - 0.5
        elseif ctm == "pytorch_half_pixel" then return len > 1 and (o + 0.5) / scale - 0.5 or 0
        elseif ctm == "align_corners" then return len > 1 and o * (n - 1) / (len - 1) or 0
        elseif ctm == "asymmetric" then return o / scale
        elseif ctm == "tf_half_pixel_for_nn" then return (o + 0.5) / scale
        elseif ctm == "half_pixel_symmetric" then
          local adj = out / (n * scale)
          local c = n / 2 - n * adj / 2
          return c + (o + 0.5) / scale - 0.5
        end
        unsupported("Resize coordinate_transformation_mode '%s'", ctm)
      end
      if mode == "nearest" then
        local idx = {}
        for o = 0, out - 1 do
          local c = src(o)
          local j
          if nearest_mode == "round_prefer_floor" then j = (c - math.floor(c) == 0.5) and math.floor(c) or math.floor(c + 0.5)
          elseif nearest_mode == "round_prefer_ceil" then j = math.floor(c + 0.5)
          elseif nearest_mode == "floor" then j = math.floor(c)
          elseif nearest_mode == "ceil" then j = math.ceil(c)
          else unsupported("Resize nearest_mode '%s'", nearest_mode) end
          idx[#idx + 1] = math.min(math.max(j, 0), n - 1)
        end
        x = take(x, d - 1, idx)
      elseif mode == "cubic" then
        -- four taps around each source coordinate, ONNX's cubic weights
        -- (coefficient A); taps outside the input repeat the edge, or with
        -- exclude_outside weigh 0 and the rest are renormalized
        local A = a.cubic_coeff_a or -0.75
        local exclude = (a.exclude_outside or 0) ~= 0
        local idxs, wts = { {}, {}, {}, {} }, { {}, {}, {}, {} }
        for o = 0, out - 1 do
          local c = src(o)
          local f = math.floor(c)
          local r = c - f
          local w = {
            ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
            ((A + 2) * r - (A + 3)) * r * r + 1,
            ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1,
            ((A * (2 - r) - 5 * A) * (2 - r) + 8 * A) * (2 - r) - 4 * A,
          }
          local total = 0
          for t = 1, 4 do
            local j = f - 2 + t
            if exclude and (j < 0 or j >= n) then w[t] = 0 end
            total = total + w[t]
          end
          for t = 1, 4 do
            local j = f - 2 + t
            idxs[t][#idxs[t] + 1] = math.min(math.max(j, 0), n - 1)
            wts[t][#wts[t] + 1] = exclude and w[t] / total or w[t]
          end
        end
        local ws = {}
        for k = 1, #s do ws[k] = 1 end
        ws[d] = out
        local acc
        for t = 1, 4 do
          local term = take(x, d - 1, idxs[t]) * const_tensor(wts[t], x.dtype, ws)
          acc = acc and acc + term or term
        end
        x = acc
      else
        local lo, hi, wl, wh = {}, {}, {}, {}
        for o = 0, out - 1 do
          local c = math.min(math.max(src(o), 0), n - 1)
          local f = math.floor(c)
          lo[#lo + 1] = f
          hi[#hi + 1] = math.min(f + 1, n - 1)
          wh[#wh + 1] = c - f
          wl[#wl + 1] = 1 - (c - f)
        end
        local ws = {}
        for k = 1, #s do ws[k] = 1 end
        ws[d] = out
        local tl = const_tensor(wl, x.dtype, ws)
        local th = const_tensor(wh, x.dtype, ws)
        x = take(x, d - 1, lo) * tl + take(x, d - 1, hi) * th
      end
    end
    s = x:shape()
  end
  return x
end
ops.Upsample = ops.Resize

local run_graph -- forward declaration: If runs subgraphs

ops.If = function(i, a, node, env)
  local c = i[1]
  local cond
  if is_known(c) then
    cond = c.v[1] ~= 0
  else
    -- a condition computed from tensor values: reading it is a graph break
    -- while tracing, named by the node (kiln.onnx.where is set)
    cond = c:item()
    cond = cond ~= 0 and cond ~= false
  end
  local g = cond and a.then_branch or a.else_branch
  local outs = run_graph(g, {}, env)
  return table.unpack(outs)
end

---------------------------------------------------------------------------
-- Running a graph

local function node_label(node)
  return string.format("ONNX node '%s' (%s, opset %d)", node.name ~= "" and node.name or node.outputs[1] or "?",
    node.op, ctx.opset)
end

local function where_of(node)
  return string.format("%s:node '%s' (%s)", ctx.short, node.name ~= "" and node.name or (node.outputs[1] or "?"), node.op)
end

-- env: name -> value, with a parent scope (If branches read outer values).
local function lookup(env, name)
  local e = env
  while e do
    local v = e.values[name]
    if v ~= nil then return v end
    e = e.parent
  end
  return nil
end

run_graph = function(g, feeds, parent)
  local env = { values = {}, parent = parent }
  for name, t in pairs(feeds) do env.values[name] = t end
  for name, t in pairs(g.initializers) do
    if env.values[name] == nil then env.values[name] = g.known_inits[name] or ctx.params[name] or t end
  end
  for _, node in ipairs(g.nodes) do
    local impl = (node.domain == "" or node.domain == "ai.onnx") and ops[node.op] or nil
    if not impl then
      local what = node.domain ~= "" and node.domain ~= "ai.onnx" and ("op domain '" .. node.domain .. "'") or "the op"
      error(string.format("%s: unsupported: %s is not implemented in kiln", node_label(node), what), 0)
    end
    for k, v in pairs(node.attrs) do
      if type(v) == "table" and v.unsupported then
        error(string.format("%s: unsupported: attribute '%s': %s", node_label(node), k, v.unsupported), 0)
      end
    end
    local ins = {}
    for k, name in ipairs(node.inputs) do
      if name ~= "" then
        local v = lookup(env, name)
        if v == nil then error(string.format("%s: input '%s' has no value", node_label(node), name), 0) end
        ins[k] = v
      end
    end
    onnx.where(where_of(node))
    local outs = table.pack(xpcall(impl, function(e)
      if getmetatable(e) == Unsupported then return string.format("%s: %s", node_label(node), e.msg) end
      local msg = tostring(e)
      if msg:find("^ONNX node") then return msg end
      return string.format("%s: %s", node_label(node), msg)
    end, ins, node.attrs, node, env))
    onnx.where(nil)
    if not outs[1] then error(outs[2], 0) end
    for k, name in ipairs(node.outputs) do
      if name ~= "" then env.values[name] = outs[k + 1] end
    end
  end
  local results = {}
  for k, o in ipairs(g.outputs) do
    local v = lookup(env, o.name)
    if v == nil then error(string.format("%s: graph output '%s' has no value", ctx.file, o.name), 0) end
    results[k] = v
  end
  return results
end

---------------------------------------------------------------------------
-- The module

local function shape_str(s)
  local p = {}
  for k, d in ipairs(s) do p[k] = tostring(d) end
  return "{" .. table.concat(p, ", ") .. "}"
end

-- Before any call (so never while tracing): small integer initializers and
-- Constant values become known values, so shape arithmetic on them folds
-- here instead of reading a traced tensor (a graph break).
local function prepare(g)
  g.known_inits = {}
  for name, t in pairs(g.initializers) do
    if INT[t.dtype] and t:numel() <= KNOWN_MAX then g.known_inits[name] = to_known(t) end
  end
  for _, node in ipairs(g.nodes) do
    local v = node.attrs.value
    if node.op == "Constant" and is_tensor(v) and v:numel() <= KNOWN_MAX and v.dtype ~= "bf16" and v.dtype ~= "f16" then
      node.known_value = to_known(v)
    end
    for _, a in pairs(node.attrs) do
      if type(a) == "table" and a.nodes and a.initializers then prepare(a) end
    end
  end
end

local OnnxModel = kiln.nn.Module {
  name = "OnnxModel",
  init = function(self, model, opts)
    self._model = model
    prepare(model.graph)
    self._opts = opts or {}
    self.params = {}
    for name, t in pairs(model.graph.initializers) do self.params[name] = t end
    local inputs = {}
    for _, vi in ipairs(model.graph.inputs) do
      if model.graph.initializers[vi.name] == nil then inputs[#inputs + 1] = vi end
    end
    self._inputs = inputs
    for _, vi in ipairs(model.graph.outputs) do
      if vi.unsupported_type then
        self._unsupported = string.format("%s: unsupported: output '%s' has type %s", model.path, vi.name, vi.unsupported_type)
      end
    end
  end,
  forward = function(self, ...)
    local model = self._model
    local args = table.pack(...)
    local feeds, dev = {}, nil
    if self._unsupported then error(self._unsupported, 2) end
    for _, vi in ipairs(self._inputs) do
      if vi.unsupported_type then
        error(string.format("%s: unsupported: input '%s' has type %s", model.path, vi.name, vi.unsupported_type), 2)
      end
    end
    for k, vi in ipairs(self._inputs) do
      local x = args[k]
      if x == nil then
        error(string.format("%s: input %d '%s' is missing (the model takes %d)", model.path, k, vi.name, #self._inputs), 2)
      end
      if type(x) == "number" then x = kiln.full({}, x, { dtype = vi.dtype or "f32" }) end
      if vi.unsupported_type then
        error(string.format("%s: unsupported: input '%s' has type %s, which kiln does not support", model.path, vi.name, vi.unsupported_type), 2)
      end
      if x.dtype ~= vi.dtype then
        error(string.format("%s: input '%s' must be %s, got %s", model.path, vi.name, vi.dtype, x.dtype), 2)
      end
      if vi.shape then
        local s = x:shape()
        if #s ~= #vi.shape then
          error(string.format("%s: input '%s' must have rank %d %s, got shape %s", model.path, vi.name, #vi.shape,
            shape_str(vi.shape), shape_str(s)), 2)
        end
        for d, want in ipairs(vi.shape) do
          if math.type(want) == "integer" and want ~= s[d] then
            error(string.format("%s: input '%s' dim %d must be %d, got %d (shape %s)", model.path, vi.name, d, want, s[d],
              shape_str(s)), 2)
          end
        end
      end
      dev = dev or x.device
      feeds[vi.name] = x
    end
    local saved = ctx
    local short = model.path:match("([^/]+)$") or model.path
    self._consts = self._consts or {}
    ctx = { device = dev, file = model.path, short = short, opset = model.opset, params = self.params,
      consts = self._consts }
    local ok, res = pcall(function()
      local outs = run_graph(model.graph, feeds, nil)
      -- outputs known in Lua (a Shape) become tensors on the model's device
      for k, v in ipairs(outs) do outs[k] = to_tensor(v) end
      return outs
    end)
    ctx = saved
    onnx.where(nil)
    if not ok then error(res, 0) end
    return table.unpack(res, 1, #res)
  end,
  named_parameters = function(self)
    local names = {}
    for _, n in ipairs(self._model.graph.initializer_names) do names[#names + 1] = n end
    local k = 0
    return function()
      k = k + 1
      local n = names[k]
      if n then return n, self.params[n] end
    end
  end,
  parameters = function(self)
    local out = {}
    for _, n in ipairs(self._model.graph.initializer_names) do out[#out + 1] = self.params[n] end
    return out
  end,
  state_dict = function(self)
    local sd = {}
    for n, t in pairs(self.params) do sd[n] = t end
    return sd
  end,
  extra_repr = function(self)
    local m = self._model
    return string.format("'%s', opset %d, %d nodes, %d initializers", m.path, m.opset, #m.graph.nodes,
      #m.graph.initializer_names)
  end,
}

-- kiln.onnx.load(path [, {sizes = {N = 1}, device = "cuda"}]): an ONNX model
-- as a kiln module (sizes: the dynamic dims' sizes for example_inputs and
-- :load; device: where the initializers go).
function onnx.load(path, opts)
  if not onnx.available then
    error("kiln.onnx.load: this kiln was built without ONNX import (protobuf-c or onnx.proto were missing)", 2)
  end
  if type(path) ~= "string" then error("kiln.onnx.load: expected a file path, got " .. type(path), 2) end
  if opts ~= nil and type(opts) ~= "table" then error("kiln.onnx.load: opts must be a table {sizes =, device =}", 2) end
  for k in pairs(opts or {}) do
    if k ~= "sizes" and k ~= "device" then error("kiln.onnx.load: unknown option '" .. tostring(k) .. "'", 2) end
  end
  local ok, model = pcall(onnx.read, path)
  if not ok then error(model, 2) end
  local m = OnnxModel(model, opts)
  if opts and opts.device then m:to(opts.device) end
  return m
end

-- Inputs for a loaded model from its graph's input types: dynamic dims from
-- sizes (name -> size), floats random (seeded), integers zero, bools false.
function onnx.example_inputs(m, sizes, seed)
  sizes = sizes or (m._opts and m._opts.sizes) or {}
  local out = {}
  for k, vi in ipairs(m._inputs) do
    if vi.unsupported_type then
      error(string.format("%s: input '%s' has type %s, which kiln does not support", m._model.path, vi.name, vi.unsupported_type), 2)
    end
    local shape = {}
    for d, want in ipairs(vi.shape or {}) do
      if math.type(want) == "integer" then
        shape[d] = want
      elseif type(want) == "string" and sizes[want] then
        shape[d] = math.tointeger(sizes[want]) or error(string.format("size %s must be an integer", want), 2)
      else
        error(string.format("%s: input '%s' dim %d is dynamic (%s): give its size, e.g. {sizes = {%s = 1}} or :load FILE %s=1",
          m._model.path, vi.name, d, tostring(want), type(want) == "string" and want or "N", type(want) == "string" and want or "N"), 2)
      end
    end
    if FLOAT[vi.dtype] then
      out[k] = kiln.randn(shape, { dtype = vi.dtype, seed = (seed or 1) + k })
    else
      out[k] = kiln.zeros(shape, { dtype = vi.dtype })
    end
  end
  return out
end

onnx.ops = ops
