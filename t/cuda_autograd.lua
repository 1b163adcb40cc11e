-- t/cuda_autograd.lua: autograd on the GPU: every gradient case of
-- t/lib/autograd_cases.lua computed on CUDA against the same case on the
-- CPU (f32 both), and a few training steps (a model, cross_entropy,
-- AdamW) on CUDA against the CPU's; a copy to the CPU carries no history.
-- The rules are kiln ops, so backward
-- runs on whatever kernels the device has; an op a rule needs that the
-- CUDA backend lacks fails here by name.
local T = dofile("t/lib/tap.lua")

if not pcall(kiln.zeros, { 1 }, { device = "cuda" }) then T.skip_all("no CUDA device") end

local GC = dofile("t/lib/gradcheck.lua")
GC.seed(tonumber(os.getenv("KILN_TEST_SEED")) or 33)

local CASES = dofile("t/lib/autograd_cases.lua")(GC.rnd)

local function grads_on(dev, f, inputs)
  CASES.set_device(dev) -- the cases' index and mask constants
  local leaves, wrt = {}, {}
  for i, x in ipairs(inputs) do
    local v = x.dtype == "f64" and x:to("f32") or x
    v = v:to(dev)
    if v.dtype == "f32" then
      v = v:requires_grad_()
      wrt[#wrt + 1] = v
    end
    leaves[i] = v
  end
  local y = f(table.unpack(leaves, 1, #inputs))
  local r = kiln.randn(y:shape(), { seed = 99 }):to(dev)
  local g = kiln.grad((y:to("f32") * r):sum(), wrt)
  local out = {}
  for i, t in ipairs(g) do out[i] = GC.flat(t) end
  return out
end

for _, c in ipairs(CASES) do
  local name, f, inputs = c[1], c[3], c[4]
  local ok, cuda = pcall(grads_on, "cuda", f, inputs)
  if not ok then
    T.ok(false, name .. " on cuda: " .. tostring(cuda))
  else
    local cpu = grads_on("cpu", f, inputs)
    local worst = 0
    for i = 1, #cpu do
      for j = 1, #cpu[i] do
        local e = math.abs(cuda[i][j] - cpu[i][j]) / math.max(1, math.abs(cpu[i][j]))
        if not (e <= worst) then worst = e end
      end
    end
    T.ok(worst <= 1e-3, string.format("%s: cuda's gradient is the cpu's (worst relative error %g)", name, worst))
  end
end

-- a few training steps, on each device from the same weights
local function train(dev)
  kiln.manual_seed(5)
  local model = kiln.nn.Sequential(kiln.nn.Linear(6, 16), kiln.nn.GELU(), kiln.nn.LayerNorm(16), kiln.nn.Linear(16, 4))
  model:to(dev)
  local x = kiln.randn({ 32, 6 }, { seed = 6 }):to(dev)
  local y = kiln.randint(1, 5, { 32 }, { seed = 7 }):to(dev)
  local opt = kiln.optim.AdamW(model:parameters(), { lr = 1e-2 })
  local losses = {}
  for step = 1, 5 do
    opt:zero_grad()
    local loss = kiln.cross_entropy(model(x), y, { label_smoothing = 0.1 })
    loss:backward()
    kiln.nn.utils.clip_grad_norm_(model, 1.0)
    opt:step()
    losses[step] = loss:item()
  end
  return losses, GC.flat(model[4].weight)
end
local cl, cw = train("cpu")
local gl, gw = train("cuda")
local worst = 0
for i = 1, #cl do worst = math.max(worst, math.abs(cl[i] - gl[i])) end
for i = 1, #cw do worst = math.max(worst, math.abs(cw[i] - gw[i])) end
T.ok(worst <= 1e-4, "5 AdamW steps of a model on cuda match the cpu's losses and weights (worst " .. worst .. ")")

-- conv2d's gradients at a convnet's sizes (cuDNN's backward data and
-- backward filter), f32, bf16 and f64, against the CPU's in f64 on the
-- same (rounded) values: strided, padded, grouped, odd sizes
do
  local CONVS = {
    { "3x3 stride 2 pad 1", { 4, 16, 15, 17 }, { 24, 16, 3, 3 }, { stride = 2, padding = 1 } },
    { "3x3 stride 1 pad 1", { 2, 32, 28, 28 }, { 32, 32, 3, 3 }, { padding = 1 } },
    { "7x7 stride 2 pad 3 (a stem)", { 2, 3, 37, 33 }, { 16, 3, 7, 7 }, { stride = 2, padding = 3 } },
    { "1x1 stride 2", { 3, 24, 14, 14 }, { 40, 24, 1, 1 }, { stride = 2 } },
    { "3x3 depthwise stride 2", { 2, 24, 15, 15 }, { 24, 1, 3, 3 }, { stride = 2, padding = 1, groups = 24 } },
    { "3x3 dilation 2, 4 groups", { 2, 16, 19, 13 }, { 8, 4, 3, 3 }, { padding = 2, dilation = 2, groups = 4 } },
  }
  for _, dt in ipairs({ "f32", "bf16", "f64" }) do
    for ci, cv in ipairs(CONVS) do
      local x0 = kiln.randn(cv[2], { seed = 100 + ci }):to(dt)
      local w0 = (kiln.randn(cv[3], { seed = 200 + ci }) * 0.2):to(dt)
      local function grads(dev, ct)
        local x = x0:to(ct):to(dev):requires_grad_()
        local w = w0:to(ct):to(dev):requires_grad_()
        local y = kiln.conv2d(x, w, nil, cv[4])
        local r = kiln.randn(y:shape(), { seed = 300 + ci }):to(ct):to(dev)
        ;(y * r):sum():backward()
        return x.grad:to("cpu"):to("f64"), w.grad:to("cpu"):to("f64")
      end
      local rx, rw = grads("cpu", "f64")
      local gx, gw = grads("cuda", dt)
      local function rel(a, b) return ((a - b):abs():amax() / (b:abs():amax() + 1e-12)):item() end
      local ex, ew = rel(gx, rx), rel(gw, rw)
      local tol = ({ f32 = 2e-5, bf16 = 2e-2, f64 = 1e-9 })[dt]
      T.ok(ex == ex and ex <= tol and ew == ew and ew <= tol,
        string.format("conv2d %s %s on cuda: input and weight gradients against f64 (max rel %.1e, %.1e)", cv[1], dt, ex, ew))
    end
  end
end

-- a device move is a copy without history, to read values
local w = kiln.ones({ 3 }, { device = "cuda", requires_grad = true })
local host = (w * 2):sum():to("cpu")
T.ok(not host.requires_grad and host:item() == 6, "x:to('cpu') of a tensor with history: its value, no history")
T.raises(function() host:backward() end, "it was copied to another device %(x:to%), which autograd does not record yet",
  "backward from the copy says why it has no gradient")

T.done()
