-- kiln.onnx.save: a kiln model as an ONNX file (the other direction of
-- import.lua).
--
--   kiln.onnx.save(model_or_cm, "model.onnx", {x})
--
-- The model is traced once on the inputs (fullgraph: ONNX holds one graph,
-- so a graph break is an error naming it) and the captured graph, before
-- any pass, is mapped op by op onto ONNX nodes here; kiln.onnx.write
-- (onnx/kn_lua_onnx.c, onnx/reader/kn_onnx_write.c) packs it with
-- protobuf-c and writes it through a temporary file and a rename.
-- Parameters and buffers become initializers under their kiln names; the
-- tensor arguments become the graph's inputs, with their dtypes and shapes.
--
-- The encodings are chosen so that kiln's importer gives the Lua model's
-- ops back (kiln.onnx.load of the file compiles to the same kernels); the
-- few import rules that takes are at the end of this file.
local kiln = ...
local onnx = kiln.onnx

local BASE_OPSET = 18 -- ReduceMean/Max/Min take their axes as an input from 18
local GELU_OPSET = 20 -- ONNX's Gelu came in opset 20
local MIN_OPSET = 17  -- LayerNormalization came in opset 17
-- the IR version each opset came with (what onnx.checker expects)
local IR_VERSION = { [17] = 8, [18] = 8, [19] = 9, [20] = 9, [21] = 10 }
local ONNX_DTYPE = { f32 = 1, i32 = 6, i64 = 7, bool = 9, f16 = 10, f64 = 11, bf16 = 16 }

local function fail(fmt, ...) error("kiln.onnx.save: " .. string.format(fmt, ...), 0) end

