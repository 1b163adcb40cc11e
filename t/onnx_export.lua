-- onnx_export.lua: kiln.onnx.save. The five Lua samples go kiln -> ONNX ->
-- kiln: the re-imported model gives the Lua model's outputs on fresh random
-- inputs (f32 and bf16, eager and compiled), its parameters keep their kiln
-- names, the graph's inputs and outputs carry dtypes and shapes, and
-- compiling it gives the Lua model's kernels (kind and ops). Then every op
-- with an ONNX mapping round-trips against the Lua function it came from,
-- and the bad inputs fail with messages that name what was wrong, leaving
-- no file behind.
local T = dofile("t/lib/tap.lua")
-- kernel lists are the CPU backend's
T.cpu_only("t/onnx_export.lua")
if not kiln.onnx.available then T.skip_all("kiln was built without ONNX support (protobuf-c missing)") end
local LINE = T.tags()

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))
local function path(name) return dir .. "/" .. name end

local function is_tensor(v) return type(v) == "userdata" and getmetatable(v).__name == "kiln.Tensor" end

-- The largest |a - b| over |b| + 1 (f64); NaN where either has one (never passes).
local function rel_diff(a, b)
  local a64, b64 = a:to("f64"), b:to("f64")
  local function count(m) return m:to("i64"):sum():item() end
  if count(a64:ne(a64)) + count(b64:ne(b64)) > 0 then return 0 / 0 end
  local inf = a64:abs():eq(math.huge)
  if count(inf) > 0 then
    -- infinities must sit at the same places with the same signs
    if count(kiln.where(inf, a64:ne(b64), false)) > 0 then return 0 / 0 end
    a64 = kiln.where(inf, 0.0, a64)
    b64 = kiln.where(inf, 0.0, b64)
  end
  return ((a64 - b64):abs() / (b64:abs() + 1)):amax():item()
end

-- Compare every output (lists of tensors); a NaN difference fails.
local function all_close(got, want, tol)
  if #got ~= #want then return false, string.format("%d outputs, expected %d", #got, #want) end
  for k = 1, #want do
    if not is_tensor(got[k]) then return false, "output " .. k .. " is not a tensor" end
    if table.concat(got[k]:shape(), ",") ~= table.concat(want[k]:shape(), ",") or got[k].dtype ~= want[k].dtype then
      return false, string.format("output %d: %s {%s}, expected %s {%s}", k, got[k].dtype, table.concat(got[k]:shape(), ","),
        want[k].dtype, table.concat(want[k]:shape(), ","))
    end
    local d = rel_diff(got[k], want[k])
    if not (d <= tol) then return false, string.format("output %d differs by %s (tol %g)", k, tostring(d), tol) end
  end
  return true
end

local function outputs(...) return table.pack(...) end

