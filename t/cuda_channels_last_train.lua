-- t/cuda_channels_last_train.lua: a convolutional training step compiled
-- channels-last on the GPU (the layout pass): its convs, their input and
-- weight gradients (cuDNN's NHWC backward engines), its BatchNorms and the
-- ReLU and BatchNorm gradients between them run NHWC, and the BatchNorm
-- statistics and their gradients' sums are column reductions of the NHWC
-- values (kn_reduce_cols, a var's two passes among them). Loss, every
-- gradient and the running statistics against eager's NCHW step on fresh
-- random inputs: bf16 under autocast (the pass's "auto" choice on a GPU)
-- and f32 (asked for: kiln.config.channels_last = true; on Hopper its
-- convs and their gradients run kiln's split-precision kernels, elsewhere
-- cuDNN's strict NHWC engines). Skipped where there is no CUDA device.
local T = dofile("t/lib/tap.lua")
if not pcall(kiln.zeros, { 1 }, { device = "cuda" }) then T.skip_all("no CUDA device") end

local nextseed = T.seeds()
local nn = kiln.nn

local function model(seed)
  nn.manual_seed(seed)
  -- channels multiples of 8, as cuDNN's NHWC engines take them in bf16;
  -- the first conv reads 3 image channels, which its weight's gradient
  -- pads to 8; the last conv has no bias, as a conv before a BatchNorm
  return nn.Sequential(nn.Conv2d(3, 16, 3, { padding = 1 }), nn.BatchNorm2d(16), nn.ReLU(),
    nn.Conv2d(16, 32, 3, { stride = 2, padding = 1 }), nn.BatchNorm2d(32), nn.ReLU(),
    nn.Conv2d(32, 24, 3, { padding = 1, bias = false }), nn.BatchNorm2d(24), nn.ReLU(),
    nn.AdaptiveAvgPool2d({ 1, 1 }), nn.Flatten(), nn.Linear(24, 10)):to("cuda")
end

local function rel_max(got, want)
  local g, w = got:to("cpu"):to("f64"), want:to("cpu"):to("f64")
  if g:ne(g):sum():item() > 0 then return math.huge end
  local m = w:abs():max():item()
  return (g - w):abs():max():item() / (m > 0 and m or 1)
end

for _, case in ipairs({ { "bf16", "auto", 3e-2 }, { "f32", true, 1e-4 } }) do
  local dt, layout, tol = case[1], case[2], case[3]
  local seed = nextseed()
  local m1, m2 = model(seed % 1000), model(seed % 1000)
  local x = kiln.randn({ 8, 3, 20, 20 }, { seed = seed, device = "cuda" })
  local labels = kiln.randint(1, 11, { 8 }, { seed = seed + 1, device = "cuda" })
  local function step(m)
    return function(xx, yy)
      m:zero_grad()
      local l = nn.functional.cross_entropy(m(xx), yy)
      l:backward()
      return l
    end
  end
  local autocast = dt ~= "f32" and dt or nil
  kiln.config.channels_last = layout
  local cm = kiln.compile(step(m2), { autocast = autocast })
  local worst_loss = 0
  for _ = 1, 3 do
    local a = (autocast and kiln.autocast(autocast, step(m1), x, labels) or step(m1)(x, labels)):item()
    local b = cm(x, labels):item()
    worst_loss = math.max(worst_loss, a == a and b == b and math.abs(a - b) / math.abs(a) or math.huge)
  end
  local notes = {}
  for _, k in ipairs(cm:kernels(x, labels)) do notes[#notes + 1] = k.name end
  notes = table.concat(notes, " ")
  kiln.config.channels_last = "auto"
  T.ok(worst_loss <= tol, string.format("%s channels-last training step: 3 compiled losses as eager's (worst %.2g, tol %g)",
    dt, worst_loss, tol))
  -- each gradient's largest difference from eager's, over the largest
  -- gradient of all: a conv's bias before a BatchNorm has a gradient of
  -- zero, rounding noise on both sides (1e-9 against 1e-2), which its own
  -- size would turn into relative differences of order 1
  local worst_grad, worst_name, scale = 0, "?", 0
  local p1, p2 = m1:parameters(), m2:parameters()
  for _, p in ipairs(p1) do scale = math.max(scale, p.grad:to("cpu"):to("f64"):abs():max():item()) end
  for k, p in ipairs(p1) do
    local d = (p2[k].grad:to("cpu"):to("f64") - p.grad:to("cpu"):to("f64")):abs():max():item() / scale
    if not (d <= worst_grad) then worst_grad, worst_name = d, tostring(k) end
  end
  T.ok(worst_grad <= tol, string.format("%s: every parameter's gradient as eager's, against the largest gradient "
    .. "(worst %.2g, parameter %s, tol %g)", dt, worst_grad, worst_name, tol))
  local worst_stat = 0
  for _, i in ipairs({ 2, 5, 8 }) do
    worst_stat = math.max(worst_stat, rel_max(m2[i].running_mean, m1[i].running_mean),
      rel_max(m2[i].running_var, m1[i].running_var))
  end
  T.ok(worst_stat <= tol, string.format("%s: the running statistics as eager's (worst %.2g)", dt, worst_stat))
  -- NHWC shapes in the kernels' names: N x H x W x C; the image's 3
  -- channels padded to a 16-byte vector (8 of bf16, 4 of f32)
  local padded = dt == "f32" and 4 or 8
  T.like(notes, "conv2d_input_grad_" .. dt .. "_8x20x20x16", dt .. ": the second conv's input gradient ran NHWC")
  T.like(notes, "conv2d_weight_grad_" .. dt .. "_32x3x3x16", dt .. ": the second conv's weight gradient ran NHWC")
  T.like(notes, "conv2d_weight_grad_" .. dt .. "_16x3x3x" .. padded,
    dt .. ": the first conv's weight gradient ran NHWC, its 3 image channels padded to " .. padded)
  T.like(notes, "batch_norm[%w_]*_8x10x10x32", dt .. ": the second BatchNorm ran NHWC")
end

T.done()
