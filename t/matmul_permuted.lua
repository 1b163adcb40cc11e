-- matmul_permuted.lua: batched matmul without copies, on the CPU. Attention's
-- head merge, `att:matmul(v):transpose(2, 3):reshape({B, T, D})`, used to
-- copy the transposed value in the reshape; a plan now has the matmul write
-- its value permuted, straight into the bytes the reshape reads in place
-- (kn_fuse_ex, kn_plan_run.c run_permuted). Compiled results equal eager on odd
-- shapes and dtypes in every mode; cm:stats() counts the permuted outputs
-- and the copies left; the profile shows no contiguous copy; cases where the
-- layout must not change keep the copy and stay right. q, k and v are
-- strided views of one qkv tensor: they reach the GEMM as views.
local T = dofile("t/lib/tap.lua")

local cache = os.tmpname()
os.remove(cache)
kiln.config.cache_dir = cache -- max-autotune's choices stay out of the user's cache

local seed = 900
local function rnd(shape, dt)
  seed = seed + 1
  return kiln.randn(shape, { seed = seed }):to(dt or "f32")
end

-- max |got - want| / max(max |want|, 1e-30) in f64; NaN or a shape mismatch: math.huge
local function relerr(got, want)
  if table.concat(got:shape(), "x") ~= table.concat(want:shape(), "x") then return math.huge end
  local g, w = got:to("f64"), want:to("f64")
  local d = (g - w):abs():amax():item()
  local s = w:abs():amax():item()
  local r = d / math.max(s, 1e-30)
  if r ~= r or d ~= d then return math.huge end
  return r
end

local TOL = { f32 = 1e-6, f64 = 1e-14, bf16 = 1e-2 }
local MODES = { "default", "reduce-overhead", "max-autotune" }

