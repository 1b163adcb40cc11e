-- diag_dynamic.lua: automatic dynamic numbers (issue 16 item 3). A Lua
-- number that changes between calls (an argument, an upvalue, a value read
-- back with :item()) recompiles once, with "number 's' at FILE:LINE is
-- dynamic from now on", and is read at every later call: 20 calls, one
-- recompile, no eager fallback, every result equal to eager and to a float64
-- reference. kiln.config.dynamic_numbers = false keeps one version per
-- value (until the cache limit); numbers that decide a shape or a branch
-- stay guarded. Functions carry "-- @tag" comments; messages take their
-- lines from those tags.
local T = dofile("t/lib/tap.lua")

local SRC = debug.getinfo(1, "S").short_src
local _, _, at = T.tags()

local function skip(name, why)
  T.n = T.n + 1
  io.write("ok " .. T.n .. " # skip " .. name .. ": " .. why .. "\n")
end

-- largest |a - b| relative to b's largest magnitude; NaN never passes
local function rel(a, b)
  if table.concat(a:shape(), ",") ~= table.concat(b:shape(), ",") then return math.huge end
  local d = (a:cast("f64") - b:cast("f64")):abs():amax():item()
  local m = b:cast("f64"):abs():amax():item()
  if d ~= d or m ~= m then return math.huge end
  return d / math.max(1, m)
end

local function step(x, s) -- @step
  return (x * s):sum(2) + x:sum(2) -- @step_use
end

local SCALE = 0.75
local function scaled(x)
  return x * SCALE -- @upvalue_use
end

local function fed_back(h)
  local s = h:sum():item()
  h = h * s -- @item_use
  return h:relu()
end

local function shaped(x, n)
  return x:reshape({n, -1}):sum(2) * n -- @shape_use
end

local function branchy(x, s)
  if s > 1 then return x * 2 end -- @branch_big
  return x * 3 -- @branch_small
end

local function two(x, a, b)
  return x * a + b -- @two_use
end

-- a child kiln process runs one case; its stderr is the test's text
if arg[1] == "child-slow" then
  local spec = dofile("samples/breaks.lua")
  local x = spec.inputs({ small = true })[1]
  local b1 = kiln.bench(spec.model, { x }, { modes = { "default" }, iters = 20 })
  local b2 = kiln.bench(spec.model, { x }, { modes = { "default" }, iters = 20 })
  local cm = kiln.compile(spec.model)
  kiln.time(cm, x, { iters = 5, warmup = 1, profile_iters = 1 })
  kiln.time(cm, x, { iters = 5, warmup = 1, profile_iters = 1 })
  io.write(string.format("return {slow1 = %q, slow2 = %q, text = %q}", tostring(b1[1].slow),
    tostring(b2[1].slow), tostring(b1)))
  os.exit(0)
