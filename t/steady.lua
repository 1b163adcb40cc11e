-- steady.lua: kiln.time and kiln.bench time only calls that compiled
-- nothing (issue 32 item 4): a call that compiled (a first call, a
-- recompile) is listed apart with what it compiled and its time, and the
-- figures are timed again where one hid among the timed calls; kiln.time
-- warns when compiled is slower than eager, measured against the function
-- kiln.compile wrapped, as :time does (docs/lua-api.md).
-- Run by the kiln program (t/run).
local T = dofile("t/lib/tap.lua")

local function lit(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end

-- Run fn with io.stderr captured: the text written, then fn's results.
local function stderr_of(fn, ...)
  local buf, real = {}, io.stderr
  io.stderr = { write = function(self, ...)
    for _, s in ipairs({ ... }) do buf[#buf + 1] = tostring(s) end
    return self
  end, flush = function() end }
  local res = table.pack(pcall(fn, ...))
  io.stderr = real
  if not res[1] then error(res[2], 0) end
  return table.concat(buf), table.unpack(res, 2, res.n)
end

local repl = kiln.repl

-- ---- which call compiled, in words ------------------------------------------
do
  local cm = kiln.compile(kiln.nn.Linear(4, 4))
  local mark = repl.compile_mark(cm)
  cm(kiln.ones({ 8, 4 }))
  T.is(repl.compiled_since(cm, mark), "first call (compiling)", "compiled_since: a first call")
  mark = repl.compile_mark(cm)
  cm(kiln.ones({ 8, 4 }))
  T.is(repl.compiled_since(cm, mark), nil, "compiled_since: a call that hit its version compiled nothing")
  mark = repl.compile_mark(cm)
  cm(kiln.ones({ 2, 4 }))
  T.is(repl.compiled_since(cm, mark), "recompiled (x dim 1: 8 -> 2)", "compiled_since: a recompile names the dim")
  mark = repl.compile_mark(cm)
  cm(kiln.ones({ 5, 4 }))
  T.is(repl.compiled_since(cm, mark), "compiled (a plan for new sizes)",
    "compiled_since: a dynamic version's plan for new sizes")
  T.is(repl.compile_mark(function() end), nil, "compile_mark: a plain function has no counters")
  T.is(repl.compile_line({ what = "recompiled (x dim 1: 8 -> 2)", s = 0.2134 }), "recompiled (x dim 1: 8 -> 2): 0.21 s",
    "compile_line: seconds")
  T.is(repl.compile_line({ what = "first call (compiling)", s = 0.0042 }), "first call (compiling): 4.2 ms",
    "compile_line: milliseconds under a tenth of a second")
end

-- A function whose Lua number changes at every call: its second call
-- recompiles (the number becomes dynamic), and every call re-traces.
local function stepper()
  local step = 0
  return function(x)
    step = step + 1
    return x * step
  end
end

-- ---- kiln.time: the compiling calls apart ------------------------------------
do
  local cm = kiln.compile(stepper())
  local x = kiln.ones({ 4, 4 })
  local r = kiln.time(cm, x, { iters = 3, warmup = 0, profile_iters = 1, quiet = true })
  T.is(#r.compiles, 1, "kiln.time, no warm-up: the timed calls held the compiles, listed once")
  T.like(r.compiles[1] and r.compiles[1].what or "", "^first call %(compiling%), recompiled %(step %(t/steady%.lua:%d+%): 1 %-> 2%)$",
    "... the first call and the recompile, with the number that changed")
  T.ok(r.compiles[1] and r.compiles[1].timed, "... marked as found among the timed calls")
  T.like(tostring(r), "^first call %(compiling%), recompiled %(step %(t/steady%.lua:%d+%): 1 %-> 2%): [%d.]+ m?s %(in the timed calls: timed again%)\n",
    "tostring: the compile first, then the table")
  local r2 = kiln.time(cm, x, { iters = 3, warmup = 2, profile_iters = 1, quiet = true })
  T.is(#r2.compiles, 0, "a warm model: nothing compiled, nothing listed")
  T.ok(not tostring(r2):find("compil"), "... and its table says nothing of compiles")

  local cm2 = kiln.compile(stepper())
  local r3 = kiln.time(cm2, x, { iters = 3, warmup = 3, profile_iters = 1, quiet = true })
  T.is(#r3.compiles, 2, "kiln.time with warm-up: each warm-up call that compiled is listed")
  T.is(r3.compiles[1] and r3.compiles[1].what, "first call (compiling)", "... the first call")
  T.like(r3.compiles[2] and r3.compiles[2].what or "", "^recompiled %(step ", "... then the recompile")
  T.ok(r3.compiles[2] and not r3.compiles[2].timed and r3.compiles[2].s > 0, "... timed alone, outside the timed calls")
end

-- ---- kiln.time: slower than eager is said, measured -------------------------
do
  -- re-traces at every call (it changes a value it reads) and has no break:
  -- without an eager time nothing said so; measured, it is many times slower
  -- on the CPU wherever the test runs: a GPU's eager launches are not
  -- cheap enough against a re-trace to be many times faster
  local cm = kiln.compile(stepper())
  local x = kiln.ones({ 4, 4 }, { device = "cpu" })
  local text, r = stderr_of(kiln.time, cm, x, { iters = 5, warmup = 3, profile_iters = 1 })
  T.ok(type(r.eager_ms) == "number" and r.eager_ms > 0, "kiln.time timed the eager function (r.eager_ms)")
  T.like(r.slow or "", "^function re%-traces on every call %(it changes Lua values it reads.-%), so compiled is [%d.]+x slower than eager: ",
    "r.slow: why, and how much slower than eager")
  T.is(text, "kiln: " .. tostring(r.slow) .. "\n", "kiln.time prints the warning on stderr")
  text = stderr_of(kiln.time, cm, x, { iters = 5, warmup = 1, profile_iters = 1 })
  T.is(text, "", "... once per compiled function")
  local cm2 = kiln.compile(stepper())
  text, r = stderr_of(kiln.time, cm2, x, { iters = 5, warmup = 3, profile_iters = 1, quiet = true })
  T.is(text, "", "quiet = true: nothing printed")
  T.like(r.slow or "", "x slower than eager", "... the reason is in r.slow")
  local plain = stderr_of(kiln.time, function(a) return a * 2 end, x, { iters = 3, warmup = 1, profile_iters = 1 })
  T.is(plain, "", "a plain function: nothing to compare, nothing said")
  -- a module: its eager form is the module itself
  local m = kiln.compile(kiln.nn.Linear(4, 4):to("cpu"))
  r = kiln.time(m, x, { iters = 3, warmup = 1, profile_iters = 1, quiet = true })
  T.ok(type(r.eager_ms) == "number" and r.eager_ms > 0, "a compiled module is compared with the module run eagerly")
end

-- ---- kiln.bench: a recompile after the first call is apart -------------------
do
  local f = stepper()
  local b = kiln.bench(f, { kiln.ones({ 4, 4 }) }, { modes = { "default" }, iters = 3, warmup = 0, quiet = true })
  local row = b[1]
  T.ok(row.compile_s and row.compile_s > 0, "kiln.bench: compile s is the first call")
  T.is(row.compiles and #row.compiles, 1, "kiln.bench: the recompile of the second call is listed apart")
  T.like(row.compiles and row.compiles[1] and row.compiles[1].what or "", "^recompiled %(step %(t/steady%.lua:%d+%): %d+ %-> %d+%)$",
    "... with the number that changed")
  T.like(tostring(b), "\ndefault: recompiled %(step %(t/steady%.lua:%d+%): %d+ %-> %d+%): [%d.]+ m?s %(in the timed calls: timed again%)",
    "tostring: under the table, found among the timed calls and timed again")
  b = kiln.bench(f, { kiln.ones({ 4, 4 }) }, { modes = { "default" }, iters = 3, warmup = 2, quiet = true })
  T.like(tostring(b), "\ndefault: recompiled %(step .-%): [%d.]+ m?s$", "with warm-up: the warm-up call that recompiled")
  b = kiln.bench(function(a) return (a * 2):relu() end, { kiln.ones({ 4, 4 }) },
    { modes = { "eager", "default" }, iters = 2, warmup = 1, quiet = true })
  T.ok(not tostring(b):find("recompiled", 1, true) and #b[2].compiles == 0, "a model that compiles once: nothing listed")
end

T.done()
