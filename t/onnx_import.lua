-- onnx_import.lua: kiln.onnx.load on models written by samples/onnx/make_onnx.lua:
-- values against the same network written with kiln ops in f64, compiled
-- against eager, the same kernels as the Lua model, parameters under their
-- ONNX names, no graph break for shape arithmetic, ONNX node names in
-- captures, breaks and :kernels, external data, If, and every bad input of
-- issue 17 (each an error naming the file and what is wrong).
local T = dofile("t/lib/tap.lua")
-- the CPU backend's kernels and texts; the GPU paths are checked elsewhere
T.cpu_only("t/onnx_import.lua")
if not kiln.onnx.available then T.skip_all("kiln was built without ONNX import (protobuf-c missing)") end
MAKE_ONNX_LIB = true
local W = dofile("samples/onnx/make_onnx.lua")

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))
local function path(name) return dir .. "/" .. name end
local function write(name, bytes)
  W.write(path(name), bytes)
  return path(name)
end

local function max_diff(a, b) return (a:to("f64") - b:to("f64")):abs():amax():item() end

---------------------------------------------------------------------------
-- the sample: values, parameters, compile

local file = write("kws.onnx", W.kws_cnn())
local m = kiln.onnx.load(file)
local names = {}
for n in m:named_parameters() do names[#names + 1] = n end
T.is(table.concat(names, ","), "conv1.weight,conv1.bias,bn1.weight,bn1.bias,bn1.running_mean,bn1.running_var,"
  .. "conv2.weight,conv2.bias,fc.weight,fc.bias,zero,minus_one", "named_parameters: the initializers under their ONNX names")
T.is(#m:parameters(), 12, "parameters(): one tensor per initializer")

-- the same network with kiln ops in f64, from the same initializer tensors
local function reference(x)
  local p = {}
  for n, t in m:named_parameters() do p[n] = t:to("f64") end
  x = x:to("f64")
  local h = kiln.conv2d(x, p["conv1.weight"], p["conv1.bias"], { padding = 1 })
  h = kiln.batch_norm(h, p["bn1.running_mean"], p["bn1.running_var"], p["bn1.weight"], p["bn1.bias"], 1e-5):relu()
  h = kiln.max_pool2d(h, 2)
  h = kiln.conv2d(h, p["conv2.weight"], p["conv2.bias"], { padding = 1 }):relu()
  h = h:mean({ 3, 4 }):matmul(p["fc.weight"]:t()) + p["fc.bias"]
  return h:softmax(-1)
end

for _, n in ipairs({ 1, 3 }) do
  local x = kiln.randn({ n, 1, 16, 16 }, { seed = 100 + n })
  local y = m(x)
  T.is(table.concat(y:shape(), ","), n .. ",4", "eager output shape for N=" .. n)
  T.ok(max_diff(y, reference(x)) < 1e-5, "eager matches the f64 reference (N=" .. n .. ")")
end

local x = kiln.randn({ 2, 1, 16, 16 }, { seed = 7 })
for _, mode in ipairs({ "default", "reduce-overhead", "max-autotune-no-cudagraphs" }) do
  local cm = kiln.compile(m, { mode = mode })
  local y = cm(x)
  local y2 = cm(x)
  T.ok(max_diff(y, m(x)) < 1e-5 and max_diff(y2, y) == 0, "compiled (" .. mode .. ") equals eager")
  T.is(#cm:breaks(), 0, "no graph break in " .. mode .. " (Shape -> Gather -> Concat -> Reshape folded)")
end

-- the same model written in Lua compiles to the same kernels
local cm_onnx = kiln.compile(m)
cm_onnx(x)
local P = {}
for n, t in m:named_parameters() do P[n] = t end
local lua_model = function(v)
  local h = kiln.conv2d(v, P["conv1.weight"], P["conv1.bias"], { padding = 1 })
  h = kiln.batch_norm(h, P["bn1.running_mean"], P["bn1.running_var"], P["bn1.weight"], P["bn1.bias"], 1e-5):relu()
  h = kiln.max_pool2d(h, 2, { stride = 2 })
  h = kiln.conv2d(h, P["conv2.weight"], P["conv2.bias"], { padding = 1 }):relu()
  h = h:mean({ 3, 4 }, true)
  h = h:reshape({ h:shape()[1], 16 })
  return (h:matmul(P["fc.weight"]:transpose(1, 2)) + P["fc.bias"]):softmax(-1)
end
local cm_lua = kiln.compile(lua_model)
cm_lua(x)
local function kernel_names(cm)
  local out = {}
  for _, k in ipairs(cm:kernels()) do out[#out + 1] = k.name end
  return table.concat(out, " ")
end
T.is(kernel_names(cm_onnx), kernel_names(cm_lua), "the ONNX model compiles to the kernels of the same model in Lua")

-- attention as exporters write it (Transpose, MatMul, Mul by a Constant,
-- Softmax, MatMul): the same kernels as the chain written in Lua
do
  local att = write("attention.onnx", W.model {
    opset = 17,
    inputs = { { "q", "f32", { 2, 2, 8, 4 } }, { "k", "f32", { 2, 2, 8, 4 } }, { "v", "f32", { 2, 2, 8, 4 } } },
    outputs = { { "o", "f32", { 2, 2, 8, 4 } } },
    nodes = {
      { op = "Constant", name = "scale", inputs = {}, outputs = { "c" }, attrs = { value = { tensor = kiln.tensor(0.5) } } },
      { op = "Transpose", name = "kt", inputs = { "k" }, outputs = { "kt" }, attrs = { perm = { 0, 1, 3, 2 } } },
      { op = "MatMul", name = "scores", inputs = { "q", "kt" }, outputs = { "s" } },
      { op = "Mul", name = "scaled", inputs = { "s", "c" }, outputs = { "s2" } },
      { op = "Softmax", name = "probs", inputs = { "s2" }, outputs = { "p" }, attrs = { axis = -1 } },
      { op = "MatMul", name = "mix", inputs = { "p", "v" }, outputs = { "o" } },
    },
  })
  local ma = kiln.onnx.load(att)
  local q, k, v = kiln.randn({ 2, 2, 8, 4 }, { seed = 21 }), kiln.randn({ 2, 2, 8, 4 }, { seed = 22 }), kiln.randn({ 2, 2, 8, 4 }, { seed = 23 })
  local cma = kiln.compile(ma)
  local cml = kiln.compile(function(a, b, c) return (a:matmul(b:transpose(3, 4)) * 0.5):softmax(-1):matmul(c) end)
  local ya, yl = cma(q, k, v), cml(q, k, v)
  local ref = (q:to("f64"):matmul(k:to("f64"):transpose(3, 4)) * 0.5):softmax(-1):matmul(v:to("f64"))
  T.ok(max_diff(ya, ref) < 1e-5, "ONNX attention matches the f64 reference")
  T.is(kernel_names(cma), kernel_names(cml), "ONNX attention compiles to the kernels of the Lua chain")
end

-- ONNX node names as the captured ops' source locations and in :kernels
local wheres = {}
for _, g in ipairs(cm_onnx:graphs()) do
  for _, nd in ipairs(g.nodes) do if nd.where ~= "" then wheres[#wheres + 1] = nd.where end end
end
local joined = table.concat(wheres, "\n")
T.like(joined, "kws%.onnx:node 'Conv_0' %(Conv%)", "captured conv2d carries its ONNX node")
T.like(joined, "kws%.onnx:node 'Softmax_12' %(Softmax%)", "captured softmax carries its ONNX node")
local k0 = cm_onnx:kernels()[1]
T.like(table.concat(k0.wheres, ","), "Conv_0", "cm:kernels() entries name the ONNX nodes")

-- :to converts the initializers; :eval is there
T.ok(m:eval() == m, ":eval() returns the module")
local m64 = kiln.onnx.load(file):to("f64")
T.is(m64.params["conv1.weight"].dtype, "f64", ":to('f64') converts float initializers")
T.is(m64.params["zero"].dtype, "i64", ":to keeps integer initializers")

T.raises(function() kiln.onnx.load(file, { size = 1 }) end, "unknown option 'size'", "an unknown option is named")
T.is(kiln.onnx.load(file, { device = "cpu" }).params["fc.bias"].device, "cpu", "opts.device places the initializers")

-- the REPL's inputs: dynamic dims from sizes
local ins = kiln.onnx.example_inputs(m, { N = 5 })
T.is(table.concat(ins[1]:shape(), ","), "5,1,16,16", "example_inputs: N from sizes")
T.raises(function() kiln.onnx.example_inputs(m, {}) end, "input 'x' dim 1 is dynamic %(N%)", "a dynamic dim without a size is named")
local spec = kiln.load(file, { quiet = true, sizes = { N = 2 } })
T.is(table.concat(spec.inputs({ device = "cpu" })[1]:shape(), ","), "2,1,16,16", "kiln.load of an .onnx file builds its inputs")

---------------------------------------------------------------------------
-- external data

local ext = {}
local ext_model = W.kws_cnn({ external = "weights.bin" })
file = write("ext.onnx", ext_model)
ext.bytes = nil
do
  local opts = { external = "weights.bin" }
  W.kws_cnn(opts)
  W.write(path("weights.bin"), opts.external_bytes)
end
local me = kiln.onnx.load(file)
T.ok(max_diff(me(x), m(x)) == 0, "external-data initializers load the same values")
os.remove(path("weights.bin"))
T.raises(function() kiln.onnx.load(file) end, "ext%.onnx: initializer 'conv1%.weight': external data file 'weights%.bin' cannot be opened",
  "a missing external-data file is named")
do
  local opts = { external = "../escape.bin" }
  file = write("escape.onnx", W.kws_cnn(opts))
  T.raises(function() kiln.onnx.load(file) end, "escape%.onnx: initializer 'conv1%.weight': external data location '%.%./escape%.bin' must be a path inside the model's folder",
    "external data outside the model's folder is refused")
end
do
  local opts = { external = "short.bin" }
  file = write("short.onnx", W.kws_cnn(opts))
  W.write(path("short.bin"), opts.external_bytes:sub(1, 100))
  T.raises(function() kiln.onnx.load(file) end, "short%.onnx: initializer 'conv1%.weight': external data 'short%.bin' holds 100 bytes",
    "an external-data file too short is named")
end

---------------------------------------------------------------------------
-- bad files

local good = W.kws_cnn()
file = write("truncated.onnx", good:sub(1, #good // 2))
T.raises(function() kiln.onnx.load(file) end, "truncated%.onnx: not an ONNX model %(the file is truncated, corrupt or another format%)",
  "a truncated file")
file = write("text.onnx", "this is not a model\n")
T.raises(function() kiln.onnx.load(file) end, "text%.onnx: not an ONNX model", "a text file")
file = write("empty.onnx", "")
T.raises(function() kiln.onnx.load(file) end, "empty%.onnx: the file is empty, not an ONNX model", "an empty file")
T.raises(function() kiln.onnx.load(path("missing.onnx")) end, "missing%.onnx: cannot open", "a missing file")
-- corrupt bytes in the middle: never a crash; an error or a model
local corrupt = good:sub(1, 200) .. string.rep("\255", 16) .. good:sub(217)
file = write("corrupt.onnx", corrupt)
local okc, errc = pcall(kiln.onnx.load, file)
T.ok(not okc and tostring(errc):find("corrupt%.onnx"), "corrupt bytes: an error naming the file (" .. tostring(errc):sub(1, 80) .. ")")

local function tiny(nodes, inits, opts)
  opts = opts or {}
  return W.model {
    opset = opts.opset or 17,
    inputs = opts.inputs or { { "x", "f32", { 2, 3 } } },
    outputs = opts.outputs or { { "y", "f32", { 2, 3 } } },
    initializers = inits or {},
    nodes = nodes,
  }
end

file = write("size.onnx", tiny({ { op = "Add", inputs = { "x", "b" }, outputs = { "y" } } },
  { { "b", kiln.zeros({ 2, 3 }), { raw = string.rep("\0", 20) } } }))
T.raises(function() kiln.onnx.load(file) end, "size%.onnx: tensor 'b' holds 20 bytes, but its shape and type %(FLOAT%) need 24",
  "an initializer whose byte size does not match its shape")

file = write("noname.onnx", tiny({ { op = "Add", inputs = { "x", "x" }, outputs = { "y" } } },
  { { "", kiln.zeros({ 2, 3 }) } }))
T.raises(function() kiln.onnx.load(file) end, "noname%.onnx: initializer 1 has no name", "an initializer without a name")

file = write("cycle.onnx", tiny({
  { op = "Add", name = "A", inputs = { "x", "c" }, outputs = { "a" } },
  { op = "Relu", name = "B", inputs = { "a" }, outputs = { "c" } },
  { op = "Identity", name = "C", inputs = { "a" }, outputs = { "y" } },
}))
T.raises(function() kiln.onnx.load(file) end, "cycle%.onnx: the graph has a cycle: node 'A' %(Add%) depends on its own output", "a cycle")

file = write("undef.onnx", tiny({ { op = "Add", name = "A", inputs = { "x", "nowhere" }, outputs = { "y" } } }))
T.raises(function() kiln.onnx.load(file) end, "undef%.onnx: node 'A' %(Add%) reads 'nowhere', which no node, input or initializer defines",
  "an undefined input")

-- out of order is fine: the loader sorts
file = write("order.onnx", tiny({
  { op = "Relu", name = "B", inputs = { "a" }, outputs = { "y" } },
  { op = "Neg", name = "A", inputs = { "x" }, outputs = { "a" } },
}))
local mo = kiln.onnx.load(file)
local xo = kiln.randn({ 2, 3 }, { seed = 9 })
T.ok(max_diff(mo(xo), (-xo):relu()) == 0, "nodes out of order are sorted")

file = write("opset.onnx", tiny({ { op = "Relu", inputs = { "x" }, outputs = { "y" } } }, nil, { opset = 99 }))
T.raises(function() kiln.onnx.load(file) end, "opset%.onnx: the model uses ONNX opset 99; kiln knows opsets up to %d+", "an opset newer than kiln knows")

-- wrong inputs
T.raises(function() mo(kiln.randn({ 2, 3, 1 })) end, "order%.onnx: input 'x' must have rank 2 {2, 3}, got shape {2, 3, 1}", "an input of the wrong rank")
T.raises(function() mo(kiln.zeros({ 2, 3 }, { dtype = "i64" })) end, "order%.onnx: input 'x' must be f32, got i64", "an input of the wrong dtype")
T.raises(function() mo(kiln.randn({ 2, 4 })) end, "order%.onnx: input 'x' dim 2 must be 3, got 4", "an input of the wrong size")
T.raises(function() mo() end, "input 1 'x' is missing", "a missing input")

-- an unsupported op: loads, fails at the first call naming node, op and opset
file = write("unsup.onnx", tiny({
  { op = "Relu", name = "fine", inputs = { "x" }, outputs = { "a" } },
  { op = "Hardmax2", name = "odd_node", inputs = { "a" }, outputs = { "y" } },
}))
local mu = kiln.onnx.load(file)
T.ok(mu ~= nil, "a model with an unsupported op loads")
T.raises(function() mu(xo) end, "^ONNX node 'odd_node' %(Hardmax2, opset 17%): unsupported: the op is not implemented in kiln",
  "an unsupported op fails at the first call, naming node, op and opset")
T.raises(function() kiln.compile(mu)(xo) end, "ONNX node 'odd_node' %(Hardmax2, opset 17%)", "the same when compiled")

-- an error inside a supported node names the node
file = write("shape.onnx", tiny({ { op = "Reshape", name = "bad_reshape", inputs = { "x", "s" }, outputs = { "y" } } },
  { { "s", kiln.tensor({ 5, 7 }, { dtype = "i64" }) } }))
T.raises(function() kiln.onnx.load(file)(xo) end, "^ONNX node 'bad_reshape' %(Reshape, opset 17%):", "an op error names the ONNX node")

---------------------------------------------------------------------------
-- If: a known condition takes a branch; a tensor condition is a graph break

local function branch(op, out)
  return { graph = { name = out, nodes = { { op = op, name = out .. "_node", inputs = { "x" }, outputs = { out } } },
    inputs = {}, outputs = { { out, "f32", { 2, 3 } } } } }
end
-- condition from the shape: Shape -> Gather -> Equal(2): known at capture
file = write("if_known.onnx", tiny({
  { op = "Shape", name = "shape", inputs = { "x" }, outputs = { "s" } },
  { op = "Gather", name = "rows", inputs = { "s", "zero" }, outputs = { "n" }, attrs = { axis = 0 } },
  { op = "Equal", name = "is_two", inputs = { "n", "two" }, outputs = { "c" } },
  { op = "If", name = "pick", inputs = { "c" }, outputs = { "y" }, attrs = { then_branch = branch("Relu", "t"), else_branch = branch("Neg", "e") } },
}, { { "zero", kiln.tensor(0, { dtype = "i64" }) }, { "two", kiln.tensor(2, { dtype = "i64" }) } },
  { inputs = { { "x", "f32", { "N", 3 } } }, outputs = { { "y", "f32", { "N", 3 } } } }))
local mk = kiln.onnx.load(file)
T.ok(max_diff(mk(xo), xo:relu()) == 0, "If with a known condition: then branch")
local x3 = kiln.randn({ 3, 3 }, { seed = 4 })
T.ok(max_diff(mk(x3), -x3) == 0, "If with a known condition: else branch")
local cmk = kiln.compile(mk)
T.ok(max_diff(cmk(xo), xo:relu()) == 0 and #cmk:breaks() == 0, "compiled If with a known condition: no break")

-- condition from values: ReduceSum > 0
file = write("if_data.onnx", tiny({
  { op = "ReduceSum", name = "total", inputs = { "x" }, outputs = { "s" }, attrs = { keepdims = 0 } },
  { op = "Greater", name = "positive", inputs = { "s", "zero" }, outputs = { "c" } },
  { op = "If", name = "pick_by_value", inputs = { "c" }, outputs = { "y" }, attrs = { then_branch = branch("Relu", "t"), else_branch = branch("Neg", "e") } },
}, { { "zero", kiln.tensor(0.0) } }))
local md = kiln.onnx.load(file)
local xp = kiln.rand({ 2, 3 }, { seed = 5 })
T.ok(max_diff(md(xp), xp:relu()) == 0 and max_diff(md(-xp), xp) == 0, "If on a tensor value, eagerly: both branches")
local cmd = kiln.compile(md)
T.ok(max_diff(cmd(xp), xp:relu()) == 0, "compiled If on a tensor value gives eager's result")
local br = cmd:breaks()
T.is(#br, 1, "compiled If on a tensor value: one graph break")
T.like(br[1] and br[1].where, "if_data%.onnx:node 'pick_by_value' %(If%)", "the break names the ONNX node and op")

-- :to moves the initializers of If branches with the module's own: each
-- branch outputs its own initializer, so the result's dtype and device are
-- the branch tensor's
local function init_branch(init_name, init, out)
  return { graph = { name = out, nodes = { { op = "Identity", name = out .. "_node", inputs = { init_name }, outputs = { out } } },
    initializers = { { init_name, init } }, inputs = {}, outputs = { { out, "f32", { 2, 3 } } } } }
end
local then_init, else_init = kiln.randn({ 2, 3 }, { seed = 21 }), kiln.randn({ 2, 3 }, { seed = 22 })
for _, cond in ipairs({ true, false }) do
  file = write("if_inits.onnx", tiny({
    { op = "Constant", name = "flag", inputs = {}, outputs = { "f" },
      attrs = { value = { tensor = kiln.tensor(cond and 1 or 0, { dtype = "i64" }) } } },
    { op = "Cast", name = "cond", inputs = { "f" }, outputs = { "c" }, attrs = { to = 9 } },
    { op = "If", name = "pick_init", inputs = { "c" }, outputs = { "y" },
      attrs = { then_branch = init_branch("then_w", then_init, "t"), else_branch = init_branch("else_w", else_init, "e") } },
  }, {}, { inputs = {} }))
  local want = cond and then_init or else_init
  local mb = kiln.onnx.load(file)
  T.ok(mb().dtype == "f32" and max_diff(mb(), want) == 0, "If branch initializer as loaded (" .. tostring(cond) .. " branch)")
  mb:to("f64")
  local yb = mb()
  T.ok(yb.dtype == "f64" and max_diff(yb, want) == 0, ":to('f64') converts the " .. tostring(cond) .. " branch's initializer")
  local cmb = kiln.compile(mb)
  yb = cmb()
  T.ok(yb.dtype == "f64" and max_diff(yb, want) == 0 and #cmb:breaks() == 0, "compiled after :to('f64'): the branch's f64 initializer")
  if pcall(kiln.zeros, { 1 }, { device = "cuda" }) then
    mb:to("cuda")
    T.is(mb().device, "cuda", ":to('cuda') moves the branch's initializer")
  end
end

---------------------------------------------------------------------------
-- Constants made from Lua values (Constant, ConstantOfShape, Range) are the
-- same tensors on every call: a compiled model compiles once

local cvals = kiln.randn({ 2, 3 }, { seed = 31 })
file = write("consts.onnx", tiny({
  { op = "Constant", name = "c", inputs = {}, outputs = { "c" }, attrs = { value = { tensor = cvals } } },
  { op = "ConstantOfShape", name = "halves", inputs = { "s" }, outputs = { "k" },
    attrs = { value = { tensor = kiln.tensor({ 0.5 }) } } },
  { op = "Constant", name = "r0", inputs = {}, outputs = { "r0" }, attrs = { value_float = 0.0 } },
  { op = "Constant", name = "r1", inputs = {}, outputs = { "r1" }, attrs = { value_float = 3.0 } },
  { op = "Constant", name = "r2", inputs = {}, outputs = { "r2" }, attrs = { value_float = 1.0 } },
  { op = "Range", name = "steps", inputs = { "r0", "r1", "r2" }, outputs = { "r" } },
  { op = "Add", name = "plus_c", inputs = { "x", "c" }, outputs = { "a" } },
  { op = "Mul", name = "times_k", inputs = { "a", "k" }, outputs = { "b" } },
  { op = "Add", name = "plus_r", inputs = { "b", "r" }, outputs = { "y" } },
}, { { "s", kiln.tensor({ 2, 3 }, { dtype = "i64" }) } }))
local mc = kiln.onnx.load(file)
local cmc = kiln.compile(mc)
local const_ok = true
for call = 1, 3 do
  local xc = kiln.randn({ 2, 3 }, { seed = 40 + call })
  local want = (xc:to("f64") + cvals:to("f64")) * 0.5 + kiln.tensor({ 0, 1, 2 }, { dtype = "f64" })
  const_ok = const_ok and max_diff(cmc(xc), want) < 1e-6 and max_diff(mc(xc), want) < 1e-6
end
local cst = cmc:stats()
T.ok(const_ok, "Constant, ConstantOfShape and Range: compiled and eager match the f64 reference on 3 calls")
T.is(cst.recompiles, 0, "3 calls of a compiled model with Constant, ConstantOfShape and Range: no recompile")
T.is(cst.versions, 1, "... one version")

---------------------------------------------------------------------------
-- Dilated pools with large windows: one kiln pool on the input taken every
-- dil positions (stride a multiple of the dilation), or one spatial dim at a
-- time; compiled, they stay one graph of a few kernels (all window offsets at
-- once passed the fuser's 16-argument limit and ran op by op)

-- the pool by loops over Lua lists, in f64: x {1, C, H, W} or {1, C, L}
local function pool_reference(x, kind, kernel, strides, dil, pads, include_pad)
  local one_d = x:dim() == 3
  local v = x:to("f64"):tolist()[1]
  local nd = one_d and 1 or 2
  local size = one_d and { #v[1] } or { #v[1], #v[1][1] }
  local k = { kernel[1], kernel[2] or 1 }
  local s, d = { strides[1], strides[2] or 1 }, { dil[1], dil[2] or 1 }
  local pb, pe = { pads[1], nd == 2 and pads[2] or 0 }, { pads[nd + 1], nd == 2 and pads[4] or 0 }
  local sz = { size[1], size[2] or 1 }
  local out = {}
  for c = 1, #v do
    local rows = {}
    local n1 = (sz[1] + pb[1] + pe[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    local n2 = (sz[2] + pb[2] + pe[2] - d[2] * (k[2] - 1) - 1) // s[2] + 1
    for o1 = 0, n1 - 1 do
      local row = {}
      for o2 = 0, n2 - 1 do
        local acc, count = kind == "max" and -math.huge or 0, 0
        for a1 = 0, k[1] - 1 do
          for a2 = 0, k[2] - 1 do
            local i1, i2 = o1 * s[1] - pb[1] + a1 * d[1], o2 * s[2] - pb[2] + a2 * d[2]
            if i1 >= 0 and i1 < sz[1] and i2 >= 0 and i2 < sz[2] then
              local e = one_d and v[c][i1 + 1] or v[c][i1 + 1][i2 + 1]
              if kind == "max" then acc = math.max(acc, e) else acc = acc + e end
              count = count + 1
            elseif include_pad then
              count = count + 1
            end
          end
        end
        row[o2 + 1] = kind == "max" and acc or acc / count
      end
      rows[o1 + 1] = one_d and row[1] or row
    end
    out[c] = rows
  end
  return kiln.tensor({ out }, { dtype = "f64" })
end

-- A compiled graph that could not be planned runs op by op: its kernels are
-- then bare per-op ones (no shape kind), none generated.
local function planned(cm)
  local ks = cm:kernels()
  local generated = 0
  for _, k in ipairs(ks) do
    if not k.shape_kind then return false end
    if k.kind == "generated" then generated = generated + 1 end
  end
  return #ks > 0 and generated > 0
end

local pool_cases = {
  { what = "MaxPool 2-D 5x5, stride 2, dilation 2", op = "MaxPool", kind = "max", shape = { 1, 2, 17, 15 },
    kernel = { 5, 5 }, strides = { 2, 2 }, dil = { 2, 2 }, pads = { 2, 1, 2, 3 } },
  { what = "MaxPool 1-D 20, stride 3, dilation 3", op = "MaxPool", kind = "max", shape = { 1, 2, 90 },
    kernel = { 20 }, strides = { 3 }, dil = { 3 }, pads = { 4, 5 } },
  { what = "AveragePool 2-D 5x5, stride 2, dilation 2", op = "AveragePool", kind = "avg", shape = { 1, 2, 17, 15 },
    kernel = { 5, 5 }, strides = { 2, 2 }, dil = { 2, 2 }, pads = { 2, 1, 2, 3 } },
  { what = "AveragePool 2-D 5x5, stride 1, dilation 2 (one dim at a time)", op = "AveragePool", kind = "avg",
    shape = { 1, 2, 13, 12 }, kernel = { 5, 5 }, strides = { 1, 1 }, dil = { 2, 2 }, pads = { 1, 2, 3, 0 } },
  { what = "MaxPool 2-D 5x4, stride 1, dilation 2 (one dim at a time)", op = "MaxPool", kind = "max",
    shape = { 1, 2, 13, 12 }, kernel = { 5, 4 }, strides = { 1, 1 }, dil = { 2, 2 }, pads = { 0, 1, 2, 2 } },
}
for n, case in ipairs(pool_cases) do
  local out_shape = { case.shape[1], case.shape[2] }
  for d = 1, #case.kernel do out_shape[d + 2] = "O" .. d end
  file = write("pool" .. n .. ".onnx", tiny({
    { op = case.op, name = "pool", inputs = { "x" }, outputs = { "y" },
      attrs = { kernel_shape = case.kernel, strides = case.strides, dilations = case.dil, pads = case.pads } },
  }, {}, { opset = 19, inputs = { { "x", "f32", case.shape } }, outputs = { { "y", "f32", out_shape } } }))
  local mp = kiln.onnx.load(file)
  local xpool = kiln.randn(case.shape, { seed = 60 + n })
  local want = pool_reference(xpool, case.kind, case.kernel, case.strides, case.dil, case.pads, false)
  T.ok(max_diff(mp(xpool), want) < 1e-5, case.what .. ": eager matches a loop reference in f64")
  local cmp = kiln.compile(mp)
  T.ok(max_diff(cmp(xpool), want) < 1e-5, case.what .. ": compiled matches it")
  local offsets = 1
  for _, kd in ipairs(case.kernel) do offsets = offsets * kd end
  local st = cmp:stats()
  T.ok(st.graphs == 1 and planned(cmp) and st.kernels < offsets,
    string.format("%s: one planned graph of %d kernels, fewer than its %d window offsets (not op by op)", case.what,
      st.kernels, offsets))
end

-- MaxPool's Indices: the flat index of each window's first maximum (offsets
-- in row-major order), by loops; integer-valued inputs so windows tie
local function argmax_reference(x, kernel, strides, pads, column_major)
  local v = x:to("f64"):tolist()
  local H, W = #v[1][1], #v[1][1][1]
  local vals, idxs = {}, {}
  for n = 1, #v do
    vals[n], idxs[n] = {}, {}
    for c = 1, #v[n] do
      local vr, ir = {}, {}
      local n1 = (H + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
      local n2 = (W + pads[2] + pads[4] - kernel[2]) // strides[2] + 1
      for o1 = 0, n1 - 1 do
        vr[o1 + 1], ir[o1 + 1] = {}, {}
        for o2 = 0, n2 - 1 do
          local best, at = -math.huge, nil
          for a1 = 0, kernel[1] - 1 do
            for a2 = 0, kernel[2] - 1 do
              local i1, i2 = o1 * strides[1] - pads[1] + a1, o2 * strides[2] - pads[2] + a2
              if i1 >= 0 and i1 < H and i2 >= 0 and i2 < W and v[n][c][i1 + 1][i2 + 1] > best then
                best = v[n][c][i1 + 1][i2 + 1]
                at = ((n - 1) * #v[n] + (c - 1)) * H * W + (column_major and i2 * H + i1 or i1 * W + i2)
              end
            end
          end
          vr[o1 + 1][o2 + 1], ir[o1 + 1][o2 + 1] = best, at
        end
      end
      vals[n][c], idxs[n][c] = vr, ir
    end
  end
  return kiln.tensor(vals, { dtype = "f64" }), kiln.tensor(idxs, { dtype = "i64" })
end
local argmax_cases = {
  { kernel = { 5, 5 }, strides = { 2, 1 }, pads = { 2, 2, 2, 1 }, order = 0 },
  { kernel = { 5, 5 }, strides = { 1, 2 }, pads = { 1, 0, 2, 2 }, order = 1 },
  { kernel = { 3, 1 }, strides = { 1, 1 }, pads = { 1, 0, 1, 0 }, order = 0 },
}
for n, case in ipairs(argmax_cases) do
  local what = string.format("MaxPool %dx%d with Indices (storage_order %d)", case.kernel[1], case.kernel[2], case.order)
  file = write("argmax" .. n .. ".onnx", tiny({
    { op = "MaxPool", name = "pool", inputs = { "x" }, outputs = { "y", "i" },
      attrs = { kernel_shape = case.kernel, strides = case.strides, pads = case.pads, storage_order = case.order } },
  }, {}, { inputs = { { "x", "f32", { 2, 2, 9, 8 } } },
    outputs = { { "y", "f32", { 2, 2, "H", "W" } }, { "i", "i64", { 2, 2, "H", "W" } } } }))
  local ma = kiln.onnx.load(file)
  -- few distinct values: ties inside windows are common
  local xa = (kiln.rand({ 2, 2, 9, 8 }, { seed = 80 + n }) * 4):floor()
  local want_v, want_i = argmax_reference(xa, case.kernel, case.strides, case.pads, case.order == 1)
  local ya, ia = ma(xa)
  T.ok(max_diff(ya, want_v) == 0 and max_diff(ia, want_i) == 0, what .. ": eager values and indices match loops")
  local cma = kiln.compile(ma)
  local yc, ic = cma(xa)
  T.ok(max_diff(yc, want_v) == 0 and max_diff(ic, want_i) == 0, what .. ": compiled matches them")
  T.ok(cma:stats().graphs == 1 and planned(cma), what .. ": one planned graph (not op by op)")
end

---------------------------------------------------------------------------
-- TensorProto files

W.write(path("t.pb"), W.tensor("named", kiln.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "i64" })))
local t, tname = kiln.onnx.read_tensor(path("t.pb"))
T.is(tname, "named", "read_tensor: the tensor's name")
T.is(t.dtype .. " " .. table.concat(t:shape(), ","), "i64 2,2", "read_tensor: dtype and shape")
T.is(t:sum():item(), 10, "read_tensor: values")
W.write(path("bad.pb"), "\255\255\255")
T.raises(function() kiln.onnx.read_tensor(path("bad.pb")) end, "bad%.pb: not a serialized ONNX TensorProto", "a corrupt TensorProto file")

os.execute("rm -rf '" .. dir .. "'")
T.done()
