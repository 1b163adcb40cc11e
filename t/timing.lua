-- timing.lua: live timing on the CPU (docs/lua-api.md, docs/repl.md and docs/modes.md):
-- kiln.profiler's records, kiln.time, kiln.profile, kiln.trace (valid JSON,
-- one event per kernel), the roofline arithmetic, the ceilings cache
-- (:device measures once, later calls and processes read the file, a
-- corrupt file is measured again), the :time table format, and that
-- profiling does not change results.
local T = dofile("t/lib/tap.lua")

local function lit(s) return (tostring(s):gsub("%p", "%%%0")) end

local function capture(fn, ...)
  local buf = {}
  local old_print = print
  print = function(...)
    local t = table.pack(...)
    for i = 1, t.n do t[i] = tostring(t[i]) end
    buf[#buf + 1] = table.concat(t, "\t", 1, t.n) .. "\n"
  end
  local res = table.pack(pcall(fn, ...))
  print = old_print
  if not res[1] then T.diag(tostring(res[2])) end
  return table.concat(buf), table.unpack(res, 1, res.n)
end

local function maxdiff(a, b)
  if table.concat(a:shape(), ",") ~= table.concat(b:shape(), ",") then return math.huge end
  return (a - b):abs():amax():item()
end

-- A tiny JSON validator: true when s is one JSON value and nothing else.
local function json_ok(s)
  local i = 1
  local value
  local function ws() i = s:find("[^ \t\r\n]", i) or #s + 1 end
  local function str()
    if s:sub(i, i) ~= '"' then return false end
    i = i + 1
    while i <= #s do
      local c = s:sub(i, i)
      if c == '"' then i = i + 1; return true end
      if c == "\\" then
        local e = s:sub(i + 1, i + 1)
        if e == "u" then
          if not s:sub(i + 2, i + 5):match("^%x%x%x%x$") then return false end
          i = i + 6
        elseif e:match('["\\/bfnrt]') then i = i + 2
        else return false end
      elseif c:byte() < 32 then return false
      else i = i + 1 end
    end
    return false
  end
  local function seq(close, item)
    i = i + 1
    ws()
    if s:sub(i, i) == close then i = i + 1; return true end
    while true do
      if not item() then return false end
      ws()
      local c = s:sub(i, i)
      i = i + 1
      if c == close then return true end
      if c ~= "," then return false end
      ws()
    end
  end
  function value()
    ws()
    local c = s:sub(i, i)
    local ok
    if c == "{" then
      ok = seq("}", function()
        if not str() then return false end
        ws()
        if s:sub(i, i) ~= ":" then return false end
        i = i + 1
        return value()
      end)
    elseif c == "[" then ok = seq("]", value)
    elseif c == '"' then ok = str()
    else
      local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", i)
      for _, w in ipairs({ "true", "false", "null" }) do
        if s:sub(i, i + #w - 1) == w then num = w end
      end
      if not num or num == "" then return false end
      i = i + #num
      ok = true
    end
    ws()
    return ok
  end
  return value() and i == #s + 1
end

-- Run a kiln child on a chunk; stdout and the exit status.
local function child(code, env) return T.child(code, { env = env }) end

-- ---------------------------------------------------------------------------
-- The profiler's records of eager ops

local P = kiln.profiler
T.ok(type(P) == "table" and type(P.begin) == "function", "kiln.profiler is there")
local a = kiln.randn({8, 32}, { seed = 1, device = "cpu" })
local w = kiln.randn({32, 16}, { seed = 2, device = "cpu" })
P.begin("cpu")
local y_prof = a:matmul(w):relu()
local recs = P.finish()
local y_plain = a:matmul(w):relu()
T.is(#recs, 2, "two eager ops, two records")
T.is(recs[1] and recs[1].name, "matmul_f32_8x16x32", "an eager matmul is named op_dtype_MxNxK")
T.is(recs[2] and recs[2].name, "relu_f32_8x16", "an eager op is named op_dtype_sizes")
T.is(recs[1] and recs[1].kind, "cpu", "a CPU op's kind is cpu")
T.is(recs[1] and recs[1].flops, 2 * 8 * 16 * 32, "matmul flops are 2*M*N*K")
T.is(recs[1] and recs[1].bytes, (8 * 32 + 32 * 16 + 8 * 16) * 4, "matmul bytes: both operands and the result once")
T.is(recs[2] and recs[2].bytes, 2 * 8 * 16 * 4, "relu bytes: read once, written once")
T.ok(recs[1] and recs[1].ms >= 0 and recs[2].start_ms >= recs[1].start_ms, "records carry times in order")
T.is(maxdiff(y_prof, y_plain), 0, "eager results are the same with the profiler on")
P.begin("cpu")
T.raises(function() P.begin("cpu") end, "already on", "a second session is refused")
P.cancel()
local bc = kiln.randn({1, 16}, { seed = 3, device = "cpu" })
P.begin("cpu")
local _ = a:matmul(w) + bc:expand({8, 16})
recs = P.finish()
T.is(recs[#recs] and recs[#recs].bytes, (8 * 16 + 16 + 8 * 16) * 4, "a broadcast operand counts the elements it has")

-- ---------------------------------------------------------------------------
-- A compiled sample: kiln.time, kiln.profile, kiln.trace

kiln.session.small = true
local spec = kiln.load("samples/transformer_block.lua", { quiet = true })
-- this part times the CPU backend, on any machine
if kiln.default_device() ~= "cpu" then spec.model:to("cpu") end
local x = spec.inputs({ small = true, dtype = "f32", device = "cpu" })
local cm = kiln.compile(spec.model)
local y1 = cm(table.unpack(x))
local y2 = cm(table.unpack(x))

-- the ceilings go to a cache folder of this test's own
local cache = os.tmpname()
os.remove(cache)
kiln.config.cache_dir = cache .. "/nested"

P.begin("cpu")
local y3 = cm(table.unpack(x))
local crecs = P.finish()
T.is(maxdiff(y3, y2), 0, "a compiled call gives the same result with the profiler on")
T.is(maxdiff(y2, y1), 0, "and the same as before")

local klist = cm:kernels()
local plan_recs = {}
for _, r in ipairs(crecs) do if r.index then plan_recs[#plan_recs + 1] = r end end
T.is(#plan_recs, #klist, "one record per kernel of cm:kernels()")
local names_ok = #klist > 0
for i, k in ipairs(klist) do
  if not plan_recs[i] or plan_recs[i].name ~= k.name or plan_recs[i].kind ~= k.kind then names_ok = false end
end
T.ok(names_ok, "records follow cm:kernels(): same names and kinds, same order")

local r = kiln.time(cm, x[1], { iters = 5, warmup = 1, profile_iters = 2 })
T.ok(r.median_ms > 0 and r.min_ms <= r.median_ms and r.median_ms <= r.max_ms, "median_ms > 0, min <= median <= max")
T.ok(r.host_us >= 0, "host_us is not negative")
T.is(r.cuda_graph, false, "no CUDA graph on the CPU")
local rows = {}
local numbers = {}
for _, k in ipairs(r.kernels) do
  if k.number then
    rows[#rows + 1] = k
    numbers[#numbers + 1] = k.number
  end
end
T.is(#rows, #klist, "kiln.time: one row per kernel of cm:kernels()")
local expected_numbers = {}
for i = 1, #klist do expected_numbers[i] = i end
T.is(table.concat(numbers, ","), table.concat(expected_numbers, ","),
  "kiln.time: each row carries its kernel's number in cm:kernels(), from 1")
names_ok = true
for i, k in ipairs(klist) do if not rows[i] or rows[i].name ~= k.name then names_ok = false end end
T.ok(names_ok, "kiln.time: rows named as cm:kernels() names them")
local pct, roof_ok, rate_ok, calls_ok = 0, true, true, true
for _, k in ipairs(r.kernels) do
  pct = pct + k.pct
  if k.roof_pct ~= nil and not (k.roof_pct > 0 and k.roof_pct < 1000) then
    roof_ok = false
    T.diag(string.format("%s roof %.1f%%", k.name, k.roof_pct))
  end
  if k.gbps and math.abs(k.gbps - k.bytes / (k.median_us * 1e-6) / 1e9) > 1e-9 * k.gbps then rate_ok = false end
  if k.gflops and math.abs(k.gflops - k.flops / (k.median_us * 1e-6) / 1e9) > 1e-9 * k.gflops then rate_ok = false end
  if k.calls < 1 or k.median_us < 0 then calls_ok = false end
end
T.near(pct, 100, 0.01, "the kernels' shares add up to 100%")
T.ok(roof_ok, "roof_pct is in (0, 1000) or nil")
T.ok(rate_ok, "GB/s and GFLOP/s are bytes and flops over the median time")
T.ok(calls_ok, "every row ran at least once per call")
T.ok(r.ceilings and r.ceilings.copy_gbps > 0 and r.ceilings.f32_gflops > 0, "kiln.time measured the CPU's ceilings")

-- the roofline arithmetic against ceilings we choose
local fake = { copy_gbps = 10, f32_gflops = 100, bf16_gflops = 0 }
local rf = kiln.time(cm, x[1], { iters = 1, warmup = 0, profile_iters = 1, ceilings = fake })
local math_ok, seen_compute, seen_bw = true, false, false
for _, k in ipairs(rf.kernels) do
  local want
  if k.flops > 0 and k.bytes > 0 then
    want = k.gflops / math.min(100, 10 * k.flops / k.bytes) * 100
    seen_compute = true
  elseif k.bytes > 0 then
    want = k.gbps / 10 * 100
    seen_bw = true
  end
  if want and math.abs(k.roof_pct - want) > 1e-9 * want then math_ok = false end
end
T.ok(math_ok and seen_compute, "roof% = achieved / min(peak, bandwidth x intensity)")
-- bandwidth by working set: interpolated in log bytes between the measured
-- sizes around the kernel's own (no compute ceiling in the way)
local curve = { copy_gbps = 1, f32_gflops = 1e12, bf16_gflops = 1e12,
  bandwidth = { { bytes = 1, gbps = 1000 }, { bytes = 1e12, gbps = 1 } } }
local rc = kiln.time(cm, x[1], { iters = 1, warmup = 0, profile_iters = 1, ceilings = curve })
local curve_ok, curve_seen = true, false
for _, k in ipairs(rc.kernels) do
  if k.bytes > 1 and k.bytes < 1e12 then
    curve_seen = true
    local g = 1000 + (1 - 1000) * math.log(k.bytes) / math.log(1e12)
    local want = k.gbps / math.min(g, 1e12 * k.bytes / math.max(k.flops, 1e-300)) * 100
    if k.flops == 0 then want = k.gbps / g * 100 end
    if math.abs(k.roof_pct - want) > 1e-9 * want then
      curve_ok = false
      T.diag(string.format("%s: roof %.6g%%, want %.6g%% (%.0f bytes)", k.name, k.roof_pct, want, k.bytes))
    end
  end
end
T.ok(curve_seen and curve_ok, "the bandwidth ceiling is the measured curve at the kernel's working set (log interpolation)")
-- reads and writes: a kernel that reads as much as it writes is held
-- against the copy's figure, one that reads two for one against the better
-- of copy and add, one in between against the two weighed by its read share
local mixc = { copy_gbps = 1, f32_gflops = 1e12, bf16_gflops = 1e12,
  bandwidth = { { bytes = 1, gbps = 400, copy_gbps = 100 }, { bytes = 1e12, gbps = 400, copy_gbps = 100 } } }
local function mix_row(fn, args)
  args[#args + 1] = { iters = 1, warmup = 0, profile_iters = 1, ceilings = mixc }
  local r = kiln.time(kiln.compile(fn), table.unpack(args))
  for _, k in ipairs(r.kernels) do if k.kind == "generated" then return k end end
end
local ma = kiln.randn({ 2, 32, 32 }, { device = "cpu", seed = 11 })
local mb = kiln.randn({ 2, 32, 32 }, { device = "cpu", seed = 12 })
local mc = kiln.randn({ 32, 32 }, { device = "cpu", seed = 13 })
for _, case in ipairs({
  { "relu (one read a write)", function(a) return a:relu() end, { ma }, 8192, 100 },
  { "add (two reads a write)", function(a, b) return a + b end, { ma, mb }, 8192, 400 },
  { "add of a broadcast half (read share 0.6)", function(a, c) return a + c end, { ma, mc }, 8192, 100 + 300 * 0.6 },
}) do
  local k = mix_row(case[2], case[3])
  T.ok(k ~= nil, case[1] .. ": a generated kernel")
  if k then
    T.is(k.write_bytes, case[4], case[1] .. ": write_bytes are the result's bytes")
    T.near(k.roof_pct, k.gbps / case[5] * 100, 1e-9 * k.roof_pct,
      string.format("%s: held against %g GB/s", case[1], case[5]))
  end
end
if not seen_bw then T.diag("no kernel without flops in this sample") end

-- a roof% above 100 (ceilings measured low, as under a sanitizer build)
-- adds a legend line after the total: set aside for the layout checks
local function no_legend(t) return (t:gsub("\nroof%% with !:[^\n]*$", "")) end
local text = no_legend(tostring(r))
T.like(text, "^  #  kernel +kind       calls   median us   %%     GB/s   GFLOP/s  roof%%\n",
  "tostring(kiln.time(...)) starts with the design's header (the kernel column as wide as the longest name)")
T.like(text, "\ntotal [%d.]+ us per call %(device%), host overhead %d+ us %(%d+%.%d us per kernel%), %d+ kernels, CUDA graph: no$",
  "and ends with the total line")
T.like(text, "\n +1  k0_%S+ +generated +1 +[%d.]+ +[%d.]+ +[%d.%-]+ +[%d.%-]+ +[%d%-]+!?\n", "a kernel row has every column, its number from 1 (roof% above 100 carries a \"!\")")

-- an eager function
local rr = kiln.time(function(t) return t:relu() end, a, { iters = 3, warmup = 0, profile_iters = 2 })
T.is(#rr.kernels, 1, "a plain function with one op: one row")
T.is(rr.kernels[1] and rr.kernels[1].name, "relu_f32_8x32", "named after the eager op")
T.is(rr.kernels[1] and rr.kernels[1].calls, 1, "one call per call")
T.is(tostring(rr):match("^[^\n]*"),
  "  #  kernel                          kind       calls   median us   %     GB/s   GFLOP/s  roof%",
  "with short names the header is the design's, column for column")
T.like(tostring(rr), "\n  1  relu_f32_8x32                   cpu            1 +[%d.]+ 100%.0 +[%d.]+ +[%d.]+ +%d+!?\n",
  "and the row lines up under it, numbered from 1")
-- The profiled calls share sessions (a session per call made every kernel
-- longer on the H100): the first call alone, then as many calls a session
-- as fit 4096 records. Counted by wrapping kiln.profiler.begin.
local function sessions_for(fn, n)
  local real_begin, count = P.begin, 0
  P.begin = function(...) count = count + 1; return real_begin(...) end
  local ok, r = pcall(kiln.profile, fn, a, { profile_iters = n, warmup = 0 })
  P.begin = real_begin
  T.ok(ok, "kiln.profile ran with a counted begin" .. (ok and "" or (": " .. tostring(r))))
  return count, ok and r or {}
end
local n_sessions, rows1 = sessions_for(function(t) return t:relu() end, 10)
T.is(n_sessions, 2, "ten profiled calls of one kernel: two sessions (the first call, then nine)")
T.is(rows1[1] and rows1[1].calls, 1, "and each kernel still counts once per call")
local function many_ops(t) -- 1000 eager ops a call: four calls a session
  for _ = 1, 1000 do t = t:neg() end
  return t
end
local n_many, rows_many = sessions_for(many_ops, 10)
T.is(n_many, 4, "ten calls of 1,000 kernels: the first call, then sessions of 4, 4 and 1")
T.is(rows_many[1] and rows_many[1].calls, 1000, "the 1,000 runs of one op a call are counted as its calls")
T.raises(function() kiln.time(function() error("boom") end, { iters = 1, warmup = 0 }) end, "boom",
  "an error in the timed function is raised")
P.begin("cpu")
P.cancel()
T.ok(true, "the profiler is usable after an error")
T.raises(function() kiln.time(42) end, "expected a compiled model or a function", "kiln.time checks its argument")

local prof = kiln.profile(cm, x[1], { profile_iters = 2, warmup = 0 })
T.ok(#prof >= #klist, "kiln.profile lists the kernels")
T.like(no_legend(tostring(prof)), "^  #  kernel .*\n[%d.]+ us per call in %d+ kernels$", "kiln.profile prints as a table")

local trace_path = cache .. "/trace.json"
local tp, nev = kiln.trace(cm, x[1], trace_path)
T.is(tp, trace_path, "kiln.trace returns the path")
local tf = io.open(trace_path, "r")
local tjson = tf and tf:read("a") or ""
if tf then tf:close() end
T.ok(json_ok(tjson), "the trace is valid JSON")
T.like(tjson, '^{"traceEvents":%[', "a Chrome trace object")
local events, gen_events = 0, 0
for ev in tjson:gmatch('{"name":"[^"]*","cat":"[^"]*","ph":"X","ts":[%d.]+,"dur":[%d.]+,"pid":1,"tid":1,"args":{"bytes":%d+,"flops":%d+') do
  events = events + 1
  if ev:match('"name":"k%d+_') then gen_events = gen_events + 1 end
end
T.is(events, nev, "every event is a complete X event with bytes and flops")
T.is(gen_events, #klist, "one event per kernel of cm:kernels()")
T.like(tjson, '"ts":0%.000', "timestamps start at the first event")

-- ---------------------------------------------------------------------------
-- :device and the ceilings cache

kiln.session.mode = "eager"
local out = capture(kiln.cmd.device)
local path_pat = lit(cache .. "/nested/device-" .. kiln.default_device() .. "-")
T.like(out, "CPU   ", ":device shows the CPU")
if kiln.default_device() == "cpu" then
  T.like(out, "no GPU in use", ":device says there is no GPU")
else
  T.ok(true, "(a GPU is in use)")
end
T.like(out, "roofline  copy [%d.]+ GB/s · f32 matmul [%d.]+ GFLOP/s", ":device prints the ceilings")
-- the curve's working sets depend on the device (the CPU's start at 0.20
-- MB, a GPU's at 0.39): read them back and check their order
local curve_line = out:match("\nbandwidth by working set, GB/s %(copy/add where they differ%): ([^\n]*)") or ""
local sizes = {}
for mb in curve_line:gmatch("([%d.]+) MB [%d./]+") do sizes[#sizes + 1] = tonumber(mb) end
local ascending = #sizes >= 2
for i = 2, #sizes do ascending = ascending and sizes[i] > sizes[i - 1] end
T.ok(ascending, ":device prints the bandwidth curve, smallest working set first: " .. curve_line)
-- kiln.time already measured them in this process: memoized, so cached
-- (with a GPU the folder holds other files too, device-cuda-*.txt and CUDA
-- modules: the CPU's file is looked for by name, not as the first line)
local files = "\n" .. io.popen("ls '" .. cache .. "/nested'"):read("a")
T.like(files, "\ndevice%-cpu%-[%w_%-]+%.txt\n", "the ceilings are cached as device-NAME.txt")
local fname = cache .. "/nested/" .. (files:match("\n(device%-cpu%-[%w_%-]+%.txt)\n") or "")
local cf = io.open(fname, "r")
local ctext = cf and cf:read("a") or ""
if cf then cf:close() end
T.like(ctext, "\ncopy_gbps = [%d.]+\nf32_gflops = [%d.]+\nbf16_gflops = [%d.]+\ndate = ", "the file is readable text")
out = capture(kiln.cmd.device)
T.like(out, "%(cached, measured .- in " .. path_pat, "a second :device reads the cache")
T.ok(not out:find("measuring", 1, true), "and does not measure again")

-- a new process: the file, then a corrupt file
local env = "KILN_CACHE_DIR='" .. cache .. "/nested'"
local code = [[
local c = kiln.ceilings({device = "cpu", progress = function(p) print("measuring " .. p) end})
print("cached=" .. tostring(c.cached), c.copy_gbps)
]]
local o1, rc1 = child(code, env)
T.ok(rc1 == 0 and o1:find("cached=true", 1, true) and not o1:find("measuring", 1, true),
  "another process reads the cached ceilings")
local bad = io.open(fname, "w")
bad:write("device = ???\ncopy_gbps = banana\n")
bad:close()
local o2, rc2 = child(code, env)
T.ok(rc2 == 0 and o2:find("cached=false", 1, true) and o2:find("measuring", 1, true), "a corrupt file is measured again")
cf = io.open(fname, "r")
ctext = cf and cf:read("a") or ""
if cf then cf:close() end
T.like(ctext, "\ncopy_gbps = [%d.]+\n", "and rewritten")
local o3 = child(code, env)
T.like(o3, "cached=true", "then read again")
T.like(ctext, "\nclock = events\n", "the file names the clock the ceilings were timed with (the CPU's: events)")
-- a file timed with another clock (or written before the clock was
-- recorded) is stale: the kernels held against it are timed differently
bad = io.open(fname, "w")
bad:write((ctext:gsub("\nclock = events\n", "\nclock = trace\n")))
bad:close()
local o4 = child(code, env)
T.ok(o4:find("cached=false", 1, true) and o4:find("measuring", 1, true), "a file timed with another clock is measured again")
-- a file whose points were measured the old way (each small working set
-- raised to the larger ones' figure) or before the way was recorded
cf = io.open(fname, "r")
ctext = cf and cf:read("a") or ""
if cf then cf:close() end
T.like(ctext, "\nruler = 5\n", "the file names how its points were measured")
T.like(ctext, "\nbandwidth_copy = [%d.]+:[%d.]+ ", "the file keeps the copy's figure of each working set")
for _, old in ipairs({ "\nruler = 4\n", "\nruler = 3\n", "\n" }) do
  bad = io.open(fname, "w")
  bad:write((ctext:gsub("\nruler = 5\n", old)))
  bad:close()
  local o5 = child(code, env)
  T.ok(o5:find("cached=false", 1, true) and o5:find("measuring", 1, true),
    "a file with " .. (old == "\n" and "no ruler" or old:match("ruler = %d")) .. " is measured again")
end
-- a file whose copy figures do not match its working sets
bad = io.open(fname, "w")
bad:write((ctext:gsub("\nbandwidth_copy = %d+:", "\nbandwidth_copy = 7:")))
bad:close()
local o6 = child(code, env)
T.ok(o6:find("cached=false", 1, true) and o6:find("measuring", 1, true),
  "a file whose copy figures name other working sets is measured again")
-- the points: one working set each, the bytes of one pass (3 x the add's
-- buffer; the copy moves as much), smallest first, as measured
local cur = kiln.ceilings({ device = "cpu" })
local steps_ok = #cur.bandwidth >= 3
for i = 2, #cur.bandwidth do
  if cur.bandwidth[i].bytes ~= 4 * cur.bandwidth[i - 1].bytes then steps_ok = false end
end
T.ok(steps_ok and cur.bandwidth[1].bytes == 3 * 64 * 1024,
  "the CPU's points: 3 x 64 KiB and up in steps of 4")

-- ---------------------------------------------------------------------------
-- :time on the loaded model

-- on the default device (the GPU where there is one)
kiln.load("samples/transformer_block.lua", { quiet = true })
capture(kiln.cmd.mode, "default")
out = no_legend((capture(kiln.cmd.time, "3"):gsub("\n$", "")))
local lines = {}
for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
-- the model was not run yet: its first call compiled, timed apart
T.like(table.remove(lines, 1) or "", "^first call %(compiling%): [%d.]+ m?s$",
  ":time first says how long the call that compiled took, apart from the figures")
T.like(lines[1] or "", "^  #  kernel +kind       calls   median us   %%     GB/s   GFLOP/s  roof%%$", ":time prints the header")
T.like(lines[#lines] or "", "^total [%d.]+ us per call %(device%), host overhead %d+ us %(%d+%.%d us per kernel%), %d+ kernels, CUDA graph: no$",
  ":time ends with the total line")
local krows = 0
for _, l in ipairs(lines) do
  if l:match("^ +%d+  k%d+_%S+ +%a+ +%d+ +[%d.]+ +[%d.]+ +[%d.%-]+ +[%d.%-]+ +[%d%-]+!?$") then krows = krows + 1 end
end
-- (a pointwise kernel folded into a matmul's library epilogue on the GPU
-- runs inside that matmul's row)
T.is(krows, #kiln.session.compiled:kernels() - (kiln.session.compiled:stats().library_epilogues or 0),
  ":time prints one row per compiled kernel")
if kiln.default_device() == "cuda" then
  capture(kiln.cmd.mode, "reduce-overhead")
  out = capture(kiln.cmd.time, "5")
  T.like(out, "CUDA graph: yes\n?$", ":time in reduce-overhead replays a CUDA graph")
  T.like(out, "\n +1  k0_", "and still times each kernel (the profiled calls run the plan), numbered from 1")
else
  for _ = 1, 2 do
    T.n = T.n + 1
    io.write("ok " .. T.n .. " # skip CUDA graphs need a GPU\n")
  end
end
capture(kiln.cmd.mode, "eager")
out = capture(kiln.cmd.time, "2")
T.like(out, "\n +1  layer_norm_f32_%S+ +%a+ ", ":time in eager mode times each op, numbered from 1")
T.ok(not pcall(kiln.cmd.time, "x"), ":time x is a usage error")

-- ---------------------------------------------------------------------------
-- kiln.bench

local bm = kiln.bench(function(t) return (t * 2):relu() + 1 end, { a }, { modes = { "eager", "default" }, iters = 2, warmup = 1 })
T.is(#bm, 2, "kiln.bench: one row per mode")
T.ok(bm[1].mode == "eager" and bm[1].speedup == 1 and bm[1].eager_ms > 0, "the eager row")
T.ok(bm[2].mode == "default" and bm[2].compiled_ms > 0 and bm[2].compile_s > 0 and bm[2].speedup > 0,
  "a compiled row has its time, compile time and speedup")
T.like(tostring(bm), "^mode +eager ms +compiled ms +speedup +compile s +peak MiB\neager +[%d.]+ ", "tostring is a table")
T.like(bm:csv(), "^mode,eager_ms,compiled_ms,speedup,compile_s,peak_mib,error\n\"eager\",", ":csv()")
T.ok(json_ok(bm:json()), ":json() is valid JSON")

os.execute("rm -rf '" .. cache .. "'")
T.done()
