-- onnx_transformer_kernels.lua: issue 17's "compiling an imported model
-- gives the same kernels as the same model written in Lua". The transformer
-- block of samples/transformer_block.lua, written as ONNX the ways PyTorch's
-- exporters write it (t/lib/onnx_transformer.lua: LayerNormalization or its
-- decomposition, MatMul + Add for Linear, Reshape/Transpose to heads, the
-- scale, the causal mask through Where in several forms, Softmax, Gelu or
-- its Erf decomposition), with the Lua model's weights, compiled on the CPU:
-- each gives the Lua model's kernel list (names, kinds, ops, the attention's
-- causal flag, what the plan computes once), its eager output matches the
-- model in f64 on a fresh input, and compiled equals eager.
local T = dofile("t/lib/tap.lua")
T.cpu_only("t/onnx_transformer_kernels.lua")
if not kiln.onnx.available then T.skip_all("kiln was built without ONNX import (protobuf-c missing)") end
MAKE_ONNX_LIB = true
local W = dofile("samples/onnx/make_onnx.lua")
local build = dofile("t/lib/onnx_transformer.lua")

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))
local function write(name, bytes)
  local p = dir .. "/" .. name
  W.write(p, bytes)
  return p
end

local function max_diff(a, b) return (a:to("f64") - b:to("f64")):abs():amax():item() end
-- a difference that is a number and at most tol (NaN never passes)
local function within(d, tol) return d == d and d <= tol end

local B, T_ = 2, 16
local spec = kiln.load("samples/transformer_block.lua", { quiet = true })
local lua_model = spec.model
local P = lua_model:state_dict()
-- the f64 reference: the same sample (seeded: the same weights) in f64
local ref_model = kiln.load("samples/transformer_block.lua", { quiet = true }).model:to("f64")
for n, t in pairs(ref_model:state_dict()) do
  assert(max_diff(t, P[n]) == 0, "the sample's weights are seeded: " .. n)
end
local x = kiln.randn({ B, T_, 512 }, { seed = 1717 }) -- not the sample's input
local y_ref = ref_model(x:to("f64"))

local kernel_lines = dofile("t/lib/kernel_lines.lua")

local cm_lua = kiln.compile(lua_model)
local y_lua = cm_lua(x)
local lua_kernels = kernel_lines(cm_lua)
T.like(lua_kernels, "attention_f32_2x8x16x64 %S+ scaled_dot_product_attention causal",
  "the Lua model compiles its attention to one causal kernel (the reference list is the fused one)")
T.ok(within(max_diff(y_lua, y_ref), 1e-4), "the Lua model compiled matches itself in f64")

local variants = {
  { name = "TorchScript exporter, opset 17", v = { linear = "pretransposed", gelu = "erf", mask = "where_not" } },
  { name = "dynamo exporter (onnxscript torch_lib), opset 18, mask folded to ones, scalars as initializers",
    v = { opset = 18, gelu = "erf_torchlib", mask = "where_ones", scalars = "initializer", ln = "op_stats" } },
  { name = "erf GELU with the 0.5 first, mask ones as a Constant", v = { gelu = "erf_dynamo", mask = "where_ones_constant" } },
  { name = "dynamo exporter, opset 20, Gelu op, LayerNormalization's statistics named",
    v = { opset = 20, gelu = "op", k_perm = "one", mask = "where_triu", ln = "op_stats" } },
  { name = "LayerNorm decomposed, Div scale, shape chains", v = { ln = "decomposed", scale = "div", shapes = "shape_chain",
    mask = "where_tril", linear = "pretransposed" } },
  { name = "LayerNorm decomposed, opset 18 (axes as inputs)", v = { opset = 18, ln = "decomposed" } },
  { name = "Linear as Reshape, Gemm, Reshape; ones by Expand", v = { opset = 18, linear = "gemm", mask = "where_expand" } },
  { name = "causal mask added as a float initializer of 0 and -inf", v = { mask = "add" } },
}

