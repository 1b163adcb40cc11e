-- capture_overhead.lua: host overhead of a compiled call on a cache hit.
-- A 50-op function on tiny tensors is called many times, eagerly and
-- compiled. For the compiled call the report splits the time into running
-- the graph's ops (kn_graph_run) and what kiln adds around it: guard checks,
-- cache lookup, binding inputs and returning outputs (the direct replay), or
-- capture as well when the function must be traced on every call.
-- Run: build/kiln bench/capture_overhead.lua [calls]
local calls = tonumber(arg and arg[1]) or 20000

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

local x = kiln.randn({4, 4}, {seed = 1})
local w = kiln.randn({4, 4}, {seed = 2})

local function per_call_us(fn, n)
  for _ = 1, 100 do fn(x, w) end
  local t0 = kiln.clock()
  for _ = 1, n do fn(x, w) end
  return (kiln.clock() - t0) / n * 1e6
end

local eager_us = per_call_us(f, calls)
local cm = kiln.compile(f)
cm(x, w)
local ops, kernels = cm:graphs()[1].op_count, cm:stats().kernels
local run0 = cm:stats().replay_run_s
local compiled_us = per_call_us(cm, calls)
local s = cm:stats()
local run_us = (s.replay_run_s - run0) / (calls + 100) * 1e6

local cg = kiln.compile(g)
local traced_us = per_call_us(cg, math.max(1, calls // 10))

print(string.format("graph: %d ops in %d kernels; replayable: %s; direct replays: %d; recompiles: %d",
  ops, kernels, s.replayable, s.direct_replays, s.recompiles))
print(string.format("eager call (Lua runs each op)        %8.2f us", eager_us))
print(string.format("compiled call, direct replay         %8.2f us", compiled_us))
print(string.format("  of which running the graph          %8.2f us", run_us))
print(string.format("  kiln overhead (guards, lookup, I/O) %7.2f us per call", compiled_us - run_us))
print(string.format("compiled call that re-traces (break) %8.2f us (capture on every call)", traced_us))
