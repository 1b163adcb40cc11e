-- 38_steady.lua: what timing says besides its figures (docs/lua-api.md,
-- docs/repl.md): the calls that compiled, timed apart from the steady state
-- (:run, :time, :bench, kiln.time and kiln.bench), and why a compiled
-- function is slow, in plain words (kiln.profiler.slow_reason). The
-- helpers go through kiln.repl to 21_repl_model.lua (:run), 40_timing.lua
-- (kiln.time, :time) and kiln.bench.
local kiln = ...

local P = kiln.profiler
local repl = kiln.repl
local is_compiled = repl.is_compiled
-- captured now: a user's script may replace the debug library
local getuservalue = debug.getuservalue

---------------------------------------------------------------------------
-- Which call compiled. A compiled callable's counters grow when a call
-- compiles (a first call, a recompile, a graph first reached after a
-- break, a plan for new sizes of a dynamic version): compile_mark before
-- the call, compiled_since after it. A median with such a call in it says
-- nothing of the steady state (:run 2 after a shape change printed
-- "202.1 ms per call (min 1.70)").

-- The counters of compiled callable fn that grow when a call compiles;
-- nil for anything else (a plain function never compiles).
function repl.compile_mark(fn)
  if not is_compiled(fn) then return nil end
  local ok, s = pcall(fn.stats, fn)
  if not ok or type(s) ~= "table" then return nil end
  return { calls = s.calls, graphs = s.graphs, misses = s.version_misses, plans = s.plans, recompiles = s.recompiles }
end

-- A failed guard in short: "x dim 1: 8 -> 2" for "0/0: tensor 'x' size
-- mismatch at dim 1: expected 8, actual 2", "step (f.lua:3): 1 -> 2" for
-- a number, "x dtype: f32 -> bf16"; other guards as they read, less their
-- "graph/version: " prefix.
local function short_reason(reason)
  local r = tostring(reason):gsub("^%d+/%d+: ", "")
  local what, dim, want, got = r:match("^tensor '(.-)' size mismatch at dim (%d+): expected ([^,]-), actual (.*)$")
  if what then return string.format("%s dim %s: %s -> %s", what, dim, want:gsub("^s%d+ = ", ""), got) end
  local name, where, from, to = r:match("^number '(.-)' at (%S+) changed: (.-) %-> (.*)$")
  if name then return string.format("%s (%s): %s -> %s", name, where, from, to) end
  local label, prop
  label, prop, want, got = r:match("^(.-) (%a[%a ]-) mismatch: expected (.-), actual (.*)$")
  if label then return string.format("%s %s: %s -> %s", label:gsub("^tensor '(.-)'$", "%1"), prop, want, got) end
  return r
end

-- What fn compiled since mark (compile_mark), in words: "first call
-- (compiling)", "recompiled (x dim 1: 8 -> 2)" ("recompiled 3 graphs
-- (...)" in a function with graph breaks), "compiled (a new graph after a
-- break)", "compiled (a plan for new sizes)"; nil when the call compiled
-- nothing (or fn is not a compiled callable).
function repl.compiled_since(fn, mark)
  local now = mark and repl.compile_mark(fn)
  if not now then return nil end
  -- a batch of timed calls may hold a first call and a recompile
  local first = mark.calls == 0 and now.calls > 0 and "first call (compiling)" or nil
  if now.recompiles > mark.recompiles then
    -- the first graph's failed guard is the cause; the graphs after it
    -- (fed by its outputs) recompile for the same reason: counted, not named
    local ok, list = pcall(fn.recompiles, fn)
    local why, graphs, ngraphs = nil, {}, 0
    for i = mark.recompiles + 1, ok and #list or 0 do
      why = why or short_reason(list[i].reasons and list[i].reasons[1] or "?")
      if not graphs[list[i].graph] then graphs[list[i].graph], ngraphs = true, ngraphs + 1 end
    end
    local re = string.format("recompiled%s (%s)", ngraphs > 1 and (" " .. ngraphs .. " graphs") or "",
      why or "a guard failed")
    return first and (first .. ", " .. re) or re
  end
  if first then return first end
  if now.graphs > mark.graphs then return "compiled (a new graph after a break)" end
  if now.misses > mark.misses then return "compiled (a new version)" end
  if now.plans > mark.plans then return "compiled (a plan for new sizes)" end
  return nil
end

-- A compile's time as printed: "0.21 s", or "4.2 ms" under a tenth of a
-- second (a compile from the cache).
function repl.fmt_compile_s(s)
  if s >= 0.1 then return string.format("%.2f s", s) end
  return string.format(s * 1000 >= 1 and "%.1f ms" or "%.2f ms", s * 1000)
end

-- "recompiled (x dim 1: 8 -> 2): 0.21 s": one call that compiled ({what, s}).
-- A compile among timed calls (steady_calls) says so: its time is the
-- slowest call's, and the calls were timed again without it.
function repl.compile_line(c)
  return c.what .. ": " .. repl.fmt_compile_s(c.s) .. (c.timed and " (in the timed calls: timed again)" or "")
end

local function sync(dev)
  if type(kiln.synchronize) == "function" then kiln.synchronize(dev) end
end

