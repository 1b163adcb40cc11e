-- cuda_library.lua: the library ops of the CUDA backend (kn_cuda_blas.c,
-- kn_cuda_conv.c, kn_cuda_dnn.c and their fallback kernels in kn_linalg.cu) against the
-- CPU reference on the same inputs: matmul over 1-D operands, batches,
-- broadcasts, transposed, sliced and expanded views, odd sizes, k = 1 and
-- k = 0; conv2d over stride, padding, dilation, groups, bias, batch and
-- layouts; f32, f64, bf16 and f16, and f32 with allow_tf32; attention's
-- head merge compiled with the matmul writing a permuted output. NaN never
-- passes. Skipped where there is no CUDA device.
local T = dofile("t/lib/tap.lua")

if kiln.cuda_available and not kiln.cuda_available() then T.skip_all("no CUDA device") end
if not pcall(kiln.zeros, { 1 }, { device = "cuda" }) then T.skip_all("no CUDA device") end

local seed = 100
local function rnd(shape, dt)
  seed = seed + 1
  return kiln.randn(shape, { seed = seed }):to(dt or "f32")
end

local function shape_str(t) return table.concat(t:shape(), "x") end

-- max |got - want| / max(max |want|, 1e-30), both in f64 on the CPU;
-- a shape mismatch or a NaN anywhere gives math.huge
local function relerr(got, want)
  if shape_str(got) ~= shape_str(want) then return math.huge end
  local g, w = got:to("cpu"):to("f64"), want:to("cpu"):to("f64")
  if w:numel() == 0 then return 0 end
  local d = (g - w):abs():amax():item()
  local s = w:abs():amax():item()
  local r = d / math.max(s, 1e-30)
  if r ~= r or d ~= d then return math.huge end
  return r
end

local function check(got, want, tol, name)
  local r = relerr(got, want)
  return T.ok(r <= tol, string.format("%s (rel err %.3g, tol %.3g)", name, r, tol))
end

local TOL = { f32 = 1e-5, f64 = 1e-12, bf16 = 1e-2, f16 = 1e-2 }
local function tol_for(dt, k)
  if dt == "f32" then return TOL.f32 * math.sqrt(math.max(k, 1)) end
  return TOL[dt]
end

---------------------------------------------------------------------------
-- matmul