local function is_tensor(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return mt and mt.__name == "kiln.Tensor" or false
end

-- The dtype both operands of a binary op compute in (kn_dtype_promote):
-- float beats int beats bool; among floats the wider; bf16 with f16 is f32.
local RANK = { bool = 0, i32 = 1, i64 = 2, bf16 = 3, f16 = 3, f32 = 4, f64 = 5 }
local function promote(a, b)
  if a == b then return a end
  if (a == "bf16" and b == "f16") or (a == "f16" and b == "bf16") then return "f32" end
  return RANK[a] >= RANK[b] and a or b
end

---------------------------------------------------------------------------
-- The model being written: nodes, initializers, unique names.

local Writer = {}
Writer.__index = Writer

-- opset: the one asked for (fixed), or nil: BASE_OPSET, raised where an op needs it
local function new_writer(opset)
  return setmetatable({ nodes = {}, inits = {}, used = {}, consts = {}, opset = opset or BASE_OPSET, fixed = opset ~= nil,
    count = 0 }, Writer)
end

-- A name no other value has: ONNX names values globally.
function Writer:unique(base)
  base = (base ~= nil and base ~= "") and base or "v"
  local name, k = base, 1
  while self.used[name] do
    k = k + 1
    name = base .. "_" .. k
  end
  self.used[name] = true
  return name
end

-- attrs: {name, kind, value} in order (written in that order).
function Writer:node(op, inputs, noutputs, attrs, base)
  local outs = {}
  base = base or self.base or op
  for k = 1, noutputs or 1 do outs[k] = self:unique(base .. (k > 1 and ("." .. k) or "")) end
  self.count = self.count + 1
  self.nodes[#self.nodes + 1] = { op = op, name = self:unique("n" .. self.count .. "_" .. op), inputs = inputs,
    outputs = outs, attrs = attrs or {}, doc = self.where }
  return table.unpack(outs)
end

-- A Constant node holding tensor t (shared by equal values).
function Writer:constant(t, key)
  if key and self.consts[key] then return self.consts[key] end
  local name = self:node("Constant", {}, 1, { { name = "value", kind = "tensor", value = t } }, "const")
  if key then self.consts[key] = name end
  return name
end

function Writer:ints(list)
  local key = "i64[" .. table.concat(list, ",") .. "]"
  -- (the written tensors live on the CPU, whatever the default device)
  local t = #list > 0 and kiln.tensor(list, { dtype = "i64", device = "cpu" })
    or kiln.zeros({ 0 }, { dtype = "i64", device = "cpu" })
  return self:constant(t, key)
end

function Writer:scalar(v, dtype)
  local key = dtype .. ":" .. string.format("%.17g", v)
  return self:constant(kiln.full({}, v, { dtype = dtype, device = "cpu" }), key)
end

-- Cast name (of dtype from) to dtype to.
function Writer:cast(name, from, to)
  if from == to then return name end
  return self:node("Cast", { name }, 1, { { name = "to", kind = "int", value = ONNX_DTYPE[to] } })
end

function Writer:initializer(name, t)
  local cpu = t:to("cpu"):contiguous()
  self.inits[#self.inits + 1] = { name = name, tensor = cpu }
end

---------------------------------------------------------------------------
-- The op table: kiln op -> ONNX nodes. Each entry takes (w, n, ins) where
-- n is the captured node ({op, a = attrs, outs, inputs, where}) and ins
-- its inputs' ONNX names with their dtypes in ins.dtypes, and returns the
-- names of its outputs.

local map = {}

local UNARY = { neg = "Neg", relu = "Relu", tanh = "Tanh", sigmoid = "Sigmoid", exp = "Exp", log = "Log",
  sqrt = "Sqrt", abs = "Abs", erf = "Erf", floor = "Floor", ceil = "Ceil", round = "Round", sin = "Sin", cos = "Cos",
  logical_not = "Not" }
for op, onnx_op in pairs(UNARY) do
  map[op] = function(w, n, ins)
    local x = ins[1]
    if op == "logical_not" then x = w:cast(x, ins.dtypes[1], "bool")
    else x = w:cast(x, ins.dtypes[1], n.outs[1].dtype) end
    return w:node(onnx_op, { x })
  end
end
map.gelu = function(w, n, ins)
  if not w.fixed then w.opset = math.max(w.opset, GELU_OPSET) end
  if w.opset >= GELU_OPSET then return w:node("Gelu", { ins[1] }) end
  -- before opset 20: 0.5 x (1 + erf(x / sqrt 2)), kiln's formula
  local dt = n.outs[1].dtype
  local e = w:node("Erf", { w:node("Mul", { ins[1], w:scalar(0.70710678118654752440, dt) }) })
  return w:node("Mul", { w:node("Mul", { ins[1], w:scalar(0.5, dt) }), w:node("Add", { e, w:scalar(1, dt) }) })
end
map.gelu_tanh = function(w, n, ins)
  if not w.fixed then w.opset = math.max(w.opset, GELU_OPSET) end
  if w.opset >= GELU_OPSET then
    return w:node("Gelu", { ins[1] }, 1, { { name = "approximate", kind = "string", value = "tanh" } })
  end
  -- before opset 20: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), kiln's formula
  local dt = n.outs[1].dtype
  local x = ins[1]
  local cube = w:node("Mul", { w:node("Mul", { x, x }), x })
  local inner = w:node("Add", { x, w:node("Mul", { cube, w:scalar(0.044715, dt) }) })
  local t = w:node("Tanh", { w:node("Mul", { inner, w:scalar(0.79788456080286535588, dt) }) })
  return w:node("Mul", { w:node("Mul", { x, w:scalar(0.5, dt) }), w:node("Add", { t, w:scalar(1, dt) }) })
end
map.silu = function(w, _, ins) return w:node("Mul", { ins[1], w:node("Sigmoid", { ins[1] }) }) end
map.rsqrt = function(w, _, ins) return w:node("Reciprocal", { w:node("Sqrt", { ins[1] }) }) end
map.cast = function(w, n, ins) return w:node("Cast", { ins[1] }, 1, { { name = "to", kind = "int", value = ONNX_DTYPE[n.outs[1].dtype] } }) end

-- Every input brought to the output's dtype (ONNX's arithmetic takes one type).
local function same_type(w, n, ins, first, dtype)
  local out = {}
  for k = first or 1, #ins do out[#out + 1] = w:cast(ins[k], ins.dtypes[k], dtype or n.outs[1].dtype) end
  return out
end

local BINARY = { add = "Add", sub = "Sub", mul = "Mul", div = "Div", pow = "Pow", maximum = "Max", minimum = "Min" }
for op, onnx_op in pairs(BINARY) do
  map[op] = function(w, n, ins) return w:node(onnx_op, same_type(w, n, ins)) end
end
local COMPARE = { gt = "Greater", lt = "Less", ge = "GreaterOrEqual", le = "LessOrEqual", eq = "Equal" }
local function compare_inputs(w, ins)
  local dt = promote(ins.dtypes[1], ins.dtypes[2])
  return { w:cast(ins[1], ins.dtypes[1], dt), w:cast(ins[2], ins.dtypes[2], dt) }
end
for op, onnx_op in pairs(COMPARE) do
  map[op] = function(w, _, ins) return w:node(onnx_op, compare_inputs(w, ins)) end
