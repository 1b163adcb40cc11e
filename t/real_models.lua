-- real_models.lua: the real-model suite's families at a size CI holds. The
-- files in t/data/real_models/ were exported on the GPU machine by
-- bench/real_models.py (PyTorch 2.11, dynamo exporter, opset 18, seeded
-- random weights, no parameter left zero) with PyTorch's outputs: f32, and
-- bf16 from the model after .to(torch.bfloat16). Each model runs here in f32
-- and bf16, eager and compiled, against those outputs (relative error 1e-4 in
-- f32, 0.05 in bf16: max |kiln - torch| / max |torch|); a bf16 model's graph
-- holds no f32 value (m:to converts the graph's numbers, constants and Cast
-- targets, onnx/lua/convert.lua). Then what the tiny files do not hold (the
-- dynamo exporter folds them): Cast targets, ConstantOfShape, Constant
-- tensors, a mask fill beyond bf16's range, in a model written here; and the
-- errors of bad input.
local T = dofile("t/lib/tap.lua")
if not kiln.onnx.available then T.skip_all("kiln was built without ONNX import (protobuf-c missing)") end
local U = dofile("bench/bench_util.lua")
local DIR = "t/data/real_models/"
local MODELS = { "resnet_tiny", "mobilenet_tiny", "vit_tiny", "bert_tiny", "gpt2_tiny" }
local TOL = { f32 = 1e-4, bf16 = 0.05 }
local KILN = os.getenv("KILN") or "build/kiln"
kiln.config.allow_tf32 = false

-- The float dtypes of every node of cm's graphs: {dtype = count}.
local function float_dtypes(cm)
  local seen = {}
  for _, g in ipairs(cm:graphs()) do
    for _, n in ipairs(g.nodes or g) do
      if n.dtype == "f32" or n.dtype == "bf16" or n.dtype == "f16" or n.dtype == "f64" then
        seen[n.dtype] = (seen[n.dtype] or 0) + 1
      end
    end
  end
  return seen
end

local function inputs_of(m, io_t, dtype)
  local xs = {}
  for k, vi in ipairs(m._inputs) do
    local x = assert(io_t[vi.name], "input " .. vi.name)
    if x.dtype == "f32" then x = x:to(dtype) end
    xs[k] = x
  end
  return xs
end

-- The check itself fails where it must: a NaN, and a reference of zeros.
do
  local ref = kiln.tensor({ 1, 2, 3 })
  local _, rel = U.errors(kiln.tensor({ 1, 0 / 0, 3 }), ref)
  T.ok(not (rel <= 1), "the comparison: a NaN in the output fails it")
  _, rel = U.errors(kiln.zeros({ 3 }), kiln.zeros({ 3 }))
  T.ok(not (rel <= 1), "the comparison: a reference whose largest value is 0 fails it")
end

-- every model on the CPU, and on the GPU where there is one
local DEVICES = { "cpu", kiln.cuda_available() and "cuda" or nil }
for _, name in ipairs(MODELS) do
  local io_t = kiln.load_safetensors(DIR .. name .. ".io.safetensors")
  for _, case in ipairs { { "cpu", "f32" }, { "cpu", "bf16" }, { DEVICES[2], "f32" }, { DEVICES[2], "bf16" } } do
    local dev, dtype = case[1], case[2]
    if not dev then break end
    local ref = io_t["output." .. dtype]
    local _, scale_rel = U.errors(ref, ref)
    T.is(scale_rel, 0, name .. " " .. dtype .. ": PyTorch's output is not all zero")
    local m = kiln.onnx.load(DIR .. name .. ".onnx"):to(dtype):to(dev)
    local xs = inputs_of(m, io_t, dtype)
    for k, x in ipairs(xs) do xs[k] = x:to(dev) end
    local file = name
    local name = dev ~= "cpu" and (file .. " (" .. dev .. ")") or file
    local y = m(table.unpack(xs))
    T.is(y.dtype, dtype, name .. " " .. dtype .. " eager: the output is " .. dtype)
    local _, rel = U.errors(y, ref)
    T.ok(rel <= TOL[dtype], string.format("%s %s eager: rel err %.3g <= %g against PyTorch", name, dtype, rel, TOL[dtype]))
    local cm = kiln.compile(m)
    local yc = cm(table.unpack(xs))
    _, rel = U.errors(yc, ref)
    T.ok(rel <= TOL[dtype], string.format("%s %s compiled: rel err %.3g <= %g against PyTorch", name, dtype, rel, TOL[dtype]))
    T.is(#cm:breaks(), 0, name .. " " .. dtype .. ": no graph break")
    -- later calls replay the graph without running the model's Lua (its
    -- index constants are cached in the module, where the replay finds
    -- them), and give the traced answer
    cm(table.unpack(xs))
    local yr = cm(table.unpack(xs))
    local st = cm:stats()
    T.ok(st.replayable == "yes" and st.direct_replays >= 1,
      string.format("%s %s: the third call replays (replayable: %s, direct replays %d)", name, dtype,
        tostring(st.replayable), st.direct_replays))
    _, rel = U.errors(yr, yc)
    T.ok(rel == 0, string.format("%s %s: the replayed answer is the traced one (rel err %.3g)", name, dtype, rel))
    local seen = float_dtypes(cm)
    if dtype == "bf16" then
      T.is(seen.f32, nil, name .. " bf16: no f32 value in the compiled graph")
      T.ok((seen.bf16 or 0) > 0, name .. " bf16: the graph computes in bf16")
    else
      T.is(seen.bf16, nil, name .. " f32: no bf16 value in the compiled graph")
    end
  end