-- `warmup` calls of fn(args), each checked: one that compiled is timed (to
-- the end of its device work) and added to `compiles` ({what, s}).
function repl.warm_up(fn, args, dev, warmup, compiles)
  local checked = is_compiled(fn)
  for i = 1, warmup do
    P.progress("warm-up calls", i - 1, warmup)
    local mark = repl.compile_mark(fn)
    local t0 = kiln.clock()
    fn(table.unpack(args, 1, args.n))
    if checked then
      sync(dev)
      local what = repl.compiled_since(fn, mark)
      if what then compiles[#compiles + 1] = { what = what, s = kiln.clock() - t0 } end
    end
  end
  return compiles
end

-- `iters` calls of fn(args) back to back (P.time_calls: the device ms and
-- the host ms of each). No check runs between them, so where one compiled
-- after all (the counters moved), it goes to `compiles` with the slowest
-- call's time and the calls are timed again (at most twice more): the
-- figures are of calls that compiled nothing.
function repl.steady_calls(fn, args, dev, iters, compiles)
  local device_ms, wall_ms
  for _ = 1, 3 do
    local mark = repl.compile_mark(fn)
    device_ms, wall_ms = P.time_calls(iters, dev, fn, table.unpack(args, 1, args.n))
    local what = repl.compiled_since(fn, mark)
    if not what then break end
    local slowest = 0
    for i = 1, iters do slowest = math.max(slowest, device_ms[i], wall_ms[i]) end
    compiles[#compiles + 1] = { what = what, s = slowest / 1000, timed = true }
  end
  return device_ms, wall_ms
end

-- The eager form of compiled callable cm (the module or function
-- kiln.compile wrapped), or nil.
function repl.eager_of(cm)
  if not is_compiled(cm) then return nil end
  local ok, uv = pcall(getuservalue, cm, 1)
  if not ok or type(uv) ~= "table" then return nil end
  return uv.module or uv.fn
end

---------------------------------------------------------------------------
-- Why a compiled function is slow, said once in plain words: it traces again
-- at every call (graph breaks, or a call a replay cannot skip), or it was
-- measured slower than eager.

-- "samples/breaks.lua:14, :22": each line once, its file named when it changes.
local function lines_text(wheres)
  local out, seen, last_file = {}, {}, nil
  for _, w in ipairs(wheres) do
    if not seen[w] then
      seen[w] = true
      local file, line = w:match("^(.*):(%d+)$")
      out[#out + 1] = (file and file == last_file) and (":" .. line) or w
      last_file = file or last_file
    end
  end
  return table.concat(out, ", ")
end

local function times_text(x) return string.format(x >= 10 and "%.0fx" or "%.1fx", x) end

-- The reason compiled callable cm is slow, or nil. compiled_ms and eager_ms
-- (both or neither) are measured times per call (slower: by more than 10%);
-- without them only a function that re-traces because of graph breaks is
-- reported.
function P.slow_reason(cm, compiled_ms, eager_ms)
  for i, v in ipairs({ compiled_ms, eager_ms }) do
    if v ~= nil and (type(v) ~= "number" or v ~= v) then
      error(string.format("kiln.profiler.slow_reason: argument %d must be a time in ms, got %s", i + 1,
        type(v) == "number" and "nan" or type(v)), 2)
    end
  end
  if (compiled_ms == nil) ~= (eager_ms == nil) then
    error("kiln.profiler.slow_reason: give both the compiled and the eager time, or neither", 2)
  end
  if not is_compiled(cm) then return nil end
  local ok, s = pcall(cm.stats, cm)
  if not ok or type(s) ~= "table" or s.calls == 0 then return nil end
  local last = cm:last_call()
  local nbreaks = last.graph_break_count or 0
  -- 10% more than eager, so timing noise on a tie says nothing
  local slower = compiled_ms and eager_ms and eager_ms > 0 and compiled_ms > eager_ms * 1.1
  local retraces = s.replayable ~= "yes" and s.replayable ~= "not called yet"
  if compiled_ms and eager_ms and not slower then return nil end -- measured, and it pays
  if not slower and nbreaks == 0 then return nil end
  local name = s.name or "the compiled function"
  local head, advice
  if nbreaks > 0 then
    local wheres = {}
    for i, b in ipairs(last.break_reasons or {}) do wheres[i] = b.where end
    head = string.format("%s re-traces on every call (%d graph break%s at %s)", name, nbreaks,
      nbreaks == 1 and "" or "s", lines_text(wheres))
    advice = "remove the break (kiln.where keeps a branch in the graph), move the code that needs a value "
      .. "into kiln.eager, or turn fullgraph on (:fullgraph on, or kiln.compile(fn, {fullgraph = true})) "
      .. "to stop at the first break with its stack; :breaks lists them"
  elseif retraces then
    head = string.format("%s re-traces on every call (%s)", name, s.replayable)
    advice = "a call that replays skips the Lua code; cm:stats().replayable says what stops it"
  else
    head = string.format("%s replays %d graph%s of %d kernels per call", name, s.graphs or 1,
      (s.graphs or 1) == 1 and "" or "s", s.kernels or 0)
    advice = "the work is too small for compiled kernels to pay for their calls; :time shows where the time "
      .. "goes, and a small function can stay eager"
  end
  local so = slower and string.format("so compiled is %s slower than eager", times_text(compiled_ms / eager_ms))
    or "so every call runs the Lua code and capture again"
  return head .. ", " .. so .. ": " .. advice, head
end

-- Print a slow reason on stderr once per (key, what it says).
local slow_warned = setmetatable({}, { __mode = "k" })
function repl.warn_slow(key, text, head)
  if type(text) ~= "string" then return end
  local seen = slow_warned[key] or {}
  slow_warned[key] = seen
  if seen[head or text] then return end
  seen[head or text] = true
  io.stderr:write("kiln: " .. text .. "\n")
  io.stderr:flush()
end