for i, c in ipairs(variants) do
  local file = write("block" .. i .. ".onnx", build(P, { B = B, T = T_ }, c.v))
  local m = kiln.onnx.load(file)
  local ye = m(x)
  T.ok(within(max_diff(ye, y_ref), 1e-4), c.name .. ": eager matches the model in f64 (" .. max_diff(ye, y_ref) .. ")")
  local cm = kiln.compile(m)
  local yc = cm(x)
  T.ok(within(max_diff(yc, ye), 1e-5), c.name .. ": compiled equals eager")
  T.is(#cm:breaks(), 0, c.name .. ": no graph break")
  T.is(kernel_lines(cm), lua_kernels, c.name .. ": the kernels of the Lua model")
end

-- 8 tokens: the mask's ones from ConstantOfShape are a known value (64
-- elements), made kiln.full by Trilu: still the causal flag
do
  local x8 = kiln.randn({ B, 8, 512 }, { seed = 88 })
  local cl = kiln.compile(lua_model)
  cl(x8)
  local m = kiln.onnx.load(write("block_t8.onnx", build(P, { B = B, T = 8 }, { mask = "where_not" })))
  local cm = kiln.compile(m)
  T.ok(within(max_diff(cm(x8), ref_model(x8:to("f64"))), 1e-4), "8 tokens: the values")
  T.like(kernel_lines(cm), "scaled_dot_product_attention causal", "8 tokens: the causal flag")
  T.is(kernel_lines(cm), kernel_lines(cl), "8 tokens: the kernels of the Lua model")
end

-- bf16: the ONNX model made bf16 with :to takes bf16 inputs and compiles to
-- the Lua model's bf16 kernels with the same values (the added float mask
-- follows the model's dtype)
for _, mask in ipairs { "where_ones", "add" } do
  local file = write("block_bf16.onnx", build(P, { B = B, T = T_ }, { mask = mask }))
  local m = kiln.onnx.load(file):to("bf16")
  local lb = kiln.load("samples/transformer_block.lua", { quiet = true }).model:to("bf16")
  local xb = x:to("bf16")
  local cm_o, cm_l = kiln.compile(m), kiln.compile(lb)
  local yo, yl = cm_o(xb), cm_l(xb)
  T.is(yo.dtype, "bf16", "bf16 (" .. mask .. "): the output is bf16")
  T.ok(within(max_diff(yo, yl), 0), "bf16 (" .. mask .. "): compiled ONNX equals compiled Lua")
  T.ok(within(max_diff(yo, y_ref), 0.1), "bf16 (" .. mask .. "): near the f64 model (" .. max_diff(yo, y_ref) .. ")")
  T.is(kernel_lines(cm_o), kernel_lines(cm_l), "bf16 (" .. mask .. "): the kernels of the Lua model")
end

-- without the fusions (fuse = false) the exporters' chains stay chains: the
-- erf GELU is a second kernel after the bias add, the decomposed layer norm
-- several; the values are the same
do
  local file = write("block_chains.onnx", build(P, { B = B, T = T_ }, { ln = "decomposed", gelu = "erf" }))
  local m = kiln.onnx.load(file, { fuse = false })
  local cm = kiln.compile(m)
  local y = cm(x)
  T.ok(within(max_diff(y, y_ref), 1e-4), "fuse = false: the chains compute the same values")
  local lines = kernel_lines(cm)
  T.like(lines, "div,erf,add,mul,mul", "fuse = false: the erf GELU chain is its own kernel")
  T.ok(not lines:find("layer_norm"), "fuse = false: no layer_norm kernel")
  T.ok(lines ~= lua_kernels, "fuse = false: other kernels than the Lua model's")
end

