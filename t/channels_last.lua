-- t/channels_last.lua: the layout pass (kn_pass_channels_last) on the CPU,
-- where it runs only when asked (kiln.config.channels_last = true, or
-- KILN_CHANNELS_LAST=1): which conv chains change layout and why
-- (KILN_LOGS=fusion, exact text), the kernels it leaves (NHWC shapes in
-- their names), and compiled channels-last results against eager NCHW and
-- a float64 reference, on fresh random inputs over odd sizes, strides,
-- paddings, dilations, groups and channel counts (3 and 5 channels are
-- padded), with weights as parameters (laid out once) and as arguments
-- (permuted at every call), residual adds and per-channel biases after
-- the convs. t/cuda_channels_last.lua is the GPU side (cuDNN NHWC).
local T = dofile("t/lib/tap.lua")
T.cpu_only("t/channels_last.lua")
local KILN = os.getenv("KILN") or "build/kiln"

local nextseed = T.seeds()

local run = T.output

local function lines_with(text, pat)
  local got = {}
  for l in text:gmatch("[^\n]+") do
    if l:find(pat) then got[#got + 1] = l end
  end
  return table.concat(got, "\n")
end

-- 1. what the pass says, exact text, on the convnet sample
local script = "local s = dofile('samples/convnet.lua'); local cm = kiln.compile(s.model); "
  .. "cm(s.inputs{small = true}[1]); for _, k in ipairs(cm:kernels()) do print(k.name) end"
local on = run("KILN_CHANNELS_LAST=1 KILN_LOGS=fusion " .. KILN .. " -e \"" .. script .. "\"")
T.is(lines_with(on, "^channels_last"), table.concat({
  "channels_last: conv2d ((command line):1) runs NHWC (converts its NCHW input: a chain starts, its 3 input channels padded to 4)",
  "channels_last: conv2d ((command line):1) runs NHWC (reads the NHWC value of the conv chain before it)",
  "channels_last: conv2d ((command line):1) runs NHWC (reads the NHWC value of the conv chain before it)",
  "channels_last: conv2d ((command line):1) runs NHWC (reads the NHWC value of the conv chain before it)",
  "channels_last: adaptive_avg_pool2d ((command line):1) runs NHWC on the conv chain's value",
}, "\n"), "KILN_LOGS=fusion: the four convs of convnet run NHWC, the first padded, and the pool after them (exact text)")
T.is(lines_with(on, "^k%d+_"), table.concat({
  "k0_conv2d_f32_2x16x16x32", "k1_relu_f32_2x16x16x32", "k2_conv2d_f32_2x8x8x64", "k3_relu_f32_2x8x8x64",
  "k4_conv2d_f32_2x4x4x128", "k5_relu_f32_2x4x4x128", "k6_conv2d_f32_2x2x2x256", "k7_relu_f32_2x2x2x256",
  "k8_adaptive_avg_pool2d_f32_2x1x1x256", "k9_matmul_f32_2x1000", "k10_add_f32_2x1000",
}, "\n"), "channels-last convnet: NHWC conv, ReLU and pool kernels, batch norm folded")
local off = run("KILN_LOGS=fusion " .. KILN .. " -e \"" .. script .. "\"")
T.is(lines_with(off, "^channels_last"), "", "default on the CPU: the pass does not run (the CPU runs NCHW)")
T.like(off, "k0_conv2d_f32_2x32x16x16", "default on the CPU: NCHW kernels")
local bad = run(KILN .. " -e \"kiln.config.channels_last = 'yes'; local cm = kiln.compile(function(x) return x + 1 end); cm(kiln.ones({2}))\"")
T.like(bad, "kiln.config.channels_last must be true, false or \"auto\" %(got yes%)", "a bad config value is an error naming it")

-- 2. results
kiln.config.channels_last = true

local function rel_err(got, want)
  local d = (got:to("f64") - want:to("f64")):abs():max():item()
  local m = want:to("f64"):abs():max():item()
  return d / (m > 0 and m or 1), d
end

local function no_nan(t) return t:to("f64"):ne(t:to("f64")):sum():item() == 0 end

-- unit roundoff per dtype; sums of up to a few hundred products
local TOL = { f32 = 1e-5, bf16 = 3e-2, f16 = 4e-3 }

local function conv_kernels(cm)
  local names = {}
  for _, k in ipairs(cm:kernels()) do
    if k.name:find("conv2d") then names[#names + 1] = k.name end
  end
  return names
end

-- a chain with weights as arguments: conv -> relu -> conv (same size) ->
-- + residual -> * per-channel scale {K, 1, 1} -> relu
local function chain(x, w1, b1, w2, scale, o)
  local y = kiln.conv2d(x, w1, b1, o):relu()
  local z = kiln.conv2d(y, w2, nil, { padding = 1 })
  return ((z + y) * scale):relu()
end

local cases = {
  -- n, c, h, w, k, kernel, stride, padding, dilation, groups
  { 2, 3, 9, 7, 8, 3, 1, 1, 1, 1 },
  { 1, 5, 11, 13, 6, 3, 2, 1, 1, 1 },
  { 3, 4, 8, 8, 4, 1, 1, 0, 1, 1 },
  { 2, 6, 10, 9, 6, 3, 2, 2, 2, 2 },
  { 1, 8, 7, 7, 8, 3, 1, 1, 1, 8 },
  { 2, 16, 6, 5, 12, 5, 1, 2, 1, 1 },
}
for _, dt in ipairs({ "f32", "bf16" }) do
  for ci, c in ipairs(cases) do
    local n, ch, h, w, k, ks, st, pd, dl, gr = table.unpack(c)
    local o = { stride = st, padding = pd, dilation = dl, groups = gr }
    local x = kiln.randn({ n, ch, h, w }, { seed = nextseed() }):to(dt)
    local w1 = (kiln.randn({ k, ch // gr, ks, ks }, { seed = nextseed() }) * 0.3):to(dt)
    local b1 = kiln.randn({ k }, { seed = nextseed() }):to(dt)
    local w2 = (kiln.randn({ k, k, 3, 3 }, { seed = nextseed() }) * 0.2):to(dt)
    local scale = kiln.randn({ k, 1, 1 }, { seed = nextseed() }):to(dt)
    local want = chain(x, w1, b1, w2, scale, o)
    local ref = chain(x:to("f64"), w1:to("f64"), b1:to("f64"), w2:to("f64"), scale:to("f64"), o)
    local cm = kiln.compile(chain)
    local got = cm(x, w1, b1, w2, scale, o)
    local what = string.format("%s case %d (n %d c %d %dx%d k %d kernel %d stride %d pad %d dil %d groups %d)",
      dt, ci, n, ch, h, w, k, ks, st, pd, dl, gr)
    T.ok(no_nan(got), what .. ": no NaN")
    local e_eager = rel_err(got, want)
    local e_ref = rel_err(got, ref)
    T.ok(e_eager <= TOL[dt] and e_ref <= TOL[dt],
      string.format("%s: channels-last compiled against eager NCHW (%.2g) and float64 (%.2g)", what, e_eager, e_ref))
    local convs = conv_kernels(cm)
    local ho = (h + 2 * pd - dl * (ks - 1) - 1) // st + 1
    local wo = (w + 2 * pd - dl * (ks - 1) - 1) // st + 1
    T.is((convs[1] or ""):gsub("^k%d+_", ""), string.format("conv2d_%s_%dx%dx%dx%d", dt, n, ho, wo, k),
      what .. ": the first conv's kernel is NHWC (channels last in its name)")
  end
end

-- 3. a module: parameters laid out once (3 channels padded), batch norm
-- folded first; a parameter written in place is seen at the next call
kiln.nn.manual_seed(nextseed())
local net = kiln.nn.Sequential({
  kiln.nn.Conv2d(3, 5, 3, { stride = 2, padding = 1, bias = false }), kiln.nn.BatchNorm2d(5), kiln.nn.ReLU(),
  kiln.nn.Conv2d(5, 7, 3, { padding = 1 }), kiln.nn.ReLU(),
}):eval()
local x = kiln.randn({ 2, 3, 13, 11 }, { seed = nextseed() })
local cm = kiln.compile(net)
local got, want = cm(x), net(x)
T.ok(no_nan(got) and rel_err(got, want) <= 1e-5, string.format("module (batch norm folded, 3 and 5 channels padded): compiled channels-last against eager (%.2g)", rel_err(got, want)))
T.is(conv_kernels(cm)[2], "k2_conv2d_f32_2x7x6x7", "module: the second conv reads the first's NHWC value")
local w4
for name, p in net:named_parameters() do
  if name == "4.weight" then w4 = p end
end
kiln.no_grad(function() w4:copy_(w4 * 2) end) -- a parameter: written outside autograd
got, want = cm(x), net(x)
T.ok(rel_err(got, want) <= 1e-5, string.format("a weight written in place: the next call lays it out again (%.2g)", rel_err(got, want)))

-- 4. a conv whose value is the caller's output comes back NCHW
local function one(x0, w0) return kiln.conv2d(x0, w0, nil, { padding = 1 }) end
local x1 = kiln.randn({ 2, 4, 5, 6 }, { seed = nextseed() })
local w1 = kiln.randn({ 3, 4, 3, 3 }, { seed = nextseed() })
local out = kiln.compile(one)(x1, w1)
T.is(table.concat(out:shape(), "x"), "2x3x5x6", "an output conv keeps its NCHW shape")
T.ok(rel_err(out, one(x1, w1)) <= 1e-6, "an output conv: compiled channels-last equals eager")
T.ok(rel_err(out:contiguous(), one(x1, w1)) <= 1e-6, "an output conv: its contiguous copy equals eager")

-- Run a script in a kiln process of its own with epilogue folding on the
-- CPU (KILN_CPU_FOLD_EPILOGUES, read when a plan is built); SEED in its
-- text becomes a fresh seed. Its output.
local function run_folding(script)
  local file = os.tmpname()
  local fh = io.open(file, "w")
  fh:write((script:gsub("SEED", tostring(nextseed()))))
  fh:close()
  local out = run("KILN_CPU_FOLD_EPILOGUES=1 " .. KILN .. " " .. file)
  os.remove(file)
  return out
end

-- 4b. a bottleneck's end, 1x1 conv + bias + residual + ReLU: folded into the
-- conv's library epilogue (on the CPU only when asked, as the GPU always
-- does), against float64, and the fold counted
do
  local script = [[
kiln.config.channels_last = true
local function f(x, w1, w2, b2)
  local y = kiln.conv2d(x, w1, nil, { padding = 1 }):relu()
  return (kiln.conv2d(y, w2, b2) + y):relu()
end
local x = kiln.randn({ 2, 8, 9, 7 }, { seed = SEED })
local w1 = kiln.randn({ 8, 8, 3, 3 }, { seed = SEED + 1 }) * 0.2
local w2 = kiln.randn({ 8, 8, 1, 1 }, { seed = SEED + 2 }) * 0.3
local b2 = kiln.randn({ 8 }, { seed = SEED + 3 })
local ref = f(x:to("f64"), w1:to("f64"), w2:to("f64"), b2:to("f64"))
local cm = kiln.compile(f)
local y = cm(x, w1, w2, b2)
local d = (y:to("f64") - ref):abs():max():item() / ref:abs():max():item()
print(string.format("err %.3g folded %d nan %d", d, cm:stats().library_epilogues, y:ne(y):sum():item()))
]]
  local out = run_folding(script)
  local err, folded, nans = out:match("err (%S+) folded (%d+) nan (%d+)")
  T.ok(tonumber(err) and tonumber(err) <= 1e-5 and nans == "0",
    "1x1 conv + bias + residual + ReLU in the conv's epilogue: against float64 (" .. tostring(err) .. ")")
  T.is(folded, "1", "... the add and ReLU kernel folded into the 1x1 conv (cm:stats().library_epilogues)")
end

-- 4c. a depthwise conv + hardswish as the ONNX importer writes it
-- (x * min(max(x * (1/6) + 0.5, 0), 1), MobileNetV3's): the activation
-- folded into the conv's epilogue, against float64; a near miss (another
-- constant) and a conv value read elsewhere too stay two kernels
do
  local script = [[
kiln.config.channels_last = true
local function hs(z, sixth) return z * (z * sixth + 0.5):maximum(0):minimum(1) end
local function f(x, w1, wd, bd)
  local y = kiln.conv2d(x, w1):relu()
  return hs(kiln.conv2d(y, wd, bd, { stride = 2, padding = 2, groups = 12 }), 1 / 6)
end
local function near(x, w1, wd, bd)
  local y = kiln.conv2d(x, w1):relu()
  return hs(kiln.conv2d(y, wd, bd, { stride = 2, padding = 2, groups = 12 }), 1 / 5)
end
local function shared(x, w1, wd, bd)
  local y = kiln.conv2d(x, w1):relu()
  local z = kiln.conv2d(y, wd, bd, { stride = 2, padding = 2, groups = 12 })
  return hs(z, 1 / 6), z:sum()
end
local x = kiln.randn({ 2, 5, 11, 9 }, { seed = SEED })
local w1 = kiln.randn({ 12, 5, 1, 1 }, { seed = SEED + 1 }) * 0.4
local wd = kiln.randn({ 12, 1, 5, 5 }, { seed = SEED + 2 }) * 0.3
local bd = kiln.randn({ 12 }, { seed = SEED + 3 })
for _, g in ipairs({ f, near, shared }) do
  local ref = g(x:to("f64"), w1:to("f64"), wd:to("f64"), bd:to("f64"))
  local cm = kiln.compile(g)
  local y = cm(x, w1, wd, bd)
  local d = (y:to("f64") - ref):abs():max():item() / ref:abs():max():item()
  io.write(string.format("err %.3g folded %d nan %d\n", d, cm:stats().library_epilogues, y:ne(y):sum():item()))
end
]]
  local out = run_folding(script)
  local rows = {}
  for err, folded, nans in out:gmatch("err (%S+) folded (%d+) nan (%d+)") do rows[#rows + 1] = { tonumber(err), folded, nans } end
  if not T.is(#rows, 3, "the hardswish script ran its three cases") then print((("\n" .. out):gsub("\n", "\n# "))) end
  for i, what in ipairs({ "depthwise conv + hardswish", "a near miss (x / 5)", "a conv value read elsewhere" }) do
    local r = rows[i] or {}
    T.ok(r[1] and r[1] <= 1e-5 and r[3] == "0", what .. ": against float64 (" .. tostring(r[1]) .. ")")
  end
  T.is(rows[1] and rows[1][2], "1", "the hardswish kernel folded into the depthwise conv (cm:stats().library_epilogues)")
  T.is(rows[2] and rows[2][2], "0", "x * (x / 5 + 0.5) clamped is not hardswish: not folded")
  T.is(rows[3] and rows[3][2], "0", "a conv value also summed is not folded (the conv's own value must exist)")
end

-- 4d. strict f32 (TF32 off) folds a conv's ReLU only where the GPU runs
-- the conv outside cuDNN: an NCHW depthwise conv (kiln's kernel) and a
-- one-pixel 1x1 conv (a GEMM) fold; a 3x3 conv of one group does not
do
  local script = [[
kiln.config.channels_last = false
local function dw(x, wd, bd) return kiln.conv2d(x, wd, bd, { padding = 1, groups = 6 }):relu() end
local function fc(x, w, b) return kiln.conv2d(x, w, b):relu() end
local function full(x, w, b) return kiln.conv2d(x, w, b, { padding = 1 }):relu() end
local cases = {
  { dw, kiln.randn({ 2, 6, 9, 7 }, { seed = SEED }), kiln.randn({ 6, 1, 3, 3 }, { seed = SEED + 1 }) },
  { fc, kiln.randn({ 3, 10, 1, 1 }, { seed = SEED + 2 }), kiln.randn({ 6, 10, 1, 1 }, { seed = SEED + 3 }) },
  { full, kiln.randn({ 2, 10, 5, 5 }, { seed = SEED + 4 }), kiln.randn({ 6, 10, 3, 3 }, { seed = SEED + 5 }) },
}
local b = kiln.randn({ 6 }, { seed = SEED + 6 })
for _, c in ipairs(cases) do
  local f, x, w = c[1], c[2], c[3] * 0.3
  local ref = f(x:to("f64"), w:to("f64"), b:to("f64"))
  local cm = kiln.compile(f)
  local y = cm(x, w, b)
  local d = (y:to("f64") - ref):abs():max():item() / ref:abs():max():item()
  print(string.format("err %.3g folded %d nan %d", d, cm:stats().library_epilogues, y:ne(y):sum():item()))
end
]]
  local out = run_folding(script)
  local rows = {}
  for err, folded, nans in out:gmatch("err (%S+) folded (%d+) nan (%d+)") do rows[#rows + 1] = { tonumber(err), folded, nans } end
  if not T.is(#rows, 3, "the strict-f32 ReLU script ran its three cases") then print((("\n" .. out):gsub("\n", "\n# "))) end
  for i, what in ipairs({ "NCHW depthwise conv + ReLU", "one-pixel 1x1 conv + ReLU", "3x3 conv + ReLU" }) do
    local r = rows[i] or {}
    T.ok(r[1] and r[1] <= 1e-5 and r[3] == "0", what .. " in f32: against float64 (" .. tostring(r[1]) .. ")")
    T.is(r[2], i < 3 and "1" or "0", what .. (i < 3 and ": the ReLU folded into the conv" or ": not folded (cuDNN's fused f32 engines were slower)"))
  end
end

-- 5. pools, a squeeze-excitation and global means on the chain: each runs
-- on the NHWC value (its kernel's name has NHWC dims), against eager NCHW
-- and float64, over odd sizes and channel counts (pool windows, strides,
-- paddings, ceil_mode, dilation and count_include_pad vary)
local function se_block(x, w1, w2, s1, s2, po, ao)
  local y = kiln.conv2d(x, w1, nil, { stride = 2, padding = 1 }):relu()
  local p = kiln.max_pool2d(y, po.k, { stride = po.stride, padding = po.padding, ceil_mode = po.ceil_mode })
  local z = kiln.conv2d(p, w2, nil, { padding = 1 })
  local a = kiln.avg_pool2d(z, ao.k, { stride = ao.stride, padding = ao.padding, count_include_pad = ao.count_include_pad })
  local e = kiln.conv2d(a:mean({ 3, 4 }, true), s1):relu()
  e = kiln.conv2d(e, s2):sigmoid()
  local r = (a * e):relu()
  return r:mean({ 3, 4 }), r
end
local pool_cases = {
  -- n, c, h, w, k; max pool {k, stride, padding, dilation (1: the API has none), ceil_mode}; avg pool {k, stride, padding, count_include_pad}
  { 2, 3, 17, 15, 8, { 3, 2, 1, 1, false }, { 3, 1, 1, true } },
  { 1, 5, 23, 19, 12, { 2, 2, 0, 1, true }, { 3, 1, 1, false } },
  { 3, 4, 14, 14, 6, { 3, 1, 1, 1, false }, { 2, 2, 0, true } },
}
for _, dt in ipairs({ "f32", "bf16" }) do
  for ci, c in ipairs(pool_cases) do
    local n, ch, h, w, k, pm, pa = table.unpack(c)
    local po = { k = pm[1], stride = pm[2], padding = pm[3], dilation = pm[4], ceil_mode = pm[5] }
    local ao = { k = pa[1], stride = pa[2], padding = pa[3], count_include_pad = pa[4] }
    local x = kiln.randn({ n, ch, h, w }, { seed = nextseed() }):to(dt)
    local w1 = (kiln.randn({ k, ch, 3, 3 }, { seed = nextseed() }) * 0.3):to(dt)
    local w2 = (kiln.randn({ k, k, 3, 3 }, { seed = nextseed() }) * 0.2):to(dt)
    local s1 = (kiln.randn({ 3, k, 1, 1 }, { seed = nextseed() }) * 0.5):to(dt)
    local s2 = (kiln.randn({ k, 3, 1, 1 }, { seed = nextseed() }) * 0.5):to(dt)
    local f = function(...) return se_block(...) end
    local want, want_r = f(x, w1, w2, s1, s2, po, ao)
    local ref, ref_r = f(x:to("f64"), w1:to("f64"), w2:to("f64"), s1:to("f64"), s2:to("f64"), po, ao)
    local cm = kiln.compile(f)
    local got, got_r = cm(x, w1, w2, s1, s2, po, ao)
    local what = string.format("%s pool case %d (n %d c %d %dx%d k %d)", dt, ci, n, ch, h, w, k)
    T.ok(no_nan(got) and no_nan(got_r), what .. ": no NaN")
    local e1, e2 = rel_err(got, want), rel_err(got, ref)
    local e3, e4 = rel_err(got_r, want_r), rel_err(got_r, ref_r)
    T.ok(math.max(e1, e2, e3, e4) <= TOL[dt], string.format(
      "%s: squeeze-excitation block with pools, compiled channels-last against eager (%.2g, %.2g) and float64 (%.2g, %.2g)",
      what, e1, e3, e2, e4))
    local pools = {}
    for _, kk in ipairs(cm:kernels()) do
      if kk.name:find("pool") then pools[#pools + 1] = (kk.name:gsub("^k%d+_", "")) end
    end
    local ho = (h + 1) // 2
    local wo = (w + 1) // 2
    local function out(len, kk, st, pd, dl, ceil)
      local span = len + 2 * pd - dl * (kk - 1) - 1
      local o = (ceil and (span + st - 1) // st or span // st) + 1
      if ceil and (o - 1) * st >= len + pd then o = o - 1 end
      return o
    end
    local ph, pw = out(ho, pm[1], pm[2], pm[3], pm[4], pm[5]), out(wo, pm[1], pm[2], pm[3], pm[4], pm[5])
    T.is(pools[1], string.format("max_pool2d_%s_%dx%dx%dx%d", dt, n, ph, pw, k),
      what .. ": the max pool runs on the NHWC value (channels last in its name)")
    T.ok(#pools >= 3 and pools[#pools]:find(string.format("^adaptive_avg_pool2d_%s_%dx1x1x%d", dt, n, k)) ~= nil,
      what .. ": the means over H and W run as global average pools of the NHWC value: " .. table.concat(pools, ", "))
  end
end

-- 7. "auto" where the device says f32 convs run faster channels-last (the
-- GPU's split-precision convolution on Hopper; KILN_CPU_CONV_NHWC_F32=1
-- makes the CPU say so): an inference graph goes NHWC, and so does a
-- training step's graph, its conv gradients too (the split-precision
-- gradients on Hopper), the image's 3 channels padded to 4 for the first
-- conv's weight gradient
do
  local inference = "local s = dofile('samples/convnet.lua'); local cm = kiln.compile(s.model); "
    .. "cm(s.inputs{small = true}[1]); for _, k in ipairs(cm:kernels()) do print(k.name) end"
  local training = "kiln.session.small = true; local s = kiln.load('samples/train_convnet.lua', {quiet = true}); "
    .. "local cm = kiln.compile(s.train_step); cm(table.unpack(s.inputs{small = true})); "
    .. "for _, k in ipairs(cm:kernels()) do print(k.name) end"
  local inf = run("KILN_CPU_CONV_NHWC_F32=1 " .. KILN .. " -e \"" .. inference .. "\"")
  T.like(inf, "k0_conv2d_f32_2x16x16x32\n", "auto, f32, a device that runs NHWC faster: the inference graph's convs are NHWC")
  local tr = run("KILN_CPU_CONV_NHWC_F32=1 " .. KILN .. " -e \"" .. training .. "\"")
  T.like(tr, "conv2d_f32_2x16x16x32\n", "... a training step's convs are NHWC too")
  T.ok(not tr:find("conv2d_f32_2x32x16x16", 1, true), "... none of them NCHW")
  T.like(tr, "conv2d_input_grad_f32_2x16x16x32\n", "... the second conv's input gradient NHWC")
  T.like(tr, "conv2d_weight_grad_f32_32x3x3x4\n", "... the first conv's weight gradient NHWC, its 3 channels padded to 4")
  local off = run(KILN .. " -e \"" .. inference .. "\"")
  T.like(off, "k0_conv2d_f32_2x32x16x16\n", "auto, f32, a device that does not: NCHW")
end

T.done()
