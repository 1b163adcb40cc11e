-- t/recompute.lua: kiln.config.activation_memory_budget and the recompute
-- pass (issue 33, item 4): below 1, a compiled training step computes
-- cheap pointwise forward values again in its backward instead of keeping
-- them from the forward; cm:saved() then lists fewer kept bytes and the
-- recomputed ops with their reason, the plan's peak falls, and the step
-- gives the same losses and parameters as with every value kept and as
-- eagerly. A bad budget is an error at the next compiled call.
local T = dofile("t/lib/tap.lua")
local nn = kiln.nn
local F = nn.functional

local x, y = kiln.randn({ 32, 16 }, { seed = 2 }), kiln.randint(1, 5, { 32 }, { seed = 3 })

local function build()
  nn.manual_seed(1)
  local layers = { nn.Linear(16, 64) }
  for _ = 1, 4 do
    layers[#layers + 1] = nn.GELU()
    layers[#layers + 1] = nn.Linear(64, 64)
  end
  layers[#layers + 1] = nn.Linear(64, 4)
  return nn.Sequential(layers)
end

local function step_of(m)
  local opt = kiln.optim.SGD(m, { lr = 0.1 })
  return function(a, b)
    opt:zero_grad()
    local l = F.cross_entropy(m(a), b)
    l:backward()
    opt:step()
    return l
  end
end

-- budget: 8 steps compiled under it; the losses, the model, the ledger, the peak
local function run(budget)
  kiln.config.activation_memory_budget = budget
  local m = build()
  local cm = kiln.compile(step_of(m))
  local losses = {}
  for i = 1, 8 do losses[i] = cm(x, y):item() end
  kiln.config.activation_memory_budget = 1
  return losses, m, cm:saved(), cm:stats().peak_bytes
end

local m0 = build()
local eager = step_of(m0)
local want = {}
for i = 1, 8 do want[i] = eager(x, y):item() end

local l1, m1, s1, p1 = run(1)
local l2, m2, s2, p2 = run(0.5)
local worst = 0
for i = 1, 8 do worst = math.max(worst, math.abs(l2[i] - l1[i]), math.abs(l2[i] - want[i])) end
T.ok(worst <= 1e-5, string.format("budget 0.5: the losses of budget 1 and of eager steps (worst %.3g)", worst))
local pd = 0
for i, p in ipairs(m2:parameters()) do pd = math.max(pd, (p - m1:parameters()[i]):abs():amax():item()) end
T.ok(pd <= 1e-5, string.format("and the same parameters after 8 steps (%.3g)", pd))
T.is(#s1.recomputed, 0, "budget 1: nothing recomputed (an f32 step has no widening casts)")
T.ok(#s2.recomputed >= 2, string.format("budget 0.5: forward ops recomputed (%d)", #s2.recomputed))
local r = s2.recomputed[1] or {}
T.is(r.op, "gelu", "the recomputed op is named (gelu)")
T.like(r.reason or "", "computed again before its first backward reader.*activation_memory_budget below 1",
  "with its reason")
T.like(r.where or "", "^t/recompute%.lua:%d+$", "and the line of the forward op it copies")
T.ok(s2.bytes < s1.bytes and s2.bytes <= 0.8 * s1.bytes,
  string.format("the kept bytes fall (%d -> %d)", s1.bytes, s2.bytes))
T.ok(p2 < p1, string.format("and so does the plan's peak (%d -> %d bytes)", p1, p2))
local kept_gelu = 0
for _, v in ipairs(s2.values) do kept_gelu = kept_gelu + (v.op == "gelu" and 1 or 0) end
T.is(kept_gelu, 4 - #s2.recomputed, "the values kept list no gelu that is recomputed")

-- at any budget, a widening cast of a value the backward keeps anyway is
-- computed again, not kept: under bf16 autocast, BatchNorm's statistics
-- read an f32 cast of the bf16 conv output, and var's gradient reads it
-- again, while the bf16 value is kept for BatchNorm's own gradient
do
  local function net()
    nn.manual_seed(4)
    return nn.Sequential(nn.Conv2d(3, 8, 3, { padding = 1, bias = false }), nn.BatchNorm2d(8), nn.ReLU(),
      nn.AdaptiveAvgPool2d({ 1, 1 }), nn.Flatten(), nn.Linear(8, 4))
  end
  local img, lab = kiln.randn({ 4, 3, 6, 6 }, { seed = 7 }), kiln.randint(1, 5, { 4 }, { seed = 8 })
  local me, mc = net(), net()
  local se, sc = step_of(me), step_of(mc)
  local cm = kiln.compile(sc, { autocast = "bf16" })
  local worst = 0
  for _ = 1, 4 do
    local a, b = kiln.autocast("bf16", se, img, lab):item(), cm(img, lab):item()
    worst = math.max(worst, a == a and b == b and math.abs(a - b) or math.huge)
  end
  T.ok(worst <= 1e-5, string.format("bf16 autocast BatchNorm step, budget 1: the eager steps' losses (worst %.3g)", worst))
  local s = cm:saved()
  local casts, kept_f32_casts = 0, 0
  for _, r in ipairs(s.recomputed) do
    if r.op == "cast" and (r.reason or ""):find("widening cast of a value the backward keeps anyway", 1, true) then
      casts = casts + 1
    end
  end
  for _, v in ipairs(s.values) do
    if v.op == "cast" and v.dtype == "f32" and #v.shape == 4 then kept_f32_casts = kept_f32_casts + 1 end
  end
  T.ok(casts >= 1, string.format("budget 1: the f32 cast of the conv output is recomputed, with its reason (%d)", casts))
  T.is(kept_f32_casts, 0, "and no f32 copy of a 4-D value is kept from the forward")
end

local ok, err = pcall(function()
  kiln.config.activation_memory_budget = 1.5
  kiln.compile(function(a) return a + 1 end)(x)
end)
kiln.config.activation_memory_budget = 1
T.like(tostring(err), "kiln%.config%.activation_memory_budget must be a number from 0 to 1", "a budget of 1.5: an error at the call")
T.ok(pcall(kiln.compile(function(a) return a + 1 end), x), "and a good budget after it runs again")

T.done()
