-- bench/host_instructions.lua: host work of compiled calls, for counting
-- instructions under callgrind (which counts the same on a busy machine):
-- a 50-op function and a transformer block of d 8, compiled in default
-- mode on the CPU, called CALLS times after a warm-up. Run it twice with
-- different CALLS and divide the difference of the totals by the
-- difference of the calls to get instructions per compiled call:
--
--   valgrind --tool=callgrind --callgrind-out-file=a build/kiln bench/host_instructions.lua 10
--   valgrind --tool=callgrind --callgrind-out-file=b build/kiln bench/host_instructions.lua 210
local calls = math.tointeger(tonumber(arg and arg[1]) or 100)
local nn = kiln.nn

local function f(x, w)
  local y = x
  for _ = 1, 10 do y = (y * w + 1):relu() - y * 0.5 end
  return y
end
local x = kiln.randn({ 4, 8 }, { seed = 1, device = "cpu" })
local w = kiln.randn({ 4, 8 }, { seed = 2, device = "cpu" })
local cf = kiln.compile(f, { mode = "default" })

nn.manual_seed(0)
local block = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8)):eval()
local xb = kiln.randn({ 2, 4, 8 }, { seed = 3, device = "cpu" })
local cb = kiln.compile(block, { mode = "default" })

for _ = 1, 3 do cf(x, w); cb(xb) end -- compile and settle into replays
for _ = 1, calls do cf(x, w); cb(xb) end
io.stderr:write(string.format("host_instructions: %d calls of each (graphs %d and %d)\n", calls,
  cf:stats().graphs, cb:stats().graphs))
