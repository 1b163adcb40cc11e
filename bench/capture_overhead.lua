-- capture_overhead.lua: host overhead of a compiled call on a cache hit, on
-- the CPU and on the GPU (the default device).
--
-- Part 1, a 50-op function on tiny tensors called many times, eagerly and
-- compiled. For the compiled call the report splits the time into running
-- the graph (the plan: binding, kernels, outputs) and what kiln adds around
-- it: guard checks, cache lookup, binding inputs and returning outputs (the
-- direct replay), or capture as well when the function must be traced on
-- every call.
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
local function per_call_us(fn, n)
  for _ = 1, 100 do fn(x, w) end
  kiln.synchronize()
  local t0 = kiln.clock()
  for _ = 1, n do fn(x, w) end
  local host = kiln.clock() - t0
  kiln.synchronize()
  local idle = {}
  for i = 1, math.max(1, n // 10) do
    kiln.synchronize()
    local t1 = kiln.clock()
    fn(x, w)
    idle[i] = kiln.clock() - t1
  end
  table.sort(idle)
  return host / n * 1e6, idle[(#idle + 1) // 2] * 1e6
end

print(string.format("device %s", dev))
local eager_us, eager_idle = per_call_us(f, calls)
for _, mode in ipairs({ "default", "reduce-overhead" }) do
  local cm = kiln.compile(f, { mode = mode })
  cm(x, w)
  local ops, kernels = cm:graphs()[1].op_count, cm:stats().kernels
  local run0 = cm:stats().replay_run_s
  local compiled_us, idle_us = per_call_us(cm, calls)
  local s = cm:stats()
  local run_us = (s.replay_run_s - run0) / (calls + 100) * 1e6
  print(string.format("%s: graph of %d ops in %d kernels; replayable: %s; direct replays: %d; recompiles: %d; CUDA graph replays: %d",
    mode, ops, kernels, s.replayable, s.direct_replays, s.recompiles, s.replays or 0))
  print(string.format("  compiled call, direct replay         %8.2f us back to back; %.2f us host from idle (%.2f us per kernel)",
    compiled_us, idle_us, idle_us / math.max(1, kernels)))
  print(string.format("    of which running the plan           %8.2f us", run_us))
  print(string.format("    kiln overhead (guards, lookup, I/O) %7.2f us per call", compiled_us - run_us))
end
print(string.format("eager call (Lua runs each op)        %8.2f us back to back; %.2f us host from idle", eager_us, eager_idle))
local cg = kiln.compile(g)
local traced_us = per_call_us(cg, math.max(10, calls // 10))
print(string.format("compiled call that re-traces (break) %8.2f us (capture on every call)", traced_us))

-- Part 2: the samples through kiln.time.
local which = arg and arg[2] or "simple_linear,large_linear,convnet,transformer_block,gcn"
if which == "none" then return end
print()
print(string.format("%-18s %-16s %7s %10s %12s %10s", "sample", "mode", "kernels", "host us", "us/kernel",
  "CUDA graph"))
for name in which:gmatch("[^,]+") do
  local spec = loadfile("samples/" .. name .. ".lua")({ small = true })
  local xs = spec.inputs({ small = true, device = dev })
  if dev ~= "cpu" then spec.model:to(dev) end
  for _, mode in ipairs({ "default", "reduce-overhead" }) do
    local cm = kiln.compile(spec.model, { mode = mode })
    local r = kiln.time(cm, table.unpack(xs), { iters = 200, warmup = 5, profile_iters = 3 })
    print(string.format("%-18s %-16s %7d %10.1f %12.2f %10s", name, mode, r.launches, r.host_us,
      r.host_us / math.max(1, r.launches), r.cuda_graph and "yes" or "no"))
  end
end
