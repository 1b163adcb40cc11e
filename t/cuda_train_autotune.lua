-- cuda_train_autotune.lua: max-autotune compiles a whole training step on
-- the GPU. The convnet sample's step (forward, loss, backward and AdamW
-- update of 14 parameters) has more outputs than the 64 that max-autotune's
-- timing of its recording once held, and every such step failed with
-- "timing a plan with more than 64 outputs" (session 22, the H200). Here it
-- runs, at the sample's small sizes, and its losses follow the eager step's.
local T = dofile("t/lib/tap.lua")
local ok_cuda, why = kiln.cuda_available()
if not ok_cuda then T.skip_all("no CUDA device (" .. tostring(why) .. ")") end

kiln.session.small = true
local cache = os.tmpname()
os.remove(cache)
kiln.config.cache_dir = cache -- a scratch cache: this file's choices stay out of the user's
kiln.config.autotune_budget_s = 3

local function load() return kiln.load("samples/train_convnet.lua", { quiet = true }) end
local a, b = load(), load()
a.model:to("cuda")
b.model:to("cuda")
local xa, xb = a.inputs({ small = true, device = "cuda" }), b.inputs({ small = true, device = "cuda" })
local cm = kiln.compile(b.train_step, { mode = "max-autotune" })
local worst, ok_all, msg = 0, true, nil
for _ = 1, 6 do
  local la = a.train_step(table.unpack(xa)):item()
  local good, lb = pcall(function() return cm(table.unpack(xb)):item() end)
  if not good then
    ok_all, msg = false, tostring(lb)
    break
  end
  local d = math.abs(la - lb) / math.max(1, math.abs(la))
  if not (d <= worst) then worst = d end
end
T.ok(ok_all, "max-autotune runs six steps of the convnet's training step" .. (msg and (": " .. msg) or ""))
T.ok(ok_all and worst <= 1e-3,
  string.format("... each step's loss within 1e-3 of the eager step's (worst %.3g)", worst))
os.execute("rm -rf '" .. cache .. "'")
T.done()