end
map.ne = function(w, _, ins) return w:node("Not", { w:node("Equal", compare_inputs(w, ins)) }) end
map.where = function(w, n, ins)
  local c = w:cast(ins[1], ins.dtypes[1], "bool")
  local ab = same_type(w, n, ins, 2)
  return w:node("Where", { c, ab[1], ab[2] })
end
-- masked_fill(x, mask, v): Where(mask, v, x) (the import rule below gives
-- masked_fill back, which the attention pass looks for)
map.masked_fill = function(w, n, ins)
  local dt = n.outs[1].dtype
  return w:node("Where", { w:cast(ins[2], ins.dtypes[2], "bool"), w:scalar(n.a.value, dt), w:cast(ins[1], ins.dtypes[1], dt) })
end

-- Reductions: axes as an input (ReduceSum from opset 13, the others from
-- 18; an attribute before), none for every dim.
local function reduce_node(w, onnx_op, x, dims, keep)
  local attrs = { { name = "keepdims", kind = "int", value = keep and 1 or 0 } }
  local inputs = { x }
  if dims and #dims > 0 then
    if onnx_op == "ReduceSum" or w.opset >= 18 then inputs[2] = w:ints(dims)
    else attrs[2] = { name = "axes", kind = "ints", value = dims } end
  end
  return w:node(onnx_op, inputs, 1, attrs)
end
local function reduce(onnx_op)
  return function(w, n, ins)
    local x = w:cast(ins[1], ins.dtypes[1], n.outs[1].dtype)
    return reduce_node(w, onnx_op, x, n.a.ndims > 0 and n.a.dims or nil, n.a.keepdim ~= 0)
  end
end
map.sum = reduce("ReduceSum")
map.mean = reduce("ReduceMean")
map.amax = reduce("ReduceMax")
map.amin = reduce("ReduceMin")
-- var: mean((x - mean(x))^2) * n / (n - correction)
map.var = function(w, n, ins)
  local x = w:cast(ins[1], ins.dtypes[1], n.outs[1].dtype)
  local dims = n.a.dims
  local inshape = n.in_shapes[1]
  if n.a.ndims == 0 then dims = {}; for d = 0, #inshape - 1 do dims[#dims + 1] = d end end
  local count = 1
  for _, d in ipairs(dims) do count = count * inshape[d + 1] end
  local m = reduce_node(w, "ReduceMean", x, dims, true)
  local c = w:node("Sub", { x, m })
  local s = reduce_node(w, "ReduceSum", w:node("Mul", { c, c }), dims, n.a.keepdim ~= 0)
  return w:node("Div", { s, w:scalar(count - n.a.correction, n.outs[1].dtype) })
end
-- max along a dim: values and kiln's 1-based i64 indices
map.max = function(w, n, ins)
  local keep = { name = "keepdims", kind = "int", value = n.a.keepdim ~= 0 and 1 or 0 }
  local values = reduce_node(w, "ReduceMax", ins[1], { n.a.dim }, n.a.keepdim ~= 0)
  local idx = w:node("ArgMax", { ins[1] }, 1, { { name = "axis", kind = "int", value = n.a.dim }, keep })
  return values, w:node("Add", { idx, w:scalar(1, "i64") })
end
map.softmax = function(w, n, ins) return w:node("Softmax", { ins[1] }, 1, { { name = "axis", kind = "int", value = n.a.dim } }) end
map.log_softmax = function(w, n, ins) return w:node("LogSoftmax", { ins[1] }, 1, { { name = "axis", kind = "int", value = n.a.dim } }) end

local function filled(w, shape, v, dtype)
  return w:constant(kiln.full(shape, v, { dtype = dtype, device = "cpu" }))
end

map.layer_norm = function(w, n, ins)
  local x = n.in_shapes[1]
  local ns = {}
  for d = #x - n.a.nshape + 1, #x do ns[#ns + 1] = x[d] end
  local dt = n.outs[1].dtype
  local inputs = { ins[1], ins[2] or filled(w, ns, 1, dt) }
  if ins[3] then inputs[3] = ins[3] end
  return w:node("LayerNormalization", inputs, 1, { { name = "axis", kind = "int", value = -n.a.nshape },
    { name = "epsilon", kind = "float", value = n.a.eps } })
end
-- kiln: x, mean, var [, weight [, bias]]; ONNX: x, scale, B, mean, var
map.batch_norm = function(w, n, ins)
  local c = { n.in_shapes[2][1] }
  local dt = ins.dtypes[2]
  return w:node("BatchNormalization", { ins[1], ins[4] or filled(w, c, 1, dt), ins[5] or filled(w, c, 0, dt), ins[2], ins[3] },
    1, { { name = "epsilon", kind = "float", value = n.a.eps } })
