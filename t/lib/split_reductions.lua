-- split_reductions.lua (run by t/split_reductions.sh with the pass on):
-- sums, means and vars over several dims, compiled, against eager and a
-- float64 reference on fresh random inputs; the compiled plans hold no
-- reduction over several dims (the pass split each into a row reduction
-- and a small rest) but column sums, which the pass leaves to the
-- backend's one reduction (on a GPU its column kernel); a BatchNorm
-- training step's statistics and their gradients the same.
local T = dofile("t/lib/tap.lua")
local seed = tonumber(os.getenv("KILN_TEST_SEED")) or os.time()
io.write("# inputs from seed ", seed, " (KILN_TEST_SEED=", seed, " repeats them)\n")

local function rel(a, b)
  a, b = a:to("f64"), b:to("f64")
  local r = ((a - b):abs():amax() / (b:abs():amax() + 1e-30)):item()
  return r == r and r or math.huge
end

-- kernels that reduce over several dims: names like k3_sum_f32_6 from a
-- 4-D input are not told apart by name, so count the plan's reductions
-- that are not generated kernels (the generic one is the backend's)
local function generic_reductions(cm, ...)
  local n = 0
  for _, k in ipairs(cm:kernels(...)) do
    if k.kind ~= "generated" and (k.name:match("_sum_") or k.name:match("_mean_") or k.name:match("_var_")) then n = n + 1 end
  end
  return n
end

local CASES = {
  { "mean over N, H, W", { 8, 6, 9, 10 }, function(t) return t:mean({ 1, 3, 4 }) end },
  { "mean over N, H, W, keepdim", { 8, 6, 9, 10 }, function(t) return t:mean({ 1, 3, 4 }, true) end },
  { "var over N, H, W (population)", { 8, 6, 9, 10 }, function(t) return t:var({ 1, 3, 4 }, { correction = 0 }) end },
  { "var over N, H, W, keepdim (unbiased)", { 8, 6, 9, 10 }, function(t) return t:var({ 1, 3, 4 }, true) end },
  { "sum over the last two dims", { 5, 7, 6, 11 }, function(t) return t:sum({ 3, 4 }) end },
  { "sum over dims 1 and 4 of 4", { 5, 7, 3, 40 }, function(t) return t:sum({ 1, 4 }) end },
  { "column sum over 2 leading dims", { 8, 16, 24 }, function(t) return t:sum({ 1, 2 }) end, 1 },
  { "column mean over 96 rows", { 96, 40 }, function(t) return t:mean({ 1 }) end },
  { "mean and var of one batch (BatchNorm's pair)", { 8, 6, 9, 10 },
    function(t) return t:mean({ 1, 3, 4 }), t:var({ 1, 3, 4 }, { correction = 0 }) end },
  -- the layout pass's NCHW view of an NHWC value: reduced over N, H and W,
  -- it is a column reduction of the NHWC value (one backend reduction)
  { "mean over N, H, W of a channels-last view", { 8, 9, 10, 6 },
    function(t) return t:permute({ 1, 4, 2, 3 }):mean({ 1, 3, 4 }) end, 1 },
  { "var over N, H, W of a channels-last view, keepdim (unbiased)", { 8, 9, 10, 6 },
    function(t) return t:permute({ 1, 4, 2, 3 }):var({ 1, 3, 4 }, true) end, 1 },
  { "var over N, H, W of a channels-last view (population)", { 8, 9, 10, 6 },
    function(t) return t:permute({ 1, 4, 2, 3 }):var({ 1, 3, 4 }, { correction = 0 }) end, 1 },
  { "sum over N, H, W of a channels-last view, keepdim", { 8, 9, 10, 6 },
    function(t) return t:permute({ 1, 4, 2, 3 }):sum({ 1, 3, 4 }, true) end, 1 },
}
for ci, c in ipairs(CASES) do
  for _, dt in ipairs({ "f32", "bf16" }) do
    local x = kiln.randn(c[2], { seed = seed + ci }):to(dt)
    local cm = kiln.compile(c[3])
    local got = { cm(x) }
    local want = { c[3](x) }
    local ref = { c[3](x:to("f64")) }
    local e_eager, e_ref = 0, 0
    for k = 1, #want do
      T.is(got[k].dtype, want[k].dtype, string.format("%s %s: result %d's dtype", c[1], dt, k))
      T.is(table.concat(got[k]:shape(), ","), table.concat(want[k]:shape(), ","), string.format("%s %s: result %d's shape", c[1], dt, k))
      e_eager = math.max(e_eager, rel(got[k], want[k]))
      e_ref = math.max(e_ref, rel(got[k], ref[k]))
    end
    local tol = dt == "f32" and 2e-6 or 1.6e-2
    T.ok(e_eager <= tol and e_ref <= tol, string.format("%s %s: compiled against eager %.1e, against f64 %.1e", c[1], dt, e_eager, e_ref))
    if c[4] then
      T.is(generic_reductions(cm, x), c[4], string.format("%s %s: the column sum stays one reduction", c[1], dt))
    else
      T.is(generic_reductions(cm, x), 0, string.format("%s %s: no reduction over several dims left in the plan", c[1], dt))
    end
  end
end

-- autocast's BatchNorm statistics: mean and var in f32 of a bf16
-- channels-last value. The column reductions read the bf16 value and
-- write f32 (the widening cast folded in: no f32 copy is made)
do
  local x = kiln.randn({ 8, 9, 10, 6 }, { seed = seed + 77 }):to("bf16")
  local function stats(v)
    v = v:permute({ 1, 4, 2, 3 })
    return v:mean({ 1, 3, 4 }), v:var({ 1, 3, 4 }, { correction = 0 }), v:var({ 1, 3, 4 }, true)
  end
  local cm = kiln.compile(function(t) return stats(t:to("f32")) end)
  local got, ref = { cm(x) }, { stats(x:to("f64")) }
  for k = 1, 3 do
    T.is(got[k].dtype, "f32", "f32 statistics of a bf16 channels-last value: result " .. k .. "'s dtype")
    T.ok(rel(got[k], ref[k]) <= 1e-6, string.format("... result %d against f64: %.1e", k, rel(got[k], ref[k])))
  end
  local names = {}
  for _, k in ipairs(cm:kernels(x)) do names[#names + 1] = k.name end
  names = table.concat(names, " ")
  T.ok(not names:find("cast", 1, true), "... no cast kernel: the reductions read the bf16 value (" .. names .. ")")
  T.is(generic_reductions(cm, x), 3, "... three column reductions")
end

-- a BatchNorm net's training step, without an update: (mean of its output squared):backward()
local function bn_step(m)
  return function(xx)
    m:zero_grad()
    local l = (m(xx) ^ 2):mean()
    l:backward()
    return l
  end
end

-- the largest difference between two models' gradients, against the
-- largest gradient of all: a conv's bias before a BatchNorm gets none
-- (rounding noise of 1e-8 on both sides)
local function grads_apart(m1, m2)
  local scale, worst = 0, 0
  for _, p in ipairs(m1:parameters()) do scale = math.max(scale, p.grad:abs():amax():item()) end
  for k, p in ipairs(m1:parameters()) do
    local d = (m2:parameters()[k].grad:to("f64") - p.grad:to("f64")):abs():amax():item()
    worst = math.max(worst, d == d and d / scale or math.huge)
  end
  return worst
end

-- a BatchNorm training step: its statistics in the forward, the sums of its
-- gradient in the backward, all split; gradients against eager
do
  local nn = kiln.nn
  nn.manual_seed(seed % 1000)
  local m1 = nn.Sequential(nn.Conv2d(3, 8, 3, { padding = 1 }), nn.BatchNorm2d(8), nn.ReLU())
  nn.manual_seed(seed % 1000)
  local m2 = nn.Sequential(nn.Conv2d(3, 8, 3, { padding = 1 }), nn.BatchNorm2d(8), nn.ReLU())
  local x = kiln.randn({ 4, 3, 12, 12 }, { seed = seed + 99 })
  local cm = kiln.compile(bn_step(m2))
  local worst = 0
  for _ = 1, 3 do
    local a, b = bn_step(m1)(x):item(), cm(x):item()
    worst = math.max(worst, math.abs(a - b) / math.abs(a))
  end
  worst = math.max(worst, grads_apart(m1, m2))
  T.ok(worst <= 1e-5, string.format("a BatchNorm training step: loss and gradients as eager's (worst %.1e)", worst))
  T.ok(rel(m2[2].running_var, m1[2].running_var) <= 1e-5, "... and its running variance")
end

-- the same channels-last under bf16 autocast (kiln.config.channels_last,
-- as bf16 convs run on a GPU): the convs, their gradients and the
-- BatchNorms run NHWC, and the statistics and their gradients' sums are
-- column reductions of the NHWC values; loss, gradients and running
-- variance against eager's NCHW step. The first conv reads a 3-channel
-- image: its weight's gradient reads the image padded to 8 channels.
do
  local nn = kiln.nn
  local function model()
    nn.manual_seed(seed % 1000 + 1)
    return nn.Sequential(nn.Conv2d(3, 8, 3, { padding = 1 }), nn.BatchNorm2d(8), nn.ReLU(),
      nn.Conv2d(8, 16, 3, { stride = 2, padding = 1 }), nn.BatchNorm2d(16), nn.ReLU())
  end
  local m1, m2 = model(), model()
  local x = kiln.randn({ 4, 3, 10, 10 }, { seed = seed + 98 })
  kiln.config.channels_last = true
  local cm = kiln.compile(bn_step(m2), { autocast = "bf16" })
  local worst = 0
  for _ = 1, 3 do
    local a, b = kiln.autocast("bf16", bn_step(m1), x):item(), cm(x):item()
    worst = math.max(worst, math.abs(a - b) / math.abs(a))
  end
  local names, per_channel = {}, 0
  for _, k in ipairs(cm:kernels(x)) do
    names[#names + 1] = k.name
    if k.kind ~= "generated" and (k.name:match("_sum_%w+_8$") or k.name:match("_sum_%w+_16$")
        or k.name:match("_mean_%w+_8$") or k.name:match("_mean_%w+_16$")
        or k.name:match("_var_%w+_8$") or k.name:match("_var_%w+_16$")) then
      per_channel = per_channel + 1
    end
  end
  names = table.concat(names, " ")
  kiln.config.channels_last = "auto"
  worst = math.max(worst, grads_apart(m1, m2))
  -- bf16 sums in other orders (columns against eager's NCHW reductions)
  -- round to other bf16 values now and then: a bf16 step's tolerance
  T.ok(worst <= 1.6e-2, string.format("a channels-last bf16 BatchNorm training step: loss and gradients as eager's (worst %.1e)", worst))
  T.ok(rel(m2[5].running_var, m1[5].running_var) <= 1.6e-2, "... and its running variance")
  T.ok(names:find("conv2d_input_grad_bf16_4x10x10x8", 1, true) and names:find("conv2d_weight_grad_bf16_16x3x3x8", 1, true)
    and names:find("batch_norm_relu_bf16_4x5x5x16", 1, true),
    "... the input's and the weight's gradients of the second conv, and the BatchNorm, ran NHWC (kernel names)")
  T.ok(names:find("conv2d_weight_grad_bf16_8x3x3x8", 1, true),
    "... and the first conv's weight gradient, its 3 image channels padded to 8 (kernel names)")
  T.ok(not names:find("k%d+_cast_f32_4x10x10x8") and not names:find("k%d+_cast_f32_4x5x5x16"),
    "... and the BatchNorms' statistics read the bf16 conv outputs, no f32 copy (kernel names)")
  T.is(per_channel, 10, "... each BatchNorm's mean, var and two gradient sums, and each conv's bias gradient: "
    .. "10 reductions to a value per channel, each one backend reduction (on a GPU: its column kernel)")
end

-- the convnet sample's whole training step on 32 images of 32 x 32,
-- compiled, against eager: cross entropy's ignore mask is a small value of
-- the labels with the rows of log_softmax's kernel, which computes it
-- before the mask's own node (ride_on_rows); the memory plan placed it at
-- its node, over bytes still alive when the kernel wrote it (with 32 images,
-- as many as the first BatchNorm's channels, a value its backward read),
-- and that BatchNorm's weight and bias came out 100 off after one AdamW
-- step
do
  local function fresh() return kiln.load("samples/train_convnet.lua", { quiet = true }) end
  local s1, s2 = fresh(), fresh()
  local x = kiln.randn({ 32, 3, 32, 32 }, { seed = seed + 5 })
  local labels = kiln.randint(1, 1001, { 32 }, { seed = seed + 6 })
  local xs1, xs2 = { x, labels }, { x, labels }
  local cm = kiln.compile(s2.train_step)
  local worst_loss, worst_param = 0, 0
  for _ = 1, 2 do
    local a, b = s1.train_step(table.unpack(xs1)):item(), cm(table.unpack(xs2)):item()
    worst_loss = math.max(worst_loss, a == a and b == b and math.abs(a - b) or math.huge)
  end
  local p1, p2 = s1.model:parameters(), s2.model:parameters()
  for k, p in ipairs(p1) do
    local d = (p2[k]:to("f64") - p:to("f64")):abs():amax():item()
    worst_param = math.max(worst_param, d == d and d or math.huge)
  end
  -- AdamW moves a parameter by at most lr (1e-3) a step; a gradient of
  -- rounding noise may move it the other way: 2 steps, 4e-3 at most
  T.ok(worst_loss <= 1e-4 and worst_param <= 4e-3, string.format(
    "the convnet's training step, compiled, as eager's for 2 steps (loss %.1e, parameters %.1e)", worst_loss, worst_param))
end

T.done()
