-- onnx_transformer.lua: the transformer block of bench/torch_models.py as
-- PyTorch's ONNX exporters write it, built with the protobuf writer of
-- samples/onnx/make_onnx.lua, for tests that have no PyTorch.
--
--   local build = dofile("t/lib/onnx_transformer.lua")
--   local bytes = build(params, {B = 2, T = 16}, variant)
--
-- params: name -> f32 tensor, the state_dict of samples/transformer_block.lua
-- (ln1, ln2, qkv, proj, fc1, fc2; Linear weights {out, in}). variant picks
-- how each piece is written, as one of the exporters does (nil: the first):
--   opset     17 (default), 18, 20
--   ln        "op": LayerNormalization; "op_stats": the same with its Mean
--             and InvStdDev outputs named (nothing reads them);
--             "decomposed": ReduceMean, Sub, Pow,
--             ReduceMean, Add, Sqrt, Div, Mul, Add (exports before opset 17)
--   linear    "transpose": Transpose(weight) then MatMul, Add(mm, bias) (the
--             dynamo exporter); "pretransposed": MatMul with a {in, out}
--             initializer, Add(bias, mm) (the TorchScript exporter); "gemm":
--             Reshape to 2-D, Gemm(transB = 1) with the bias, Reshape back
--             (linear decomposed to addmm)
--   k_perm    "two": Transpose to heads, then Transpose of the last two dims;
--             "one": the two merged into one Transpose
--   scale     "mul": Mul by a Constant 1/sqrt(hd); "div": Div by sqrt(hd)
--   mask      "where_not": ConstantOfShape(bool) -> Trilu -> Not ->
--             Where(not, -inf, scores) (masked_fill(~tril));
--             "where_ones": the ones as a bool initializer, then the same;
--             "where_ones_constant": the ones as a bool Constant node;
--             "where_tril": a bool initializer holding tril(ones) and
--             Where(tril, scores, -inf);
--             "where_triu": a bool initializer holding ~tril(ones) and
--             Where(it, -inf, scores) (the exporter folded the mask);
--             "where_expand": the ones as Expand of a bool Constant, then as
--             "where_not"; "add": Add of a float {T, T} initializer of 0 and -inf
--             (-inf above the diagonal); "add_other": the same with -inf also
--             more than 3 positions back (a window, not causal)
--   gelu      "op": Gelu (opset 20); "erf": Div by sqrt(2), Erf, Add 1,
--             Mul by x, Mul by 0.5 (the TorchScript exporter's);
--             "erf_dynamo": the same with the constant first in the last Mul;
--             "erf_torchlib": x * (0.5 * (1 + erf)) (onnxscript's torch_lib,
--             which the dynamo exporter uses at every opset)
--   shapes    "const": Reshape targets as initializers; "shape_chain":
--             Shape -> Gather -> Unsqueeze -> Concat -> Reshape
--   scalars   "constant": scalar constants (the scale, -inf, GELU's and
--             LayerNorm's numbers) as Constant nodes; "initializer": as
--             one-element initializers (constant folding's output)
MAKE_ONNX_LIB = true
local W = dofile("samples/onnx/make_onnx.lua")

-- the weights' bytes, packed once per tensor (packing 3M floats in Lua takes seconds)
local RAW = setmetatable({}, { __mode = "k" })
local function raw_of(t, transposed)
  RAW[t] = RAW[t] or {}
  local key = transposed and "t" or "n"
  if not RAW[t][key] then RAW[t][key] = W.tensor_bytes(transposed and t:t():contiguous() or t) end
  return RAW[t][key]
end

local DEFAULT = { opset = 17, ln = "op", linear = "transpose", k_perm = "two", scale = "mul", mask = "where_not",
  gelu = "erf", shapes = "const", scalars = "constant" }

return function(P, dims, variant)
  local v = {}
  for k, d in pairs(DEFAULT) do v[k] = (variant or {})[k] or d end
  for k in pairs(variant or {}) do
    if DEFAULT[k] == nil then error("onnx_transformer: unknown variant key '" .. k .. "'") end
  end
  local B, T = dims.B, dims.T
  local D = P["ln1.weight"]:shape()[1]
  local H = dims.H or 8
  local hd = D // H
  local nodes, inits, seq = {}, {}, 0
  local function name(base) seq = seq + 1; return base .. "_" .. seq end
  local function node(op, inputs, attrs, nout)
    local outs = {}
    local nm = name(op)
    for k = 1, nout or 1 do outs[k] = nm .. "_out" .. k end
    nodes[#nodes + 1] = { op = op, name = "/" .. nm, inputs = inputs, outputs = outs, attrs = attrs }
    return table.unpack(outs)
  end
  local function init(nm, t, raw) inits[#inits + 1] = { nm, t, raw and { raw = raw } }; return nm end
  local function ints(vals) return kiln.tensor(vals, { dtype = "i64" }) end
  local function const(x) -- a scalar (f32): a Constant node or an initializer
    if v.scalars == "initializer" then return init(name("scalar"), kiln.tensor(x)) end
    return node("Constant", {}, { value = { tensor = kiln.tensor(x) } })
  end
  local function axes_of(node_op, input, axes_val, attrs)
    -- ReduceMean takes its axes as an input from opset 18
    attrs = attrs or {}
    if v.opset >= 18 then return node(node_op, { input, init(name("axes"), ints(axes_val)) }, attrs) end
    attrs.axes = axes_val
    return node(node_op, { input }, attrs)
  end

  for _, pn in ipairs { "ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias" } do init(pn, P[pn], raw_of(P[pn])) end

  local function layer_norm(x, prefix)
    if v.ln == "op" or v.ln == "op_stats" then
      return (node("LayerNormalization", { x, prefix .. ".weight", prefix .. ".bias" }, { axis = -1, epsilon = 1e-5 },
        v.ln == "op_stats" and 3 or 1))
    end
    local mean = axes_of("ReduceMean", x, { -1 }, { keepdims = 1 })
    local c = node("Sub", { x, mean })
    local sq = node("Pow", { c, const(2.0) })
    local var = axes_of("ReduceMean", sq, { -1 }, { keepdims = 1 })
    local s = node("Sqrt", { node("Add", { var, const(1e-5) }) })
    local n = node("Div", { c, s })
    return node("Add", { node("Mul", { n, prefix .. ".weight" }), prefix .. ".bias" })
  end

  local function linear(x, prefix)
    local w, b = P[prefix .. ".weight"], P[prefix .. ".bias"]
    init(prefix .. ".bias", b, raw_of(b))
    if v.linear == "gemm" then
      init(prefix .. ".weight", w, raw_of(w))
      local out_f, in_f = w:shape()[1], w:shape()[2]
      local flat = node("Reshape", { x, init(name("shape"), ints({ -1, in_f })) })
      local y = node("Gemm", { flat, prefix .. ".weight", prefix .. ".bias" }, { transB = 1 })
      return node("Reshape", { y, init(name("shape"), ints({ B, T, out_f })) })
    end
    if v.linear == "pretransposed" then
      local wt = init("onnx::MatMul_" .. prefix, w:t():contiguous(), raw_of(w, true))
      return node("Add", { prefix .. ".bias", node("MatMul", { x, wt }) })
    end
    init(prefix .. ".weight", w, raw_of(w))
    local wt = node("Transpose", { prefix .. ".weight" }, { perm = { 1, 0 } })
    return node("Add", { node("MatMul", { x, wt }), prefix .. ".bias" })
  end

  -- a Reshape target {a, b, ...}: numbers as they are; "B", "T" from x's shape
  local function target(x, list)
    if v.shapes == "const" then
      local vals = {}
      for k, d in ipairs(list) do vals[k] = d == "B" and B or d == "T" and T or d end
      return init(name("shape"), ints(vals))
    end
    local shape = node("Shape", { x })
    local parts = {}
    for k, d in ipairs(list) do
      if d == "B" or d == "T" then
        local g = node("Gather", { shape, init(name("idx"), kiln.tensor(d == "B" and 0 or 1, { dtype = "i64" })) }, { axis = 0 })
        if v.opset >= 13 then
          parts[k] = node("Unsqueeze", { g, init(name("axes"), ints({ 0 })) })
        else
          parts[k] = node("Unsqueeze", { g }, { axes = { 0 } })
        end
      else
        parts[k] = init(name("dim"), ints({ d }))
      end
    end
    return node("Concat", parts, { axis = 0 })
  end

  local x = "x"
  local h = linear(layer_norm(x, "ln1"), "qkv")
  local q, k, vv = node("Split", { h, init("split_sizes", ints({ D, D, D })) }, { axis = -1 }, 3)
  local function heads(t)
    return node("Transpose", { node("Reshape", { t, target(t, { "B", "T", H, hd }) }) }, { perm = { 0, 2, 1, 3 } })
  end
  q, vv = heads(q), heads(vv)
  local kt
  if v.k_perm == "one" then
    kt = node("Transpose", { node("Reshape", { k, target(k, { "B", "T", H, hd }) }) }, { perm = { 0, 2, 3, 1 } })
  else
    kt = node("Transpose", { heads(k) }, { perm = { 0, 1, 3, 2 } })
  end
  local s = node("MatMul", { q, kt })
  if v.scale == "mul" then
    s = node("Mul", { s, const(1.0 / math.sqrt(hd)) })
  else
    s = node("Div", { s, const(math.sqrt(hd)) })
  end
  local neg_inf = const(-math.huge)
  local tril = kiln.ones({ T, T }, { dtype = "bool" }):tril()
  if v.mask == "where_not" or v.mask == "where_ones" or v.mask == "where_expand" or v.mask == "where_ones_constant" then
    local ones
    if v.mask == "where_ones_constant" then
      ones = node("Constant", {}, { value = { tensor = kiln.ones({ T, T }, { dtype = "bool" }) } })
    elseif v.mask == "where_expand" then
      ones = node("Expand", { node("Constant", {}, { value = { tensor = kiln.tensor(true, { dtype = "bool" }) } }),
        init("mask_shape", ints({ T, T })) })
    elseif v.mask == "where_not" then
      ones = node("ConstantOfShape", { init("mask_shape", ints({ T, T })) },
        { value = { tensor = kiln.tensor({ true }, { dtype = "bool" }) } })
    else
      ones = init("mask_ones", kiln.ones({ T, T }, { dtype = "bool" }))
    end
    local low = node("Trilu", { ones }, { upper = 0 })
    s = node("Where", { node("Not", { low }), neg_inf, s })
  elseif v.mask == "where_tril" then
    s = node("Where", { init("mask_tril", tril), s, neg_inf })
  elseif v.mask == "where_triu" then
    s = node("Where", { init("mask_triu", tril:logical_not()), neg_inf, s })
  elseif v.mask == "add" or v.mask == "add_other" then
    local drop = tril:logical_not()
    if v.mask == "add_other" then -- a window: -inf also more than 3 positions back
      drop = (drop:to("i32") + kiln.ones({ T, T }, { dtype = "i32" }):tril(-4)):ne(0)
    end
    local m = kiln.zeros({ T, T }):masked_fill(drop, -math.huge)
    s = node("Add", { s, init("mask_add", m) })
  else
    error("onnx_transformer: unknown mask '" .. v.mask .. "'")
  end
  local p = node("Softmax", { s }, { axis = -1 })
  local y = node("MatMul", { p, vv })
  y = node("Transpose", { y }, { perm = { 0, 2, 1, 3 } })
  y = node("Reshape", { y, target(x, { "B", "T", D }) })
  local x1 = node("Add", { x, linear(y, "proj") })
  local f = linear(layer_norm(x1, "ln2"), "fc1")
  if v.gelu == "op" then
    f = node("Gelu", { f })
  else
    local e = node("Erf", { node("Div", { f, const(math.sqrt(2)) }) })
    local plus = node("Add", { e, const(1.0) })
    if v.gelu == "erf_torchlib" then
      f = node("Mul", { f, node("Mul", { const(0.5), plus }) })
    elseif v.gelu == "erf_dynamo" then
      f = node("Mul", { const(0.5), node("Mul", { f, plus }) })
    else
      f = node("Mul", { node("Mul", { f, plus }), const(0.5) })
    end
  end
  local out = node("Add", { x1, linear(f, "fc2") })
  nodes[#nodes + 1] = { op = "Identity", name = "/output", inputs = { out }, outputs = { "y" } }

  return W.model {
    opset = v.opset,
    name = "transformer_block",
    inputs = { { "x", "f32", { B, T, D } } },
    outputs = { { "y", "f32", { B, T, D } } },
    initializers = inits,
    nodes = nodes,
  }
end