end
map.matmul = function(w, n, ins) return w:node("MatMul", same_type(w, n, ins)) end

local function pads(a) return { a.padding[1], a.padding[2], a.padding[1], a.padding[2] } end
map.conv2d = function(w, n, ins)
  local ws = n.in_shapes[2]
  return w:node("Conv", { ins[1], ins[2], ins[3] }, 1, {
    { name = "kernel_shape", kind = "ints", value = { ws[3], ws[4] } },
    { name = "strides", kind = "ints", value = n.a.stride },
    { name = "pads", kind = "ints", value = pads(n.a) },
    { name = "dilations", kind = "ints", value = n.a.dilation },
    { name = "group", kind = "int", value = n.a.groups } })
end
local function pool(onnx_op)
  return function(w, n, ins)
    local attrs = {
      { name = "kernel_shape", kind = "ints", value = n.a.kernel },
      { name = "strides", kind = "ints", value = n.a.stride },
      { name = "pads", kind = "ints", value = pads(n.a) },
      { name = "ceil_mode", kind = "int", value = n.a.ceil_mode } }
    if onnx_op == "AveragePool" then
      attrs[#attrs + 1] = { name = "count_include_pad", kind = "int", value = n.a.count_include_pad }
    end
    return w:node(onnx_op, { ins[1] }, 1, attrs)
  end
end
map.max_pool2d = pool("MaxPool")
map.avg_pool2d = pool("AveragePool")
-- adaptive_avg_pool2d where the output size divides the input's: an
-- AveragePool of kernel and stride in / out (to 1x1: the window is the
-- whole image, which the import rule below reads back as adaptive_avg_pool2d)
map.adaptive_avg_pool2d = function(w, n, ins)
  local s, o = n.in_shapes[1], n.outs[1].shape
  if s[3] % o[3] ~= 0 or s[4] % o[4] ~= 0 then
    return nil, string.format("adaptive_avg_pool2d from %dx%d to %dx%d (ONNX has it only where the output size divides the input's)",
      s[3], s[4], o[3], o[4])
  end
  local k = { s[3] // o[3], s[4] // o[4] }
  return w:node("AveragePool", { ins[1] }, 1, { { name = "kernel_shape", kind = "ints", value = k },
    { name = "strides", kind = "ints", value = k } })
end
map.contiguous = function(w, _, ins) return w:node("Identity", { ins[1] }) end
map.cat = function(w, n, ins) return w:node("Concat", same_type(w, n, ins), 1, { { name = "axis", kind = "int", value = n.a.dim } }) end

-- kiln's index tensors count from 1, ONNX's from 0.
local function zero_based(w, idx, dtype) return w:node("Sub", { idx, w:scalar(1, dtype) }) end
map.index_select = function(w, n, ins)
  return w:node("Gather", { ins[1], zero_based(w, ins[2], ins.dtypes[2]) }, 1, { { name = "axis", kind = "int", value = n.a.dim } })
end
map.gather = function(w, n, ins)
  return w:node("GatherElements", { ins[1], zero_based(w, ins[2], ins.dtypes[2]) }, 1,
    { { name = "axis", kind = "int", value = n.a.dim } })
end
-- index_add(x, dim, idx, src): along dim 1, ScatterND with reduction add
-- and the index as a column; along another dim ScatterElements, the index
-- spread over src's shape
map.index_add = function(w, n, ins)
  local src_shape = n.in_shapes[3]
  if n.a.dim == 0 then
    -- (ScatterND's indices are i64)
    local col = w:node("Unsqueeze", { w:cast(zero_based(w, ins[2], ins.dtypes[2]), ins.dtypes[2], "i64"), w:ints({ 1 }) })
    return w:node("ScatterND", { ins[1], col, ins[3] }, 1, { { name = "reduction", kind = "string", value = "add" } })
  end
  local rs = {}
  for d = 1, #src_shape do rs[d] = (d == n.a.dim + 1) and src_shape[d] or 1 end
  local idx = w:node("Reshape", { zero_based(w, ins[2], ins.dtypes[2]), w:ints(rs) })
  idx = w:node("Expand", { idx, w:ints(src_shape) })
  return w:node("ScatterElements", { ins[1], idx, ins[3] }, 1, { { name = "axis", kind = "int", value = n.a.dim },
    { name = "reduction", kind = "string", value = "add" } })
end
local function tri(upper)
  return function(w, n, ins)
    return w:node("Trilu", { ins[1], w:scalar(n.a.diagonal, "i64") }, 1, { { name = "upper", kind = "int", value = upper } })
  end
end
map.tril = tri(0)
map.triu = tri(1)
map.reshape = function(w, n, ins)
  local zero = false
  for _, d in ipairs(n.a.shape) do if d == 0 then zero = true end end
  return w:node("Reshape", { ins[1], w:ints(n.a.shape) }, 1, zero and { { name = "allowzero", kind = "int", value = 1 } } or nil)
end
map.permute = function(w, n, ins) return w:node("Transpose", { ins[1] }, 1, { { name = "perm", kind = "ints", value = n.a.dims } }) end
map.slice = function(w, n, ins)
  return w:node("Slice", { ins[1], w:ints({ n.a.start }), w:ints({ n.a.stop }), w:ints({ n.a.dim }), w:ints({ n.a.step }) })
end
map.expand = function(w, n, ins) return w:node("Expand", { ins[1], w:ints(n.a.shape) }) end
map.full = function(w, n)
  local dt, shape = n.outs[1].dtype, n.outs[1].shape
  local v = n.a.value
  if dt == "bool" then v = v ~= 0 end
  if #shape == 0 then return w:scalar(v, dt) end
  return w:node("ConstantOfShape", { w:ints(shape) }, 1, { { name = "value", kind = "tensor",
    value = kiln.full({ 1 }, v, { dtype = dt, device = "cpu" }) } })
end
map.arange = function(w, n)
  local dt, count = n.outs[1].dtype, n.outs[1].shape[1]
  local start, step = n.a.value, n.a.value2
  return w:node("Range", { w:scalar(start, dt), w:scalar(start + count * step, dt), w:scalar(step, dt) })
end
-- F.scaled_dot_product_attention written out: the chain the attention
-- pass turns back into one node on import
map.scaled_dot_product_attention = function(w, n, ins)
  local qs = n.in_shapes[1]
  local r = #qs
  local perm = {}
  for d = 0, r - 1 do perm[d + 1] = d end
  perm[r - 1], perm[r] = r - 1, r - 2
  local dt = n.outs[1].dtype
  local kt = w:node("Transpose", { ins[2] }, 1, { { name = "perm", kind = "ints", value = perm } })
  local s = w:node("Mul", { w:node("MatMul", { ins[1], kt }), w:scalar(n.a.scale, dt) })
  if n.a.causal ~= 0 then
    local tq, tk = qs[r - 1], n.in_shapes[2][r - 1]
    local keep = w:node("Trilu", { filled(w, { tq, tk }, true, "bool"), w:scalar(0, "i64") }, 1,
      { { name = "upper", kind = "int", value = 0 } })
    s = w:node("Where", { w:node("Not", { keep }), w:scalar(-math.huge, dt), s })
  end
  if ins[4] then
    if ins.dtypes[4] == "bool" then s = w:node("Where", { w:node("Not", { ins[4] }), w:scalar(-math.huge, dt), s })
    else s = w:node("Add", { s, w:cast(ins[4], ins.dtypes[4], dt) }) end
  end
  return w:node("MatMul", { w:node("Softmax", { s }, 1, { { name = "axis", kind = "int", value = -1 } }), ins[3] })
end

-- gather_scatter(h, src, dst [, weight] [, base]): what it stands for,
-- base:index_add(1, dst, h:index_select(1, src) * weight), which the import
-- gives back and the message-passing pass fuses again
map.gather_scatter = function(w, n, ins)
  local has_base = n.a.nshape ~= 1
  local has_weight = #n.inputs == (has_base and 5 or 4)
  local dt = n.outs[1].dtype
  local hs = n.in_shapes[1]
  local msg = w:node("Gather", { w:cast(ins[1], ins.dtypes[1], dt), zero_based(w, ins[2], ins.dtypes[2]) }, 1,
    { { name = "axis", kind = "int", value = 0 } })
  if has_weight then
    local rs = { n.in_shapes[4][1] }
    for _ = 2, #hs do rs[#rs + 1] = 1 end
    msg = w:node("Mul", { msg, w:node("Reshape", { w:cast(ins[4], ins.dtypes[4], dt), w:ints(rs) }) })
  end
  local base
  if has_base then
    base = w:cast(ins[has_weight and 5 or 4], ins.dtypes[has_weight and 5 or 4], dt)
  else
    base = w:node("ConstantOfShape", { w:ints(n.outs[1].shape) }, 1, { { name = "value", kind = "tensor",
      value = kiln.full({ 1 }, 0, { dtype = dt, device = "cpu" }) } })
  end
  local col = w:node("Unsqueeze", { w:cast(zero_based(w, ins[3], ins.dtypes[3]), ins.dtypes[3], "i64"), w:ints({ 1 }) })
  return w:node("ScatterND", { base, col, msg }, 1, { { name = "reduction", kind = "string", value = "add" } })
end

local NO_MAPPING = {
  randn = "a random op (ONNX's RandomNormal draws other numbers than kiln's generator)",
  rand = "a random op (ONNX's RandomUniform draws other numbers than kiln's generator)",
  randint = "a random op (ONNX has no generator that draws kiln's numbers)",
}

---------------------------------------------------------------------------
-- From the captured graph to the model table kiln.onnx.write takes.

-- The captured nodes the outputs need (the trace also holds ops whose
-- values nothing returned).
local function live_nodes(g)
  local live = {}
  local stack = {}
  for _, o in ipairs(g.outputs) do stack[#stack + 1] = o[1] end
  while #stack > 0 do
    local i = table.remove(stack)
    if not live[i] then
      live[i] = true
      for _, r in ipairs(g.nodes[i].inputs) do stack[#stack + 1] = r[1] end
    end
  end
  return live
end

local function build(g, input_names, graph_name, opset)
  local w = new_writer(opset)
  local value = {} -- node -> {out -> ONNX name}
  local dtype_of = function(r) return g.nodes[r[1]].outs[r[2]].dtype end
  local graph_inputs, outputs = {}, {}
  local live = live_nodes(g)
  -- names first: arguments, then parameters keep their kiln names
  local arg_k = 0
  for i, n in ipairs(g.nodes) do
    if n.op == "input" then
      local in_ = g.inputs[n.input]
      if in_.kind == "arg" then
        arg_k = arg_k + 1
        local name = w:unique(input_names[arg_k] or in_.name)
        value[i] = { name }
        graph_inputs[#graph_inputs + 1] = { name = name, dtype = n.outs[1].dtype, shape = n.outs[1].shape }
      elseif live[i] then
        if in_.kind == "graph_output" or not in_.tensor then
          fail("input '%s' of the traced graph (%s) has no value to write", in_.name, n.where)
        end
        if in_.kind == "value" then
          -- a tensor made during the call from Lua values (kiln.tensor
          -- {...}): its value at the trace, as a Constant, the way a Lua
          -- number is baked in
          w.where, w.base = n.where, "value"
          value[i] = { w:constant(in_.tensor:to("cpu"):contiguous()) }
        else
          local name = w:unique(in_.name)
          value[i] = { name }
          w:initializer(name, in_.tensor)
        end
      end
    end
  end
  for i, n in ipairs(g.nodes) do
    if live[i] and n.op ~= "input" then
      w.where = n.where
      w.base = n.op
      if n.op == "constant" then
        value[i] = { w:scalar(n.value, n.outs[1].dtype) }
      else
        local f = map[n.op]
        local why = NO_MAPPING[n.op]
        if not f then
          fail("op '%s' at %s has no ONNX mapping%s", n.op, n.where ~= "" and n.where or "?", why and (": " .. why) or "")
        end
        local ins = { dtypes = {} }
        n.in_shapes = {}
        for k, r in ipairs(n.inputs) do
          ins[k] = value[r[1]][r[2]]
          ins.dtypes[k] = dtype_of(r)
          n.in_shapes[k] = g.nodes[r[1]].outs[r[2]].shape
        end
        local outs = table.pack(f(w, n, ins))
        if outs[1] == nil then fail("op '%s' at %s has no ONNX mapping: %s", n.op, n.where, outs[2] or "?") end
        value[i] = outs
      end
    end
  end
  w.where, w.base = nil, nil
  for k, r in ipairs(g.outputs) do
    local name = w:unique(#g.outputs == 1 and "output" or ("output_" .. k))
    local o = g.nodes[r[1]].outs[r[2]]
    w.nodes[#w.nodes + 1] = { op = "Identity", name = w:unique("n_" .. name), inputs = { value[r[1]][r[2]] }, outputs = { name }, attrs = {} }
    outputs[#outputs + 1] = { name = name, dtype = o.dtype, shape = o.shape }
  end
  return {
    ir_version = IR_VERSION[w.opset],
    opsets = { [""] = w.opset },
    producer = "kiln",
    graph = { name = graph_name, nodes = w.nodes, initializers = w.inits, inputs = graph_inputs, outputs = outputs },
  }
end

-- The names of a function's parameters (skipping self for a method).
local function param_names(fn, skip)
  local names = {}
  if type(fn) ~= "function" then return names end
  for k = 1 + skip, 64 do
    local name = debug.getlocal(fn, k)
    if not name then break end
    names[#names + 1] = name
  end
  return names
end

-- kiln.onnx.save(model_or_cm, path, inputs [, {opset = n}]): trace the
-- model on inputs (a tensor or a list) and write the graph as an ONNX file
-- at path. opset: 17 to 21 (default 18, or 20 where there is a gelu).
function onnx.save(model, path, inputs, opts)
  if not onnx.available then fail("this kiln was built without ONNX support (protobuf-c or onnx.proto were missing)") end
  local fn, module = onnx.wrapped(model)
  if not fn then
    local t = type(model)
    if (t == "table" or t == "userdata") and not is_tensor(model) and type(model.forward) == "function" then
      module = model
    elseif t == "function" then
      fn = model
    else
      fail("argument 1 must be a kiln.nn module, a compiled callable (kiln.compile) or a function, got %s",
        is_tensor(model) and "a tensor" or t)
    end
  end
  if onnx.tracing() then fail("called while a compiled function is being traced: save outside kiln.compile") end
  if type(path) ~= "string" or path == "" then fail("argument 2 must be a file path, got %s", type(path)) end
  if is_tensor(inputs) then inputs = { inputs } end
  if type(inputs) ~= "table" then fail("argument 3 must be the example inputs: a tensor or a list of them, got %s", type(inputs)) end
  opts = kiln._check_options(opts, "kiln.onnx.save", { "opset" })
  local opset = opts.opset
  if opset ~= nil and (math.type(opset) ~= "integer" or not IR_VERSION[opset]) then
    fail("opset must be an integer from %d to 21, got %s", MIN_OPSET, tostring(opset))
  end
  local n_inputs = #inputs
  for k = 1, n_inputs do
    if not is_tensor(inputs[k]) and type(inputs[k]) ~= "number" then
      fail("input %d is a %s: the example inputs are tensors (numbers are baked in)", k, type(inputs[k]))
    end
  end
  local call = module and function(...) return module(...) end or fn
  local captured
  local proxy = {
    forward = function(_, ...)
      local outs = table.pack(call(...))
      captured = onnx.captured(table.unpack(outs, 1, outs.n))
      return table.unpack(outs, 1, outs.n)
    end,
  }
  if module then
    if type(module.named_parameters) == "function" then proxy.named_parameters = function() return module:named_parameters() end end
    if type(module.named_buffers) == "function" then proxy.named_buffers = function() return module:named_buffers() end end
  end
  local cm = kiln.compile(proxy, { fullgraph = true, dynamic = false })
  -- the trace is what is wanted: run the graph op by op, no kernels compiled
  local compiler = kiln.config.compiler
  kiln.config.compiler = false
  local ok, err = pcall(cm, table.unpack(inputs, 1, n_inputs))
  kiln.config.compiler = compiler
  if not ok then
    err = tostring(err)
    if err:find("fullgraph=true", 1, true) then
      fail("ONNX holds one graph, but the model does not trace as one:%s", err:gsub("^.-fullgraph=true: [^\n]*", ""))
    end
    fail("tracing the model failed: %s", err)
  end
  if not captured then fail("the model ran without being traced") end
  -- the graph's inputs are the tensor arguments, named by their parameters
  local params, names = param_names(module and module.forward or fn, module and 1 or 0), {}
  for k = 1, n_inputs do
    if is_tensor(inputs[k]) then names[#names + 1] = params[k] or ("input_" .. k) end
  end
  local m = build(captured, names, module and (module._name or "model") or "model", opset)
  local wok, werr = pcall(onnx.write, path, m)
  if not wok then fail("%s", tostring(werr)) end
  return path
end

---------------------------------------------------------------------------
-- Import rules that give a saved model's ops back. They refine the op
-- table (kiln.onnx.ops, filled by ops_*.lua, which load before this file)
-- for the encodings chosen above;
-- each falls back to the general rule for anything else.

local ops = onnx.ops
local function is_known(x) return type(x) == "table" and x.known end

-- Where(mask, v, x) with v one known number and the mask not widening x:
-- masked_fill, the op a Lua model writes (and the attention pass reads).
local where = ops.Where
ops.Where = function(i, a, node, env)
  local c, v, x = i[1], i[2], i[3]
  if is_known(v) and #v.v == 1 and not is_known(x) and not is_known(c) and c.dtype == "bool"
    and is_tensor(x) and v.dtype == x.dtype and #v.shape <= x:dim() then
    local cs, xs = c:shape(), x:shape()
    local fits = #cs <= #xs
    for d = 1, #cs do
      local xd = xs[#xs - #cs + d]
      if cs[d] ~= xd and cs[d] ~= 1 then fits = false end
    end
    if fits then return x:masked_fill(c, v.v[1]) end
  end
  return where(i, a, node, env)
end

-- A one-element bf16 or f16 Constant is a number too, so that it becomes a
-- constant of the graph as in the Lua model (the importer keeps only
-- f32/f64/integer constants as known values).
local constant = ops.Constant
ops.Constant = function(i, a, node, env)
  local t = a.value
  if is_tensor(t) and (t.dtype == "bf16" or t.dtype == "f16") and t:numel() == 1 then
    return { known = true, dtype = t.dtype, shape = t:shape(), v = { t:item() } }
  end
  return constant(i, a, node, env)
end

-- AveragePool whose window is the whole image (no padding): what
-- adaptive_avg_pool2d to 1x1 (nn.AdaptiveAvgPool2d(1)) is, and that op.
local average_pool = ops.AveragePool
ops.AveragePool = function(i, a, node, env)
  local x = i[1]
  local k = a.kernel_shape
  if is_tensor(x) and x:dim() == 4 and k and #k == 2 and k[1] == x:size(3) and k[2] == x:size(4)
    and (a.auto_pad or "NOTSET") == "NOTSET" then
    local padded = false
    for _, p in ipairs(a.pads or {}) do if p ~= 0 then padded = true end end
    for _, d in ipairs(a.dilations or {}) do if d ~= 1 then padded = true end end
    if not padded then return x:adaptive_avg_pool2d({ 1, 1 }) end
  end
  return average_pool(i, a, node, env)
end

-- kiln's index tensors count from 1: the saved model subtracts 1 before
-- Gather and ScatterND. On import, an integer tensor with data (a
-- parameter, or any tensor outside a trace) whose values are all at least 1
-- minus one is remembered with the tensor it came from, and Gather (and
-- ScatterND through the Unsqueeze that makes the index a column) take that
-- one as kiln's 1-based index: index_select and index_add, the ops the Lua
-- model has (the message-passing pass fuses them), with no index arithmetic.
local one_based = setmetatable({}, { __mode = "k" })     -- idx - 1 -> idx
local one_based_col = setmetatable({}, { __mode = "k" }) -- (idx - 1) as a column -> idx
local INT = { i32 = true, i64 = true }

-- (reading a traced call's parameter goes through its values in Lua, once
-- per trace: a tensor op there would be recorded into the graph)
local function all_positive(t)
  if t:numel() == 0 then return true end
  if not onnx.tracing() then return t:amin():item() >= 1 end
  for _, v in ipairs(t:tolist()) do if v < 1 then return false end end
  return true
end

local sub = ops.Sub
ops.Sub = function(i, a, node, env)
  local r = sub(i, a, node, env)
  local x, one = i[1], i[2]
  if is_tensor(x) and INT[x.dtype] and x:dim() == 1 and is_known(one) and #one.v == 1 and one.v[1] == 1
    and is_tensor(r) and not onnx.is_placeholder(x) and all_positive(x) then
    one_based[r] = x
  end
  return r
end

local gather = ops.Gather
ops.Gather = function(i, a, node, env)
  local x, idx = i[1], i[2]
  if is_tensor(x) and is_tensor(idx) and one_based[idx] then
    local axis = a.axis or 0
    if axis < 0 then axis = axis + x:dim() end
    return x:index_select(axis + 1, one_based[idx])
  end
  return gather(i, a, node, env)
end

local unsqueeze = ops.Unsqueeze
ops.Unsqueeze = function(i, a, node, env)
  local r = unsqueeze(i, a, node, env)
  local axes = i[2]
  if is_tensor(i[1]) and one_based[i[1]] and is_known(axes) and #axes.v == 1 and (axes.v[1] == 1 or axes.v[1] == -1) then
    one_based_col[r] = one_based[i[1]]
  end
  return r
end

local scatter_nd = ops.ScatterND
ops.ScatterND = function(i, a, node, env)
  local x, col, upd = i[1], i[2], i[3]
  if a.reduction == "add" and is_tensor(x) and is_tensor(upd) and is_tensor(col) and one_based_col[col]
    and x.dtype == upd.dtype then
    return x:index_add(1, one_based_col[col], upd)
  end
  return scatter_nd(i, a, node, env)
end
