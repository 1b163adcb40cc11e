-- t/cuda_training_samples.lua: the training samples (samples/train_*.lua)
-- at their full sizes on the GPU, in f32: the compiled step (reduce-overhead:
-- replayed from its recording, which writes the parameters and the
-- optimizer's state itself) gives the eager step's losses for 5 steps, and
-- parameters within what AdamW's steps allow. t/training_samples.lua holds
-- the small sizes on the CPU; the GPU plans differ (split reductions, the
-- recording's write-backs), and a memory-plan bug there once took the
-- convnet's first BatchNorm 100-1000 off after one step.
local T = dofile("t/lib/tap.lua")
if not pcall(kiln.zeros, { 1 }, { device = "cuda" }) then T.skip_all("no CUDA device") end

local params_diff = dofile("t/lib/train_step.lua").params_diff

local STEPS = 5
-- each sample's AdamW learning rate, and its losses' tolerance: gcn's
-- scatter-adds are atomics, whose order differs from run to run on both sides
for _, case in ipairs({ { "gcn", 1e-2, 1e-3 }, { "convnet", 1e-3, 1e-4 }, { "transformer", 3e-4, 1e-4 } }) do
  local name, lr, tol = case[1], case[2], case[3]
  local file = "samples/train_" .. name .. ".lua"
  local a, b = kiln.load(file, { quiet = true }), kiln.load(file, { quiet = true })
  local xa, xb = a.inputs({ device = "cuda" }), b.inputs({ device = "cuda" })
  local cm = kiln.compile(b.train_step, { mode = "reduce-overhead" })
  local worst = 0
  for _ = 1, STEPS do
    local la, lb = a.train_step(table.unpack(xa)):item(), cm(table.unpack(xb)):item()
    local r = math.abs(la - lb) / math.max(math.abs(la), 1e-30)
    worst = (la == la and lb == lb) and math.max(worst, r) or math.huge
  end
  T.ok(worst <= tol, string.format("%s f32 on the GPU: the compiled step's losses are eager's for %d steps (worst relative %.2g)",
    name, STEPS, worst))
  -- AdamW moves a parameter by at most about lr a step; a gradient of
  -- rounding noise may move it the other way
  local d = params_diff(a.model, b.model)
  T.ok(d <= 2 * lr * STEPS, string.format("%s: ... and its parameters (largest difference %.2g)", name, d))
  T.ok(cm:stats().replays >= STEPS - 2, string.format("%s: the steps replay a recording (%d of %d)", name, cm:stats().replays, STEPS))
end
T.done()
