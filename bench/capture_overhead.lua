-- capture_overhead.lua: host overhead of a compiled call on a cache hit, on
-- the CPU and on the GPU (the default device).
--
-- Part 1, tiny models (a 50-op function, a transformer block of d 8, twelve
-- Linear(2, 2)) called many times, compiled in default and reduce-overhead:
-- host us per call (back to back, and from an idle device: the host's own
-- time) and per kernel, split into running the plan (binding, kernels,
-- outputs) and what the direct replay adds around it (guards, binding the
-- arguments, returning results). Then the 50-op function eagerly and with a
-- graph break (traced on every call), for scale.
--
-- Part 2, the samples (samples/*.lua, small inputs) in default and
-- reduce-overhead modes: kiln.time's host time per call (on a GPU the time a
-- call takes to return; on the CPU its wall time minus its kernels' time)
-- and that host time divided by the kernels the call launches. The issue's
-- targets on the GPU: at most 5 us per kernel without a CUDA graph, at most
-- 10 us per call replaying one.
--
-- Run: build/kiln bench/capture_overhead.lua [calls] [samples]
--   calls    part 1's timed calls (default 20000)
--   samples  comma-separated sample names, or "none" (default: all)
local calls = tonumber(arg and arg[1]) or 20000
local dev = kiln.default_device()

local function f(x, w)
  local y = x
  for _ = 1, 10 do
    y = (y * w + 1):relu() - y * 0.5 -- 5 ops per round: mul, add, relu, mul, sub
  end
  return y
end

-- The same, with a graph break: every call re-runs the Lua code (traces).
local function g(x, w)
  local y = f(x, w)
  kiln.graph_break()
  return y
end

local x = kiln.randn({4, 4}, {seed = 1, device = dev})
local w = kiln.randn({4, 4}, {seed = 2, device = dev})

-- Back to back: us per call for n calls (on a GPU the host may wait for
-- the device once its queue is full). Idle: each call starts on an idle
-- device (a synchronize before it, not timed), so its time is the host's
-- alone: the median over the calls.
local function per_call_us(fn, n, ...)
  for _ = 1, 100 do fn(...) end
  collectgarbage()
  local idle = {}
  for i = 1, math.max(1, n // 10) do
    kiln.synchronize()
    local t1 = kiln.clock()
    fn(...)
    idle[i] = kiln.clock() - t1
  end
  table.sort(idle)
  collectgarbage()
  kiln.synchronize()
  local t0 = kiln.clock()
  for _ = 1, n do fn(...) end
  local host = kiln.clock() - t0
  kiln.synchronize()
  return host / n * 1e6, idle[(#idle + 1) // 2] * 1e6
end

-- Tiny models (kernels cost next to nothing on tiny tensors): a transformer
-- block of the sample's class with d 8, 2 heads, MLP 16 on 1 x 4 tokens,
-- and twelve Linear(2, 2) + ReLU.
local nn = kiln.nn
local block_class = getmetatable(loadfile("samples/transformer_block.lua")({ small = true }).model).__index
nn.manual_seed(0)
local tiny_block = block_class(8, 2, 16):eval()
local layers = {}
for _ = 1, 12 do layers[#layers + 1] = nn.Linear(2, 2); layers[#layers + 1] = nn.ReLU() end
local mlp12 = nn.Sequential(table.unpack(layers))
if dev ~= "cpu" then tiny_block:to(dev); mlp12:to(dev) end
local cases = {
  { "f: 50 ops on 4x4", f, { x, w } },
  { "tiny transformer_block", tiny_block, { kiln.randn({1, 4, 8}, {seed = 3, device = dev}) } },
  { "12 x (Linear 2->2, ReLU)", mlp12, { kiln.randn({1, 2}, {seed = 4, device = dev}) } },
}

print(string.format("device %s", dev))
print(string.format("%-26s %-16s %7s %12s %12s %10s %10s %12s", "model", "mode", "kernels", "back to back",
  "host (idle)", "us/kernel", "plan us", "guards+I/O"))
for _, case in ipairs(cases) do
  local name, fn, args = case[1], case[2], case[3]
  for _, mode in ipairs({ "default", "reduce-overhead" }) do
    local cm = kiln.compile(fn, { mode = mode })
    cm(table.unpack(args))
    local kernels = cm:stats().kernels
    local run0 = cm:stats().replay_run_s
    local b2b_us, idle_us = per_call_us(cm, calls, table.unpack(args))
    local s = cm:stats()
    local run_us = (s.replay_run_s - run0) / (calls + 100 + math.max(1, calls // 10)) * 1e6
    print(string.format("%-26s %-16s %7d %12.2f %12.2f %10.2f %10.2f %12.2f%s", name, mode, kernels, b2b_us,
      idle_us, idle_us / math.max(1, kernels), run_us, b2b_us - run_us,
      s.direct_replays < calls and "  (not all direct replays!)" or ""))
  end
end
local _, eager_idle = per_call_us(f, math.max(10, calls // 10), x, w)
print(string.format("f eager (Lua runs each op): %.2f us host per call", eager_idle))
local cg = kiln.compile(g)
local _, traced_us = per_call_us(cg, math.max(10, calls // 10), x, w)
print(string.format("f compiled with a graph break (traced every call): %.2f us host per call", traced_us))

-- Part 2: the samples through kiln.time, and the direct replay's own share
-- (guards, binding, results: the call's time outside the plan's run).
local which = arg and arg[2] or "simple_linear,large_linear,convnet,transformer_block,gcn"
if which == "none" then return end
print()
print(string.format("%-18s %-16s %7s %10s %10s %14s %10s", "sample", "mode", "kernels", "host us", "us/kernel",
  "guards+I/O us", "CUDA graph"))
for name in which:gmatch("[^,]+") do
  local spec = loadfile("samples/" .. name .. ".lua")({ small = true })
  local xs = spec.inputs({ small = true, device = dev })
  if dev ~= "cpu" then spec.model:to(dev) end
  for _, mode in ipairs({ "default", "reduce-overhead" }) do
    local cm = kiln.compile(spec.model, { mode = mode })
    local r = kiln.time(cm, table.unpack(xs), { iters = 200, warmup = 5, profile_iters = 20 })
    local s0, n = cm:stats(), 200
    local t0 = kiln.clock()
    for _ = 1, n do cm(table.unpack(xs)) end
    local call_s = kiln.clock() - t0
    local s1 = cm:stats()
    local outside = (call_s - (s1.replay_run_s - s0.replay_run_s)) / n * 1e6
    print(string.format("%-18s %-16s %7d %10.1f %10.2f %14.2f %10s", name, mode, r.launches, r.host_us,
      r.host_us / math.max(1, r.launches), outside, r.cuda_graph and "yes" or "no"))
  end
end
