-- first_call.lua: the first call of a compiled function, phase by phase
-- (core/base/kn_phase.h): cm:stats().first_call and cm:last_call().phases
-- name where the time went (start-up, capture, passes, kernel source,
-- kernel compile, library plans, autotune, run), and the phases add up to
-- the call. Device memory: kiln.memory_stats and cm:stats().device_peak_bytes
-- (on a GPU; the CPU keeps no allocator figures).
local T = dofile("t/lib/tap.lua")
local PHASES = { "startup", "capture", "passes", "source", "nvrtc", "library_plans", "autotune", "run" }

local function fresh_cache()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  kiln.config.cache_dir = dir
  return dir
end

local function model()
  local nn = kiln.nn
  return nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 8)), kiln.randn({ 4, 64 }, { seed = 3 })
end

local function check_phases(p, wall, what)
  local sum = 0
  for _, k in ipairs(PHASES) do
    T.ok(type(p[k]) == "number" and p[k] >= 0, what .. ": phase '" .. k .. "' is a time")
    sum = sum + (p[k] or 0)
  end
  T.ok(math.abs(sum - p.total) <= 0.1 * p.total,
    string.format("%s: the phases add up to the call (%.4f of %.4f s)", what, sum, p.total))
  if wall then
    T.ok(p.total <= wall and p.total >= 0.9 * wall,
      string.format("%s: the call's total is the measured first call within 10%% (%.4f of %.4f s)", what, p.total, wall))
  end
  return sum
end

local dirs = {}
for _, dev in ipairs { "cpu", kiln.cuda_available() and "cuda" or nil } do
  dirs[#dirs + 1] = fresh_cache()
  local m, x = model()
  m:to(dev)
  x = x:to(dev)
  local cm = kiln.compile(m)
  T.is(cm:stats().first_call, nil, dev .. ": no first_call before the first call")
  kiln.synchronize(dev)
  local t0 = kiln.clock()
  cm(x)
  kiln.synchronize(dev)
  local wall = kiln.clock() - t0
  local fc = cm:stats().first_call
  T.ok(type(fc) == "table", dev .. ": cm:stats().first_call after the first call")
  check_phases(fc, wall, dev .. " first call")
  T.ok(fc.nvrtc > 0, string.format("%s: a cold cache compiles kernels (%.3f s)", dev, fc.nvrtc))
  T.ok(fc.capture > 0 and fc.run > 0 and fc.source > 0, dev .. ": capture, kernel source and the run take time")
  cm(x)
  T.is(cm:stats().first_call.total, fc.total, dev .. ": first_call stays the first call's")
  -- a new function on the same model: its kernels come from the cache
  local cm2 = kiln.compile(m)
  cm2(x)
  check_phases(cm2:stats().first_call, nil, dev .. " warm first call")
  T.ok(cm2:stats().first_call.nvrtc < fc.nvrtc, dev .. ": a warm cache compiles less")
  local line = kiln.format_phases(fc, "First call")
  T.like(line, "^First call: %d+%.%d+ s = ", dev .. ": kiln.format_phases names the total")
  T.like(line, "kernel compile %d", dev .. ": kiln.format_phases names the kernel compile")
  kiln.explain_quiet = true
  local r = kiln.explain(m, x)
  kiln.explain_quiet = nil
  T.like(kiln.format_explain(r), "\nCall time: %d+%.%d+ s = ", dev .. ": kiln.explain says where the call's time went")
  if dev == "cuda" then
    local ms = kiln.memory_stats("cuda")
    T.ok(ms and ms.reserved_bytes >= ms.allocated_bytes and ms.peak_reserved_bytes >= ms.reserved_bytes
      and ms.allocated_bytes > 0, "cuda: kiln.memory_stats: allocated <= reserved <= peak reserved")
    local dp = cm:stats().device_peak_bytes
    T.ok(dp > 0 and dp <= ms.peak_reserved_bytes, "cuda: cm:stats().device_peak_bytes is the pool's peak by a run")
    kiln.reset_peak_memory_stats("cuda")
    T.is(kiln.memory_stats("cuda").peak_reserved_bytes, kiln.memory_stats("cuda").reserved_bytes,
      "cuda: kiln.reset_peak_memory_stats: the peak starts again from now")
  else
    T.is(kiln.memory_stats("cpu"), nil, "cpu: kiln.memory_stats is nil (no allocator figures)")
    T.is(cm:stats().device_peak_bytes, 0, "cpu: device_peak_bytes 0")
  end
end
if not kiln.cuda_available() then T.diag("no GPU: the cuda half (memory figures, cuDNN/cuBLASLt phases) runs on the GPU machine") end
for _, d in ipairs(dirs) do os.execute("rm -rf '" .. d .. "'") end
T.done()
