-- t/training_samples.lua: the training samples (samples/train_gcn.lua,
-- train_convnet.lua, train_transformer.lua; issue 33, item 5) at their
-- small sizes on the CPU: each trains (its loss falls over 20 eager steps,
-- never NaN), its compiled step (kiln.compile(spec.train_step), default
-- mode) gives the eager step's losses and parameters for 20 steps, and
-- after its first recompiles builds no new plan (a step writes its
-- parameters in place; a plan once rebuilt itself at every step for
-- that); :run on a training spec runs steps and reports their losses; a
-- train_step that returns no loss is a clear error.
local T = dofile("t/lib/tap.lua")

kiln.session.small = true

local function load(file)
  return kiln.load(file, { quiet = true })
end

local params_diff = dofile("t/lib/train_step.lua").params_diff

for _, case in ipairs({ { "samples/train_gcn.lua", 1e-5 }, { "samples/train_convnet.lua", 1e-4 },
  { "samples/train_transformer.lua", 1e-5 } }) do
  local file, tol = case[1], case[2]
  local a, b = load(file), load(file)
  T.ok(type(a.train_step) == "function" and a.optimizer ~= nil, file .. ": a training spec (train_step, optimizer)")
  local xa, xb = a.inputs({ small = true }), b.inputs({ small = true })
  local cm = kiln.compile(b.train_step)
  local worst, first, last, nan = 0, nil, nil, false
  local plans_at_5
  for step = 1, 20 do
    local la, lb = a.train_step(table.unpack(xa)):item(), cm(table.unpack(xb)):item()
    nan = nan or la ~= la or lb ~= lb
    local d = math.abs(la - lb) / math.max(1, math.abs(la))
    if d > worst then worst = d end
    first, last = first or la, la
    if step == 5 then plans_at_5 = cm:stats().plans end
  end
  T.ok(not nan and last < first, string.format("%s: 20 eager steps train it (loss %.4f -> %.4f)", file, first, last))
  -- On Hopper the compiled convnet step runs its f32 convolutions and
  -- their gradients in kiln's split-precision kernels (channels-last, the
  -- layout pass's "auto"), eager's in cuDNN's strict engines: the losses
  -- drift apart as the channels-last section below says, and AdamW moves
  -- a parameter whose gradient is near zero by up to lr a step on either
  -- side, so the parameters are compared only where both sides run the
  -- same engines (the split gradients themselves are held to 1e-4 of
  -- eager's: t/cuda_channels_last_train.lua)
  local split = file:match("convnet") and xb[1].device ~= "cpu" and kiln.device_info().cuda.devices[1].cc == "9.0"
  if split then tol = 2e-3 end
  T.ok(not nan and worst <= tol, string.format("%s: the compiled step's losses are the eager step's (worst %.3g, tol %g)",
    file, worst, tol))
  -- AdamW divides each gradient by its own running size, so a rounding
  -- difference in a near-zero gradient moves a parameter by up to lr (3e-4
  -- here) a step: on the GPU, whose kernels sum in other orders, the
  -- transformer's parameters differ by 6e-5 after 20 steps while the
  -- losses agree to 1e-5
  if not split then
    local pd, ptol = params_diff(a.model, b.model), math.max(tol, 2e-4)
    T.ok(pd <= ptol, string.format("%s: and so are the parameters after 20 steps (worst %.3g, tol %.3g)", file, pd, ptol))
  end
  T.is(cm:stats().plans, plans_at_5, file .. ": no plan built after step 5 (the parameters it writes rebuild nothing)")
end

-- channels-last (kiln.config.channels_last = true, as bf16 convs run on a
-- GPU): a training step lays its conv weights out in the graph, not once
-- per plan, so the parameters it writes rebuild nothing either. On Hopper
-- its f32 forward convs then run in the split-precision kernel (within
-- the "ieee" contract), whose rounding differs from the strict engines'
-- that eager's NCHW convs run: the first step's loss (one forward) agrees
-- to f32's rounding, and AdamW, which turns rounding differences in
-- near-zero gradients into steps of its learning rate, lets the later
-- losses drift further (5e-4 after 12 steps, H200), where the CPU's and
-- the strict engines' agree to 1e-4
do
  kiln.config.channels_last = true
  local a, b = load("samples/train_convnet.lua"), load("samples/train_convnet.lua")
  local xa, xb = a.inputs({ small = true }), b.inputs({ small = true })
  local cm = kiln.compile(b.train_step)
  local worst, first_d, plans_at_5 = 0, nil, nil
  for step = 1, 12 do
    local la, lb = a.train_step(table.unpack(xa)):item(), cm(table.unpack(xb)):item()
    local d = math.abs(la - lb) / math.max(1, math.abs(la))
    first_d = first_d or d
    if not (d <= worst) then worst = d end
    if step == 5 then plans_at_5 = cm:stats().plans end
  end
  kiln.config.channels_last = "auto"
  local split = xb[1].device ~= "cpu" and kiln.device_info().cuda.devices[1].cc == "9.0"
  T.ok(first_d <= 1e-5, string.format("channels-last convnet step: the first step's loss is eager's (%.3g)", first_d))
  local tol = split and 2e-3 or 1e-4
  T.ok(worst <= tol, string.format("channels-last convnet step: 12 compiled steps follow eager's (worst %.3g, tol %g)",
    worst, tol))
  T.is(cm:stats().plans, plans_at_5, "channels-last convnet step: no plan built after step 5")
end

-- :run on a training spec: n steps, each loss returned
load("samples/train_gcn.lua")
kiln.cmd.mode("eager")
local r = kiln.cmd.run(3)
T.is(#(r.losses or {}), 3, ":run 3 on a training spec runs three steps and returns their losses")
T.ok(r.losses and r.losses[3] < r.losses[1], ":run's steps train the session's model (the loss falls)")
kiln.cmd.mode("default")
r = kiln.cmd.run(4)
T.is(#(r.losses or {}), 4, ":run 4 in mode default: four compiled steps, compiling ones counted too")

-- a train_step that returns no loss
local bad = os.tmpname() .. ".lua"
local fh = io.open(bad, "w")
fh:write([[
local m = kiln.nn.Linear(2, 2)
return { name = "bad", model = m, inputs = function() return { kiln.randn({ 1, 2 }) } end,
  train_step = function(x) m(x) end }
]])
fh:close()
kiln.load(bad, { quiet = true })
kiln.cmd.mode("eager")
local ok, err = pcall(kiln.cmd.run, 1)
T.ok(not ok and tostring(err):find("train_step of '.-' must return its loss %(a scalar tensor%), got nil"),
  "a train_step without a loss: an error saying so (" .. tostring(err) .. ")")
os.remove(bad)

T.done()