-- The kernels of a compiled callable as "kind:op,op" (what cm:kernels() reports).
local function kernel_list(cm)
  local out = {}
  for _, k in ipairs(cm:kernels()) do out[#out + 1] = k.shape_kind .. ":" .. table.concat(k.ops, ",") end
  return table.concat(out, " | ")
end

-- Fresh inputs like xs: other random values, the same shapes and dtypes.
local function fresh(xs, seed)
  local out = {}
  for k, x in ipairs(xs) do
    if x.dtype == "f32" or x.dtype == "bf16" or x.dtype == "f16" or x.dtype == "f64" then
      out[k] = kiln.randn(x:shape(), { dtype = x.dtype, seed = seed + k })
    else
      out[k] = x
    end
  end
  return out
end

---------------------------------------------------------------------------
-- The five samples

local SAMPLES = { "simple_linear", "large_linear", "transformer_block", "convnet", "gcn" }
for _, name in ipairs(SAMPLES) do
  for _, dtype in ipairs({ "f32", "bf16" }) do
    local s = loadfile("samples/" .. name .. ".lua")({ small = true })
    local model = dtype == "f32" and s.model or s.model:to(dtype)
    local xs = s.inputs({ small = true, dtype = dtype })
    local file = path(name .. "_" .. dtype .. ".onnx")
    local what = name .. " " .. dtype
    local ok, err = pcall(kiln.onnx.save, model, file, xs)
    T.ok(ok, what .. ": saved")
    if not ok then T.diag(err) end
    if ok then
      local back = kiln.onnx.load(file)
      -- parameters and buffers under their kiln names
      local want, got = {}, {}
      for n in model:named_parameters() do want[#want + 1] = n end
      -- (BatchNorm's num_batches_tracked is not read in eval: not in the graph)
      for n in model:named_buffers() do if not n:find("num_batches_tracked", 1, true) then want[#want + 1] = n end end
      for n in back:named_parameters() do got[#got + 1] = n end
      table.sort(want)
      table.sort(got)
      T.is(table.concat(got, ","), table.concat(want, ","), what .. ": the initializers are the parameters and buffers the model reads, by name")
      local same_values = true
      local params = {}
      for n, t in back:named_parameters() do params[n] = t end
      for n, t in model:named_parameters() do if rel_diff(params[n], t) ~= 0 then same_values = false end end
      T.ok(same_values, what .. ": the initializers hold the parameters' values")
      -- graph inputs and outputs with dtypes and shapes
      local g = kiln.onnx.read(file).graph
      local x = xs[1]
      T.is(string.format("%s %s {%s}", g.inputs[1].name, g.inputs[1].dtype, table.concat(g.inputs[1].shape, ",")),
        string.format("x %s {%s}", x.dtype, table.concat(x:shape(), ",")), what .. ": the graph input's name, dtype and shape")
      local y = model(table.unpack(xs))
      T.is(string.format("%s {%s}", g.outputs[1].dtype, table.concat(g.outputs[1].shape, ",")),
        string.format("%s {%s}", y.dtype, table.concat(y:shape(), ",")), what .. ": the graph output's dtype and shape")
      -- outputs on fresh inputs: eager against eager, compiled against compiled
      local fx = fresh(xs, 500)
      local okv, why = all_close(outputs(back(table.unpack(fx))), outputs(model(table.unpack(fx))), 0)
      T.ok(okv, what .. ": eager, the re-imported model gives the Lua model's outputs")
      if not okv then T.diag(why) end
      local cm_lua, cm_onnx = kiln.compile(model), kiln.compile(back)
      local yl = outputs(cm_lua(table.unpack(fx)))
      okv, why = all_close(outputs(cm_onnx(table.unpack(fx))), yl, 0)
      T.ok(okv, what .. ": compiled, the re-imported model gives the compiled Lua model's outputs")
      if not okv then T.diag(why) end
      okv, why = all_close(yl, outputs(model(table.unpack(fx))), dtype == "f32" and 1e-4 or 0.05)
      T.ok(okv, what .. ": compiled against eager")
      if not okv then T.diag(why) end
      T.is(kernel_list(cm_onnx), kernel_list(cm_lua), what .. ": compiling the re-imported model gives the Lua model's kernels")
      T.is(#cm_onnx:breaks(), 0, what .. ": the re-imported model compiles without a graph break")
    end
  end
end

-- a compiled callable saves what it wraps
do
  local s = loadfile("samples/simple_linear.lua")({ small = true })
  local cm = kiln.compile(s.model)
  local xs = s.inputs({ small = true })
  kiln.onnx.save(cm, path("cm.onnx"), xs)
  local back = kiln.onnx.load(path("cm.onnx"))
  local fx = fresh(xs, 900)
  T.is(rel_diff(back(fx[1]), s.model(fx[1])), 0.0, "a compiled callable: saved, its model's outputs")
  local g = kiln.onnx.read(path("cm.onnx"))
  local ops = {}
  for _, n in ipairs(g.graph.nodes) do ops[#ops + 1] = n.op end
  T.is(table.concat(ops, ","), "Transpose,MatMul,Add,Identity", "Linear is Transpose, MatMul, Add (and the output's Identity)")
  T.is(g.opset, 18, "opset 18 without Gelu")
  T.is(g.producer, "kiln", "producer_name kiln")
end

---------------------------------------------------------------------------
-- Every mapped op against the Lua function it came from (fresh inputs;
-- f32 and integer values exact or to rounding)

local w = kiln.randn({ 4, 3, 3, 3 }, { seed = 31 })
local b = kiln.randn({ 4 }, { seed = 32 })
local wg = kiln.randn({ 4, 1, 3, 3 }, { seed = 33 })
local gamma, beta = kiln.randn({ 6 }, { seed = 34 }), kiln.randn({ 6 }, { seed = 35 })
local rm, rv = kiln.randn({ 3 }, { seed = 36 }), kiln.rand({ 3 }, { seed = 37 }) + 0.5
local idx = kiln.tensor({ 3, 1, 2, 3 }, { dtype = "i64" })
local gidx = kiln.randint(1, 7, { 2, 3, 6, 6 }, { seed = 38 })

local CASES = {
  { "unary", function(x)
    return x:neg():relu() + x:gelu() + x:silu() + x:tanh() + x:sigmoid() + (x * 0.25):exp() + (x:abs() + 1):log()
      + x:abs():sqrt() + (x:abs() + 1):rsqrt() + x:erf() + (x * 3):floor() + (x * 3):ceil() + (x * 3):round()
      + x:sin() + x:cos()
  end, { { 2, 3, 6, 6 } } },
  { "arith", function(x, y)
    return (x + y) * 2 - x / (y:abs() + 1) + (x:abs() + 0.5):pow(1.5) + x:maximum(y) - x:minimum(y) + 2 / (y:abs() + 1) - 1
  end, { { 2, 3, 6, 6 }, { 2, 3, 6, 6 } } },
  { "compare", function(x, y)
    local m = x:gt(y)
    return kiln.where(m:logical_not(), x, y) + x:lt(y):cast("f32") + x:ge(0):cast("f32") + x:le(y):cast("f32")
      + x:eq(x):cast("f32") + x:ne(y):cast("f32") + x:masked_fill(m, 2.5)
  end, { { 2, 3, 6, 6 }, { 2, 3, 6, 6 } } },
  { "reduce", function(x)
    local v, i = x:max(2)
    return x:sum(2), x:mean({ 2, 3 }, true), x:amax(-1), x:amin(1), x:var(2), x:var(3, { correction = 0 }), v, i, x:sum()
  end, { { 2, 3, 6, 6 } } },
  { "normalize", function(x)
    return x:softmax(-1), x:log_softmax(2), kiln.layer_norm(x, { 6 }, gamma, beta, 1e-5),
      kiln.layer_norm(x, { 6, 6 }), kiln.batch_norm(x, rm, rv, nil, nil, 1e-3), kiln.batch_norm(x, rm, rv, rv, rm, 1e-5)
  end, { { 2, 3, 6, 6 } } },
  { "conv_pool", function(x)
    local c = kiln.conv2d(x, w, b, { stride = 2, padding = 1 })
    local g = kiln.conv2d(x:slice(2, 1, 1):expand({ 2, 4, 6, 6 }):contiguous(), wg, nil, { padding = 2, dilation = 2, groups = 4 })
    return c, g, kiln.max_pool2d(x, 2), kiln.max_pool2d(x, 3, { stride = 1, padding = 1 }),
      kiln.avg_pool2d(x, 3, { stride = 1, padding = 1, count_include_pad = false }), kiln.avg_pool2d(x, 2),
      x:adaptive_avg_pool2d({ 2, 3 }), x:adaptive_avg_pool2d(1)
  end, { { 2, 3, 6, 6 } } },
  { "layout", function(x, y)
    local a, c = x:split(2, 4)
    return kiln.cat({ x, y }, 2), x:reshape({ 2, 18, 6 }), x:permute({ 4, 1, 3, 2 }), x:transpose(1, 2):contiguous(),
      x:slice(4, 1, 6, 2), x:slice(2, 1, 1):expand({ 2, 5, 6, 6 }), x:flatten(2), x:unsqueeze(1):squeeze(1), a, c,
      x:slice(1, 1, 1):slice(2, 1, 1):slice(3, 1, 1):slice(4, 1, 1):reshape({})
  end, { { 2, 3, 6, 6 }, { 2, 3, 6, 6 } } },
  { "index", function(x, y)
    return x:index_select(4, idx), x:gather(4, gidx), x:index_add(2, kiln.tensor({ 3, 1, 3 }, { dtype = "i64" }), y:slice(2, 1, 3)),
      x:index_add(1, kiln.tensor({ 2, 2 }, { dtype = "i32" }), y), x:tril(), x:triu(1), x:tril(-1)
  end, { { 2, 3, 6, 6 }, { 2, 3, 6, 6 } } },
  { "message_passing", function(h, e)
    local src = kiln.tensor({ 1, 2, 3, 4, 5, 6, 2, 4 }, { dtype = "i64" })
    local dst = kiln.tensor({ 2, 3, 1, 1, 6, 5, 4, 2 }, { dtype = "i64" })
    return kiln.gather_scatter(h, src, dst, { weight = e }), kiln.gather_scatter(h, src, dst, { rows = 7 }),
      kiln.gather_scatter(h, src, dst, { weight = e, base = h * 2 })
  end, { { 6, 5 }, { 8 } } },
  { "create", function(x)
    return x + kiln.full({ 6 }, 0.5) + kiln.arange(6) + kiln.arange(2, 8, 1):to("f32"),
      kiln.ones({ 6, 6 }, { dtype = "bool" }):tril():logical_not():cast("f32") * x
  end, { { 2, 3, 6, 6 } } },
  { "attention", function(q, k, v, m)
    return kiln.scaled_dot_product_attention(q, k, v, { causal = true }),
      kiln.scaled_dot_product_attention(q, k, v, { mask = m:gt(-1) }),
      kiln.scaled_dot_product_attention(q, k, v, { mask = m, scale = 0.3 })
  end, { { 2, 2, 5, 4 }, { 2, 2, 5, 4 }, { 2, 2, 5, 4 }, { 5, 5 } } },
  { "integers", function(x)
    local n = x:to("i64")
    local i = x:to("i32")
    return (n * 2 + 1):sum(2), i:maximum(0) - 3, (n:gt(0)):to("i32")
  end, { { 2, 3, 6, 6 } } },
}

for k, case in ipairs(CASES) do
  local name, fn, shapes = case[1], case[2], case[3]
  local xs, fx = {}, {}
  for j, s in ipairs(shapes) do
    xs[j] = kiln.randn(s, { seed = 100 * k + j }) * 2
    fx[j] = kiln.randn(s, { seed = 100 * k + 50 + j }) * 2
  end
  local file = path("op_" .. name .. ".onnx")
  local ok, err = pcall(kiln.onnx.save, fn, file, xs)
  T.ok(ok, "ops " .. name .. ": saved")
  if not ok then T.diag(err) else
    local back = kiln.onnx.load(file)
    local okv, why = all_close(outputs(back(table.unpack(fx))), outputs(fn(table.unpack(fx))), 1e-6)
    T.ok(okv, "ops " .. name .. ": the re-imported model gives the function's outputs on fresh inputs")
    if not okv then T.diag(why) end
    local cm = kiln.compile(back)
    okv, why = all_close(outputs(cm(table.unpack(fx))), outputs(fn(table.unpack(fx))), 1e-4)
    T.ok(okv, "ops " .. name .. ": compiled, the same")
    if not okv then T.diag(why) end
  end
end

-- numbers among the inputs are baked in; the tensors keep their parameters' names
do
  local f = function(scale, x, y) return x * scale + y end
  local x, y = kiln.randn({ 2, 3 }, { seed = 71 }), kiln.randn({ 2, 3 }, { seed = 72 })
  kiln.onnx.save(f, path("numbers.onnx"), { 3, x, y })
  local g = kiln.onnx.read(path("numbers.onnx")).graph
  T.is(#g.inputs .. " " .. g.inputs[1].name .. " " .. g.inputs[2].name, "2 x y", "a number input is baked in; the tensors are x and y")
  T.is(rel_diff(kiln.onnx.load(path("numbers.onnx"))(y, x), f(3, y, x)), 0.0, "  and the model computes x * 3 + y")
end

-- gelu needs opset 20; opset 17 writes it out, and the reductions' axes as attributes
do
  kiln.onnx.save(function(x) return x:gelu() end, path("gelu.onnx"), { kiln.randn({ 3 }) })
  T.is(kiln.onnx.read(path("gelu.onnx")).opset, 20, "a graph with gelu is written at opset 20 (ONNX's Gelu)")
  local f17 = function(x) return x:gelu():mean(2) + x:amax(2) + x:var(2) + x:sum(2), x:max(2) end
  local xs = { kiln.randn({ 3, 4 }, { seed = 61 }) }
  kiln.onnx.save(f17, path("opset17.onnx"), xs, { opset = 17 })
  local m17 = kiln.onnx.read(path("opset17.onnx"))
  local ops = {}
  for _, n in ipairs(m17.graph.nodes) do ops[n.op] = true end
  T.ok(m17.opset == 17 and m17.ir_version == 8 and not ops.Gelu and ops.Erf, "opset 17: gelu as its erf formula, IR version 8")
  local fx = { kiln.randn({ 3, 4 }, { seed = 62 }) }
  local okv, why = all_close(outputs(kiln.onnx.load(path("opset17.onnx"))(fx[1])), outputs(f17(fx[1])), 1e-6)
  T.ok(okv, "opset 17: the re-imported model gives the function's outputs")
  if not okv then T.diag(why) end
  T.raises(function() kiln.onnx.save(f17, path("o.onnx"), xs, { opset = 16 }) end, "opset must be an integer from 17 to 21, got 16",
    "an opset kiln does not write")
  T.raises(function() kiln.onnx.save(f17, path("o.onnx"), xs, { opst = 18 }) end, "unknown option 'opst'", "an unknown option")
end

-- gelu_tanh: ONNX's Gelu(approximate = "tanh") at opset 20, its tanh
-- formula at 17; either file re-imports to the same values
do
  local f = function(x) return x:gelu_tanh() end
  local x = kiln.randn({ 3, 5 }, { seed = 63 })
  for _, opset in ipairs({ 20, 17 }) do
    local file = path("gelu_tanh" .. opset .. ".onnx")
    kiln.onnx.save(f, file, { x }, { opset = opset })
    local ops = {}
    for _, n in ipairs(kiln.onnx.read(file).graph.nodes) do ops[n.op] = n end
    T.ok(opset == 20 and ops.Gelu and ops.Gelu.attrs.approximate == "tanh" or opset == 17 and ops.Tanh and not ops.Gelu,
      "gelu_tanh at opset " .. opset .. (opset == 20 and ": Gelu(approximate = 'tanh')" or ": its tanh formula"))
    local okv, why = all_close(outputs(kiln.onnx.load(file)(x)), outputs(f(x)), 1e-6)
    T.ok(okv, "  the re-imported model gives the function's values")
    if not okv then T.diag(why) end
  end
end

-- a model on the GPU saves the same file: its tensors are written from the CPU
if kiln.cuda_available() then
  local s = loadfile("samples/transformer_block.lua")({ small = true })
  local xs = s.inputs({ small = true })
  kiln.onnx.save(s.model, path("cpu.onnx"), xs)
  local gpu_model = loadfile("samples/transformer_block.lua")({ small = true }).model:to("cuda")
  kiln.onnx.save(gpu_model, path("gpu.onnx"), { xs[1]:to("cuda") })
  local fa, fb = io.open(path("cpu.onnx"), "rb"), io.open(path("gpu.onnx"), "rb")
  T.ok(fa:read("a") == fb:read("a"), "a model on the GPU: the same file as on the CPU")
  fa:close()
  fb:close()
  local back = kiln.onnx.load(path("gpu.onnx"), { device = "cuda" })
  local fx = kiln.randn(xs[1]:shape(), { seed = 77 })
  local okv, why = all_close({ back(fx:to("cuda")):to("cpu") }, { s.model(fx) }, 1e-3)
  T.ok(okv, "a model saved on the GPU, loaded onto the GPU: the CPU model's outputs")
  if not okv then T.diag(why) end
else
  T.n = T.n + 1
  io.write("ok " .. T.n .. " # SKIP saving a model on the GPU: no GPU\n")
end

---------------------------------------------------------------------------
-- Bad input

local lin = kiln.nn.Linear(3, 2)
local x3 = kiln.randn({ 2, 3 })
local function listing()
  local p = io.popen("ls -A '" .. dir .. "'")
  local s = p:read("a")
  p:close()
  return s
end

local before = listing()
T.raises(function() kiln.onnx.save(lin, dir .. "/no/such/dir/m.onnx", { x3 }) end,
  "kiln%.onnx%.save: .*no/such/dir/m%.onnx: cannot create a file there", "a path that cannot be written: named")
os.execute("mkdir -p '" .. path("a_dir.onnx") .. "/inside'")
before = listing()
T.raises(function() kiln.onnx.save(lin, path("a_dir.onnx"), { x3 }) end, "a_dir%.onnx: cannot replace the file",
  "a path that is a directory: named")
T.is(listing(), before, "a failed write leaves no temporary file behind")

-- an existing file stays as it was when the save fails
local keep = path("keep.onnx")
kiln.onnx.save(lin, keep, { x3 })
local f = io.open(keep, "rb")
local old = f:read("a")
f:close()
local Breaks = kiln.nn.Module { name = "Breaks",
  init = function(self) self.fc = kiln.nn.Linear(3, 2) end,
  forward = function(self, x)
    local h = self.fc(x)
    if h:sum():item() > 0 then -- @break
      return h:relu()
    end
    return h
  end }
T.raises(function() kiln.onnx.save(Breaks(), keep, { x3 }) end,
  "ONNX holds one graph, but the model does not trace as one:.*onnx_export%.lua:" .. LINE["break"],
  "a graph break: an error naming the break's line")
f = io.open(keep, "rb")
T.ok(f:read("a") == old, "the file already there is unchanged after a failed save")
f:close()

local Random = kiln.nn.Module { name = "Random", forward = function(_, x)
  return x + kiln.randn(x:shape()) -- @randn
end }
T.raises(function() kiln.onnx.save(Random(), path("r.onnx"), { x3 }) end,
  "op 'randn' at .*onnx_export%.lua:" .. LINE.randn .. " has no ONNX mapping", "an op without a mapping: named with its line")
T.ok(not io.open(path("r.onnx")), "nothing written for a model that cannot be exported")

T.raises(function() kiln.onnx.save(42, path("n.onnx"), { x3 }) end,
  "argument 1 must be a kiln.nn module, a compiled callable %(kiln.compile%) or a function, got number", "a number as the model")
T.raises(function() kiln.onnx.save(x3, path("n.onnx"), { x3 }) end, "got a tensor", "a tensor as the model")
T.raises(function() kiln.onnx.save({}, path("n.onnx"), { x3 }) end, "got table", "a table without forward as the model")
T.raises(function() kiln.onnx.save(lin, nil, { x3 }) end, "argument 2 must be a file path", "no path")
T.raises(function() kiln.onnx.save(lin, path("n.onnx")) end, "argument 3 must be the example inputs", "no inputs")
T.raises(function() kiln.onnx.save(lin, path("n.onnx"), { "x" }) end, "input 1 is a string", "a string as an input")
T.raises(function() kiln.onnx.save(function(x) return { x } end, path("n.onnx"), { x3 }) end,
  "result 1 is a table, not a tensor", "a model returning a table")
T.raises(function() kiln.onnx.save(lin, path("n.onnx"), { kiln.randn({ 2, 4 }) }) end, "tracing the model failed: .*Linear%(3 %-> 2%): input's last dim is 4, expected 3",
  "inputs the model cannot take: the shape error")
T.raises(function()
  kiln.compile(function(x) kiln.onnx.save(lin, path("n.onnx"), { x }); return x end)(x3)
end, "called while a compiled function is being traced", "saving inside a traced call")
T.raises(function()
  kiln.onnx.write(path("w.onnx"), { ir_version = 8, opsets = { [""] = 18 }, graph = { nodes = { { op = 5 } }, inputs = {}, outputs = {} } })
end, "kiln%.onnx%.write: op must be a string, got number", "kiln.onnx.write: a number where a name goes")
T.ok(not io.open(path("w.onnx")), "  and no file")

os.execute("rm -rf '" .. dir .. "'")
T.done()