-- a float {T, T} mask added that is not the causal one (0 and -inf, but -inf
-- on the diagonal's left too) stays data: fused into the attention kernel
-- as a mask input, not the causal flag; the values right
do
  local file = write("block_add_other.onnx", build(P, { B = B, T = T_ }, { mask = "add_other" }))
  local m = kiln.onnx.load(file)
  local cm = kiln.compile(m)
  local y = cm(x)
  local ye = m(x)
  T.ok(within(max_diff(y, ye), 1e-5), "another float mask: compiled equals eager")
  T.is(ye:ne(ye):to("i32"):sum():item(), 0, "another float mask: no NaN")
  T.like(kernel_lines(cm), "scaled_dot_product_attention\n", "another float mask: one attention kernel, the mask an input")
end

---------------------------------------------------------------------------
-- the fusions leave alone what they must not change

local function tiny(nodes, inits, outputs, opset)
  return W.model { opset = opset or 17, inputs = { { "x", "f32", { 3, 8 } } }, outputs = outputs,
    initializers = inits or {}, nodes = nodes }
end
local function c(nm, v) return { op = "Constant", name = nm, inputs = {}, outputs = { nm }, attrs = { value = { tensor = kiln.tensor(v) } } } end
local xs = kiln.randn({ 3, 8 }, { seed = 5 })
local x64 = xs:to("f64")
local function ops_of(m)
  local out = {}
  for _, n in ipairs(m._model.graph.nodes) do out[#out + 1] = n.op end
  return table.concat(out, ",")
end

-- GELU whose erf is also a graph output: not fused, both outputs right
do
  local m = kiln.onnx.load(write("gelu_shared.onnx", tiny({
    c("sqrt2", math.sqrt(2)), c("one", 1.0), c("half", 0.5),
    { op = "Div", inputs = { "x", "sqrt2" }, outputs = { "d" } },
    { op = "Erf", inputs = { "d" }, outputs = { "e" } },
    { op = "Add", inputs = { "e", "one" }, outputs = { "a" } },
    { op = "Mul", inputs = { "x", "a" }, outputs = { "m" } },
    { op = "Mul", inputs = { "m", "half" }, outputs = { "y" } },
  }, nil, { { "y", "f32", { 3, 8 } }, { "e", "f32", { 3, 8 } } })))
  T.like(ops_of(m), "Erf", "a GELU chain whose erf is read elsewhere is not fused")
  local y, e = m(xs)
  T.ok(within(max_diff(y, x64:gelu()), 1e-6) and within(max_diff(e, (x64 / math.sqrt(2)):erf()), 1e-6),
    "the unfused chain's outputs")
end

-- GELU whose erf an If branch also reads: not fused, both outputs right
do
  local then_branch = { graph = { name = "t", nodes = { { op = "Relu", name = "t_node", inputs = { "e" }, outputs = { "t" } } },
    inputs = {}, outputs = { { "t", "f32", { 3, 8 } } } } }
  local else_branch = { graph = { name = "f", nodes = { { op = "Neg", name = "f_node", inputs = { "x" }, outputs = { "f" } } },
    inputs = {}, outputs = { { "f", "f32", { 3, 8 } } } } }
  local m = kiln.onnx.load(write("gelu_branch.onnx", tiny({
    c("sqrt2", math.sqrt(2)), c("one", 1.0), c("half", 0.5),
    { op = "Constant", name = "cond", inputs = {}, outputs = { "cond" }, attrs = { value = { tensor = kiln.tensor(true, { dtype = "bool" }) } } },
    { op = "Div", inputs = { "x", "sqrt2" }, outputs = { "d" } },
    { op = "Erf", inputs = { "d" }, outputs = { "e" } },
    { op = "Add", inputs = { "e", "one" }, outputs = { "a" } },
    { op = "Mul", inputs = { "x", "a" }, outputs = { "m" } },
    { op = "Mul", inputs = { "m", "half" }, outputs = { "y" } },
    { op = "If", name = "pick", inputs = { "cond" }, outputs = { "z" }, attrs = { then_branch = then_branch, else_branch = else_branch } },
  }, nil, { { "y", "f32", { 3, 8 } }, { "z", "f32", { 3, 8 } } })))
  T.like(ops_of(m), "Erf", "a GELU chain whose erf an If branch reads is not fused")
  local y, z = m(xs)
  T.ok(within(max_diff(y, x64:gelu()), 1e-6) and within(max_diff(z, (x64 / math.sqrt(2)):erf():relu()), 1e-6),
    "the chain's and the branch's outputs")
end

-- GELU written (x * 0.5) * (1 + erf(x * (1/sqrt 2))): fused
do
  local m = kiln.onnx.load(write("gelu_half_first.onnx", tiny({
    c("rsqrt2", 1 / math.sqrt(2)), c("one", 1.0), c("half", 0.5),
    { op = "Mul", inputs = { "rsqrt2", "x" }, outputs = { "d" } },
    { op = "Erf", inputs = { "d" }, outputs = { "e" } },
    { op = "Add", inputs = { "one", "e" }, outputs = { "a" } },
    { op = "Mul", inputs = { "x", "half" }, outputs = { "h" } },
    { op = "Mul", inputs = { "h", "a" }, outputs = { "y" } },
  }, nil, { { "y", "f32", { 3, 8 } } })))
  T.is(ops_of(m), "Constant,Constant,Constant,Gelu", "GELU as (x * 0.5) * (1 + erf(x / sqrt 2)) becomes Gelu")
  T.ok(within(max_diff(m(xs), x64:gelu()), 1e-6), "its value")
end

-- GELU's tanh form (GPT-2's gelu_new) as PyTorch's dynamo exporter writes
-- it: Mul(x, 0.5), Pow(x, 3), Mul(0.044715), Add(x), Mul(sqrt(2 / pi)),
-- Tanh, Add(1), Mul: fused into Gelu(approximate = "tanh"); x^3 as
-- (x * x) * x too; a constant off by 1% (0.045) is left alone. The value
-- against the formula computed here in f64
local function gelu_tanh_ref(x, k)
  return x * (((x + x * x * x * (k or 0.044715)) * math.sqrt(2 / math.pi)):tanh() + 1) * 0.5
end
for _, case in ipairs({ { "Pow(x, 3)", "pow", 0.044715, true }, { "(x * x) * x", "muls", 0.044715, true },
  { "0.045 for 0.044715", "pow", 0.045, false } }) do
  local label, cube, k, fused = case[1], case[2], case[3], case[4]
  local nodes = { c("half", 0.5), c("three", 3.0), c("k", k), c("s2pi", math.sqrt(2 / math.pi)), c("one", 1.0),
    { op = "Mul", inputs = { "x", "half" }, outputs = { "h" } } }
  if cube == "pow" then
    nodes[#nodes + 1] = { op = "Pow", inputs = { "x", "three" }, outputs = { "x3" } }
  else
    nodes[#nodes + 1] = { op = "Mul", inputs = { "x", "x" }, outputs = { "x2" } }
    nodes[#nodes + 1] = { op = "Mul", inputs = { "x2", "x" }, outputs = { "x3" } }
  end
  for _, n in ipairs({
    { op = "Mul", inputs = { "x3", "k" }, outputs = { "kx3" } },
    { op = "Add", inputs = { "x", "kx3" }, outputs = { "u" } },
    { op = "Mul", inputs = { "u", "s2pi" }, outputs = { "v" } },
    { op = "Tanh", inputs = { "v" }, outputs = { "t" } },
    { op = "Add", inputs = { "t", "one" }, outputs = { "a" } },
    { op = "Mul", inputs = { "h", "a" }, outputs = { "y" } },
  }) do nodes[#nodes + 1] = n end
  local m = kiln.onnx.load(write("gelu_tanh_" .. cube .. ".onnx", tiny(nodes, nil, { { "y", "f32", { 3, 8 } } })))
  if fused then
    T.like(ops_of(m), "Gelu$", "GELU's tanh form with " .. label .. " becomes one Gelu node")
    T.ok(not ops_of(m):find("Tanh"), "  and no Tanh is left")
  else
    T.like(ops_of(m), "Tanh", "a near-GELU-tanh (" .. label .. ") is left alone")
  end
  local y = m(xs)
  T.ok(within(max_diff(y, gelu_tanh_ref(x64, k)), 1e-6), string.format("  %s: its value against f64 (%.2g)", label,
    max_diff(y, gelu_tanh_ref(x64, k))))
  local cm = kiln.compile(m)
  T.ok(within(max_diff(cm(xs), gelu_tanh_ref(x64, k)), 1e-6), "  compiled too")
end

-- Gelu's approximate is 'none' or 'tanh': anything else is an error naming both
do
  local m = kiln.onnx.load(write("gelu_bad_approx.onnx", tiny({
    { op = "Gelu", inputs = { "x" }, outputs = { "y" }, attrs = { approximate = "fast" } },
  }, nil, { { "y", "f32", { 3, 8 } } }, 20)))
  T.raises(function() return m(xs) end, "Gelu's approximate must be 'none' or 'tanh', got 'fast'",
    "Gelu(approximate = 'fast'): an error naming the valid words")
end

-- a near-GELU (erf(x / 1.5)) is not fused
do
  local m = kiln.onnx.load(write("not_gelu.onnx", tiny({
    c("k", 1.5), c("one", 1.0), c("half", 0.5),
    { op = "Div", inputs = { "x", "k" }, outputs = { "d" } },
    { op = "Erf", inputs = { "d" }, outputs = { "e" } },
    { op = "Add", inputs = { "e", "one" }, outputs = { "a" } },
    { op = "Mul", inputs = { "x", "a" }, outputs = { "m" } },
    { op = "Mul", inputs = { "m", "half" }, outputs = { "y" } },
  }, nil, { { "y", "f32", { 3, 8 } } })))
  T.like(ops_of(m), "Erf", "erf(x / 1.5) is not GELU: left alone")
  T.ok(within(max_diff(m(xs), x64 * ((x64 / 1.5):erf() + 1) * 0.5), 1e-6), "its value")
end

-- a mean over the first axis (not trailing) is not a layer norm
do
  local m = kiln.onnx.load(write("not_ln.onnx", tiny({
    c("eps", 1e-5), c("two", 2.0),
    { op = "ReduceMean", inputs = { "x" }, outputs = { "mu" }, attrs = { axes = { 0 } } },
    { op = "Sub", inputs = { "x", "mu" }, outputs = { "d" } },
    { op = "Pow", inputs = { "d", "two" }, outputs = { "d2" } },
    { op = "ReduceMean", inputs = { "d2" }, outputs = { "var" }, attrs = { axes = { 0 } } },
    { op = "Add", inputs = { "var", "eps" }, outputs = { "ve" } },
    { op = "Sqrt", inputs = { "ve" }, outputs = { "s" } },
    { op = "Div", inputs = { "d", "s" }, outputs = { "y" } },
  }, nil, { { "y", "f32", { 3, 8 } } })))
  T.like(ops_of(m), "ReduceMean", "a normalization over axis 0 is left alone")
  local mu = x64:mean(1, true)
  local want = (x64 - mu) / (((x64 - mu) * (x64 - mu)):mean(1, true) + 1e-5):sqrt()
  T.ok(within(max_diff(m(xs), want), 1e-5), "its value")
end

-- a decomposed layer norm without scale and bias: fused, the value right
do
  local m = kiln.onnx.load(write("ln_plain.onnx", tiny({
    c("eps", 1e-5), c("two", 2.0),
    { op = "ReduceMean", inputs = { "x" }, outputs = { "mu" }, attrs = { axes = { -1 } } },
    { op = "Sub", inputs = { "x", "mu" }, outputs = { "d" } },
    { op = "Pow", inputs = { "d", "two" }, outputs = { "d2" } },
    { op = "ReduceMean", inputs = { "d2" }, outputs = { "var" }, attrs = { axes = { -1 } } },
    { op = "Add", inputs = { "var", "eps" }, outputs = { "ve" } },
    { op = "Sqrt", inputs = { "ve" }, outputs = { "s" } },
    { op = "Div", inputs = { "d", "s" }, outputs = { "y" } },
  }, nil, { { "y", "f32", { 3, 8 } } })))
  T.is(ops_of(m), "Constant,Constant,LayerNormalization", "the decomposition without scale and bias becomes LayerNormalization")
  local mu = x64:mean(2, true)
  local want = (x64 - mu) / (((x64 - mu) * (x64 - mu)):mean(2, true) + 1e-5):sqrt()
  T.ok(within(max_diff(m(xs), want), 1e-5), "its value")
end

-- Where with one known number on either side (masked_fill), the condition
-- broadcast: the values of Where
do
  local cond = kiln.rand({ 3, 1 }, { seed = 11 }):gt(0.5)
  local x3 = kiln.randn({ 2, 3, 4 }, { seed = 12 })
  for _, number_first in ipairs { true, false } do
    local m = kiln.onnx.load(write("where.onnx", W.model {
      opset = 17, inputs = { { "x", "f32", { 2, 3, 4 } } }, outputs = { { "y", "f32", { 2, 3, 4 } } },
      initializers = { { "c", cond } },
      nodes = {
        c("v", -2.5),
        { op = "Where", inputs = number_first and { "c", "v", "x" } or { "c", "x", "v" }, outputs = { "y" } },
      },
    }))
    local x64, v64 = x3:to("f64"), kiln.full({}, -2.5, { dtype = "f64" })
    local want = number_first and kiln.where(cond, v64, x64) or kiln.where(cond, x64, v64)
    local what = number_first and "Where(c, number, x)" or "Where(c, x, number)"
    T.ok(within(max_diff(m(x3), want), 0), what .. ", c broadcast: eager")
    T.ok(within(max_diff(kiln.compile(m)(x3), want), 0), what .. ", c broadcast: compiled")
  end
end

-- Reshape -> Gemm -> Reshape that is not a Linear on x's rows (the result
-- reshaped to other leading dims): the three ops, right
do
  local w = kiln.randn({ 5, 4 }, { seed = 8 })
  local b = kiln.randn({ 5 }, { seed = 9 })
  local m = kiln.onnx.load(write("gemm_rows.onnx", W.model {
    opset = 17, inputs = { { "x", "f32", { 2, 3, 4 } } }, outputs = { { "y", "f32", { 3, 2, 5 } } },
    initializers = { { "w", w }, { "b", b }, { "s1", kiln.tensor({ -1, 4 }, { dtype = "i64" }) },
      { "s2", kiln.tensor({ 3, 2, 5 }, { dtype = "i64" }) } },
    nodes = {
      { op = "Reshape", inputs = { "x", "s1" }, outputs = { "flat" } },
      { op = "Gemm", name = "fc", inputs = { "flat", "w", "b" }, outputs = { "g" }, attrs = { transB = 1 } },
      { op = "Reshape", inputs = { "g", "s2" }, outputs = { "y" } },
    },
  }))
  T.is(ops_of(m), "Gemm", "Reshape -> Gemm -> Reshape is one node")
  local x3 = kiln.randn({ 2, 3, 4 }, { seed = 10 })
  local want = (x3:to("f64"):reshape({ 6, 4 }):matmul(w:to("f64"):t()) + b:to("f64")):reshape({ 3, 2, 5 })
  local y = m(x3)
  T.is(table.concat(y:shape(), ","), "3,2,5", "other leading dims: the shape the file says")
  T.ok(within(max_diff(y, want), 1e-5), "other leading dims: the three ops' value")
  T.ok(within(max_diff(kiln.compile(m)(x3), y), 1e-6), "other leading dims: compiled equals eager")
end

-- Reshape -> Gemm -> Reshape whose input's rows are split over two dims
-- (GPT-2's attention c_proj reads the heads {B, T, H, D} as {B*T, H*D}):
-- the matmul runs on the input viewed as {B, T, H*D}, so the bias and the
-- residual add after it are its epilogue: one kernel
do
  local w = kiln.randn({ 5, 4 }, { seed = 18 })
  local b = kiln.randn({ 5 }, { seed = 19 })
  local m = kiln.onnx.load(write("gemm_heads.onnx", W.model {
    opset = 17, inputs = { { "x", "f32", { 2, 3, 2, 2 } }, { "r", "f32", { 2, 3, 5 } } },
    outputs = { { "y", "f32", { 2, 3, 5 } } },
    initializers = { { "w", w }, { "b", b }, { "s1", kiln.tensor({ -1, 4 }, { dtype = "i64" }) },
      { "s2", kiln.tensor({ 2, 3, 5 }, { dtype = "i64" }) } },
    nodes = {
      { op = "Reshape", inputs = { "x", "s1" }, outputs = { "flat" } },
      { op = "Gemm", name = "c_proj", inputs = { "flat", "w", "b" }, outputs = { "g" }, attrs = { transB = 1 } },
      { op = "Reshape", inputs = { "g", "s2" }, outputs = { "p" } },
      { op = "Add", inputs = { "r", "p" }, outputs = { "y" } },
    },
  }))
  local x4, r = kiln.randn({ 2, 3, 2, 2 }, { seed = 20 }), kiln.randn({ 2, 3, 5 }, { seed = 21 })
  local want = (x4:to("f64"):reshape({ 6, 4 }):matmul(w:to("f64"):t()) + b:to("f64")):reshape({ 2, 3, 5 }) + r:to("f64")
  T.ok(within(max_diff(m(x4, r), want), 1e-5), "heads as rows: the three ops' value")
  local cm = kiln.compile(m)
  T.ok(within(max_diff(cm(x4, r), want), 1e-5), "heads as rows: compiled value")
  -- the plan folds such a pair into the library call where the backend
  -- can (cuBLASLt; the CPU only with KILN_CPU_FOLD_EPILOGUES): what it
  -- needs is a matmul of the output's shape and the two adds after it
  local ks = cm:kernels()
  T.is(#ks, 2, "heads as rows: two kernels")
  T.like(ks[1] and ks[1].name or "", "matmul_f32_2x3x5$", "heads as rows: the matmul runs on {2, 3, 4}, not {6, 4}")
  T.is(ks[2] and table.concat(ks[2].ops, ",") or "", "add,add", "heads as rows: the bias and the residual add in one kernel after it")
end

-- MatMul on rows transposed first (nn.MultiheadAttention's in_proj reads
-- {B, T, E} as {T, B, E}): one node; the matmul runs on the contiguous
-- {B, T, E} rows with its bias after it, and the result is the transposed view
do
  local w = kiln.randn({ 4, 6 }, { seed = 38 })
  local b = kiln.randn({ 6 }, { seed = 39 })
  local m = kiln.onnx.load(write("in_proj_t.onnx", W.model {
    opset = 17, inputs = { { "x", "f32", { 2, 3, 4 } } }, outputs = { { "y", "f32", { 3, 2, 6 } } },
    initializers = { { "w", w }, { "b", b } },
    nodes = {
      { op = "Transpose", inputs = { "x" }, outputs = { "xt" }, attrs = { perm = { 1, 0, 2 } } },
      { op = "MatMul", name = "in_proj", inputs = { "xt", "w" }, outputs = { "p" } },
      { op = "Add", inputs = { "p", "b" }, outputs = { "y" } },
    },
  }))
  T.is(ops_of(m), "MatMul", "Transpose -> MatMul -> Add of a bias is one node")
  local x = kiln.randn({ 2, 3, 4 }, { seed = 40 })
  local want = x:to("f64"):transpose(1, 2):matmul(w:to("f64")) + b:to("f64")
  local y = m(x)
  T.is(table.concat(y:shape(), ","), "3,2,6", "rows transposed first: the shape the file says")
  T.ok(within(max_diff(y, want), 1e-5), "rows transposed first: the value")
  local cm = kiln.compile(m)
  T.ok(within(max_diff(cm(x), want), 1e-5), "rows transposed first: compiled value")
  local ks = cm:kernels()
  T.like(ks[1] and ks[1].name or "", "matmul_f32_2x3x6$", "rows transposed first: one matmul over the {2, 3} rows as stored")
end

-- a compiled ONNX model replays without running the interpreter: its
-- parameters are found again under their dotted names (module.params), and
-- naming ops after ONNX nodes (kiln.onnx.where) keeps the trace replayable
do
  local m = kiln.onnx.load(write("block_replay.onnx", build(P, { B = B, T = T_ }, { opset = 20, gelu = "op", mask = "where_ones" })))
  local cm = kiln.compile(m)
  local first = cm(x)
  for _ = 1, 4 do cm(x) end
  local st = cm:stats()
  T.is(st.replayable, "yes", "an imported model's compiled call is replayable")
  T.ok(st.direct_replays >= 3, "an imported model replays directly (" .. st.direct_replays .. " of 5 calls)")
  T.ok(within(max_diff(cm(x), first), 0), "a replay gives the traced call's values")
  local x2 = kiln.randn({ B, T_, 512 }, { seed = 77 })
  T.ok(within(max_diff(cm(x2), m(x2)), 1e-4), "a replay on new input equals eager on it")
  -- the module's parameter replaced: the replay notices and traces again
  local name = "ln1.weight"
  if m.params[name] then
    local before = cm:stats().direct_replays
    m.params[name] = m.params[name] * 2
    T.ok(within(max_diff(cm(x2), m(x2)), 1e-4), "a replaced parameter: compiled equals eager with it")
    T.is(cm:stats().direct_replays, before, "a replaced parameter: that call traced again instead of replaying")
  else
    T.ok(false, "the block's initializer ln1.weight is a parameter of the module")
  end
end

os.execute("rm -rf '" .. dir .. "'")
T.done()