-- Each case: shapes of a and b, optional view functions applied on both
-- devices, and k (for the tolerance).
local id = function(t) return t end
local MM = {
  { "2-D 33x17 . 17x65", { 33, 17 }, { 17, 65 } },
  { "1-D . 2-D", { 17 }, { 17, 65 } },
  { "2-D . 1-D", { 33, 17 }, { 17 } },
  { "1-D . 1-D (dot)", { 17 }, { 17 } },
  { "1-D . 3-D", { 17 }, { 3, 17, 5 } },
  { "batched 3-D", { 4, 33, 17 }, { 4, 17, 65 } },
  { "batched 4-D", { 2, 3, 9, 13 }, { 2, 3, 13, 7 } },
  { "broadcast: 3-D . 2-D (shared weight)", { 4, 33, 17 }, { 17, 65 } },
  { "broadcast: 2-D . 3-D", { 33, 17 }, { 4, 17, 65 } },
  { "broadcast: {2,1} x {1,3} batch", { 2, 1, 9, 13 }, { 1, 3, 13, 7 } },
  { "broadcast: {4} x {1} batch", { 4, 33, 17 }, { 1, 17, 65 } },
  { "k = 1", { 33, 1 }, { 1, 65 } },
  { "m = 1, n = 1 batched", { 5, 1, 17 }, { 5, 17, 1 } },
  { "transposed a", { 17, 33 }, { 17, 65 }, function(t) return t:transpose(1, 2) end },
  { "transposed b (x @ w^T)", { 33, 17 }, { 65, 17 }, nil, function(t) return t:transpose(1, 2) end },
  { "both transposed, batched", { 4, 17, 33 }, { 4, 65, 17 },
    function(t) return t:transpose(2, 3) end, function(t) return t:transpose(2, 3) end },
  { "batch-transposed (dims 1,2 swapped)", { 33, 4, 17 }, { 4, 17, 65 },
    function(t) return t:transpose(1, 2) end },
  -- x @ w over a sequence-first view (ViT's in-projection): run as 4 GEMMs
  -- of 33 rows, not 33 GEMMs of 4 (kn_cuda_blas.c mm_rows_from_batch)
  { "sequence-first view . shared weight", { 4, 33, 17 }, { 17, 65 }, function(t) return t:transpose(1, 2) end },
  { "4-D, last batch dim longer than M", { 2, 3, 33, 17 }, { 17, 65 }, function(t) return t:transpose(2, 3) end },
  { "sequence-first view . 1-D", { 4, 33, 17 }, { 17 }, function(t) return t:transpose(1, 2) end },
  { "sliced a (offset, row stride 30)", { 40, 30 }, { 17, 65 },
    function(t) return t:slice(1, 3, 35):slice(2, 2, 18) end },
  { "sliced b with step 2", { 33, 17 }, { 17, 130 }, nil, function(t) return t:slice(2, 1, -1, 2) end },
  { "expanded a (batch stride 0)", { 1, 33, 17 }, { 4, 17, 65 }, function(t) return t:expand({ 4, 33, 17 }) end },
  { "expanded b column (stride 0 in a matrix dim)", { 33, 17 }, { 17, 1 }, nil,
    function(t) return t:expand({ 17, 65 }) end },
  { "larger 96x384 . 384x160", { 96, 384 }, { 384, 160 } },
  { "larger batched 8x64x128 . 8x128x96", { 8, 64, 128 }, { 8, 128, 96 } },
}

for _, dt in ipairs({ "f32", "f64", "bf16", "f16" }) do
  for _, c in ipairs(MM) do
    local name, sa, sb, va, vb = c[1], c[2], c[3], c[4] or id, c[5] or id
    local a, b = rnd(sa, dt), rnd(sb, dt)
    local ac, bc = a:to("cuda"), b:to("cuda")
    local okc, got = pcall(kiln.matmul, va(ac), vb(bc))
    local want = kiln.matmul(va(a), vb(b))
    local k = va(a):shape()[#va(a):shape()]
    if not okc then
      T.ok(false, string.format("matmul %s %s raised: %s", dt, name, tostring(got)))
    else
      T.is(got.device, "cuda", string.format("matmul %s %s: result on cuda", dt, name))
      T.is(got.dtype, dt, string.format("matmul %s %s: dtype", dt, name))
      check(got, want, tol_for(dt, k), string.format("matmul %s %s", dt, name))
    end
  end
end

-- k = 0: the sums are empty, the result is zeros
do
  local a, b = kiln.zeros({ 3, 0 }), kiln.zeros({ 0, 4 })
  local okc, got = pcall(kiln.matmul, a:to("cuda"), b:to("cuda"))
  T.ok(okc and shape_str(got) == "3x4" and got:to("cpu"):abs():amax():item() == 0,
    "matmul k = 0 gives zeros " .. (okc and "" or tostring(got)))
end

-- mixed dtypes promote (f32 . bf16 -> f32), as on the CPU
do
  local a, b = rnd({ 33, 17 }, "f32"), rnd({ 17, 65 }, "bf16")
  local okc, got = pcall(kiln.matmul, a:to("cuda"), b:to("cuda"))
  if okc then
    T.is(got.dtype, "f32", "matmul f32 . bf16 is f32")
    check(got, kiln.matmul(a, b), tol_for("f32", 17), "matmul f32 . bf16")
  else
    T.ok(false, "matmul f32 . bf16 raised: " .. tostring(got))
  end
end

-- a repeated call (cached plan) gives the same bits
do
  local a, b = rnd({ 64, 96 }):to("cuda"), rnd({ 96, 80 }):to("cuda")
  local c1, c2 = kiln.matmul(a, b), kiln.matmul(a, b)
  T.ok((c1 - c2):abs():amax():item() == 0, "matmul: a repeated call gives identical results")
end

-- allow_tf32: f32 may use TF32 tensor cores, still within 1e-2
do
  local a, b = rnd({ 96, 384 }), rnd({ 384, 160 })
  local want = kiln.matmul(a, b)
  kiln.config.allow_tf32 = true
  local okc, got = pcall(kiln.matmul, a:to("cuda"), b:to("cuda"))
  kiln.config.allow_tf32 = false
  T.ok(okc, "matmul f32 with allow_tf32 runs " .. (okc and "" or tostring(got)))
  if okc then check(got, want, 1e-2, "matmul f32 with allow_tf32") end
  local strict = kiln.matmul(a:to("cuda"), b:to("cuda"))
  check(strict, want, tol_for("f32", 384), "matmul f32 after allow_tf32 is off again (strict)")
end

---------------------------------------------------------------------------
-- conv2d

-- x shape, w shape, bias?, options, optional view of x (both devices)
local CONV = {
  { "1x3x9x11, 4x3x3x3, s1 p0", { 1, 3, 9, 11 }, { 4, 3, 3, 3 }, false, {} },
  { "4x4x13x9, 6x4x3x3, s2 p1, bias", { 4, 4, 13, 9 }, { 6, 4, 3, 3 }, true, { stride = 2, padding = 1 } },
  { "2x3x11x11, 5x3x3x3, dilation 2 p1", { 2, 3, 11, 11 }, { 5, 3, 3, 3 }, false, { dilation = 2, padding = 1 } },
  { "groups 2, bias", { 2, 4, 10, 7 }, { 6, 2, 3, 3 }, true, { padding = 1, groups = 2 } },
  { "1x1 conv, bias, batch 4", { 4, 8, 5, 5 }, { 16, 8, 1, 1 }, true, {} },
  { "stride {2,1} padding {0,1}, 5x3 kernel", { 2, 3, 15, 9 }, { 4, 3, 5, 3 }, true,
    { stride = { 2, 1 }, padding = { 0, 1 } } },
  { "unbatched 3-D input", { 3, 9, 11 }, { 4, 3, 3, 3 }, true, { padding = 1 } },
  { "channels-last view of x", { 2, 9, 11, 3 }, { 4, 3, 3, 3 }, true, { padding = 1 },
    function(t) return t:permute({ 1, 4, 2, 3 }) end },
  { "4x16x32x32, 32x16x3x3 p1, bias", { 4, 16, 32, 32 }, { 32, 16, 3, 3 }, true, { padding = 1 } },
}

local function conv_case(dt, c)
  local name, sx, sw, has_bias, opts, vx = c[1], c[2], c[3], c[4], c[5], c[6] or id
  local x, w = rnd(sx, dt), rnd(sw, dt)
  local bias = has_bias and rnd({ sw[1] }, dt) or nil
  local xc, wc, bc = x:to("cuda"), w:to("cuda"), bias and bias:to("cuda") or nil
  local want = kiln.conv2d(vx(x), w, bias, opts)
  local okc, got = pcall(kiln.conv2d, vx(xc), wc, bc, opts)
  local k = sw[2] * sw[3] * sw[4]
  if not okc then
    T.ok(false, string.format("conv2d %s %s raised: %s", dt, name, tostring(got)))
    return
  end
  T.is(got.device, "cuda", string.format("conv2d %s %s: result on cuda", dt, name))
  check(got, want, tol_for(dt, k), string.format("conv2d %s %s", dt, name))
end

for _, dt in ipairs({ "f32", "bf16", "f16" }) do
  for _, c in ipairs(CONV) do conv_case(dt, c) end
end
-- f64: cuDNN or the fallback kernel, either way exact to f64 rounding
conv_case("f64", CONV[2])
conv_case("f64", CONV[4])

---------------------------------------------------------------------------
-- matmul into a permuted output (kn_plan_run.c run_permuted, kn_cuda_blas.c's
-- strided D): attention's head merge compiled on cuda against the CPU's
-- eager result. At B = 1 the output's batch dim (heads) is one strided run:
-- cuBLASLt writes the head-merged layout directly (permuted_outputs 1, no
-- copy left). At B > 1 (batch dims (B, H), no single run) the backend
-- declines and the plan keeps the reshape's copy (permuted_outputs 0).
-- With a softmax between the matmuls the chain is attention: the attention
-- pass makes it one fused kernel, which writes any layout (permuted 1 at
-- every B); its scores stay in f32 where eager rounds them to bf16/f16,
-- hence the wider half tolerance. With a relu it stays two matmuls.
local function head_merge(h, attention)
  return function(x)
    local s = x:shape()
    local B, Tn, D = s[1], s[2], s[3] // 3
    local hd = D // h
    local q, k, v = x:split(D, -1)
    q = q:reshape({ B, Tn, h, hd }):transpose(2, 3)
    k = k:reshape({ B, Tn, h, hd }):transpose(2, 3)
    v = v:reshape({ B, Tn, h, hd }):transpose(2, 3)
    local sc = q:matmul(k:transpose(-2, -1))
    sc = attention and sc:softmax(-1) or sc:relu()
    return sc:matmul(v):transpose(2, 3):reshape({ B, Tn, D })
  end
end
for _, dt in ipairs({ "f32", "bf16", "f16" }) do
  for _, c in ipairs({ { B = 1, Tn = 37, h = 3, hd = 16, permuted = 1 }, { B = 1, Tn = 8, h = 5, hd = 8, permuted = 1 },
    { B = 2, Tn = 19, h = 4, hd = 8, permuted = 0 },
    { B = 1, Tn = 37, h = 3, hd = 16, permuted = 1, attention = true },
    { B = 2, Tn = 19, h = 4, hd = 8, permuted = 1, attention = true } }) do
    local f = head_merge(c.h, c.attention)
    local name = string.format("head merge %s%s B %d T %d heads %d hd %d", c.attention and "(attention) " or "", dt,
      c.B, c.Tn, c.h, c.hd)
    local function case_tol(d, k) return (c.attention and d ~= "f32") and 3 * TOL[d] or tol_for(d, k) end
    local x = rnd({ c.B, c.Tn, 3 * c.h * c.hd }, dt)
    local want = f(x)
    local cm = kiln.compile(f, { mode = "default" })
    local okc, got = pcall(cm, x:to("cuda"))
    if not okc then
      T.ok(false, name .. " raised: " .. tostring(got))
    else
      check(got, want, case_tol(dt, math.max(c.Tn, c.hd)), name .. ": compiled on cuda equals the CPU's eager result")
      local okc2, again = pcall(cm, x:to("cuda"))
      T.ok(okc2 and relerr(again, want) <= case_tol(dt, math.max(c.Tn, c.hd)), name .. ": and again (a second call)")
      local st = cm:stats()
      T.ok(st.permuted_outputs == c.permuted and st.view_copies == 1 - c.permuted,
        string.format("%s: permuted outputs %d (want %d), copies left %d", name, st.permuted_outputs, c.permuted,
          st.view_copies))
    end
  end
end

-- a Linear over a sequence-first view (ViT's in-projection), compiled: the
-- bias and GELU ride in cuBLASLt's epilogue, and a residual as its C,
-- over the exchanged batch/row layout (kn_cuda_blas.c mm_rows_from_batch)
for _, dt in ipairs({ "f32", "bf16" }) do
  local x, w, bias, r = rnd({ 4, 33, 17 }, dt), rnd({ 65, 17 }, dt), rnd({ 65 }, dt), rnd({ 33, 4, 65 }, dt)
  local fns = {
    { "bias and GELU", function(a, b, c) return (a:transpose(1, 2):matmul(b:transpose(1, 2)) + c):gelu() end },
    { "bias and residual", function(a, b, c, d) return a:transpose(1, 2):matmul(b:transpose(1, 2)) + c + d end },
  }
  for _, fc in ipairs(fns) do
    local name, f = fc[1], fc[2]
    local want = f(x:to("f64"), w:to("f64"), bias:to("f64"), r:to("f64"))
    local okc, got = pcall(kiln.compile(f, { mode = "default" }), x:to("cuda"), w:to("cuda"), bias:to("cuda"),
      r:to("cuda"))
    if okc then
      check(got, want, dt == "f32" and tol_for("f32", 17) or 2 * TOL[dt],
        string.format("%s: x:transpose(1, 2) @ w^T with %s, compiled on cuda", dt, name))
    else
      T.ok(false, string.format("%s: sequence-first Linear with %s raised: %s", dt, name, tostring(got)))
    end
  end
end

-- GELU's tanh form after a Linear (GPT-2's MLP): in bf16 and f16 the plan
-- folds bias and GELU into cuBLASLt's GELU_BIAS epilogue (that epilogue
-- is the tanh form); in f32 the generated kernel keeps it
for _, dt in ipairs({ "bf16", "f16", "f32" }) do
  local x, w, bias = rnd({ 2, 24, 40 }, dt), rnd({ 72, 40 }, dt), rnd({ 72 }, dt)
  local f = function(a, b, c) return (a:matmul(b:transpose(1, 2)) + c):gelu_tanh() end
  local want = f(x:to("f64"), w:to("f64"), bias:to("f64"))
  local cm = kiln.compile(f, { mode = "default" })
  local okc, got = pcall(cm, x:to("cuda"), w:to("cuda"), bias:to("cuda"))
  if okc then
    check(got, want, dt == "f32" and tol_for("f32", 40) or 2 * TOL[dt],
      string.format("%s: gelu_tanh(x @ w^T + b) compiled on cuda", dt))
    T.is(cm:stats().library_epilogues, dt == "f32" and 0 or 1,
      string.format("%s: bias and tanh GELU %s cuBLASLt's epilogue", dt, dt == "f32" and "stay out of" or "ride in"))
  else
    T.ok(false, string.format("%s: gelu_tanh after a Linear raised: %s", dt, tostring(got)))
  end
end

-- allow_tf32 for conv: within 1e-2
do
  local x, w, b = rnd({ 4, 16, 32, 32 }), rnd({ 32, 16, 3, 3 }), rnd({ 32 })
  local want = kiln.conv2d(x, w, b, { padding = 1 })
  kiln.config.allow_tf32 = true
  local okc, got = pcall(kiln.conv2d, x:to("cuda"), w:to("cuda"), b:to("cuda"), { padding = 1 })
  kiln.config.allow_tf32 = false
  T.ok(okc, "conv2d f32 with allow_tf32 runs " .. (okc and "" or tostring(got)))
  if okc then check(got, want, 1e-2, "conv2d f32 with allow_tf32") end
end

T.done()
