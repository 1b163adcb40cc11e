-- repl_commands.lua: the REPL's commands as Lua functions (kiln.cmd.*,
-- kiln.load, kiln.repl.command), with good and bad model files written to a
-- temporary folder; also the REPL helpers kiln.repl.format and
-- kiln.repl.complete. Run by the kiln program (t/run).
local T = dofile("t/lib/tap.lua")

-- Run fn(...) with print and io.stdout captured; returns the text printed,
-- then pcall's results.
local function capture(fn, ...)
  local buf = {}
  local old_print, old_stdout = print, io.stdout
  print = function(...)
    local t = table.pack(...)
    for i = 1, t.n do t[i] = tostring(t[i]) end
    buf[#buf + 1] = table.concat(t, "\t", 1, t.n) .. "\n"
  end
  io.stdout = { write = function(self, ...)
    for _, s in ipairs({ ... }) do buf[#buf + 1] = tostring(s) end
    return self
  end }
  local res = table.pack(pcall(fn, ...))
  print, io.stdout = old_print, old_stdout
  return table.concat(buf), table.unpack(res, 1, res.n)
end

local function lit(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"), "cannot make " .. dir)
local written = {}
local function write(name, text)
  local path = dir .. "/" .. name
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  written[#written + 1] = path
  return path
end

-- ---- the command table and :help
for _, name in ipairs({ "load", "mode", "run", "device", "help", "quit" }) do
  T.is(type(kiln.cmd[name]), "function", "kiln.cmd." .. name .. " is a function")
end
local out = capture(kiln.cmd.help)
for _, usage in ipairs({ ":load FILE.lua", ":mode [MODE]", ":run [n]", ":device", ":help [CMD]", ":quit" }) do
  T.like(out, lit(usage), ":help lists " .. usage)
end
kiln.repl.register("zz_gone", { usage = ":zz_gone" }, function() end)
kiln.cmd.zz_gone = nil
out = capture(kiln.cmd.help)
T.ok(not out:find(":zz_gone", 1, true), ":help lists only commands that exist")
out = capture(kiln.cmd.help, "run")
T.like(out, lit("small = kiln.session.small"), ":help run gives the longer text")
out = capture(kiln.cmd.help, ":mode")
T.like(out, "max%-autotune%-no%-cudagraphs", ":help :mode (with the colon) works too")
T.raises(function() kiln.cmd.help("nosuch") end, lit("unknown command ':nosuch' (try :help)"), ":help of an unknown command")

-- ---- kiln.repl.command: parsing a `:` line
T.raises(function() kiln.repl.command(":nosuch 1 2") end, lit("unknown command ':nosuch' (try :help)"),
  "an unknown command")
T.raises(function() kiln.repl.command(":") end, lit("empty command (try :help)"), "an empty command")
-- extra words are an error naming them and the usage, never dropped
T.raises(function() kiln.repl.command(":run 2 3") end,
  "^" .. lit("':run' takes at most 1 argument, got extra '3' (usage: :run [n])") .. "$", ":run 2 3")
T.raises(function() kiln.repl.command(":kernels all of them") end,
  "^" .. lit("':kernels' takes no arguments, got 'all of them' (usage: :kernels)") .. "$", ":kernels with words")
T.raises(function() kiln.repl.command(":mode eager now") end,
  "^" .. lit("':mode' takes at most 1 argument, got extra 'now' (usage: :mode [MODE])") .. "$", ":mode with a second word")
T.raises(function() kiln.repl.command(":autotune 1 extra") end,
  "^" .. lit("':autotune K' takes one kernel, got extra 'extra' (usage: :autotune [K | pin K CHOICE])") .. "$",
  ":autotune K with a second word")
T.raises(function() kiln.repl.command(":autotune pin 1 a b c d e f g") end,
  "^" .. lit("':autotune' takes at most 8 arguments, got extra 'g' (usage: :autotune [K | pin K CHOICE])") .. "$",
  ":autotune pin with a choice of too many words")
local got
out, _, got = capture(kiln.repl.command, "  :mode   eager  ")
T.is(got, "eager", "a : line is split on whitespace into the name and its arguments")
T.is(out, "mode: eager\n", ":mode eager prints the mode")
local ok, err = pcall(kiln.repl.command, ":run")
T.is(tostring(err), "no model loaded (use :load FILE.lua)", ":run with no model: the message, exactly")
T.ok(not ok and type(err) == "table", "command errors are objects (the REPL prints them without a traceback)")

-- ---- kiln.load: bad model files
local missing = dir .. "/missing.lua"
T.raises(function() kiln.load(missing) end,
  lit("cannot open model file '" .. missing .. "': No such file or directory"), "a missing file")
T.raises(function() kiln.load() end, lit("usage: :load FILE.lua"), "no file name")
local p = write("syntax.lua", "return {name = 'x',\n  model = function(x) return x end end}\n")
T.raises(function() kiln.load(p) end, lit("cannot load model file '" .. p .. "': " .. p .. ":2:"),
  "a syntax error names the file and the line")
p = write("throws.lua", "local t = nil\nreturn t.field\n")
T.raises(function() kiln.load(p) end, lit("error while running model file '" .. p .. "': " .. p .. ":2:"),
  "an error while running the file")
p = write("number.lua", "return 42\n")
T.raises(function() kiln.load(p) end, lit("model file '" .. p .. "' must return a table {name = ..., model = ..., inputs = "),
  "a file that returns no table")
p = write("nomodel.lua", "return {name = 'm', inputs = function() return {} end}\n")
T.raises(function() kiln.load(p) end,
  lit("model file '" .. p .. "' has no 'model' field (the model to run: an nn module or a function)"),
  "a missing 'model' field")
p = write("noinputs.lua", "return {name = 'm', model = function(x) return x end}\n")
T.raises(function() kiln.load(p) end, lit("model file '" .. p .. "' has no 'inputs' field"),
  "a missing 'inputs' field")
p = write("noname.lua", "return {model = function(x) return x end, inputs = function() return {} end}\n")
T.raises(function() kiln.load(p) end, lit("model file '" .. p .. "' has no 'name' field"), "a missing 'name' field")
p = write("badmodel.lua", "return {name = 'm', model = 42, inputs = function() return {} end}\n")
T.raises(function() kiln.load(p) end,
  lit("model file '" .. p .. "': 'model' must be the model to run: an nn module or a function, got number"),
  "a 'model' that cannot be called")
T.is(kiln.session.model, nil, "failed loads leave no model in the session")

-- ---- kiln.load and :run with a good function model
local seen_opts
p = write("double.lua", [[
return {
  name = "double",
  model = function(x) return x * 2 end,
  inputs = function(opts)
    SEEN_OPTS = opts
    return {kiln.ones({opts.small and 1 or 4, 3}, {device = opts.device, dtype = opts.dtype})}
  end,
}
]])
local spec
out, ok, spec = capture(kiln.load, p)
T.ok(ok, "kiln.load of a good file succeeds")
T.is(out, "loaded double from " .. p .. ": a function\n", "kiln.load prints what it loaded")
T.is(type(spec) == "table" and spec.name, "double", "kiln.load returns the file's table")
T.is(kiln.session.name, "double", "the session has the model's name")
T.is(kiln.session.file, p, "... and its file")
T.ok(kiln.session.model == spec.model, "... and the model")
out = capture(kiln.load, p, { quiet = true })
T.is(out, "", "kiln.load(path, {quiet = true}) prints nothing")

local r
out, ok, r = capture(kiln.cmd.run, 2)
T.ok(ok, ":run 2 succeeds")
seen_opts = SEEN_OPTS
T.is(seen_opts and seen_opts.device, kiln.default_device(), "inputs(opts) gets the default device")
T.is(seen_opts and seen_opts.dtype, "f32", "inputs(opts) gets dtype f32")
T.is(seen_opts and seen_opts.small, false, "inputs(opts) gets small = false by default")
T.like(out, "^output {4,3} f32 · 2 runs · [%d.]+ ms per call %(min [%d.]+%) · eager on " .. lit(kiln.default_device()),
  ":run prints shape, dtype, runs, time per call, mode and device")
T.is(r and r.runs, 2, ":run returns the number of runs")
T.is(r and #r.times_ms, 2, "... one time per call")
T.ok(r and r.min_ms <= r.median_ms, "... min <= median")
T.is(r and r.output:sum():item(), 24, "... and the output (ones * 2, 4x3)")
kiln.session.small = true
out, ok, r = capture(kiln.cmd.run, "1")
kiln.session.small = false
T.is(SEEN_OPTS.small, true, "kiln.session.small = true reaches inputs(opts)")
T.like(out, "^output {1,3} f32 · 1 run · ", "... and the reduced input size shows in the output")
T.raises(function() kiln.cmd.run("abc") end, lit("usage: :run [n] (n must be a positive integer, got 'abc')"),
  ":run with a bad count")
T.raises(function() kiln.cmd.run(0) end, lit("n must be a positive integer"), ":run 0")

-- ---- a callable table with parameters() (as nn modules are)
p = write("module.lua", [[
local M = setmetatable({}, {__call = function(self, x) return x:matmul(self.w) end})
M.w = kiln.ones({3, 4})
M.b = kiln.zeros({4})
function M:parameters() return {self.w, self.b} end
return {name = "tiny", model = M, inputs = function(o) return {kiln.ones({2, 3})} end}
]])
out = capture(kiln.load, p)
T.is(out, "loaded tiny from " .. p .. ": 16 parameters\n", "parameters are counted through model:parameters()")
out, ok = capture(kiln.cmd.run)
T.like(out, "^output {2,4} f32 · 1 run", "a callable table runs")
if kiln.nn and kiln.nn.Linear then
  p = write("linear.lua", "return {name = 'lin', model = kiln.nn.Linear(3, 4), inputs = function() return {kiln.ones({2, 3})} end}\n")
  out = capture(kiln.load, p)
  T.is(out, "loaded lin from " .. p .. ": 16 parameters\n", "an nn.Linear(3, 4) has 16 parameters")
end

p = write("badinputs.lua", "return {name = 'b', model = function(x) return x end, inputs = function() return 7 end}\n")
capture(kiln.load, p)
T.raises(function() kiln.cmd.run() end, lit("inputs(opts) of '" .. p .. "' must return a list of inputs {x, ...}, got number"),
  "inputs() that returns no list")

-- ---- :mode, without and with a compiler
local real_compile = kiln.compile
if real_compile == nil then
  T.raises(function() kiln.cmd.mode("default") end, lit("mode 'default' needs kiln.compile, which this build does not have yet"),
    ":mode default without kiln.compile")
end
T.raises(function() kiln.cmd.mode("fast") end, lit("unknown mode 'fast' (known: eager, default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs)"),
  "an unknown mode")
local compiled_with, calls = nil, 0
kiln.compile = function(model, opts)
  compiled_with = opts.mode
  return function(...) calls = calls + 1; return model(...) end
end
capture(kiln.load, write("double2.lua", "return {name = 'd', model = function(x) return x + x end, inputs = function(o) return {kiln.ones({2, 2})} end}\n"))
out = capture(kiln.cmd.mode, "max-autotune")
T.is(out, "mode: max-autotune\n", ":mode sets a compiled mode when kiln.compile exists")
out = capture(kiln.cmd.run, 2)
T.is(compiled_with, "max-autotune", ":run compiles with the session's mode")
T.is(calls, 3, "the first call (compiling) is made apart from the 2 timed ones")
T.like(out, "first call %(compiling%): [%d.]+ m?s\noutput {2,2} f32 · 2 runs · .* · max%-autotune on ", ":run reports the compile and the mode")
out = capture(kiln.cmd.run, 1)
T.is(calls, 4, "a second :run reuses the compiled model, with no extra call")
capture(kiln.cmd.mode, "eager")
kiln.compile = real_compile
out = capture(kiln.cmd.mode)
T.is(out, "mode: eager\n", ":mode with no argument shows the mode")

-- ---- :device formats kiln.device_info()
local real_info = kiln.device_info
kiln.device_info = function()
  return { cpu = { name = "Test CPU", cores = 16, memory_bytes = 128 * 2 ^ 30 },
    cuda = { built = true, count = 1, devices = { { name = "Fake GPU", memory_bytes = 80 * 2 ^ 30, sm_count = 132, cc = "9.0" } } } }
end
out = capture(kiln.cmd.device)
T.like(out, lit("CPU   Test CPU · 16 cores · 128.0 GiB"), ":device shows the CPU")
T.like(out, lit("0: Fake GPU · 80.0 GiB · 132 SMs · compute capability 9.0"), ":device shows each GPU")
kiln.device_info = function()
  return { cpu = { name = "c", cores = 1, memory_bytes = 2 ^ 30 }, cuda = { built = false, count = 0, devices = {} } }
end
out = capture(kiln.cmd.device)
T.like(out, lit("CUDA  not built"), ":device says when CUDA was not built")
kiln.device_info = function()
  return { cpu = { name = "c", cores = 1, memory_bytes = 2 ^ 30 },
    cuda = { built = true, count = 0, devices = {}, error = "no CUDA device: driver too old" } }
end
out = capture(kiln.cmd.device)
T.like(out, lit("CUDA  built; no CUDA device: driver too old"), ":device gives the reason there is no GPU")
kiln.device_info = real_info
if real_info then
  out, ok = capture(kiln.cmd.device)
  T.ok(ok and out:find("CPU   ", 1, true), ":device works with the real kiln.device_info")
end

-- ---- :quit asks the REPL to stop
local quits = 0
kiln.repl.on_quit = function() quits = quits + 1 end
kiln.cmd.quit()
kiln.repl.on_quit = nil
T.is(quits, 1, "kiln.cmd.quit() calls the REPL's on_quit")

-- ---- how the REPL prints values
T.is(kiln.repl.format({ 1, 2, { a = 1, b = "x" } }), '{1, 2, {a = 1, b = "x"}}', "tables print as constructors")
local cyc = {}
cyc.self = cyc
T.is(kiln.repl.format(cyc), "{self = <cycle>}", "a cycle is marked")
T.is(kiln.repl.format("top"), "top", "a string prints as it is")
T.is(kiln.repl.format({ [10] = true, ["not id"] = 1 }), '{[10] = true, ["not id"] = 1}', "keys that are not names are bracketed")
T.like(kiln.repl.format(kiln.zeros({ 2 })), "^[^{]", "a tensor prints with its own tostring")
local long = {}
for i = 1, 30 do long["key" .. i] = i end
T.like(kiln.repl.format(long), "^{\n  key1 = 1,\n", "a long table prints one field a line")

-- ---- tab completion
local function complete(word, before) return table.concat(kiln.repl.complete(word, before or ""), " ") end
T.is(complete("kiln.versi"), "kiln.version", "a field of a global table")
T.is(complete(":he"), ":help", "a command at the start of the line")
T.is(complete(":he", "x = "), "", "no command completion after other text")
T.is(complete("ru", ":help "), "run", "command names after :help")
T.is(complete("max", ":mode "), "max-autotune max-autotune-no-cudagraphs", "modes after :mode")
T.is(kiln.repl.complete("sam", ":load "), nil, "file names (nil) after other commands")
T.is(complete("kiln.Tensor.resh"), "kiln.Tensor.reshape", "two tables deep")
COMPLETION_X = kiln.zeros({ 2 })
T.is(complete("COMPLETION_X:sha"), "COMPLETION_X:shape", "methods of a tensor (through its __index)")
T.is(complete("COMPLETION_X.dty"), "COMPLETION_X.dtype", "properties of a tensor")
T.like(complete("whi"), "while", "Lua keywords")
T.is(complete("1+kiln.versi"), "1+kiln.version", "a name after an operator keeps the operator")
T.is(complete("no_such_global.x"), "", "nothing for an unknown table")
local obj = setmetatable({ own = 1 }, { __index = { inherited = function() end, field = 2 } })
COMPLETION_OBJ = obj
T.is(complete("COMPLETION_OBJ:"), "COMPLETION_OBJ:inherited", "after ':' only functions, found through __index tables")
T.is(complete("COMPLETION_OBJ."), "COMPLETION_OBJ.field COMPLETION_OBJ.inherited COMPLETION_OBJ.own", "after '.' every field")

for _, path in ipairs(written) do os.remove(path) end
os.remove(dir)
T.done()