end
if arg[1] == "child-step" or arg[1] == "child-static" then
  if arg[1] == "child-static" then kiln.config.dynamic_numbers = false end
  local cm = kiln.compile(step)
  local x = kiln.randn({3, 5}, {seed = 1, device = "cpu"})
  for i = 1, 20 do cm(x, 0.25 + i / 8) end
  io.write(string.format("return {recompiles = %d, fallbacks = %d}", #cm:recompiles(), cm:stats().eager_fallbacks))
  os.exit(0)
end

local function child(case, logs, env)
  local kiln_bin = os.getenv("KILN") or "build/kiln"
  local errfile = os.tmpname()
  local p = io.popen((env or "") .. "KILN_LOGS=" .. logs .. " '" .. kiln_bin .. "' " .. SRC .. " " .. case .. " 2>'" .. errfile .. "'")
  local out = p:read("a")
  p:close()
  local f = io.open(errfile)
  local text = f and f:read("a") or ""
  if f then f:close() end
  os.remove(errfile)
  local okl, r = pcall(function() return assert(load(out))() end)
  if not okl then
    T.diag(case .. " printed: " .. out)
    r = {}
  end
  return r, text
end

-- ---- a number argument (a step counter): dynamic after one recompile ----
do
  local cm = kiln.compile(step, {mode = "default"})
  local x = kiln.randn({3, 5}, {seed = 2, device = "cpu"})
  local worst_eager, worst_ref = 0, 0
  for i = 1, 20 do
    local s = 0.25 + i / 8
    local y = cm(x, s)
    worst_eager = math.max(worst_eager, rel(y, step(x, s)))
    local x64 = x:cast("f64")
    worst_ref = math.max(worst_ref, rel(y, (x64 * s):sum(2) + x64:sum(2)))
  end
  T.ok(worst_eager <= 1e-6, "argument: 20 calls, compiled equals eager (worst " .. worst_eager .. ")")
  T.ok(worst_ref <= 1e-5, "argument: compiled equals a float64 reference (worst " .. worst_ref .. ")")
  local rc = cm:recompiles()
  T.is(#rc, 1, "argument: exactly one recompile in 20 calls")
  T.is(cm:stats().eager_fallbacks, 0, "argument: no eager fallback")
  T.is(cm:stats().versions, 2, "argument: two versions (the constant, then the input)")
  T.is(rc[1] and rc[1].reasons[1], "0/0: number 's' at " .. at("step_use") .. " changed: 0.375 -> 0.5",
    "argument: the recompile names the number")
  T.is(rc[1] and table.concat(rc[1].dynamic, "|"), "number 's' at " .. at("step_use"),
    "argument: cm:recompiles() lists the number made dynamic")
  local found
  for _, g in ipairs(cm:guards()) do
    if g.version == 1 then
      for _, s in ipairs(g.guards) do if s:find("^number 's'") then found = s end end
    end
  end
  T.is(found, "number 's' at " .. at("step_use") .. " is dynamic: read at every call, dtype f32 device cpu",
    "argument: the new version's guard says the number is read at every call")
  -- the same number again: a direct replay binds the traced value; a new one traces
  local d0 = cm:stats().direct_replays
  local y1, y2 = cm(x, 7.5), cm(x, 7.5)
  T.ok(cm:stats().direct_replays == d0 + 1, "argument: the same number twice: the second call is a direct replay")
  T.ok(rel(y2, step(x, 7.5)) <= 1e-6 and rel(y1, step(x, 7.5)) <= 1e-6, "argument: the replay uses the number")
  T.ok(rel(cm(x, -2.25), step(x, -2.25)) <= 1e-6, "argument: after a replay, a new number is seen")
  T.is(#cm:recompiles(), 1, "argument: still one recompile")
end

-- ---- a step counter the function keeps in its own upvalue ----------------
do
  local lr = 0.5
  local function decay(x) -- @decay
    lr = lr * 0.9
    return x * lr -- @decay_use
  end
  local cm = kiln.compile(decay)
  local x = kiln.randn({2, 3}, {seed = 10, device = "cpu"})
  local worst = 0
  for i = 1, 20 do
    local y = cm(x)
    local want = x:cast("f64") * (0.5 * 0.9 ^ i)
    worst = math.max(worst, rel(y, want))
  end
  T.ok(worst <= 1e-6, "own upvalue: every call sees the new value (worst " .. worst .. ")")
  T.is(cm:stats().replayable, "it changes Lua values it reads (an upvalue, a table field or a global)",
    "own upvalue: never replayed (a replay would skip the write)")
  T.is(#cm:recompiles(), 1, "own upvalue: one recompile")
  T.is(cm:stats().eager_fallbacks, 0, "own upvalue: no eager fallback")
end

-- ---- the recompile message, and dynamic_numbers = false, in a child ------
do
  local r, text = child("child-step", "recompiles")
  T.is(r.recompiles, 1, "child: one recompile")
  T.is(r.fallbacks, 0, "child: no eager fallback")
  T.is(text, "Recompiling step (" .. at("step") .. "), graph 0, version 1\n"
    .. "  triggered by the guard failure(s):\n"
    .. "  - 0/0: number 's' at " .. at("step_use") .. " changed: 0.375 -> 0.5\n"
    .. "  number 's' at " .. at("step_use") .. " is dynamic from now on\n",
    "KILN_LOGS=recompiles: the recompile says the number is dynamic from now on (exact text)")

  local rs, stext = child("child-static", "")
  T.is(rs.recompiles, 7, "dynamic_numbers = false: a recompile per value up to the cache limit (8 versions)")
  T.is(rs.fallbacks, 12, "dynamic_numbers = false: the 12 later calls run eagerly (today's specialization)")
  T.is(stext, "step (" .. at("step") .. ") hit kiln.config.cache_size_limit (8): graph 0 runs eagerly from now on\n"
    .. "  last reason: 0/7: number 's' at " .. at("step_use") .. " changed: 1.25 -> 1.375\n",
    "dynamic_numbers = false: the cache-limit warning, once (exact text)")
end

-- ---- dynamic = false keeps numbers static too ------------------------------
do
  local cm = kiln.compile(step, {dynamic = false})
  local x = kiln.randn({3, 5}, {seed = 12, device = "cpu"})
  for i = 1, 4 do cm(x, i / 2) end
  T.is(#cm:recompiles(), 3, "dynamic = false: one version per number")
  T.is(#cm:recompiles()[3].dynamic, 0, "dynamic = false: no number made dynamic")
end

-- ---- an upvalue -----------------------------------------------------------
do
  local cm = kiln.compile(scaled)
  local x = kiln.randn({4, 4}, {seed = 3, device = "cpu"})
  local worst = 0
  for i = 1, 20 do
    SCALE = 0.75 + i / 16
    worst = math.max(worst, rel(cm(x), scaled(x)))
  end
  T.ok(worst <= 1e-6, "upvalue: 20 values, compiled equals eager")
  T.is(#cm:recompiles(), 1, "upvalue: one recompile")
  T.is(cm:stats().eager_fallbacks, 0, "upvalue: no eager fallback")
  local rc = cm:recompiles()[1]
  T.is(rc and table.concat(rc.dynamic, "|"), "number 'SCALE' at " .. at("upvalue_use"),
    "upvalue: named as the code reads it")
end

-- ---- a number read back with :item() (after a graph break) ---------------
do
  local cm = kiln.compile(fed_back)
  local h0 = kiln.randn({3, 3}, {seed = 4, device = "cpu"})
  local worst = 0
  for i = 1, 20 do
    local h = h0 * (i / 10)
    worst = math.max(worst, rel(cm(h), fed_back(h)))
  end
  T.ok(worst <= 1e-6, "item(): 20 calls, compiled equals eager")
  T.is(#cm:recompiles(), 1, "item(): one recompile")
  T.is(cm:stats().eager_fallbacks, 0, "item(): no eager fallback")
  local rc = cm:recompiles()[1]
  T.is(rc and table.concat(rc.dynamic, "|"), "number 's' at " .. at("item_use"), "item(): the fed-back number is dynamic")
  T.is(rc and rc.graph, 1, "item(): in the graph after the break")
end

-- ---- one line in a loop across graph breaks: dynamic in each graph ------
do
  local function looped(x, s)
    for _ = 1, 2 do
      x = x * s -- @loop_use
      if x:sum() > 1e9 then x = x + 1 end -- a break: the next turn is another graph
    end
    return x
  end
  local cm = kiln.compile(looped)
  local x = kiln.randn({3}, {seed = 11, device = "cpu"})
  local worst = 0
  for i = 1, 20 do worst = math.max(worst, rel(cm(x, 1 + i / 32), looped(x, 1 + i / 32))) end
  T.ok(worst <= 1e-6, "loop across breaks: compiled equals eager")
  local rc = cm:recompiles()
  T.is(#rc, 2, "loop across breaks: one recompile per graph holding the number, in the second call")
  T.is(rc[1] and rc[2] and (rc[1].dynamic[1] .. "|" .. rc[2].dynamic[1]),
    "number 's' at " .. at("loop_use") .. "|number 's' at " .. at("loop_use"), "loop across breaks: each says so")
  T.is(cm:stats().eager_fallbacks, 0, "loop across breaks: no eager fallback")
end

-- ---- two numbers of one line change together: both dynamic at once -------
do
  local cm = kiln.compile(two)
  local x = kiln.randn({2, 3}, {seed = 5, device = "cpu"})
  local worst = 0
  for i = 1, 20 do worst = math.max(worst, rel(cm(x, i + 0.5, -i / 4), two(x, i + 0.5, -i / 4))) end
  T.ok(worst <= 1e-6, "two numbers: compiled equals eager")
  T.is(#cm:recompiles(), 1, "two numbers: one recompile for both")
  local rc = cm:recompiles()[1]
  T.is(rc and table.concat(rc.dynamic, "|"), "number 'a' at " .. at("two_use") .. "|number 'b' at " .. at("two_use") .. " #2",
    "two numbers: each named, the second of the line numbered")
end

-- ---- a number that decides a shape stays guarded -------------------------
do
  local cm = kiln.compile(shaped, {dynamic = false})
  local x = kiln.randn({12}, {seed = 6, device = "cpu"})
  local worst = 0
  for _, n in ipairs{2, 3, 4, 6, 3} do worst = math.max(worst, rel(cm(x, n), shaped(x, n))) end
  T.ok(worst <= 1e-6, "shape number: compiled equals eager for each n")
  local rc = cm:recompiles()
  T.is(#rc, 3, "shape number: one version per n (n = 3 again fits its version)")
  local any = 0
  for _, r in ipairs(rc) do any = any + #r.dynamic end
  T.is(any, 0, "shape number: never made dynamic (it is part of the graph's structure)")
  T.like(rc[1] and rc[1].reasons[1] or "", "^0/0: graph differs from version 0 from node %d+ at " .. at("shape_use"):gsub("%p", "%%%0") .. "$",
    "shape number: the reshape's size is a structure guard")
end

-- ---- a number that decides a branch stays guarded ------------------------
do
  local cm = kiln.compile(branchy)
  local x = kiln.randn({2, 2}, {seed = 7, device = "cpu"})
  local worst = 0
  for i = 1, 10 do
    local s = i % 2 == 0 and 0.5 + i or 0.5
    worst = math.max(worst, rel(cm(x, s), branchy(x, s)))
  end
  T.ok(worst <= 1e-6, "branch: compiled equals eager on both sides")
  local rc = cm:recompiles()
  T.is(#rc, 1, "branch: one version per side")
  T.is(rc[1] and #rc[1].dynamic, 0, "branch: the branch's numbers stay constants")
end

-- ---- reduce-overhead: the number is a per-call input of the replayed plan -
do
  local cm = kiln.compile(step, {mode = "reduce-overhead"})
  local x = kiln.randn({3, 5}, {seed = 8, device = "cpu"})
  local worst = 0
  for i = 1, 20 do worst = math.max(worst, rel(cm(x, i / 3), step(x, i / 3))) end
  T.ok(worst <= 1e-6, "reduce-overhead (CPU): 20 values, compiled equals eager")
  T.is(#cm:recompiles(), 1, "reduce-overhead (CPU): one recompile")
end

-- ---- the slow-compile warning (issue 16 item 4) --------------------------
do
  local spec = dofile("samples/breaks.lua")
  local x = spec.inputs({ small = true })[1]
  local cm = kiln.compile(spec.model)
  cm(x)
  local advice = "remove the break (kiln.where keeps a branch in the graph), move the code that needs a value "
    .. "into kiln.eager, or turn fullgraph on (:fullgraph on, or kiln.compile(fn, {fullgraph = true})) "
    .. "to stop at the first break with its stack; :breaks lists them"
  local head = "forward re-traces on every call (2 graph breaks at samples/breaks.lua:14)"
  T.is(kiln.profiler.slow_reason(cm, 0.193, 0.017),
    head .. ", so compiled is 11x slower than eager: " .. advice,
    "slow reason: breaks and the measured ratio, in plain words (exact text)")
  T.is(kiln.profiler.slow_reason(cm, 0.05, 0.02),
    head .. ", so compiled is 2.5x slower than eager: " .. advice, "slow reason: a ratio under 10 keeps a decimal")
  T.is(kiln.profiler.slow_reason(cm), head .. ", so every call runs the Lua code and capture again: " .. advice,
    "slow reason without an eager time (kiln.time): the re-tracing alone")
  T.is(kiln.profiler.slow_reason(cm, 0.01, 0.02), nil, "not slower than eager: nothing to say")
  T.is(kiln.profiler.slow_reason(cm, 0.105, 0.1), nil, "within 10% of eager (timing noise): nothing to say")
  T.raises(function() kiln.profiler.slow_reason(cm, 0.1) end, "give both the compiled and the eager time",
    "slow_reason: one time without the other is an error")

  local pure = kiln.compile(function(a) return (a * 2):relu() end)
  pure(x)
  pure(x)
  T.is(kiln.profiler.slow_reason(pure), nil, "a replayed function with no eager time: nothing to say")
  T.like(kiln.profiler.slow_reason(pure, 0.3, 0.1) or "",
    "^function replays 1 graph of %d+ kernels per call, so compiled is 3%.0x slower than eager: the work is too small",
    "slow reason of a replayed graph that is slower: says so")

  -- on the CPU wherever the test runs (KILN_DEVICE): the warning needs a
  -- re-traced call many times slower than eager, which a GPU's eager
  -- launches may not be
  local r, text = child("child-slow", "", "KILN_DEVICE=cpu ")
  local lines = {}
  for l in text:gmatch("[^\n]+") do lines[#lines + 1] = l end
  T.is(#lines, 2, "warned once per model (two kiln.bench calls) and once per compiled function (two kiln.time calls)")
  T.like(lines[1] or "", "^kiln: " .. (head .. ", so compiled is "):gsub("%p", "%%%0") .. "%d[%d.]*x slower than eager: "
    .. advice:gsub("%p", "%%%0") .. "$", "kiln.bench: the warning on stderr")
  -- kiln.time times a few eager calls: slower, it says by how much; else that it re-traces
  local retrace = "kiln: " .. head .. ", so every call runs the Lua code and capture again: " .. advice
  local slower = "^kiln: " .. (head .. ", so compiled is "):gsub("%p", "%%%0") .. "%d[%d.]*x slower than eager: "
    .. advice:gsub("%p", "%%%0") .. "$"
  T.ok(lines[2] == retrace or (lines[2] or ""):match(slower), "kiln.time: the warning on stderr, measured against eager")
  T.like(r.slow1 or "", "^" .. head:gsub("%p", "%%%0"), "kiln.bench: the row's slow field holds the reason")
  T.like(r.text or "", "\n! default: " .. head:gsub("%p", "%%%0"), "tostring(bench): the reason under the table")
  T.like(r.text or "", "\ndefault +[%d.]+ +[%d.]+ +[%d.]+x! ", "tostring(bench): the row is marked !")
end

-- ---- the GPU: the scalar lives on the device, CUDA graphs replay it -------
if pcall(kiln.zeros, {1}, {device = "cuda"}) then
  for _, mode in ipairs{"default", "reduce-overhead"} do
    local cm = kiln.compile(step, {mode = mode})
    local x = kiln.randn({64, 32}, {seed = 9, device = "cpu"}):to("cuda")
    local worst = 0
    for i = 1, 20 do worst = math.max(worst, rel(cm(x, i / 3):to("cpu"), step(x, i / 3):to("cpu"))) end
    T.ok(worst <= 1e-5, "cuda " .. mode .. ": 20 values, compiled equals eager (worst " .. worst .. ")")
    T.is(#cm:recompiles(), 1, "cuda " .. mode .. ": one recompile")
    T.is(cm:stats().eager_fallbacks, 0, "cuda " .. mode .. ": no eager fallback")
    if mode == "reduce-overhead" then
      T.ok(cm:stats().replays > 0, "cuda reduce-overhead: the recording was replayed (" .. tostring(cm:stats().cuda_graph) .. ")")
    end
  end
else
  skip("cuda: dynamic numbers in default and reduce-overhead", "no CUDA device")
end

T.done()
