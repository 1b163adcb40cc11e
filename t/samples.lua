-- t/samples.lua: each model of samples/ in its small size: it loads, runs,
-- gives the expected output shape with finite values, the same output on a
-- second load, the parameter names of the PyTorch model it copies
-- (bench/torch_models.py); plus causality of the transformer block
-- and normalized GCN outputs.
local T = dofile("t/lib/tap.lua")

-- The models run on the CPU on any machine (samples are made on the default
-- device; with a GPU they move): the same checks everywhere, exact equality
-- of two loads included (CUDA's index_add sums with atomics, in no fixed
-- order). t/cuda_samples.lua runs them on the GPU.
local function load(name)
  local chunk = assert(loadfile("samples/" .. name .. ".lua"))
  local spec = chunk({ small = true })
  if kiln.default_device() ~= "cpu" then spec.model:to("cpu") end
  return spec
end

-- the inputs go where the model is: the CPU
local function run(spec)
  local inputs = spec.inputs({ small = true, dtype = "f32", device = "cpu" })
  return spec.model(table.unpack(inputs)), inputs
end

local function shape(t) return table.concat(t:shape(), ",") end

local function finite(t)
  local m = t:abs():amax():item()
  return m == m and m < math.huge
end

local function maxdiff(a, b) return (a - b):abs():amax():item() end

-- The model's state_dict names with PyTorch's 0-based indices, sorted.
local function torch_names(model)
  local out = {}
  for name in pairs(model:state_dict()) do
    local parts = {}
    for part in (name .. "."):gmatch("([^.]*)%.") do
      parts[#parts + 1] = part:match("^%d+$") and tostring(tonumber(part) - 1) or part
    end
    out[#out + 1] = table.concat(parts, ".")
  end
  table.sort(out)
  return table.concat(out, " ")
end

local expected = {
  simple_linear = { out = "2,1024", names = "bias weight" },
  large_linear = { out = "2,256",
    names = "0.bias 0.weight 2.bias 2.weight 4.bias 4.weight 6.bias 6.weight" },
  convnet = { out = "2,1000",
    names = "0.weight 1.bias 1.num_batches_tracked 1.running_mean 1.running_var 1.weight 10.bias "
      .. "10.num_batches_tracked 10.running_mean 10.running_var 10.weight 14.bias 14.weight 3.weight 4.bias "
      .. "4.num_batches_tracked 4.running_mean 4.running_var 4.weight 6.weight 7.bias 7.num_batches_tracked "
      .. "7.running_mean 7.running_var 7.weight 9.weight" },
  transformer_block = { out = "2,16,512",
    names = "fc1.bias fc1.weight fc2.bias fc2.weight ln1.bias ln1.weight ln2.bias ln2.weight proj.bias "
      .. "proj.weight qkv.bias qkv.weight" },
  gcn = { out = "200,7", names = "dst l1.bias l1.weight l2.bias l2.weight norm src" },
}

local specs = {}
for _, name in ipairs({ "simple_linear", "large_linear", "convnet", "transformer_block", "gcn" }) do
  local t0 = os.clock()
  local spec = load(name)
  specs[name] = spec
  T.is(spec.name, name, name .. ": loads and names itself")
  T.ok(kiln.nn.is_module(spec.model) and not spec.model.training, name .. ": the model is a module in eval mode")
  local y = run(spec)
  T.is(shape(y), expected[name].out, name .. ": output shape " .. expected[name].out)
  T.ok(finite(y), name .. ": finite outputs")
  local y2 = run(load(name))
  T.is(maxdiff(y, y2), 0, name .. ": a second load gives the same output")
  T.is(torch_names(spec.model), expected[name].names, name .. ": PyTorch's parameter names (0-based)")
  T.diag(string.format("%s: %.2f s CPU to load and run twice", name, os.clock() - t0))
end

-- convnet layer shapes, as the PyTorch model
do
  local m = specs.convnet.model
  T.is(shape(m[1].weight) .. " " .. shape(m[4].weight) .. " " .. shape(m[10].weight) .. " " .. shape(m[15].weight),
    "32,3,3,3 64,32,3,3 256,128,3,3 1000,256", "convnet: conv and fc weight shapes")
end

-- transformer: a later token cannot change an earlier output; an earlier one changes later ones
do
  local spec = specs.transformer_block
  local x = spec.inputs({ small = true, device = "cpu" })[1]
  local B, Tn, D = table.unpack(x:shape())
  local y = spec.model(x)
  local x_late = kiln.cat({ x:slice(2, 1, Tn - 1), kiln.randn({ B, 1, D }, { seed = 99, device = "cpu" }) }, 2)
  local y_late = spec.model(x_late)
  T.ok(maxdiff(y:slice(2, 1, Tn - 1), y_late:slice(2, 1, Tn - 1)) <= 1e-6,
    "transformer: changing the last token leaves earlier outputs unchanged")
  T.ok(maxdiff(y:slice(2, Tn, Tn), y_late:slice(2, Tn, Tn)) > 1e-3, "and changes the last output")
  local x_early = kiln.cat({ kiln.randn({ B, 1, D }, { seed = 98, device = "cpu" }), x:slice(2, 2, Tn) }, 2)
  T.ok(maxdiff(y:slice(2, Tn, Tn), spec.model(x_early):slice(2, Tn, Tn)) > 1e-3,
    "changing the first token changes the last output")
end

-- gcn: log_softmax rows, the graph's normalization
do
  local spec = specs.gcn
  local y = run(spec)
  local rows = y:exp():sum(2)
  T.ok(maxdiff(rows, kiln.ones({ 200 }, { device = "cpu" })) < 1e-5, "gcn: each row of exp(output) sums to 1")
  T.ok(y:amax():item() <= 0, "gcn: log-probabilities are <= 0")
  local m = spec.model
  T.is(shape(m.src) .. " " .. shape(m.dst) .. " " .. m.src.dtype, "980 980 i64", "gcn: 780 edges plus 200 self loops")
  T.ok(m.norm:amax():item() <= 1 and m.norm:amin():item() > 0, "gcn: edge norms lie in (0, 1]")
  local x = spec.inputs({})[1]
  local density = x:mean():item()
  T.ok(x.dtype == "f32" and density > 0.01 and density < 0.03, "gcn: binary features with about 2% ones")
end

-- small at load time can also come from kiln.session.small (what :load sees)
do
  local session = kiln.session
  if session then
    local saved = session.small
    session.small = true
    local ok, spec = pcall(dofile, "samples/gcn.lua")
    local okl, lin = pcall(dofile, "samples/large_linear.lua")
    session.small = saved
    T.ok(ok and spec.model.num_nodes == 200, "gcn: kiln.session.small = true gives the small graph")
    T.ok(okl and lin.model[1].in_features == 256, "large_linear: and the small width")
  end
end

-- full-size inputs have the sizes of torch_models.py (built, not run)
do
  local x = specs.transformer_block.inputs({})[1]
  T.is(shape(x), "16,256,512", "transformer_block: full inputs 16 x 256 x 512")
  T.is(shape(specs.simple_linear.inputs({})[1]), "32,1024", "simple_linear: full inputs 32 x 1024")
  T.is(specs.convnet.inputs({ dtype = "bf16" })[1].dtype, "bf16", "inputs follow opts.dtype")
end

T.done()
