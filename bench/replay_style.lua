-- replay_style.lua: README's function style against nn.Sequential, per call
-- on a cache hit (issue "A tool that does not mislead", item 1: the function
-- style within 10% of the same layers as nn.Sequential, in default and
-- reduce-overhead). Three ways to write the same MLP (16 -> 32 -> 4, ReLU):
-- an nn.Sequential, a function reaching its layers through upvalues, and one
-- reaching them through script globals (every replay compares what the
-- function can read; the globals' additions come from kiln's watch, not a
-- count of them: docs/guards.md). On the
-- default device; the least of REPS repetitions of CALLS calls (the
-- repetitions alternate between the three, so that a busy machine slows
-- them alike).
--
--   build/kiln bench/replay_style.lua [calls] [reps]
local CALLS = tonumber(arg and arg[1]) or 20000
local REPS = tonumber(arg and arg[2]) or 15
local nn = kiln.nn
local x = kiln.randn({ 8, 16 }, { seed = 1 })
local seq = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
local up1, up2 = seq[1], seq[3]
local function up_style(v) return up2(up1(v):relu()) end
rs_fc1, rs_fc2 = seq[1], seq[3]
local function global_style(v) return rs_fc2(rs_fc1(v):relu()) end

local function per_call_us(cms)
  local best = {}
  for i, cm in ipairs(cms) do
    for _ = 1, 50 do cm(x) end
    best[i] = math.huge
  end
  for _ = 1, REPS do
    for i, cm in ipairs(cms) do
      kiln.synchronize()
      local t0 = kiln.clock()
      for _ = 1, CALLS do cm(x) end
      kiln.synchronize()
      best[i] = math.min(best[i], (kiln.clock() - t0) / CALLS * 1e6)
    end
  end
  return table.unpack(best)
end

print(string.format("device %s, %d calls x %d repetitions, least us per call", kiln.default_device(), CALLS, REPS))
print(string.format("%-16s %12s %12s %12s %9s %9s", "mode", "Sequential", "upvalues", "globals", "up/seq", "glob/seq"))
for _, mode in ipairs({ "default", "reduce-overhead" }) do
  local cu, cg = kiln.compile(up_style, { mode = mode }), kiln.compile(global_style, { mode = mode })
  local a, b, c = per_call_us({ kiln.compile(seq, { mode = mode }), cu, cg })
  assert(cu:stats().direct_replays > 0 and cg:stats().direct_replays > 0, "the function styles must replay")
  print(string.format("%-16s %12.2f %12.2f %12.2f %9.2f %9.2f", mode, a, b, c, b / a, c / a))
end