local function profiled_names(cm, ...)
  local rows = kiln.profile(cm, ..., { warmup = 0, profile_iters = 1, ceilings = false })
  local names = {}
  -- rows of the plan's own work: a copy a library makes inside its call
  -- (an inner sub-row) is not a copy of the layout
  for _, r in ipairs(rows) do
    if not r.inner then names[#names + 1] = r.name end
  end
  return table.concat(names, " ")
end

-- attention over heads, with the head split of one qkv tensor and the merge
local function attention(h)
  return function(x)
    local s = x:shape()
    local B, Tn, D3 = s[1], s[2], s[3]
    local D = D3 // 3
    local hd = D // h
    local q, k, v = x:split(D, -1)
    q = q:reshape({ B, Tn, h, hd }):transpose(2, 3)
    k = k:reshape({ B, Tn, h, hd }):transpose(2, 3)
    v = v:reshape({ B, Tn, h, hd }):transpose(2, 3)
    local att = q:matmul(k:transpose(-2, -1)):softmax(-1)
    return att:matmul(v):transpose(2, 3):reshape({ B, Tn, D })
  end
end

for _, case in ipairs({ { B = 3, Tn = 7, h = 5, hd = 9, dt = "f32" }, { B = 2, Tn = 13, h = 3, hd = 4, dt = "f64" },
  { B = 1, Tn = 1, h = 2, hd = 3, dt = "f32" }, { B = 2, Tn = 5, h = 4, hd = 8, dt = "bf16" } }) do
  local f = attention(case.h)
  local what = string.format("head merge B %d T %d heads %d hd %d %s", case.B, case.Tn, case.h, case.hd, case.dt)
  for _, mode in ipairs(MODES) do
    local cm = kiln.compile(f, { mode = mode })
    local good, worst = true, 0
    for _ = 1, 3 do -- replays and recordings too
      local x = rnd({ case.B, case.Tn, 3 * case.h * case.hd }, case.dt)
      local r = relerr(cm(x), f(x))
      worst = math.max(worst, r)
      good = good and r <= TOL[case.dt]
    end
    T.ok(good, string.format("%s, %s: equals eager over 3 calls (worst rel err %.3g)", what, mode, worst))
    local st = cm:stats()
    -- T = 1: the transposed value is already in merged order, the reshape is a view
    local want_permuted = case.Tn > 1 and 1 or 0
    T.ok(st.permuted_outputs == want_permuted and st.view_copies == 0,
      string.format("%s, %s: the P.V matmul writes permuted (%d), no copy is left (permuted %d, copies %d)", what,
        mode, want_permuted, st.permuted_outputs, st.view_copies))
  end
end

-- a backend that declines the strided output at run time (as cuBLASLt may
-- for a stride pattern it cannot map): the plan computes contiguous and
-- copies once, and the result is the same
do
  local code = [[
local x = kiln.randn({ 2, 6, 36 }, { seed = 3 })
local function f(x)
  local q, k, v = x:split(12, -1)
  q = q:reshape({ 2, 6, 3, 4 }):transpose(2, 3)
  k = k:reshape({ 2, 6, 3, 4 }):transpose(2, 3)
  v = v:reshape({ 2, 6, 3, 4 }):transpose(2, 3)
  return q:matmul(k:transpose(-2, -1)):softmax(-1):matmul(v):transpose(2, 3):reshape({ 2, 6, 12 })
end
local cm = kiln.compile(f)
local y1, y2, want = cm(x), cm(x), f(x)
local d = math.max((y1 - want):abs():amax():item(), (y2 - want):abs():amax():item())
-- the values themselves, to compare the two runs bit for bit
local vals = {}
local flat = y1:reshape({ -1 }):tolist()
for i = 1, #flat do vals[i] = string.format("%.9g", flat[i]) end
io.write(string.format("%s %d %s", tostring(d <= 1e-6), cm:stats().permuted_outputs, table.concat(vals, ",")))
]]
  local declined, direct = T.child(code, { env = "KILN_CPU_DECLINE_STRIDED_OUT=1" }), T.child(code)
  T.like(declined, "^true 1 ", "declined strided output: the plan's fallback copy gives eager's result")
  T.is(declined, direct, "declined strided output: the same values as the matmul writing permuted")
end

-- the profile of a compiled head merge has no contiguous copy
do
  local f = attention(4)
  local cm = kiln.compile(f, { mode = "default" })
  local x = rnd({ 2, 6, 48 })
  cm(x)
  local names = profiled_names(cm, x)
  -- (the chain is attention-shaped, so the attention pass may have made it
  -- one attention kernel: that one writes the merged layout just the same)
  T.ok(not names:find("contiguous", 1, true) and (names:find("matmul", 1, true) or names:find("attention", 1, true)),
    "kiln.profile of the head merge lists its library kernels and no contiguous copy")
  if names:find("contiguous", 1, true) then T.diag(names) end
end

-- where the matmul's own value is read too, its layout stays contiguous
-- and the reshape copies, as before
do
  local function both(a, b)
    local y = a:matmul(b)
    return y:transpose(1, 2):reshape({ 5, 12 }), y:sum()
  end
  local cm = kiln.compile(both, { mode = "default" })
  local a, b = rnd({ 3, 5, 7 }), rnd({ 3, 7, 4 })
  local g1, g2 = cm(a, b)
  local w1, w2 = both(a, b)
  T.ok(relerr(g1, w1) <= 1e-6 and relerr(g2, w2) <= 1e-6, "matmul read twice: equals eager")
  T.ok(cm:stats().permuted_outputs == 0 and cm:stats().view_copies == 1,
    "matmul read twice: not permuted, the reshape copies")
end

-- a transpose read by a generated kernel (no copying reshape): nothing to save
do
  local function scaled(a, b) return a:matmul(b):transpose(1, 2) * 2 end
  local cm = kiln.compile(scaled, { mode = "default" })
  local a, b = rnd({ 3, 5, 7 }), rnd({ 3, 7, 4 })
  T.ok(relerr(cm(a, b), scaled(a, b)) <= 1e-6, "transpose into a pointwise kernel: equals eager")
  T.is(cm:stats().permuted_outputs, 0, "transpose into a pointwise kernel: the matmul's layout is unchanged")
end

-- a reshape that the permuted layout does not help (it merges the wrong dims)
do
  local function other(a, b) return a:matmul(b):transpose(1, 3):reshape({ -1 }) end
  local cm = kiln.compile(other, { mode = "default" })
  local a, b = rnd({ 2, 3, 5, 7 }), rnd({ 2, 3, 7, 4 })
  T.ok(relerr(cm(a, b), other(a, b)) <= 1e-6, "transpose(1, 3) then flatten: equals eager")
  -- the CPU writes any strides; cuBLASLt takes one strided batch run only,
  -- so on the GPU this layout (two batch dims) keeps its one copy
  local st = cm:stats()
  if kiln.default_device() == "cpu" then
    T.is(st.view_copies, 0, "transpose(1, 3) then flatten: written permuted, no copy left")
  else
    T.is(st.permuted_outputs + st.view_copies, 1, "transpose(1, 3) then flatten: written permuted or copied once")
  end
end

-- the transformer sample: no copy around its matmuls, equal to eager in every mode
do
  local s = dofile("samples/transformer_block.lua")
  local x = s.inputs({ small = true })[1]
  local want = s.model(x)
  for _, mode in ipairs(MODES) do
    local cm = kiln.compile(s.model, { mode = mode })
    local r = math.max(relerr(cm(x), want), relerr(cm(x), want))
    T.ok(r <= 1e-5, string.format("transformer_block, %s: equals eager (rel err %.3g)", mode, r))
    local st = cm:stats()
    T.ok(st.view_copies == 0 and st.permuted_outputs == 1,
      string.format("transformer_block, %s: the head merge copies nothing (copies %d, permuted %d)", mode,
        st.view_copies, st.permuted_outputs))
    local contiguous = false
    for _, k in ipairs(cm:kernels()) do
      for _, o in ipairs(k.ops) do contiguous = contiguous or o == "contiguous" end
    end
    T.ok(not contiguous, "transformer_block, " .. mode .. ": no contiguous kernel in cm:kernels()")
    if mode == "default" then
      local names = profiled_names(cm, x)
      T.ok(not names:find("contiguous", 1, true), "transformer_block: its profile has no contiguous copy")
    end
  end
end

os.execute("rm -rf '" .. cache .. "'")
T.done()
