-- samples/onnx/make_onnx.lua: writes samples/kws_cnn.onnx, a small keyword-spotting
-- style CNN (Conv, BatchNormalization, Relu, MaxPool, GlobalAveragePool,
-- a Shape -> Gather -> Concat -> Reshape chain, Gemm, Softmax) with a dynamic
-- batch dim N and seeded random weights.
--
--   build/kiln samples/onnx/make_onnx.lua [OUT.onnx]
--   then in the REPL:  :load samples/kws_cnn.onnx N=2
--
-- The protobuf writer below is only the few ONNX fields this model uses
-- (kiln reads ONNX with protobuf-c; this writer exists so the sample and the
-- tests can make files without Python). As a library (dofile with
-- MAKE_ONNX_LIB set) it returns {model = fn, write = fn, ...} for t/onnx_*.lua.
local W = {}

local function varint(n)
  local out = {}
  -- two's complement for negatives, as protobuf's int64
  if n < 0 then n = n + 0 end
  repeat
    local b = n & 0x7f
    n = n >> 7 -- logical shift: negatives take 10 bytes
    if n ~= 0 then b = b | 0x80 end
    out[#out + 1] = string.char(b)
  until n == 0
  return table.concat(out)
end
local function key(field, wire) return varint((field << 3) | wire) end
local function f_varint(field, n) return key(field, 0) .. varint(n) end
local function f_bytes(field, s) return key(field, 2) .. varint(#s) .. s end
local function f_float(field, x) return key(field, 5) .. string.pack("<f", x) end
W.varint, W.f_varint, W.f_bytes, W.f_float = varint, f_varint, f_bytes, f_float

local ONNX_TYPE = { f32 = 1, i32 = 6, i64 = 7, bool = 9, f16 = 10, f64 = 11, bf16 = 16 }
local PACK = { f32 = "<f", f64 = "<d", i32 = "<i4", i64 = "<i8", bool = "<B" }

local function flat(v, out)
  if type(v) ~= "table" then out[#out + 1] = v return out end
  for _, e in ipairs(v) do flat(e, out) end
  return out
end

-- The raw little-endian bytes of a kiln tensor (f32, f64, i32, i64, bool).
function W.tensor_bytes(t)
  local vals = t:dim() == 0 and { t:item() } or flat(t:tolist(), {})
  local fmt = PACK[t.dtype] or error("make_onnx: dtype " .. t.dtype)
  local parts = {}
  for i, v in ipairs(vals) do
    if type(v) == "boolean" then v = v and 1 or 0 end
    parts[i] = string.pack(fmt, v)
  end
  return table.concat(parts)
end

-- TensorProto; opts.external = {location =, offset =} writes no data inline.
function W.tensor(name, t, opts)
  opts = opts or {}
  local s = {}
  for _, d in ipairs(t:shape()) do s[#s + 1] = f_varint(1, d) end
  s[#s + 1] = f_varint(2, ONNX_TYPE[t.dtype])
  s[#s + 1] = f_bytes(8, name)
  if opts.external then
    local function entry(k, v) return f_bytes(13, f_bytes(1, k) .. f_bytes(2, v)) end
    s[#s + 1] = entry("location", opts.external.location)
    s[#s + 1] = entry("offset", tostring(opts.external.offset or 0))
    s[#s + 1] = entry("length", tostring(opts.external.length or #W.tensor_bytes(t)))
    s[#s + 1] = f_varint(14, 1)
  else
    s[#s + 1] = f_bytes(9, opts.raw or W.tensor_bytes(t))
  end
  return table.concat(s)
end

-- AttributeProto from a Lua value: integer, float, string, list of ints or
-- floats, or {tensor = t}.
function W.attr(name, v)
  local s = f_bytes(1, name)
  if math.type(v) == "integer" then return s .. f_varint(20, 2) .. f_varint(3, v) end
  if type(v) == "number" then return s .. f_varint(20, 1) .. f_float(2, v) end
  if type(v) == "string" then return s .. f_varint(20, 3) .. f_bytes(4, v) end
  if type(v) == "table" and v.graph then return s .. f_varint(20, 5) .. f_bytes(6, W.graph(v.graph)) end
  if type(v) == "table" and v.tensor then return s .. f_varint(20, 4) .. f_bytes(5, W.tensor("", v.tensor)) end
  if type(v) == "table" and math.type(v[1]) == "integer" then
    local p = {}
    for i, e in ipairs(v) do p[i] = f_varint(8, e) end
    return s .. f_varint(20, 7) .. table.concat(p)
  end
  local p = {}
  for i, e in ipairs(v) do p[i] = f_float(7, e) end
  return s .. f_varint(20, 6) .. table.concat(p)
end

-- NodeProto: {op, inputs, outputs, name =, attrs = {name = value}}
function W.node(n)
  local s = {}
  for _, i in ipairs(n.inputs) do s[#s + 1] = f_bytes(1, i) end
  for _, o in ipairs(n.outputs) do s[#s + 1] = f_bytes(2, o) end
  s[#s + 1] = f_bytes(3, n.name or n.outputs[1])
  s[#s + 1] = f_bytes(4, n.op)
  local keys = {}
  for k in pairs(n.attrs or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do s[#s + 1] = f_bytes(5, W.attr(k, n.attrs[k])) end
  return table.concat(s)
end

-- ValueInfoProto: name, dtype, shape (numbers or dim names)
function W.value_info(name, dtype, shape)
  local dims = {}
  for _, d in ipairs(shape) do
    dims[#dims + 1] = f_bytes(1, type(d) == "string" and f_bytes(2, d) or f_varint(1, d))
  end
  local tensor_type = f_varint(1, ONNX_TYPE[dtype]) .. f_bytes(2, table.concat(dims))
  return f_bytes(1, name) .. f_bytes(2, f_bytes(1, tensor_type))
end

-- ModelProto: {nodes, initializers = {{name, tensor, opts}}, inputs = {{name, dtype, shape}}, outputs, opset =}
-- GraphProto bytes of {nodes, initializers, inputs, outputs, name}
function W.graph(m)
  local g = {}
  for _, n in ipairs(m.nodes) do g[#g + 1] = f_bytes(1, W.node(n)) end
  g[#g + 1] = f_bytes(2, m.name or "kiln_sample")
  for _, init in ipairs(m.initializers or {}) do g[#g + 1] = f_bytes(5, W.tensor(init[1], init[2], init[3])) end
  for _, vi in ipairs(m.inputs) do g[#g + 1] = f_bytes(11, W.value_info(vi[1], vi[2], vi[3])) end
  for _, vi in ipairs(m.outputs) do g[#g + 1] = f_bytes(12, W.value_info(vi[1], vi[2], vi[3])) end
  return table.concat(g)
end

function W.model(m)
  local opset = f_bytes(1, "") .. f_varint(2, m.opset or 17)
  return f_varint(1, 8) .. f_bytes(2, "kiln samples/onnx/make_onnx.lua") .. f_bytes(7, W.graph(m)) .. f_bytes(8, opset)
end

function W.write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

-- The sample: input x {N, 1, 16, 16} -> 4 keyword scores per example.
function W.kws_cnn(opts)
  opts = opts or {}
  local r = function(shape, seed, scale) return kiln.randn(shape, { seed = seed }) * (scale or 0.3) end
  local inits = {
    { "conv1.weight", r({ 8, 1, 3, 3 }, 1) }, { "conv1.bias", r({ 8 }, 2, 0.1) },
    { "bn1.weight", kiln.rand({ 8 }, { seed = 3 }) + 0.5 }, { "bn1.bias", r({ 8 }, 4, 0.1) },
    { "bn1.running_mean", r({ 8 }, 5, 0.1) }, { "bn1.running_var", kiln.rand({ 8 }, { seed = 6 }) + 0.5 },
    { "conv2.weight", r({ 16, 8, 3, 3 }, 7, 0.15) }, { "conv2.bias", r({ 16 }, 8, 0.1) },
    { "fc.weight", r({ 4, 16 }, 9) }, { "fc.bias", r({ 4 }, 10, 0.1) },
    { "zero", kiln.tensor({ 0 }, { dtype = "i64" }) }, { "minus_one", kiln.tensor({ -1 }, { dtype = "i64" }) },
  }
  if opts.external then
    -- every float initializer in one file beside the model
    local blob, off = {}, 0
    for _, init in ipairs(inits) do
      if init[2].dtype == "f32" then
        local b = W.tensor_bytes(init[2])
        init[3] = { external = { location = opts.external, offset = off, length = #b } }
        blob[#blob + 1] = b
        off = off + #b
      end
    end
    opts.external_bytes = table.concat(blob)
  end
  return W.model {
    opset = 17,
    name = "kws_cnn",
    inputs = { { "x", "f32", { "N", 1, 16, 16 } } },
    outputs = { { "probs", "f32", { "N", 4 } } },
    initializers = inits,
    nodes = {
      { op = "Conv", name = "Conv_0", inputs = { "x", "conv1.weight", "conv1.bias" }, outputs = { "c1" },
        attrs = { kernel_shape = { 3, 3 }, pads = { 1, 1, 1, 1 } } },
      { op = "BatchNormalization", name = "BatchNorm_1", inputs = { "c1", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var" },
        outputs = { "b1" }, attrs = { epsilon = 1e-5 } },
      { op = "Relu", name = "Relu_2", inputs = { "b1" }, outputs = { "r1" } },
      { op = "MaxPool", name = "MaxPool_3", inputs = { "r1" }, outputs = { "p1" }, attrs = { kernel_shape = { 2, 2 }, strides = { 2, 2 } } },
      { op = "Conv", name = "Conv_4", inputs = { "p1", "conv2.weight", "conv2.bias" }, outputs = { "c2" },
        attrs = { kernel_shape = { 3, 3 }, auto_pad = "SAME_UPPER" } },
      { op = "Relu", name = "Relu_5", inputs = { "c2" }, outputs = { "r2" } },
      { op = "GlobalAveragePool", name = "GlobalAveragePool_6", inputs = { "r2" }, outputs = { "g" } },
      -- the exporter's flatten: Shape -> Gather(0) -> Concat(-1) -> Reshape
      { op = "Shape", name = "Shape_7", inputs = { "g" }, outputs = { "g_shape" } },
      { op = "Gather", name = "Gather_8", inputs = { "g_shape", "zero" }, outputs = { "batch" }, attrs = { axis = 0 } },
      { op = "Concat", name = "Concat_9", inputs = { "batch", "minus_one" }, outputs = { "flat_shape" }, attrs = { axis = 0 } },
      { op = "Reshape", name = "Reshape_10", inputs = { "g", "flat_shape" }, outputs = { "f" } },
      { op = "Gemm", name = "Gemm_11", inputs = { "f", "fc.weight", "fc.bias" }, outputs = { "logits" }, attrs = { transB = 1 } },
      { op = "Softmax", name = "Softmax_12", inputs = { "logits" }, outputs = { "probs" }, attrs = { axis = -1 } },
    },
  }
end

if rawget(_G, "MAKE_ONNX_LIB") then return W end

local out = (arg and arg[1]) or "samples/kws_cnn.onnx"
W.write(out, W.kws_cnn())
print("wrote " .. out)
