-- t/gc_pacing.lua: Lua's collector sees a tensor as a few bytes of handle,
-- not the memory behind it nor the autograd history a result keeps alive;
-- kn_lua_pushtensor paces it with what core allocated
-- (kn_alloc_pressure_take). Without that, 100,000 calls of a compiled MLP
-- with grad on grew the process to 585 MB (2.3x slower). Here: 20,000 such
-- calls must not grow the resident set by more than 60 MB (unpaced they
-- grew it by 261 MB). Linux only (it reads /proc/self/statm), and not in
-- the sanitizer build, whose allocator holds freed memory back on purpose.
local T = dofile("t/lib/tap.lua")
local f = io.open("/proc/self/statm", "r")
if not f then T.skip_all("no /proc/self/statm") end
f:close()
if (os.getenv("KILN_BUILD") or ""):find("asan") then
  T.skip_all("the sanitizer build's allocator keeps freed memory in quarantine")
end

local function rss_mb()
  local fh = io.open("/proc/self/statm", "r")
  local _, resident = fh:read("n", "n")
  fh:close()
  return resident * 4096 / 2 ^ 20 -- pages of 4 KiB (the kernels CI runs)
end

local nn = kiln.nn
local x = kiln.randn({ 8, 16 }, { seed = 1 })
local seq = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
local cm = kiln.compile(seq)
for _ = 1, 200 do cm(x) end
collectgarbage()
local before = rss_mb()
local last
for _ = 1, 20000 do last = cm(x) end
local grown = rss_mb() - before
T.ok(grown < 60, string.format("20,000 compiled calls with grad on: the process grew %.0f MB (under 60)", grown))
T.ok(last.requires_grad, "  their results do carry autograd history (what made them grow)")
T.done()
