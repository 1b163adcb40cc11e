-- k_major_weights.lua (run by t/k_major_weights.sh with the pass on): a
-- matmul by a fixed [K, N] weight (the ONNX exporter's Linear) reads a
-- k-contiguous copy of it made when the plan is built. Compiled results
-- against a float64 reference on fresh random inputs, the plan built again
-- when the weight is written in place, what the pass says and what it
-- leaves alone (a weight given as an argument, nn.Linear's transposed
-- [N, K] weight, a training step, the pass turned off), and the suite's
-- tiny ONNX models against PyTorch's outputs.
local T = dofile("t/lib/tap.lua")
local nextseed = T.seeds()

local rel = T.rel

-- a captured [K, N] weight, a bias and an activation after it, on a
-- 3-D input (its leading dims are the GEMM's rows)
local W = kiln.randn({ 24, 40 }, { seed = nextseed() })
local bias = kiln.randn({ 40 }, { seed = nextseed() })
local W2 = kiln.randn({ 40, 24 }, { seed = nextseed() })
local function f(x) return (x:matmul(W) + bias):relu():matmul(W2) end
local function ref(x)
  return ((x:to("f64"):matmul(W:to("f64")) + bias:to("f64")):relu()):matmul(W2:to("f64"))
end
local cm = kiln.compile(f)
for i, shape in ipairs({ { 2, 5, 24 }, { 7, 24 } }) do
  local x = kiln.randn(shape, { seed = nextseed() })
  local r = rel(cm(x), ref(x))
  T.ok(r <= 1e-5, string.format("x%s @ W + b, relu, @ W2: compiled equals f64 (%.2g)",
    table.concat(shape, "x"), r))
  T.ok(rel(cm(x), f(x)) <= 1e-5, string.format("x%s: compiled equals eager", table.concat(shape, "x")))
end
-- written in place after compiling: the plan builds again from the new values
local x = kiln.randn({ 3, 24 }, { seed = nextseed() })
cm(x)
kiln.no_grad(function() W:copy_(W * -0.5) end)
T.ok(rel(cm(x), ref(x)) <= 1e-5, "after W is written in place, the compiled result follows it")

-- what KILN_LOGS=fusion says
local function notes(script, env) return T.fusion_notes(script, "k_major_weights", env) end
local prelude = "local W = kiln.randn({8, 4}); local x = kiln.randn({3, 8}); "
local use = prelude .. "local cm = kiln.compile(function(x) return x:matmul(W) end); cm(x)"
T.like(notes(use), "^k_major_weights: 1 %[K, N%] matmul weight laid out k%-contiguous %(0%.0 MiB more device "
  .. "memory%), the device's matmul runs faster so; 0 left as given$", "the pass says what it laid out")
T.is(notes(use, "KILN_K_MAJOR_WEIGHTS=0"), "", "KILN_K_MAJOR_WEIGHTS=0 turns it off")
T.is(notes(use, "env -u KILN_CPU_K_MAJOR_WEIGHTS"), "", "off on the CPU without KILN_CPU_K_MAJOR_WEIGHTS")
T.is(notes(prelude .. "local cm = kiln.compile(function(x, w) return x:matmul(w) end); cm(x, W)"), "",
  "a weight that is an argument is left alone")
T.is(notes("local l = kiln.nn.Linear(8, 4); local x = kiln.randn({3, 8}); "
  .. "local cm = kiln.compile(function(x) return l(x) end); cm(x)"), "",
  "nn.Linear's [N, K] weight, read transposed, is k-contiguous already")
T.is(notes(prelude .. "local two = kiln.compile(function(x) return x:matmul(W) + x:matmul(W) end); two(x)"),
  "k_major_weights: 1 [K, N] matmul weight laid out k-contiguous (0.0 MiB more device memory), the device's "
  .. "matmul runs faster so; 0 left as given", "a weight two matmuls read is laid out once")
T.is(notes("local l = kiln.nn.Linear(8, 4); local W = kiln.randn({4, 4}, {requires_grad = true}); "
  .. "local x = kiln.randn({3, 8}); local opt = kiln.optim.SGD({W}, {lr = 0.1}); "
  .. "local cm = kiln.compile(function(x) opt:zero_grad(); local l = x:matmul(l.weight:t()):matmul(W):sum(); "
  .. "l:backward(); opt:step(); return l end); cm(x); cm(x)"), "",
  "a training step, which writes its weights at every call, is left alone")

-- the suite's tiny ONNX models (the exporter's [K, N] weights) against
-- PyTorch's outputs; BERT's merged query, key and value weight is laid
-- out by merge_projections itself
if kiln.onnx.available then
  local dir = "t/data/real_models/"
  local U = dofile("bench/bench_util.lua")
  local laid = { bert_tiny = 6, gpt2_tiny = 8, vit_tiny = 6 }
  for _, name in ipairs({ "bert_tiny", "gpt2_tiny", "vit_tiny" }) do
    local m = kiln.onnx.load(dir .. name .. ".onnx")
    local io_t = kiln.load_safetensors(dir .. name .. ".io.safetensors")
    local xs = {}
    for i, vi in ipairs(m._inputs) do xs[i] = io_t[vi.name] end
    local _, r = U.errors(kiln.compile(m)(table.unpack(xs)), io_t["output.f32"])
    T.ok(r <= 1e-4, string.format("%s compiled with k-major weights: rel err %.2g against PyTorch", name, r))
    local said = notes("local m = kiln.onnx.load('" .. dir .. name .. ".onnx'); "
      .. "local io = kiln.load_safetensors('" .. dir .. name .. ".io.safetensors'); local xs = {}; "
      .. "for i, vi in ipairs(m._inputs) do xs[i] = io[vi.name] end; kiln.compile(m)(table.unpack(xs))")
    T.like(said, "k_major_weights: " .. laid[name] .. " %[K, N%] matmul weights laid out",
      name .. ": " .. laid[name] .. " weights laid out, the replaced projections' weights not")
    if name == "bert_tiny" then
      T.is(select(2, said:gsub("the merged %[64, 192%] weight is laid out k%-contiguous", "")), 2,
        "bert_tiny: the merged projection weight of each of its 2 layers is laid out k-contiguous")
    end
  end
else
  T.diag("no ONNX import in this build: the tiny models are not run")
end

T.done()
