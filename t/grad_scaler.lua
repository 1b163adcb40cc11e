-- t/grad_scaler.lua: kiln.amp.GradScaler (issue 33, item 3: the gradient
-- scaler for f16): under kiln.autocast("f16") a small loss's gradients
-- underflow to zero, and scaled they come back as the f32 ones; a step
-- whose gradients hold an inf is skipped and the scale halved; the scale
-- grows after growth_interval good steps; misuse is an error.
local T = dofile("t/lib/tap.lua")
local nn = kiln.nn

local x = kiln.randn({ 8, 16 }, { seed = 1 })
local function model()
  nn.manual_seed(2)
  return nn.Linear(16, 4)
end

-- a loss small enough that its f16 gradients underflow (the f16 subnormals end near 6e-8)
local function tiny_loss(m) return m(x):sum() * 1e-8 end

local ref = model()
tiny_loss(ref):backward()
local want = ref.weight.grad

local m1 = model()
kiln.autocast("f16", function() return tiny_loss(m1) end):backward()
T.ok(m1.weight.grad:abs():amax():item() == 0, "autocast f16 without a scaler: the small loss's weight gradient underflows to 0")

local m2 = model()
local opt = kiln.optim.SGD(m2, { lr = 0.1 })
local scaler = kiln.amp.GradScaler()
scaler:scale(kiln.autocast("f16", function() return tiny_loss(m2) end)):backward()
scaler:unscale_(opt)
local g = m2.weight.grad
local rel = (g - want):abs():amax():item() / want:abs():amax():item()
T.ok(g.dtype == "f32" and rel <= 2e-3, string.format("with the scaler, unscaled: the f32 gradient within f16's rounding (%.3g)", rel))
local before = m2.weight:clone()
T.ok(scaler:step(opt) and (m2.weight - before):abs():amax():item() > 0, "a finite step is taken")
scaler:update()
T.is(scaler:get_scale(), 65536.0, "the scale stays until growth_interval good steps")

-- an inf gradient: the step is skipped, the scale halved, the parameters untouched
do
  local m = model()
  local o = kiln.optim.SGD(m, { lr = 0.1 })
  local s = kiln.amp.GradScaler({ init_scale = 1024.0, growth_interval = 2 })
  s:scale(m(x):sum()):backward()
  m.bias.grad:copy_(kiln.full({ 4 }, math.huge))
  local w0 = m.weight:clone()
  T.is(s:step(o), false, "a gradient holds inf: step() skips the update")
  T.is((m.weight - w0):abs():amax():item(), 0.0, "and leaves every parameter as it was")
  s:update()
  T.is(s:get_scale(), 512.0, "update() after a skipped step halves the scale")
  for _ = 1, 2 do
    o:zero_grad()
    s:scale(m(x):sum()):backward()
    T.ok(s:step(o), "a good step")
    s:update()
  end
  T.is(s:get_scale(), 1024.0, "after growth_interval (2) good steps the scale doubles")
  o:zero_grad()
  s:scale(m(x):sum()):backward()
  s:unscale_(o)
  local ok, err = pcall(s.unscale_, s, o)
  T.like(tostring(err), "already called for this optimizer", "unscale_ twice in a step: an error")
end

-- disabled: a pass-through
do
  local s = kiln.amp.GradScaler({ enabled = false })
  local l = x:sum()
  T.ok(s:scale(l) == l and s:get_scale() == 1.0, "enabled = false: scale() returns the loss itself, scale 1")
end

-- bad options
for _, case in ipairs({
  { { init_scale = 0 }, "init_scale must be a positive finite number" },
  { { growth_factor = 1 }, "growth_factor must be a number > 1" },
  { { backoff_factor = 1.5 }, "backoff_factor must be a number in %(0, 1%)" },
  { { growth_interval = 0 }, "growth_interval must be an integer >= 1" },
  { { grwoth_interval = 3 }, "unknown option 'grwoth_interval'" },
}) do
  local ok, err = pcall(kiln.amp.GradScaler, case[1])
  T.like(tostring(err), case[2], "GradScaler option error: " .. case[2]:gsub("%%", ""))
end

T.done()