end

-- On the GPU, reduce-overhead reads the token embedding inside the kernel
-- that adds it (a gathered load of the table through the ids): no
-- index_select of its own, and the answer of the default mode's plan,
-- which runs it alone.
if DEVICES[2] then
  local gathered_kernel = dofile("t/lib/gathered_kernel.lua")
  for _, file in ipairs({ "bert_tiny", "gpt2_tiny" }) do
    local io_t = kiln.load_safetensors(DIR .. file .. ".io.safetensors")
    for _, dtype in ipairs({ "f32", "bf16" }) do
      local m = kiln.onnx.load(DIR .. file .. ".onnx"):to(dtype):to("cuda")
      local xs = inputs_of(m, io_t, dtype)
      for k, x in ipairs(xs) do xs[k] = x:to("cuda") end
      local ro = kiln.compile(m, { mode = "reduce-overhead" })
      local yro = ro(table.unpack(xs))
      ro(table.unpack(xs))
      local yrep = ro(table.unpack(xs))
      local yd = kiln.compile(m, { mode = "default" })(table.unpack(xs))
      local _, rel = U.errors(yro, yd)
      local _, rel_rep = U.errors(yrep, yd)
      local _, rel_ref = U.errors(yrep, io_t["output." .. dtype])
      T.ok(rel <= 1e-6 and rel_rep <= 1e-6 and rel_ref <= TOL[dtype],
        string.format("%s %s (cuda) reduce-overhead, embedding gathered: rel err %.3g / %.3g (replayed) against "
          .. "the default plan, %.3g against PyTorch", file, dtype, rel, rel_rep, rel_ref))
      local fused, alone = gathered_kernel(ro)
      T.ok(fused and not alone, file .. " " .. dtype .. " (cuda): the index_select runs inside a generated kernel")
    end
  end
end

-- keep_io_types: f32 in and out, bf16 inside; without it an f32 input is an
-- error that names the option.
do
  local io_t = kiln.load_safetensors(DIR .. "vit_tiny.io.safetensors")
  local m = kiln.onnx.load(DIR .. "vit_tiny.onnx"):to("bf16", { keep_io_types = true })
  local cm = kiln.compile(m)
  local y = cm(io_t.x)
  T.is(y.dtype, "f32", "keep_io_types: the output keeps the file's f32")
  local _, rel = U.errors(y, io_t["output.bf16"])
  T.ok(rel <= TOL.bf16, string.format("keep_io_types: rel err %.3g against PyTorch's bf16 model", rel))
  local seen = float_dtypes(cm)
  T.ok((seen.bf16 or 0) > 10 and (seen.f32 or 0) <= 2,
    string.format("keep_io_types: bf16 inside, f32 only at the edges (%d bf16, %d f32 values)", seen.bf16 or 0, seen.f32 or 0))
  local plain = kiln.onnx.load(DIR .. "vit_tiny.onnx"):to("bf16")
  T.raises(function() plain(io_t.x) end,
    "input 'x' must be bf16, got f32: the model was converted with :to%(\"bf16\"%); to pass f32, convert it with "
      .. ":to%(\"bf16\", {keep_io_types = true}%)", "an f32 input to a bf16 model: the error names the option")
  T.raises(function() plain:to("bf16", { keep_io_type = true }) end, "unknown option 'keep_io_type' %(known: keep_io_types%)",
    "a misspelt option of :to is an error")
  -- back to f32: the graph's numbers are f32 again (the weights went through bf16)
  local back = kiln.onnx.load(DIR .. "vit_tiny.onnx"):to("bf16"):to("f32")
  local cb = kiln.compile(back)
  local yb = cb(io_t.x)
  T.is(float_dtypes(cb).bf16, nil, ":to(\"bf16\"):to(\"f32\"): no bf16 value left in the graph")
  _, rel = U.errors(yb, io_t["output.bf16"])
  T.ok(rel <= TOL.bf16, string.format(":to(\"bf16\"):to(\"f32\"): the answer of bf16 weights (rel err %.3g)", rel))
end

-- KILN_LOGS=onnx lists what the conversion changed.
do
  local p = io.popen("KILN_LOGS=onnx " .. KILN .. " -e 'kiln.onnx.load(\"" .. DIR .. "bert_tiny.onnx\"):to(\"bf16\")' 2>&1")
  local out = p:read("a")
  p:close()
  T.like(out, "onnx: " .. DIR:gsub("%p", "%%%0") .. "bert_tiny%.onnx converted to bf16: 43 float initializers, 6 numbers of "
    .. "the graph %(scalar initializers and Constants%), 0 Constant tensors, 0 ConstantOfShape values, 0 Cast targets\n",
    "KILN_LOGS=onnx: one line with what was converted")
  T.like(out, "onnx:   initializer 'val_100': values beyond bf16's range clamped to its largest finite value\n",
    "KILN_LOGS=onnx: the mask fill clamped to bf16's range is named")
