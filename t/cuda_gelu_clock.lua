-- t/cuda_gelu_clock.lua: (1) the generated bias + GELU with a bf16 or f16
-- result, which the CUDA target computes from an erfc fit (kn_gelu_bf16,
-- kn_gelu_f16) after a bias add in packed pairs (kn_pair_add_*),
-- against a float64 reference on fresh random inputs, with infinities and
-- NaN as eager has them; (2) the clock :time uses on the GPU (CUPTI's
-- trace or events) is named, recorded in the ceilings, and a profiled
-- kernel's time is positive and no longer than the call around it.
local T = dofile("t/lib/tap.lua")

if not pcall(kiln.zeros, { 1 }, { device = "cuda" }) then T.skip_all("no CUDA device") end

-- the elements of a tensor (any device) as a flat Lua list
local function flat(t) return t:to("cpu"):reshape({ -1 }):tolist() end

local bias_gelu = function(x, b) return (x + b):gelu() end

for _, dt in ipairs({ "bf16", "f16" }) do
  local seed = os.time() % 100000
  -- values over [-6, 6] (where the float64 erf formula is exact enough to
  -- be the reference), a width that is not a multiple of the vector width
  local x = (kiln.rand({ 37, 1029 }, { seed = seed }) * 12 - 6):to(dt)
  local b = (kiln.rand({ 1029 }, { seed = seed + 1 }) - 0.5):to(dt)
  local cm = kiln.compile(bias_gelu)
  local got = flat(cm(x:to("cuda"), b:to("cuda")))
  -- the reference: the sum rounded to the dtype as the kernel rounds it,
  -- then GELU in float64
  local a = (x + b):to("f64")
  local want = flat(a:gelu())
  local worst, bad = 0, 0
  local ulp = dt == "bf16" and 2 ^ -8 or 2 ^ -11
  -- f16's smallest subnormal: GELU(-6) = -5.9e-9 is 0 in f16
  local tiny = dt == "f16" and 2 ^ -24 or 1e-30
  for i = 1, #want do
    local g, w = got[i], want[i]
    local err = math.abs(g - w)
    -- one unit in the last place of the dtype, relative, or a tiny absolute
    local ok = g == g and err <= ulp * math.abs(w) + tiny
    if not ok then bad = bad + 1 end
    if g ~= g then worst = math.huge elseif math.abs(w) > tiny and err / math.abs(w) > worst then worst = err / math.abs(w) end
  end
  T.is(bad, 0, string.format("%s bias+gelu (seed %d): every element within one ulp of the float64 reference "
    .. "(worst relative error %.3g, %d elements)", dt, seed, worst, #want))
  -- infinities and NaN: as eager on the CPU has them
  local s = kiln.tensor({ { math.huge, -math.huge, 0 / 0, 0, -0.0, 1e-3 } }):to(dt)
  local zb = kiln.zeros({ 6 }):to(dt)
  local gs = flat(kiln.compile(bias_gelu)(s:to("cuda"), zb:to("cuda")))
  local ws = flat(bias_gelu(s, zb))
  local same = true
  for i = 1, #ws do
    local g, w = gs[i], ws[i]
    if not ((g ~= g and w ~= w) or g == w or math.abs(g - w) <= ulp * math.abs(w)) then same = false end
  end
  T.ok(same, string.format("%s: inf, -inf, NaN, zeros and a small value as eager (got %s; eager %s)", dt,
    table.concat(gs, " "), table.concat(ws, " ")))
end

-- the clock
local clock = kiln.profiler.timing("cuda")
T.ok(clock == "trace" or clock == "events", "kiln.profiler.timing names the GPU's clock: " .. tostring(clock))
local c = kiln.ceilings({ device = "cuda" })
T.is(c.clock, clock, "the ceilings were measured with that clock")
local f = io.open(c.path, "r")
local text = f and f:read("a") or ""
if f then f:close() end
T.like(text, "\nclock = " .. clock .. "\n", "and the ceilings file records it")
local x = kiln.randn({ 64, 1024 }, { seed = 3, device = "cuda" })
local cm = kiln.compile(function(t) return (t * 2):relu() end)
local r = kiln.time(cm, x, { iters = 20, warmup = 3, profile_iters = 5 })
local k = r.kernels[1]
T.ok(k and k.median_us > 0, "a profiled kernel has a positive time: " .. tostring(k and k.median_us))
T.ok(k and k.median_us <= r.median_ms * 1000 * 1.5 + 5, string.format(
  "and no longer than the call it is part of (%.2f us against %.2f us a call)", k and k.median_us or -1, r.median_ms * 1000))
T.done()
