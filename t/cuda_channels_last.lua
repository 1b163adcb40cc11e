-- t/cuda_channels_last.lua: channels-last convolutions on the GPU (the
-- layout pass, cuDNN's NHWC plans, kiln's transpose-and-pad of the chain's
-- input, and kiln's own kernel where cuDNN refuses): compiled NHWC chains
-- against a float64 reference on the CPU and against CUDA eager (NCHW) on
-- fresh random inputs, over odd sizes, strides, paddings, dilations, groups
-- and channel counts (3, 5: padded to 16 bytes), bf16, f16 and f32, in every
-- mode; that "auto" turns the pass on for bf16 (and cuDNN takes the NHWC
-- plan: KILN_LOGS=library); and batch norm folded into an NHWC conv.
-- Skipped where there is no CUDA device.
local T = dofile("t/lib/tap.lua")
if not pcall(kiln.zeros, { 1 }, { device = "cuda" }) then T.skip_all("no CUDA device") end
local KILN = os.getenv("KILN") or "build/kiln"

local nextseed = T.seeds()

local run = T.output

local function rel_err(got, want)
  local g, w = got:to("cpu"):to("f64"), want:to("cpu"):to("f64")
  if g:ne(g):sum():item() > 0 then return math.huge end
  local d = (g - w):abs():max():item()
  local m = w:abs():max():item()
  return d / (m > 0 and m or 1)
end

local TOL = { f32 = 2e-5, bf16 = 3e-2, f16 = 4e-3 }

local function chain(x, w1, b1, w2, scale, o)
  local y = kiln.conv2d(x, w1, b1, o):relu()
  local z = kiln.conv2d(y, w2, nil, { padding = 1 })
  return ((z + y) * scale):relu()
end

local cases = {
  -- n, c, h, w, k, kernel, stride, padding, dilation, groups
  { 2, 3, 33, 31, 8, 3, 1, 1, 1, 1 },
  { 1, 5, 21, 19, 6, 3, 2, 1, 1, 1 },
  { 3, 16, 8, 8, 16, 1, 1, 0, 1, 1 },
  { 2, 6, 10, 9, 6, 3, 2, 2, 2, 2 },
  { 1, 32, 15, 15, 32, 3, 1, 1, 1, 32 },
  { 4, 64, 14, 14, 128, 3, 2, 1, 1, 1 },
}
kiln.config.channels_last = true -- f32 too (auto leaves f32 NCHW off Hopper)
for _, dt in ipairs({ "bf16", "f16", "f32" }) do
  for ci, c in ipairs(cases) do
    local n, ch, h, w, k, ks, st, pd, dl, gr = table.unpack(c)
    local o = { stride = st, padding = pd, dilation = dl, groups = gr }
    local args = {
      kiln.randn({ n, ch, h, w }, { seed = nextseed() }),
      kiln.randn({ k, ch // gr, ks, ks }, { seed = nextseed() }) * 0.3,
      kiln.randn({ k }, { seed = nextseed() }),
      kiln.randn({ k, k, 3, 3 }, { seed = nextseed() }) * 0.2,
      kiln.randn({ k, 1, 1 }, { seed = nextseed() }),
    }
    local cpu, gpu = {}, {}
    for i, a in ipairs(args) do
      local r = a:to(dt) -- the rounded inputs both sides see
      cpu[i] = r:to("f64")
      gpu[i] = r:to("cuda")
    end
    cpu[6], gpu[6] = o, o
    local ref = chain(table.unpack(cpu))
    local eager = chain(table.unpack(gpu))
    local what = string.format("%s case %d (n %d c %d %dx%d k %d kernel %d stride %d pad %d dil %d groups %d)",
      dt, ci, n, ch, h, w, k, ks, st, pd, dl, gr)
    T.ok(rel_err(eager, ref) <= TOL[dt], what .. ": CUDA eager (NCHW) against float64")
    for _, mode in ipairs({ "default", "reduce-overhead", "max-autotune" }) do
      local cm = kiln.compile(chain, { mode = mode })
      local got = cm(table.unpack(gpu))
      got = cm(table.unpack(gpu)) -- a replay under reduce-overhead
      local e_ref, e_eager = rel_err(got, ref), rel_err(got, eager)
      T.ok(e_ref <= TOL[dt] and e_eager <= TOL[dt],
        string.format("%s %s: channels-last against float64 (%.2g) and CUDA eager (%.2g)", what, mode, e_ref, e_eager))
    end
  end
end

-- auto: bf16 runs NHWC through cuDNN, f32 stays NCHW
local script = "local s = dofile('samples/convnet.lua'); local m = s.model:to('cuda'):to('%s'); "
  .. "local cm = kiln.compile(m); cm(s.inputs{dtype = '%s', device = 'cuda'}[1]); "
  .. "for _, k in ipairs(cm:kernels()) do print(k.name) end"
local bf = run("KILN_LOGS=library,fusion " .. KILN .. " -e \"" .. script:format("bf16", "bf16") .. "\"")
T.like(bf, "k0_conv2d_bf16_32x112x112x32", "auto, bf16 convnet: the first conv's kernel is NHWC")
T.like(bf, "conv2d bf16 x{32,32,112,112} w{64,32,3,3}[^\n]* fused bias nhwc[^\n]*: cuDNN plan",
  "auto, bf16: cuDNN takes the second conv NHWC with its bias and ReLU fused")
local ma_dir = os.tmpname()
os.remove(ma_dir)
local ma = run("KILN_CACHE_DIR=" .. ma_dir .. " KILN_LOGS=autotune " .. KILN .. " -e \"" .. script:format("bf16", "bf16"):gsub("kiln.compile%(m%)", "kiln.compile(m, {mode = 'max-autotune'})") .. "\"")
T.like(ma, "autotune k0_conv2d_bf16_32x112x112x32 [^\n]*kiln stem conv nhwc %+bias%+relu",
  "max-autotune, bf16: the image conv's candidates include kiln's stem kernel (bias and ReLU fused)")
os.execute("rm -rf '" .. ma_dir .. "'")
-- f32: NHWC where kiln's split-precision convolution runs (Hopper), whose
-- epilogue takes the ReLU; NCHW elsewhere and with it turned off
local dev1 = (kiln.device_info().cuda.devices or {})[1] or {}
local f32 = run("KILN_LOGS=fusion " .. KILN .. " -e \"" .. script:format("f32", "f32") .. "\"")
if dev1.cc == "9.0" then
  T.like(f32, "k0_conv2d_f32_32x112x112x32\n", "auto, f32 convnet on Hopper: NHWC, the ReLU in the conv's kernel")
  T.like(f32, "runs k3_relu_f32_32x56x56x64 in its epilogue", "auto, f32 convnet on Hopper: the ReLUs in the convs' epilogues")
  T.like(f32, "runs k1_relu_f32_32x112x112x32 in its epilogue", "... the stem conv's too")
else
  T.like(f32, "k0_conv2d_f32_32x32x112x112", "auto, f32 convnet: NCHW")
end
local f32_off = run("KILN_CONV_X3=0 KILN_LOGS=fusion " .. KILN .. " -e \"" .. script:format("f32", "f32") .. "\"")
T.like(f32_off, "k0_conv2d_f32_32x32x112x112", "auto, f32 convnet, KILN_CONV_X3=0: NCHW")

-- cuDNN's chosen plans are kept in the cache dir: a second process builds
-- them from there, and computes the same values
local dir = os.tmpname()
os.remove(dir)
local sum_script = "local s = dofile('samples/convnet.lua'); local m = s.model:to('cuda'):to('bf16'); "
  .. "local y = kiln.compile(m)(s.inputs{dtype = 'bf16', device = 'cuda'}[1]); "
  .. "print(string.format('sum %.17g', y:to('f64'):abs():sum():item()))"
local first = run("KILN_CACHE_DIR=" .. dir .. " KILN_LOGS=library " .. KILN .. " -e \"" .. sum_script .. "\"")
local second = run("KILN_CACHE_DIR=" .. dir .. " KILN_LOGS=library " .. KILN .. " -e \"" .. sum_script .. "\"")
local function count(text, pat)
  local n = 0
  for _ in text:gmatch(pat) do n = n + 1 end
  return n
end
T.ok(count(first, "conv2d [^\n]*: cuDNN plan\n") == 3 and count(first, "from the cache") == 0,
  "first process: cuDNN chooses the three NHWC plans")
T.ok(count(second, "conv2d [^\n]*: cuDNN plan %(from the cache%)\n") == 3 and count(second, "conv2d [^\n]*: cuDNN plan\n") == 0,
  "second process: all three plans come from the cache dir, none is chosen again")
T.ok(first:match("sum (%S+)") ~= nil and first:match("sum (%S+)") == second:match("sum (%S+)"),
  "second process: the same output as the first (" .. tostring(first:match("sum (%S+)")) .. ")")
os.execute("rm -rf '" .. dir .. "'")

-- batch norm folded into an NHWC conv, in every mode
kiln.config.channels_last = "auto"
kiln.nn.manual_seed(nextseed())
local net = kiln.nn.Sequential({
  kiln.nn.Conv2d(3, 24, 3, { stride = 2, padding = 1, bias = false }), kiln.nn.BatchNorm2d(24), kiln.nn.ReLU(),
  kiln.nn.Conv2d(24, 40, 3, { padding = 1, bias = false }), kiln.nn.BatchNorm2d(40), kiln.nn.ReLU(),
  kiln.nn.AdaptiveAvgPool2d(1),
}):eval()
local x = kiln.randn({ 4, 3, 37, 29 }, { seed = nextseed() }):to("bf16")
local ref = net:to("f64")(x:to("f64"))
net = net:to("cuda"):to("bf16")
for _, mode in ipairs({ "default", "reduce-overhead", "max-autotune" }) do
  local cm = kiln.compile(net, { mode = mode })
  local got = cm(x:to("cuda"))
  T.ok(rel_err(got, ref) <= TOL.bf16, string.format("batch norm folded, NHWC bf16, %s: against float64 (%.2g)", mode, rel_err(got, ref)))
end

T.done()
