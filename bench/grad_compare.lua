-- bench/grad_compare.lua: which side of a gradient disagreement is wrong.
-- One small conv + BatchNorm training step (cross entropy, no optimizer
-- step) from the same weights and batch, its parameters' gradients taken
-- four ways: eager and compiled on the device, eager on the CPU in the
-- same dtype, and eager on the CPU in f64 (the reference). Each row is a
-- parameter (by shape); each column its largest difference from the f64
-- reference, relative to the largest reference gradient of all parameters
-- (a conv's bias before a BatchNorm has a zero gradient, whose rounding
-- noise its own size would make look like an error of order 1).
--
--   build/kiln bench/grad_compare.lua [device] [dtype] [channels_last] [mode]
--   (device: cuda by default; dtype f32; channels_last: auto, true or
--   false; mode: default)
--
-- The question it answers: a compiled step's gradient differs from eager's
-- on a device; which of the two is off?
local device = (arg and arg[1]) or "cuda"
local dtype = (arg and arg[2]) or "f32"
local layout = (arg and arg[3]) or "auto"
local mode = (arg and arg[4]) or "default"
local nn = kiln.nn

local function model(dev, dt)
  nn.manual_seed(7)
  local m = nn.Sequential(nn.Conv2d(3, 16, 3, { padding = 1 }), nn.BatchNorm2d(16), nn.ReLU(),
    nn.Conv2d(16, 32, 3, { stride = 2, padding = 1 }), nn.BatchNorm2d(32), nn.ReLU(),
    nn.Conv2d(32, 24, 3, { padding = 1, bias = false }), nn.BatchNorm2d(24), nn.ReLU(),
    nn.AdaptiveAvgPool2d({ 1, 1 }), nn.Flatten(), nn.Linear(24, 10))
  return m:to(dt):to(dev)
end

local x0 = kiln.randn({ 8, 3, 20, 20 }, { seed = 5 })
local labels0 = kiln.randint(1, 11, { 8 }, { seed = 6 })
local function step(m)
  return function(xx, yy)
    m:zero_grad()
    local l = nn.functional.cross_entropy(m(xx), yy)
    l:backward()
    return l
  end
end

local function grads(dev, dt, compiled)
  local m = model(dev, dt)
  local x, y = x0:to(dt):to(dev), labels0:to(dev)
  local f = step(m)
  if compiled then
    kiln.config.channels_last = layout == "true" or (layout ~= "false" and "auto")
    f = kiln.compile(f, { mode = mode })
  end
  for _ = 1, 2 do f(x, y) end
  kiln.config.channels_last = "auto"
  local out = {}
  for k, p in ipairs(m:parameters()) do out[k] = p.grad:to("cpu"):to("f64") end
  return out
end

local ref = grads("cpu", "f64", false)
local cols = {
  { device .. " eager", grads(device, dtype, false) },
  { device .. " compiled", grads(device, dtype, true) },
  { "cpu eager " .. dtype, grads("cpu", dtype, false) },
}
print(string.format("gradients against the CPU's f64 eager step (%s, %s, channels_last %s, mode %s)", device, dtype,
  layout, mode))
local head = string.format("%-4s %-22s", "#", "parameter")
for _, c in ipairs(cols) do head = head .. string.format(" %18s", c[1]) end
print(head)
local scale = 1e-300
for _, r in ipairs(ref) do scale = math.max(scale, r:abs():max():item()) end
for k, r in ipairs(ref) do
  local line = string.format("%-4d %-22s", k, table.concat(r:shape(), "x"))
  for _, c in ipairs(cols) do
    local d = (c[2][k] - r):abs():max():item() / scale
    line = line .. string.format(" %18.2e", d)
  end
  print(line)
end