end

-- What the exporter folded away in the files above, in a model written here.
MAKE_ONNX_LIB = true
local W = dofile("samples/onnx/make_onnx.lua")
local tmp = os.tmpname()
local function model(nodes, inits)
  W.write(tmp, W.model {
    opset = 18,
    inputs = { { "x", "f32", { 2, 80 } } },
    outputs = { { "y", "f32", { 2, 80 } } },
    initializers = inits,
    nodes = nodes,
  })
  return tmp
end
do
  local c = kiln.randn({ 80 }, { seed = 11 })
  local ids = kiln.arange(80):to("i64")
  local path = model({
    { op = "Constant", name = "c", inputs = {}, outputs = { "c" }, attrs = { value = { tensor = c } } },
    { op = "Mul", name = "a", inputs = { "x", "c" }, outputs = { "a" } },
    { op = "Shape", name = "s", inputs = { "x" }, outputs = { "s" } },
    { op = "ConstantOfShape", name = "z", inputs = { "s" }, outputs = { "z" } },
    { op = "Add", name = "b", inputs = { "a", "z" }, outputs = { "b" } },
    { op = "Constant", name = "ids", inputs = {}, outputs = { "ids" }, attrs = { value = { tensor = ids } } },
    { op = "Cast", name = "cf", inputs = { "ids" }, outputs = { "cf" }, attrs = { to = 1 } },
    { op = "Mul", name = "d", inputs = { "b", "cf" }, outputs = { "d" } },
    { op = "Constant", name = "h", inputs = {}, outputs = { "h" }, attrs = { value_float = 0.03125 } },
    { op = "Mul", name = "e", inputs = { "d", "h" }, outputs = { "e" } },
    { op = "Less", name = "neg", inputs = { "e", "zero" }, outputs = { "neg" } },
    { op = "Where", name = "f", inputs = { "neg", "fill", "e" }, outputs = { "f" } },
    { op = "Softmax", name = "p", inputs = { "f" }, outputs = { "p" }, attrs = { axis = -1 } },
    -- 0 * the fill: 0 where the fill is finite, NaN where it became -inf
    { op = "Where", name = "mv", inputs = { "neg", "fill", "zero" }, outputs = { "mv" } },
    { op = "Mul", name = "mz", inputs = { "mv", "zero" }, outputs = { "mz" } },
    { op = "Add", name = "y", inputs = { "p", "mz" }, outputs = { "y" } },
  }, { { "fill", kiln.tensor(-3.4028234663852886e38) }, { "zero", kiln.tensor(0.0) } })
  local x = kiln.randn({ 2, 80 }, { seed = 12 })
  -- the reference in f64, written with kiln's ops
  local x64, c64 = x:to("f64"), c:to("f64")
  local e64 = x64 * c64 * kiln.arange(80):to("f64") * 0.03125
  local ref = e64:masked_fill(e64:lt(0), -3.4028234663852886e38):softmax(-1)
  for _, dtype in ipairs { "f32", "bf16" } do
    local m = kiln.onnx.load(path):to(dtype)
    local cm = kiln.compile(m)
    local y = cm(x:to(dtype))
    local _, rel = U.errors(y, ref)
    T.ok(rel <= TOL[dtype], string.format("Constant, ConstantOfShape, Cast, mask fill in %s: rel err %.3g against f64", dtype, rel))
    local seen = float_dtypes(cm)
    T.ok(seen[dtype] and (dtype == "f32" or seen.f32 == nil),
      dtype .. ": every float value of the graph is " .. dtype .. " (Cast targets, ConstantOfShape, constants follow)")
  end

  -- bad input: a Cast to STRING, an integer-only op fed floats
  path = model({
    { op = "Cast", name = "to_text", inputs = { "x" }, outputs = { "t" }, attrs = { to = 8 } },
    { op = "Identity", name = "y", inputs = { "x" }, outputs = { "y" } },
  })
  local m = kiln.onnx.load(path)
  T.raises(function() m:to("bf16") end, "node 'to_text' %(Cast%): a cast to STRING cannot convert to bf16",
    "a Cast to STRING: the conversion's error names the node and the type")
  path = model({
    { op = "Cast", name = "f", inputs = { "x" }, outputs = { "xf" }, attrs = { to = 1 } },
    { op = "BitShift", name = "shift", inputs = { "xf", "xf" }, outputs = { "s" }, attrs = { direction = "LEFT" } },
    { op = "Identity", name = "y", inputs = { "x" }, outputs = { "y" } },
  })
  m = kiln.onnx.load(path)
  T.raises(function() m:to("bf16") end, "node 'shift' %(BitShift%) takes integers, and its input 'xf' is bf16 after conversion",
    "an integer op fed floats: the error names the node, the input and the type")
end
os.remove(tmp)
T.done()
