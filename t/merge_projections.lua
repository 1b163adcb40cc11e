-- t/merge_projections.lua: the merge_projections pass (issue "Real models
-- fast, transformers"): Linear layers that read one input (BERT's query,
-- key and value) run as one matmul whose slices are their results. On the
-- CPU (the GPU runs the same graph: t/cuda_onnx_transformer.lua): compiled
-- against a float64 reference in both weight forms (nn.Linear's x @ W^T,
-- and the exporter's pre-transposed [K, N] initializer in the suite's tiny
-- BERT), what the pass says, what it leaves alone (a weight that is an
-- argument, a bias on only some, another input), and a weight written
-- after compiling (the plan builds again and the merged weight follows).
local T = dofile("t/lib/tap.lua")
local nn = kiln.nn

local function rel(got, want)
  local g, w = got:to("f64"), want:to("f64")
  local d = (g - w):abs():amax():item()
  local s = w:abs():amax():item()
  local r = d / math.max(s, 1e-30)
  return r == r and r or math.huge
end

local function matmul_kernels(cm)
  local n = 0
  for _, k in ipairs(cm:kernels()) do
    if k.name:find("matmul") then n = n + 1 end
  end
  return n
end

-- three Linear layers of different widths on one input, used together
local function qkv_model(bias)
  local q, k, v = nn.Linear(24, 16, { bias = bias }), nn.Linear(24, 16, { bias = bias }), nn.Linear(24, 8, { bias = bias })
  return q, k, v, function(x)
    local a = q(x):matmul(k(x):transpose(-2, -1)):softmax(-1)
    return a:matmul(v(x))
  end
end

for _, bias in ipairs({ true, false }) do
  local q, k, v, f = qkv_model(bias)
  local x = kiln.randn({ 2, 5, 24 }, { seed = 3 })
  local cm = kiln.compile(f)
  local got = cm(x)
  -- the reference: the same layers in f64
  local function lin(l, t)
    local y = t:matmul(l.weight:to("f64"):transpose(1, 2))
    return l.bias and y + l.bias:to("f64") or y
  end
  local x64 = x:to("f64")
  local want = lin(q, x64):matmul(lin(k, x64):transpose(-2, -1)):softmax(-1):matmul(lin(v, x64))
  local label = bias and "with biases" or "without biases"
  T.ok(rel(got, want) <= 1e-5, string.format("three Linear layers %s: compiled equals f64 (%.2g)", label, rel(got, want)))
  T.is(matmul_kernels(cm), 3, label .. ": one projection matmul (and attention's two) left of five")
  -- a weight written in place: the plan builds again, the merged weight follows
  kiln.no_grad(function() k.weight:copy_(k.weight * 0.5) end)
  local want2 = lin(q, x64):matmul(lin(k, x64):transpose(-2, -1)):softmax(-1):matmul(lin(v, x64))
  local got2 = cm(x)
  T.ok(rel(got2, want2) <= 1e-5, label .. ": after k.weight is written in place, the result follows it")
end

-- what KILN_LOGS=fusion says, and what is left alone
-- (a script that failed says nothing of merges either: T.fusion_notes says it failed)
local function notes(script) return T.fusion_notes(script, "merge_projections") end
local prelude = "local nn = kiln.nn; local a, b, c = nn.Linear(8, 4), nn.Linear(8, 4), nn.Linear(8, 6); "
  .. "local x = kiln.randn({3, 8}); "
T.like(notes(prelude .. "local cm = kiln.compile(function(x) return a(x) + b(x), c(x) end); cm(x)"),
  "^merge_projections: 3 matmuls reading the same input %(the first matmul %(.-%)%) run as one of 14 columns, "
  .. "biases merged too$", "the pass says what it merged")
T.is(notes(prelude .. "local cm = kiln.compile(function(x, w) return a(x) + x:matmul(w) end); cm(x, kiln.randn({8, 4}))"),
  "", "a weight that is an argument is left alone")
T.is(notes(prelude .. "local y = kiln.randn({3, 8}); local cm = kiln.compile(function(x, y) return a(x) + b(y) end); cm(x, y)"),
  "", "two inputs: nothing to merge")
T.is(notes(prelude .. "local d = nn.Linear(8, 4, {bias = false}); "
  .. "local cm = kiln.compile(function(x) return a(x) + d(x) end); cm(x)"), "",
  "a bias on one and not the other: left alone")

-- a training step writes its weights at every call: nothing is merged
-- (a merged weight computed once would build the plan again at every step)
T.is(notes(prelude .. "local opt = kiln.optim.SGD({a.weight, a.bias, b.weight, b.bias}, {lr = 0.1}); "
  .. "local cm = kiln.compile(function(x) opt:zero_grad(); local l = (a(x) + b(x)):sum(); l:backward(); "
  .. "opt:step(); return l end); cm(x); cm(x)"), "", "a training step keeps its projections apart")

-- the suite's tiny BERT (the exporter's [K, N] weights): its three
-- projections a layer merge, and the output stays PyTorch's
if kiln.onnx.available then
  local dir = "t/data/real_models/"
  local U = dofile("bench/bench_util.lua")
  local m = kiln.onnx.load(dir .. "bert_tiny.onnx")
  local io_t = kiln.load_safetensors(dir .. "bert_tiny.io.safetensors")
  local xs = {}
  for i, vi in ipairs(m._inputs) do xs[i] = io_t[vi.name] end
  local cm = kiln.compile(m)
  local _, r = U.errors(cm(table.unpack(xs)), io_t["output.f32"])
  T.ok(r <= 1e-4, string.format("tiny BERT compiled: rel err %.2g against PyTorch", r))
  local script = "local m = kiln.onnx.load('" .. dir .. "bert_tiny.onnx'); "
    .. "local io = kiln.load_safetensors('" .. dir .. "bert_tiny.io.safetensors'); local xs = {}; "
    .. "for i, vi in ipairs(m._inputs) do xs[i] = io[vi.name] end; kiln.compile(m)(table.unpack(xs))"
  local said = notes(script)
  local count = select(2, said:gsub("merge_projections: 3 matmuls", ""))
  T.is(count, 2, "tiny BERT: a merge of three projections in each of its 2 layers")
else
  T.diag("no ONNX import in this build: the tiny BERT part is not run")
end

T.done()
