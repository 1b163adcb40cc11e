-- 20_repl.lua: the REPL's `:` commands as Lua functions (kiln.cmd.NAME and
-- kiln.load), the session they share (kiln.session), and the helpers the C
-- REPL (repl/kn_repl.c) calls: kiln.repl.command runs a `:` line,
-- kiln.repl.show prints results, kiln.repl.complete gives tab completions.
-- luaopen_kiln runs this file with the kiln table as `...`, so it works the
-- same in the kiln program and under the stock lua5.4 (require "kiln").
--
-- Later files add commands with kiln.repl.register(name, info, fn), which
-- keeps :help and kiln.cmd in step.
local kiln = ...

local repl = kiln.repl or {}
kiln.repl = repl
local cmd = kiln.cmd or {}
kiln.cmd = cmd

-- The globals of this Lua state, whatever the user later does to _G.
local G = _ENV

local MODES = { "eager", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs" }
local MODE_SET = {}
for _, m in ipairs(MODES) do MODE_SET[m] = true end

-- The session: what :load loaded and how :run runs it. Settable from Lua
-- (kiln.session.small = true asks inputs() for the reduced size).
kiln.session = kiln.session or {}
local session = kiln.session
if session.mode == nil then session.mode = "eager" end
if session.small == nil then session.small = false end
if session.fullgraph == nil then session.fullgraph = false end

---------------------------------------------------------------------------
-- Errors for the user, not for a debugger: an error object whose __tostring
-- is the message. The REPL's message handler prints such objects without a
-- traceback (as lua.c does); tostring(err) gives the text from Lua.

local UsageError = { __name = "kiln.UsageError" }
UsageError.__tostring = function(e) return e.message end
UsageError.__concat = function(a, b) return tostring(a) .. tostring(b) end

-- Raise a usage error; with more arguments, fmt is a string.format format.
-- Arguments that are not strings or numbers are shown by repl.describe_value (no
-- table addresses in messages).
function repl.error(fmt, ...)
  local args = table.pack(...)
  for i = 1, args.n do
    if type(args[i]) ~= "string" and type(args[i]) ~= "number" then args[i] = repl.describe_value(args[i]) end
  end
  local msg = args.n > 0 and string.format(fmt, table.unpack(args, 1, args.n)) or tostring(fmt)
  error(setmetatable({ message = msg }, UsageError), 2)
end
local fail = repl.error

---------------------------------------------------------------------------
-- Command registry: one entry per command, in the order :help lists them.

local commands, order = {}, {}

-- Add or replace command `name`: info = {usage = ":run [n]", summary = "one
-- line", help = "longer text for :help name"}; fn becomes kiln.cmd[name].
function repl.register(name, info, fn)
  assert(type(name) == "string" and name:match("^[%a_][%w_%-]*$"), "command name expected")
  assert(type(fn) == "function", "command function expected")
  if not commands[name] then order[#order + 1] = name end
  local usage = info.usage or (":" .. name)
  commands[name] = {
    usage = usage,
    summary = info.summary or "",
    help = info.help,
    -- how many words a `:` line may pass: info.max_args, else one per word
    -- of the usage after the name (":graph [captured|fused] [FILE]" is 2)
    max_args = info.max_args or select(2, usage:gsub("%S+", "")) - 1,
  }
  cmd[name] = fn
end

-- The command list, one line per command that still exists (for :help and
-- kiln --help).
function repl.help_text()
  local rows, width = {}, 0
  for _, name in ipairs(order) do
    if cmd[name] then
      local c = commands[name]
      rows[#rows + 1] = c
      width = math.max(width, #c.usage)
    end
  end
  local lines = {}
  for _, c in ipairs(rows) do
    lines[#lines + 1] = string.format("  %-" .. width .. "s  %s", c.usage, c.summary)
  end
  lines[#lines + 1] = "Each command is also a Lua function: kiln.cmd.run(3), kiln.load(path)."
  lines[#lines + 1] = ":help CMD shows the details of one command."
  return table.concat(lines, "\n") .. "\n"
end

-- Run one `:` line: split on whitespace into a name and string arguments,
-- then call kiln.cmd[name](args...).
function repl.command(line)
  local name, rest = tostring(line):match("^%s*:(%S*)(.*)$")
  if not name then fail("not a command: '%s' (commands start with ':')", line) end
  if name == "" then fail("empty command (try :help)") end
  local f = cmd[name]
  if f == nil then fail("unknown command ':%s' (try :help)", name) end
  repl.interrupt_note = nil
  local args = {}
  for a in rest:gmatch("%S+") do args[#args + 1] = a end
  -- a word too many is an error, not dropped: ':run 2 3' must not run twice
  local c = commands[name]
  if c and #args > c.max_args then
    local extra = table.concat(args, " ", c.max_args + 1)
    if c.max_args == 0 then fail("':%s' takes no arguments, got '%s' (usage: %s)", name, extra, c.usage) end
    fail("':%s' takes at most %d argument%s, got extra '%s' (usage: %s)", name, c.max_args,
      c.max_args == 1 and "" or "s", extra, c.usage)
  end
  return f(table.unpack(args))
end

---------------------------------------------------------------------------
-- Ctrl-C in a command: a command that runs long sets
-- repl.interrupt_note = function() return "interrupted after ..." end; the
-- REPL prints what it returns instead of a traceback (repl/kn_repl.c).
-- check_interrupt stops a loop whose call swallowed the interrupt (a
-- pcall in the model): the flag stays set until the chunk ends.

function repl.check_interrupt()
  if kiln.profiler and kiln.profiler.interrupted() then error("interrupted", 0) end
end

---------------------------------------------------------------------------
-- Small helpers

local function is_callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__call") ~= nil
end

-- Whether v is a userdata of kiln's kind `name` ("kiln.Tensor", "kiln.Compiled").
local function is_kind(v, name)
  if type(v) ~= "userdata" then return false end
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__name") == name
end

local function is_tensor(v) return is_kind(v, "kiln.Tensor") end
local function is_compiled(v) return is_kind(v, "kiln.Compiled") end

-- for later files (40_timing, 45_autotune, 50_graph)
repl.is_callable, repl.is_tensor, repl.is_compiled = is_callable, is_tensor, is_compiled

local function shape_string(shape)
  local dims = {}
  for i, d in ipairs(shape) do dims[i] = tostring(d) end
  return "{" .. table.concat(dims, ",") .. "}"
end

-- "output {16,256,512} f32": a value as :run reports it.
local function describe(v, depth)
  depth = depth or 0
  if is_tensor(v) then
    local ok, shape = pcall(function() return v:shape() end)
    local okd, dtype = pcall(function() return v.dtype end)
    return (ok and type(shape) == "table" and shape_string(shape) or "?") .. " " .. (okd and tostring(dtype) or "?")
  end
  if type(v) == "table" and depth < 2 then
    local parts = {}
    for i, e in ipairs(v) do
      if i > 4 then parts[#parts + 1] = "..."; break end
      parts[#parts + 1] = describe(e, depth + 1)
    end
    if #parts > 0 then return "{" .. table.concat(parts, ", ") .. "}" end
  end
  if type(v) == "number" or type(v) == "boolean" then return type(v) .. " " .. tostring(v) end
  return type(v)
end

-- Milliseconds with about four significant digits.
local function fmt_ms(ms)
  if ms >= 100 then return string.format("%.1f", ms) end
  if ms >= 1 then return string.format("%.2f", ms) end
  return string.format("%.3f", ms)
end

local function fmt_bytes(n)
  if type(n) ~= "number" then return "? memory" end
  if n >= 2 ^ 30 then return string.format("%.1f GiB", n / 2 ^ 30) end
  return string.format("%.0f MiB", n / 2 ^ 20)
end

local function default_device()
  if type(kiln.default_device) == "function" then return kiln.default_device() end
  return "cpu"
end

-- shared with the later Lua parts of kiln (40_timing.lua)
repl.fmt_bytes, repl.default_device = fmt_bytes, default_device

local function clock()
  -- kiln.clock is monotonic wall time; os.clock (CPU time) is the fallback
  -- for a build that lacks it, and is wrong for GPU work.
  if type(kiln.clock) == "function" then return kiln.clock() end
  return os.clock()
end

---------------------------------------------------------------------------
-- :load

-- The number of scalar parameters of an nn module (model:parameters() gives
-- a list of tensors), or nil when the model has no parameters() method.
local function count_parameters(model)
  if type(model) ~= "table" then return nil end
  local okp, params_fn = pcall(function() return model.parameters end)
  if not okp or type(params_fn) ~= "function" then return nil end
  local ok, params = pcall(params_fn, model)
  if not ok then fail("model:parameters() failed: %s", tostring(params)) end
  if type(params) ~= "table" then fail("model:parameters() returned %s, not a list of tensors", type(params)) end
  local n = 0
  for _, p in pairs(params) do
    local okn, numel = pcall(function() return p:numel() end)
    if okn and math.type(numel) == "integer" then n = n + numel end
  end
  return n
end

-- Load a model file: it returns {name = "...", model = <module or function>,
-- inputs = function(opts) return {x, ...} end}. Makes it the session's model
-- and prints "loaded NAME from FILE: N parameters" unless opts.quiet.
-- Returns the table the file returned.
function kiln.load(path, opts)
  if type(path) ~= "string" or path == "" then
    fail("usage: :load FILE.lua (kiln.load needs a file name, got %s)", type(path) == "string" and "''" or type(path))
  end
  local f, oerr = io.open(path, "r")
  if not f then
    fail("cannot open model file '%s': %s", path, tostring(oerr):match(": ([^:]*)$") or tostring(oerr))
  end
  f:close()
  local spec
  if path:match("%.onnx$") then
    -- an ONNX model: inputs from the graph's input types, dynamic dims from
    -- opts.sizes (:load model.onnx N=1 T=128)
    local sizes = type(opts) == "table" and opts.sizes or {}
    local okm, model = pcall(kiln.onnx.load, path, { sizes = sizes })
    if not okm then fail("%s", tostring(model)) end
    local dev = kiln.default_device()
    if dev ~= "cpu" then model:to(dev) end
    spec = {
      name = path:match("([^/]+)%.onnx$"),
      model = model,
      inputs = function(o)
        local list = kiln.onnx.example_inputs(model, sizes)
        local want = o and o.device
        if want and want ~= "cpu" then
          for k, t in ipairs(list) do list[k] = t:to(want) end
        end
        return list
      end,
    }
    -- fail now, not at :run, when a dynamic dim has no size
    local oki, ierr = pcall(kiln.onnx.example_inputs, model, sizes)
    if not oki then fail("%s", tostring(ierr)) end
  else
    local chunk, lerr = loadfile(path, "t")
    if not chunk then fail("cannot load model file '%s': %s", path, lerr) end
    local ok
    ok, spec = xpcall(chunk, debug.traceback)
    if not ok then fail("error while running model file '%s': %s", path, tostring(spec)) end
  end
  return repl.use_spec(spec, path, opts)
end

-- Whether v looks like what a model file returns ({model =, inputs =}):
-- `kiln FILE.lua` and `kiln -i FILE.lua` ask, to treat such a file as a model.
function repl.is_model_spec(v)
  if type(v) ~= "table" then return false end
  local okm, model = pcall(function() return v.model end)
  local oki, inputs = pcall(function() return v.inputs end)
  return okm and oki and is_callable(model) and is_callable(inputs)
end

-- Make spec, what model file `path` returned, the session's model (the
-- second half of kiln.load, for a file the program already ran).
function repl.use_spec(spec, path, opts)
  local shape = "{name = ..., model = ..., inputs = function(opts) return {x, ...} end}"
  if type(spec) ~= "table" then
    fail("model file '%s' must return a table %s, got %s", path, shape, type(spec))
  end
  local function need(field, good, what)
    local v = spec[field]
    if v == nil then fail("model file '%s' has no '%s' field (%s)", path, field, what) end
    if not good(v) then fail("model file '%s': '%s' must be %s, got %s", path, field, what, type(v)) end
  end
  need("name", function(v) return type(v) == "string" end, "the model's name, a string")
  need("model", is_callable, "the model to run: an nn module or a function")
  need("inputs", is_callable, "a function(opts) returning the list of inputs {x, ...}")

  local nparams = count_parameters(spec.model)
  session.model, session.spec, session.name, session.file = spec.model, spec, spec.name, path
  session.compiled, session.warm, session.inspect = nil, nil, nil
  if not (type(opts) == "table" and opts.quiet) then
    local what
    if nparams then what = string.format("%d parameters", nparams)
    elseif type(spec.model) == "function" then what = "a function"
    else what = "a callable " .. type(spec.model) end
    print(string.format("loaded %s from %s: %s", spec.name, path, what))
  end
  return spec
end

repl.register("load", {
  usage = ":load FILE.lua | FILE.onnx [NAME=SIZE ...]",
  max_args = 17,
  summary = "load a model file (it returns {name=, model=, inputs=})",
  help = [[
Runs FILE.lua, which returns
  {name = "...", model = <nn module or function>,
   inputs = function(opts) return {x, ...} end}
opts carries device, dtype and small (true: a reduced size that runs in a
second on a CPU; set kiln.session.small = true). The model becomes the
session's model for :run and :mode. From Lua: kiln.load(path) returns the
table; kiln.load(path, {quiet = true}) prints nothing.
FILE.onnx loads an ONNX model (kiln.onnx.load); its inputs are built from
the graph's input types, and dynamic dims take their sizes from NAME=SIZE
words (:load model.onnx N=1 T=128) or kiln.load(path, {sizes = {N = 1}}).]],
}, function(path, ...)
  local sizes = {}
  for _, w in ipairs({ ... }) do
    local name, n = w:match("^([%w_%.%-]+)=(%d+)$")
    if not name then fail(":load: '%s' is not NAME=SIZE (a dynamic dim's size, e.g. N=1)", w) end
    sizes[name] = math.tointeger(tonumber(n))
  end
  if select("#", ...) > 0 and not path:match("%.onnx$") then
    fail(":load: NAME=SIZE words are for ONNX files only")
  end
  return kiln.load(path, { sizes = sizes })
end)

-- What the kiln program does with the first value a script returned
-- (repl/kn_repl.c): a model spec is loaded as :load would with -i
-- (then_repl), else it says how to use it, since running a model file
-- alone computes nothing. Other values are ignored, as lua does.
function repl.script_result(value, path, then_repl)
  if not repl.is_model_spec(value) then return end
  if then_repl then return repl.use_spec(value, path) end
  local name = type(value.name) == "string" and (" (" .. value.name .. ")") or ""
  print(string.format("%s returns a model%s: use `kiln -i %s` or `:load %s` in the REPL to run it", path, name,
    path, path))
end

---------------------------------------------------------------------------
-- :mode

repl.register("mode", {
  usage = ":mode [MODE]",
  summary = "show or set the mode (eager, default, reduce-overhead, max-autotune...)",
  help = [[
With no argument, shows the session's mode; else sets it. "eager" runs the
model as written; the others compile it with kiln.compile(model, {mode = ...})
on the next :run. Modes: ]] .. table.concat(MODES, ", ") .. ".",
}, function(mode)
  if mode == nil then
    print("mode: " .. session.mode)
    return session.mode
  end
  if not MODE_SET[mode] then fail("unknown mode '%s' (modes: %s)", mode, table.concat(MODES, ", ")) end
  if mode ~= "eager" and type(kiln.compile) ~= "function" then
    fail("mode '%s' needs kiln.compile, which this build does not have yet: only 'eager' works", mode)
  end
  session.mode = mode
  local c = session.compiled
  if c and mode ~= "eager" then
    -- keep the compiled versions when the callable can switch modes itself
    local ok = pcall(function() c:set_mode(mode) end)
    if not ok then session.compiled = nil end
    session.warm = nil -- the next call compiles: time it apart
  end
  print("mode: " .. mode)
  return mode
end)

---------------------------------------------------------------------------
-- :fullgraph

repl.register("fullgraph", {
  usage = ":fullgraph [on|off]",
  summary = "show or set fullgraph: a graph break is an error instead of a new graph",
  help = [[
With no argument, shows whether the session compiles with fullgraph; "on"
compiles the model with kiln.compile(model, {fullgraph = true}) from the
next call, so the first graph break stops the call with the break's reason
and user stack (the way to find what makes a model re-trace on every call);
"off" lets capture go on after a break again. The compiled model is made
afresh, so its cached versions start over.]],
}, function(word)
  if word == nil then
    print("fullgraph: " .. (session.fullgraph and "on" or "off"))
    return session.fullgraph
  end
  local on = ({ on = true, off = false })[word]
  if on == nil then fail("usage: :fullgraph on|off (got '%s')", tostring(word)) end
  if on ~= session.fullgraph then
    session.fullgraph = on
    session.compiled, session.warm = nil, nil -- compiled with the old setting
  end
  print("fullgraph: " .. word)
  return on
end)

---------------------------------------------------------------------------
-- :run

-- The session model's inputs as :run builds them: the list, its length and
-- the device.
local function model_inputs()
  if not session.model then fail("no model loaded (use :load FILE.lua)") end
  local device = default_device()
  local inputs = session.spec.inputs({ device = device, dtype = "f32", small = session.small and true or false })
  if type(inputs) ~= "table" then
    fail("inputs(opts) of '%s' must return a list of inputs {x, ...}, got %s", session.file, type(inputs))
  end
  return inputs, inputs.n or #inputs, device
end

-- What :run calls: the model itself, or its compiled form.
local function runner()
  if session.mode == "eager" then return session.model, false end
  if type(kiln.compile) ~= "function" then
    fail("mode '%s' needs kiln.compile, which this build does not have yet: only 'eager' works", session.mode)
  end
  if not session.compiled then
    session.compiled = kiln.compile(session.model, { mode = session.mode, fullgraph = session.fullgraph })
    session.warm = nil
  end
  return session.compiled, true
end

repl.register("run", {
  usage = ":run [n]",
  summary = "run the loaded model n times (default 1) and time it",
  help = [[
Builds the inputs once with inputs({device = kiln.default_device(),
dtype = "f32", small = kiln.session.small}), calls the model n times and
prints the output's shape and dtype and the time per call (the median, and
the minimum). In a compiled mode the first call compiles; it is timed apart.
From Lua, kiln.cmd.run(n) returns {output, runs, times_ms, median_ms, min_ms,
mode, device, compile_s}.]],
}, function(n)
  local count = 1
  if n ~= nil then
    count = math.tointeger(tonumber(n))
    if not count or count < 1 then fail("usage: :run [n] (n must be a positive integer, got '%s')", n) end
  end
  local inputs, ninputs, device = model_inputs()
  local fn, compiled = runner()
  local sync = type(kiln.synchronize) == "function" and kiln.synchronize or function() end

  -- Ctrl-C: the REPL prints this note instead of a traceback
  local done, compiling = 0, false
  repl.interrupt_note = function()
    return string.format("interrupted after %d of %d run%s%s", done, count, count == 1 and "" or "s",
      compiling and " (in the first call, which compiles)" or "")
  end
  local compile_s
  if compiled and not session.warm then
    compiling = true
    local t0 = clock()
    fn(table.unpack(inputs, 1, ninputs))
    sync()
    compile_s = clock() - t0
    session.warm = true
    compiling = false
    repl.check_interrupt()
    print(string.format("first call (compiling): %.2f s", compile_s))
  end
  local times, out = {}, nil
  for i = 1, count do
    local t0 = clock()
    out = table.pack(fn(table.unpack(inputs, 1, ninputs)))
    sync()
    times[i] = (clock() - t0) * 1000
    repl.check_interrupt() -- a Ctrl-C that code inside the call caught
    done = i
  end
  repl.interrupt_note = nil
  local sorted = table.move(times, 1, count, 1, {})
  table.sort(sorted)
  local median = count % 2 == 1 and sorted[(count + 1) // 2] or (sorted[count // 2] + sorted[count // 2 + 1]) / 2
  local described = {}
  for i = 1, out.n do described[i] = describe(out[i]) end
  print(string.format("output %s · %d run%s · %s ms per call (min %s) · %s on %s",
    out.n == 0 and "nothing" or table.concat(described, ", "), count, count == 1 and "" or "s",
    fmt_ms(median), fmt_ms(sorted[1]), session.mode, device))
  return {
    output = out.n <= 1 and out[1] or out, runs = count, times_ms = times,
    median_ms = median, min_ms = sorted[1], mode = session.mode, device = device, compile_s = compile_s,
  }
end)

---------------------------------------------------------------------------
-- :explain, :breaks, :recompiles, :guards: what capture made of the model

-- The mode the inspection commands compile with when the session is eager.
local INSPECT_MODE = "default"

local function need_compile()
  if type(kiln.compile) ~= "function" then fail("this build has no kiln.compile: nothing to inspect") end
  if not session.model then fail("no model loaded (use :load FILE.lua)") end
end

-- In eager mode the inspection commands look at a compiled model that :run
-- does not use: say so, so that nobody takes it for what :run did.
local function eager_note()
  if session.mode == "eager" then
    print(string.format("(mode eager: compiled with mode %s for this inspection; :run stays eager)", INSPECT_MODE))
  end
end

-- The compiled model to inspect, called at least once: the session's own
-- (what :run calls) in a compiled mode, compiled with the current mode when
-- needed; in eager mode one compiled with INSPECT_MODE, kept until the next
-- :load so that later inspections see the same calls.
local function inspected()
  need_compile()
  eager_note()
  local cm
  if session.mode == "eager" then
    session.inspect = session.inspect or kiln.compile(session.model, { mode = INSPECT_MODE })
    cm = session.inspect
  else
    cm = runner()
  end
  if cm:stats().calls == 0 then
    local inputs, n = model_inputs()
    cm(table.unpack(inputs, 1, n))
    -- the compiling call is done: :run need not time its next call apart
    if cm == session.compiled then session.warm = true end
  end
  return cm
end

-- The compiled function's name and definition line, as its messages show
-- them ("forward", "samples/breaks.lua:42").
local function compiled_name(cm, entry)
  local name, where = tostring(cm):match("^kiln%.Compiled (.-) %((.*)%), mode [%w%-]+$")
  return (entry and entry.fn) or name or "?", (entry and entry.where) or where or "?"
end

repl.register("explain", {
  usage = ":explain",
  summary = "graph count, break count, op count, each break with reason and source line",
  help = [[
Runs the loaded model once under capture with its inputs (as :run builds
them) through kiln.explain and prints its report: graph count, graph break
count, op count, each break with its reason and source line (and the lines
that called it), ops per graph and compile time. kiln.explain compiles with
mode default whatever the session's mode. From Lua, kiln.cmd.explain()
returns the report table.]],
}, function()
  need_compile()
  local inputs, n = model_inputs()
  eager_note()
  local quiet = kiln.explain_quiet
  kiln.explain_quiet = true
  local ok, r = pcall(kiln.explain, session.model, table.unpack(inputs, 1, n))
  kiln.explain_quiet = quiet
  if not ok then error(r, 0) end
  print(kiln.format_explain(r))
  return r
end)

repl.register("breaks", {
  usage = ":breaks",
  summary = "graph breaks with reason, file:line and user stack",
  help = [[
Prints each distinct graph break of the session's compiled model as
KILN_LOGS=graph_breaks does: where it happened, its reason and a hint, and
the user stack, innermost first. Compiles the model with the session's mode
(mode default when the session is eager) and runs it once if it has not run
yet. From Lua, kiln.cmd.breaks() returns cm:breaks().]],
}, function()
  local cm = inspected()
  local list = cm:breaks()
  if #list == 0 then
    print("no graph breaks")
    return list
  end
  local texts = {}
  for i, b in ipairs(list) do texts[i] = (tostring(b.message):gsub("\n+$", "")) end
  print(table.concat(texts, "\n\n"))
  return list
end)

repl.register("recompiles", {
  usage = ":recompiles",
  summary = "recompilations with the failed guards of each cached version",
  help = [[
Prints each recompilation of the session's compiled model, oldest first, as
KILN_LOGS=recompiles does: the function, graph and new version, then the
guard that failed against each cached version (K/V: graph K, version V),
the newest first. Says "no recompilations" when there were none. Compiles
and runs the model once if needed (mode default when the session is eager).
From Lua, kiln.cmd.recompiles() returns cm:recompiles().]],
}, function()
  local cm = inspected()
  local list = cm:recompiles()
  if #list == 0 then
    print("no recompilations")
    return list
  end
  local lines = {}
  for _, r in ipairs(list) do
    local name, where = compiled_name(cm, r)
    lines[#lines + 1] = string.format("Recompiling %s (%s), graph %d, version %d", name, where, r.graph, r.version)
    lines[#lines + 1] = "  triggered by the guard failure(s):"
    for _, reason in ipairs(r.reasons) do lines[#lines + 1] = "  - " .. reason end
    for _, number in ipairs(r.dynamic or {}) do lines[#lines + 1] = "  " .. number .. " is dynamic from now on" end
  end
  print(table.concat(lines, "\n"))
  return list
end)

repl.register("guards", {
  usage = ":guards",
  summary = "the guards of each cached version of each graph",
  help = [[
Prints, for each graph of the session's compiled model and each cached
version of it, the guards a call must pass to reuse that version: the mode,
each input tensor and parameter (shape, dtype, device, layout), each Lua
number baked into the graph and the graph's structure. Compiles and runs
the model once if needed (mode default when the session is eager). From Lua,
kiln.cmd.guards() returns cm:guards().]],
}, function()
  local cm = inspected()
  local list = cm:guards()
  if #list == 0 then
    print("no compiled versions (the model ran no tensor ops)")
    return list
  end
  local name, where = compiled_name(cm)
  local lines = {}
  for _, v in ipairs(list) do
    lines[#lines + 1] = string.format("Guards of %s (%s), graph %d, version %d:", name, where, v.graph, v.version)
    for _, g in ipairs(v.guards) do lines[#lines + 1] = "  " .. g end
  end
  print(table.concat(lines, "\n"))
  return list
end)

---------------------------------------------------------------------------
-- :kernels, :src, :check: what the compiler made of the model

-- The kernels of the inspected model (compiled and run once if needed), as
-- cm:kernels() lists them: the latest version of each graph, in order.
-- Their index in :kernels and :src is the 0-based position in that list,
-- which is the N of the kernel's kN_ name when there is one graph (names
-- restart at k0 in each graph).
local function inspected_kernels()
  local cm = inspected()
  return cm, cm:kernels()
end

-- Kernel K of the list: an index (number, or a string of digits) or a
-- kernel name; a usage error for anything else. Returns the entry and its
-- index.
local function find_kernel(list, k)
  local how = "see :kernels"
  if #list == 0 then fail("the model has no kernels (it ran no tensor ops)") end
  local i = math.tointeger(tonumber(k))
  if i ~= nil then
    if i < 0 or i >= #list then
      fail("no kernel %d: the model has %d kernel%s, 0 to %d (%s)", i, #list, #list == 1 and "" or "s", #list - 1, how)
    end
    return list[i + 1], i
  end
  local found = {}
  for j, e in ipairs(list) do
    if e.name == k then found[#found + 1] = j - 1 end
  end
  if #found == 0 then fail("no kernel named '%s' (%s)", k, how) end
  if #found > 1 then
    local idx = {}
    for j, f in ipairs(found) do idx[j] = tostring(f) end
    fail("kernel name '%s' is in several graphs: give its index (%s)", k, table.concat(idx, ", "))
  end
  return list[found[1] + 1], found[1]
end

-- for later files' commands (45_autotune.lua)
repl.inspected, repl.find_kernel = inspected, find_kernel

repl.register("kernels", {
  usage = ":kernels",
  summary = "the compiled kernels of the loaded model: index, name, kind, ops",
  help = [[
Lists the kernels of the current version of each graph of the session's
compiled model, in the order they run: the index (for :src), the graph when
there are several, the kernel's name, its kind ("generated": C or CUDA that
kiln wrote for this graph; "cpu": a library call or a reference op), its
group (pointwise, row, library, reference) and the op nodes it covers; a
node a pass made from several ops (attention) lists those ops and lines.
Compiles and runs the model once if needed (mode default when the session
is eager). With kiln.config.compiler = false the graph runs op by op: one
cpu kernel per op. Values that depend only on shapes and constants (a
causal mask) are computed once when a version is compiled, not per call:
they are listed after the kernels. From Lua, kiln.cmd.kernels() returns
cm:kernels() (its field `once` lists those values).]],
}, function()
  local cm, list = inspected_kernels()
  if #list == 0 then
    print("no kernels (the model ran no tensor ops)")
    return list
  end
  local graphs, ngen = {}, 0
  for _, k in ipairs(list) do
    graphs[k.graph or 0] = true
    if k.kind == "generated" then ngen = ngen + 1 end
  end
  local ngraphs = 0
  for _ in pairs(graphs) do ngraphs = ngraphs + 1 end
  local rows = { { "#", "graph", "kernel", "kind", "group", "ops" } }
  for i, k in ipairs(list) do
    -- ops of an imported (ONNX) model also name the nodes they came from
    local nodes, seen = {}, {}
    for _, w in ipairs(k.wheres or {}) do
      local n = w:match(":node '(.-)' %(")
      if n and not seen[n] then seen[n] = true; nodes[#nodes + 1] = n end
    end
    rows[#rows + 1] = { tostring(i - 1), tostring(k.graph or 0), k.name, k.kind, k.shape_kind or "-",
      table.concat(k.ops or {}, ", ") .. (k.covers and (" = " .. k.covers) or "")
        .. (#nodes > 0 and ("  [" .. table.concat(nodes, ", ") .. "]") or "") }
  end
  local cols = ngraphs > 1 and { 1, 2, 3, 4, 5, 6 } or { 1, 3, 4, 5, 6 }
  local width = {}
  for _, c in ipairs(cols) do
    width[c] = 0
    for _, r in ipairs(rows) do width[c] = math.max(width[c], #r[c]) end
  end
  local lines = {}
  for _, r in ipairs(rows) do
    local parts = {}
    for j, c in ipairs(cols) do
      if c == 1 then parts[j] = string.format("%" .. width[c] .. "s", r[c])
      elseif j == #cols then parts[j] = r[c]
      else parts[j] = string.format("%-" .. width[c] .. "s", r[c]) end
    end
    lines[#lines + 1] = "  " .. table.concat(parts, "  ")
  end
  for _, o in ipairs(list.once or {}) do
    lines[#lines + 1] = string.format("  computed once per version, not per call: %s -> %s {%s} (%s)", o.ops, o.dtype,
      table.concat(o.shape, ", "), o.where or "?")
  end
  local nk = #list
  lines[#lines + 1] = string.format("%d kernel%s (%d generated, %d cpu) in %d graph%s%s",
    nk, nk == 1 and "" or "s", ngen, nk - ngen, ngraphs, ngraphs == 1 and "" or "s",
    kiln.config and kiln.config.compiler == false and "; kiln.config.compiler = false: op by op" or "")
  print(table.concat(lines, "\n"))
  return list
end)

repl.register("src", {
  usage = ":src K",
  summary = "the generated source of kernel K (index from :kernels, or name)",
  help = [[
Prints the C source kiln generated for kernel K of the session's compiled
model: K is the index that :kernels shows, or the kernel's name. Library
calls and reference ops have no generated source. Compiles and runs the
model once if needed (mode default when the session is eager). The whole
program of a graph, for C or CUDA, is cm:source("c") or cm:source("cuda").
From Lua, kiln.cmd.src(K) returns the source.]],
}, function(k)
  if k == nil or k == "" then fail("usage: :src K (K: a kernel's index from :kernels, or its name)") end
  local _, list = inspected_kernels()
  local e, i = find_kernel(list, k)
  if e.source == nil then
    local what
    if e.kind == "generated" then what = "a generated kernel whose source could not be rendered"
    elseif e.shape_kind == "library" then what = "a library call"
    elseif e.shape_kind == "reference" then what = "a reference op (the cpu backend's own code)"
    elseif e.shape_kind == nil then what = "an op run op by op (kiln.config.compiler = false)"
    else what = "a " .. tostring(e.kind) .. " kernel" end
    fail("kernel %d (%s) is %s: no generated source", i, e.name, what)
  end
  local src = tostring(e.source)
  io.stdout:write(src, src:sub(-1) == "\n" and "" or "\n")
  return src
end)

repl.register("check", {
  usage = ":check",
  summary = "run the model once comparing every kernel with the reference",
  help = [[
Runs the session's compiled model once on its inputs (as :run builds them)
with the numerics check: each kernel's outputs are compared with the
reference ops on the same inputs, and the first kernel that diverges is
named with its op nodes and their source lines. Prints "numerics check:
every kernel agrees with the reference", or the kernel that differs (and
then the command fails). Compiles the model if needed (mode default when the
session is eager). kiln.config.check_numerics = true checks every call.
From Lua, kiln.cmd.check() returns the report {ok, message, checks} of
cm:check.]],
}, function()
  need_compile()
  eager_note()
  local cm
  if session.mode == "eager" then
    session.inspect = session.inspect or kiln.compile(session.model, { mode = INSPECT_MODE })
    cm = session.inspect
  else
    cm = runner()
  end
  local inputs, n = model_inputs()
  local report = cm:check(table.unpack(inputs, 1, n))
  if cm == session.compiled then session.warm = true end
  if type(report) ~= "table" then fail("cm:check returned %s, not a report", type(report)) end
  print("numerics check: " .. tostring(report.message))
  if not report.ok then
    fail("numerics check failed: the compiled model differs from the reference")
  end
  return report
end)

---------------------------------------------------------------------------
-- :device

repl.register("device", {
  usage = ":device",
  summary = "the CPU and the CUDA devices kiln can use",
  help = [[
Shows the CPU (name, cores, memory) and, for CUDA, whether this kiln was
built with it, each device's name, memory, SM count and compute capability,
or the reason there is none. From Lua: kiln.cmd.device() also returns
kiln.device_info().]],
}, function()
  if type(kiln.device_info) ~= "function" then fail("kiln.device_info is not available in this build") end
  local info = kiln.device_info()
  local cpu, cuda = info.cpu or {}, info.cuda or {}
  local lines = {
    string.format("CPU   %s · %s cores · %s", cpu.name or "unknown", tostring(cpu.cores or "?"), fmt_bytes(cpu.memory_bytes)),
  }
  local devices = cuda.devices or {}
  if not cuda.built then
    lines[#lines + 1] = "CUDA  not built (this kiln was compiled without the CUDA toolkit)"
  elseif #devices == 0 then
    lines[#lines + 1] = "CUDA  built; " .. tostring(cuda.error or "no device found")
  else
    lines[#lines + 1] = string.format("CUDA  %d device%s", #devices, #devices == 1 and "" or "s")
    for i, d in ipairs(devices) do
      lines[#lines + 1] = string.format("  %d: %s · %s · %s SMs · compute capability %s", i - 1,
        d.name or "?", fmt_bytes(d.memory_bytes), tostring(d.sm_count or "?"), tostring(d.cc or "?"))
    end
    if cuda.error then lines[#lines + 1] = "  note: " .. tostring(cuda.error) end
  end
  print(table.concat(lines, "\n"))
  return info
end)

---------------------------------------------------------------------------
-- :help, :quit

repl.register("help", {
  usage = ":help [CMD]",
  summary = "list the commands, or show the details of one",
}, function(name)
  if name == nil then
    io.stdout:write(repl.help_text())
    return
  end
  name = tostring(name):gsub("^:", "")
  local c = commands[name]
  if not c or not cmd[name] then fail("unknown command ':%s' (try :help)", name) end
  print(c.usage .. "\n" .. (c.help or c.summary))
end)

repl.register("quit", {
  usage = ":quit",
  summary = "leave kiln (as Ctrl-D does)",
}, function()
  -- In the REPL, on_quit ends the loop after this line, so the exit status
  -- still tells whether earlier lines failed; elsewhere, exit at once.
  if type(repl.on_quit) == "function" then return repl.on_quit() end
  os.exit(0)
end)

---------------------------------------------------------------------------
-- Printing results: tables as Lua constructors, nested up to a depth.

local MAX_DEPTH, MAX_ITEMS, WIDTH = 4, 40, 78

local function quote(s)
  return (string.format("%q", s):gsub("\\\n", "\\n"))
end

local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta < tb end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

local format_value

local function format_table(t, depth, seen, indent)
  if seen[t] then return "<cycle>" end
  if depth > MAX_DEPTH then return "{...}" end
  seen[t] = true
  local items, n = {}, rawlen(t)
  for i = 1, math.min(n, MAX_ITEMS) do items[#items + 1] = format_value(rawget(t, i), depth + 1, seen, indent .. "  ") end
  local keys = {}
  for k in next, t do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
  end
  table.sort(keys, key_order)
  for _, k in ipairs(keys) do
    if #items >= MAX_ITEMS then break end
    local ks = type(k) == "string" and k:match("^[%a_][%w_]*$") and k or ("[" .. format_value(k, depth + 1, seen, indent) .. "]")
    items[#items + 1] = ks .. " = " .. format_value(rawget(t, k), depth + 1, seen, indent .. "  ")
  end
  local total = n + #keys
  if total > #items then items[#items + 1] = string.format("... (%d more)", total - #items) end
  seen[t] = nil
  if #items == 0 then return "{}" end
  local line = "{" .. table.concat(items, ", ") .. "}"
  if #line + #indent <= WIDTH and not line:find("\n") then return line end
  return "{\n" .. indent .. "  " .. table.concat(items, ",\n" .. indent .. "  ") .. "\n" .. indent .. "}"
end

function format_value(v, depth, seen, indent)
  local tv = type(v)
  if tv == "string" then return quote(v) end
  if tv ~= "table" then return tostring(v) end
  local mt = getmetatable(v)
  if type(mt) == "table" and rawget(mt, "__tostring") then return tostring(v) end
  -- a proxy (kiln.config) shows the table it reads through to
  if type(mt) == "table" and rawget(mt, "__pairs") and type(rawget(mt, "__index")) == "table" then v = rawget(mt, "__index") end
  return format_table(v, depth, seen, indent)
end

-- One value as the REPL shows it: strings as they are, tables readably.
function repl.format(v)
  if type(v) == "string" then return v end
  return format_value(v, 1, {}, "")
end

-- Print the results of an expression, tab-separated (as print does).
function repl.show(...)
  local parts = table.pack(...)
  for i = 1, parts.n do parts[i] = repl.format(parts[i]) end
  io.stdout:write(table.concat(parts, "\t", 1, parts.n), "\n")
end

---------------------------------------------------------------------------
-- Tab completion

local KEYWORDS = {
  "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
  "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
}

-- Fields that a userdata's __index function computes, by metatable name:
-- they are in no table to walk.
local PROPERTIES = { ["kiln.Tensor"] = { "dtype", "device", "ndim" } }

-- A C __index function that looks keys up in a table keeps that table as an
-- upvalue (kiln.Tensor's methods do); Lua closures are left alone, since
-- their first upvalue is often _ENV.
local function index_table(f)
  local info = debug.getinfo(f, "S")
  if not info or info.what ~= "C" then return nil end
  for i = 1, 4 do
    local name, val = debug.getupvalue(f, i)
    if name == nil then return nil end
    if type(val) == "table" then return val end
  end
end

-- The step from a value to where its missing fields come from: a table
-- __index, or the table behind a C __index.
local function next_index(v)
  local mt = getmetatable(v)
  if type(mt) ~= "table" then return nil, nil end
  local idx = rawget(mt, "__index")
  if type(idx) == "function" then idx = index_table(idx) end
  return type(idx) == "table" and idx or nil, mt
end

-- v[k] without running any metamethod function.
local function field(v, k)
  for _ = 1, 16 do
    if type(v) == "table" then
      local r = rawget(v, k)
      if r ~= nil then return r end
    end
    v = next_index(v)
    if v == nil then return nil end
  end
end

-- name -> value for the identifier keys of v and of its __index chain.
local function fields(v)
  local out, visited = {}, {}
  for _ = 1, 16 do
    if type(v) == "table" and not visited[v] then
      visited[v] = true
      for k, val in next, v do
        if type(k) == "string" and k:match("^[%a_][%w_]*$") and out[k] == nil then out[k] = val end
      end
    end
    local idx, mt = next_index(v)
    local props = mt and PROPERTIES[rawget(mt, "__name")]
    for _, p in ipairs(props or {}) do if out[p] == nil then out[p] = true end end
    if idx == nil then break end
    v = idx
  end
  return out
end

local function starting_with(names, p, prefix)
  local out = {}
  for _, name in ipairs(names) do
    if name:sub(1, #p) == p then out[#out + 1] = prefix .. name end
  end
  table.sort(out)
  return out
end

local function command_names()
  local names = {}
  for name in pairs(cmd) do
    if type(name) == "string" then names[#names + 1] = name end
  end
  return names
end

-- Completions of `word` (the text before the cursor back to a blank or a
-- bracket; `before` is the rest of the line before it): `:` commands at the
-- start of a line, command names after :help, modes after :mode, else Lua
-- names, fields after `a.b.` and methods after `a:`. Returns a sorted list
-- of whole words that replace `word`, or nil where file names fit (the
-- arguments of other commands).
function repl.complete(word, before)
  word, before = tostring(word or ""), tostring(before or "")
  if word:sub(1, 1) == ":" and not before:find("%S") then
    return starting_with(command_names(), word:sub(2), ":")
  end
  local command = before:match("^%s*:(%S+)%s")
  if command == "help" then return starting_with(command_names(), word, "") end
  if command == "mode" then return starting_with(MODES, word, "") end
  if command then return nil end
  local out = {}
  -- `word` may start with an operator (breaks are only blanks and
  -- brackets): keep that part as it is.
  local head, expr = word:match("^(.-)([%a_][%w_%.:]*)$")
  if not head then return out end
  local path, sep, partial = expr:match("^(.*)([.:])([%w_]*)$")
  local names
  if not path then
    partial, names = expr, fields(G)
    for _, k in ipairs(KEYWORDS) do names[k] = names[k] or true end
  else
    if path:find(":") then return out end
    local v = G
    for name in path:gmatch("[^.]+") do
      if not name:match("^[%a_][%w_]*$") then return out end
      v = field(v, name)
      if v == nil then return out end
    end
    names = fields(v)
  end
  local prefix = head .. (path and (path .. sep) or "")
  for k, val in pairs(names) do
    if k:sub(1, #partial) == partial and (sep ~= ":" or is_callable(val)) then
      out[#out + 1] = prefix .. k
    end
  end
  table.sort(out)
  return out
end

return kiln
