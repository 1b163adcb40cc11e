-- cuda_k_major_weights.lua: on the GPU, a matmul by a fixed [K, N] weight
-- (the ONNX exporter's Linear, here BERT's FFN shape) reads a k-contiguous
-- copy of it where the CUDA backend asks for one (f32 "ieee" on Hopper:
-- its split-f32 kernel runs faster so, core/compiler/kn_pass_k_major.c).
-- The compiled result against float64 and against eager on fresh random
-- inputs, with a bias and GELU after it; the precision ledger's engine and
-- contract; the plan built again when the weight is written in place; in
-- "tf32" mode nothing is laid out. Without a GPU it skips.
local T = dofile("t/lib/tap.lua")
local KILN = os.getenv("KILN") or "build/kiln"

if not (kiln.cuda_available and kiln.cuda_available() and pcall(kiln.zeros, { 1 }, { device = "cuda" })) then
  T.skip_all("no CUDA device")
end
local nextseed = T.seeds()
kiln.config.f32_precision = "ieee"

local rel = T.rel

local W = kiln.randn({ 768, 3072 }, { seed = nextseed(), device = "cuda" }) * 0.03
local b = kiln.randn({ 3072 }, { seed = nextseed(), device = "cuda" })
local function ffn(x) return (x:matmul(W) + b):gelu() end
local function ref(x)
  return (x:to("cpu"):to("f64"):matmul(W:to("cpu"):to("f64")) + b:to("cpu"):to("f64")):gelu()
end
local x = kiln.randn({ 8, 128, 768 }, { seed = nextseed(), device = "cuda" })
local cm = kiln.compile(ffn)
local got = cm(x)
local r64, reager = rel(got, ref(x)), rel(got, ffn(x))
T.ok(r64 <= 1e-5, string.format("x @ W[768, 3072] + b, GELU: compiled equals float64 (rel %.2g)", r64))
T.ok(reager <= 1e-5, string.format("and eager (rel %.2g)", reager))

local gpu = kiln.device_info().cuda.devices[1] or {}
local hopper = gpu.cc == "9.0" or gpu.cc == 9.0
local led = cm:precision(x)
local row = led[1] or {}
if hopper then
  T.ok(row.engine and row.engine:find("split%-f32 GEMM wg"),
    "on Hopper the laid-out weight runs the wgmma split kernel: " .. tostring(row.engine))
else
  T.ok(row.engine and not row.engine:find("split%-f32"), "off Hopper cuBLASLt runs it: " .. tostring(row.engine))
end
T.ok(row.meets, string.format("within the contract: error %.2e, true f32 %.2e", row.max_err or -1,
  row.f32_max_err or -1))

kiln.no_grad(function() W:copy_(W * -2) end)
T.ok(rel(cm(x), ref(x)) <= 1e-5, "after W is written in place, the compiled result follows it")

-- what the pass says, on this GPU and in "tf32" mode
local function notes(precision)
  local out = T.output("KILN_LOGS=fusion " .. KILN .. " -e \"kiln.config.f32_precision = '" .. precision
    .. "'; local W = kiln.randn({768, 3072}, {device = 'cuda'}); "
    .. "local x = kiln.randn({1024, 768}, {device = 'cuda'}); "
    .. "kiln.compile(function(x) return x:matmul(W) end)(x); print('ran to the end')\" 2>&1")
  if not out:find("ran to the end", 1, true) then return "the script failed: " .. out end
  return out:match("(k_major_weights:[^\n]*)") or ""
end
if hopper then
  T.like(notes("ieee"), "^k_major_weights: 1 %[K, N%] matmul weight laid out k%-contiguous %(9%.0 MiB",
    "ieee on Hopper: the weight is laid out, and the note says how much memory it took")
else
  T.is(notes("ieee"), "", "ieee off Hopper: nothing laid out (cuBLASLt reads either layout as fast)")
end
T.is(notes("tf32"), "", "tf32: nothing laid out")

T.done()
