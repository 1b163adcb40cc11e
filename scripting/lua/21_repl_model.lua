-- 21_repl_model.lua: the REPL commands that load and run the session's
-- model: :load (and kiln.load, and what the kiln program does with a
-- script that returns a model), :mode, :fullgraph and :run. The command
-- table, the session and the shared helpers are 20_repl.lua's; the
-- inspection commands (22_repl_inspect.lua) run the model as :run does,
-- through repl.model_inputs and repl.runner.
local kiln = ...
local repl = kiln.repl
local session = kiln.session
local fail = repl.error
local is_callable, is_tensor = repl.is_callable, repl.is_tensor
local default_device = repl.default_device

local MODES = repl.modes -- 20_repl.lua
local MODE_SET = {}
for _, m in ipairs(MODES) do MODE_SET[m] = true end

---------------------------------------------------------------------------
-- What :run prints: values, milliseconds, and the clock it reads

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
  opts = kiln._check_options(opts, "kiln.load", { "sizes", "quiet" })
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
  if spec.train_step ~= nil and not is_callable(spec.train_step) then
    fail("model file '%s': 'train_step' must be a function(inputs...) running one training step and returning "
      .. "its loss, got %s", path, type(spec.train_step))
  end

  local nparams = count_parameters(spec.model)
  session.model, session.spec, session.name, session.file = spec.model, spec, spec.name, path
  session.compiled, session.warm, session.inspect = nil, nil, nil
  if not (type(opts) == "table" and opts.quiet) then
    local what
    if nparams then what = string.format("%d parameters", nparams)
    elseif type(spec.model) == "function" then what = "a function"
    else what = "a callable " .. type(spec.model) end
    if spec.train_step then what = what .. "; :run runs its training step" end
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
  if not MODE_SET[mode] then fail("%s", kiln._unknown_message("mode", repl.describe_value(mode), MODES)) end
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

-- What :run calls: the model itself (a training spec's train_step: one
-- whole step, which returns its loss), or its compiled form.
local function runner()
  local target = session.spec.train_step or session.model
  if session.mode == "eager" then return target, false end
  if type(kiln.compile) ~= "function" then
    fail("mode '%s' needs kiln.compile, which this build does not have yet: only 'eager' works", session.mode)
  end
  if not session.compiled then
    session.compiled = kiln.compile(target, { mode = session.mode, fullgraph = session.fullgraph })
    session.warm = nil
  end
  return session.compiled, true
end

-- for the inspection commands (22_repl_inspect.lua), which run the model
-- as :run does
repl.model_inputs, repl.runner = model_inputs, runner

-- One call of fn on the inputs, timed (device work included); what it
-- compiled, in words (repl.compiled_since), or nil; first: a call that may
-- compile where nothing else can tell (a callable other than kiln.compile's
-- before its first call).
local function timed_call(fn, inputs, ninputs, sync, first)
  local mark = repl.compile_mark(fn)
  local t0 = clock()
  local out = table.pack(fn(table.unpack(inputs, 1, ninputs)))
  sync()
  local ms = (clock() - t0) * 1000
  local what = repl.compiled_since(fn, mark)
  if not what and not mark and first then what = "first call (compiling)" end
  return out, ms, what
end

-- A loss as :run prints it: the number a scalar tensor holds.
local function loss_value(v)
  local ok, x = pcall(function() return v:item() end)
  return ok and type(x) == "number" and x or nil
end

repl.register("run", {
  usage = ":run [n]",
  summary = "run the loaded model (or training step) n times (default 1) and time it",
  help = [[
Builds the inputs once with inputs({device = kiln.default_device(),
dtype = "f32", small = kiln.session.small}), calls the model n times and
prints the output's shape and dtype and the time per call (the median, and
the minimum). In a compiled mode a call that compiles (the first call, a
recompile after a shape change, a plan for new sizes) is timed apart and
printed with what it compiled ("recompiled (x dim 1: 8 -> 2): 0.21 s"),
and another call takes its place, so the median and the minimum are of
calls that compiled nothing. From Lua, kiln.cmd.run(n) returns {output,
runs, times_ms, median_ms, min_ms, mode, device, compile_s, compiles}
(compiles: {what, s} per call that compiled).
A training spec (one with train_step, as samples/train_*.lua) runs n
training steps instead: each step's loss is printed (every step up to 10,
then about ten lines), the summary gives the first and last loss and the
time per step, and the result also has losses.]],
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
  -- count calls that compiled nothing; each call that compiled is printed
  -- apart, and another takes its place (at most count more: a call
  -- recompiles only until the cache limit makes its graph run eagerly)
  local times, compiles, out = {}, {}, nil
  local training, losses = session.spec.train_step ~= nil, {}
  local every = count > 10 and math.ceil(count / 10) or 1 -- which steps' losses are printed
  for _ = 1, 2 * count + 1 do
    local first = compiled and not session.warm
    compiling = first
    local res, ms, what = timed_call(fn, inputs, ninputs, sync, first)
    compiling = false
    if compiled then session.warm = true end
    repl.check_interrupt() -- a Ctrl-C that code inside the call caught
    out = res
    if training then
      -- every call is a step that trained the model: counted, compiling or not
      local loss = loss_value(res[1])
      if not loss then
        fail("train_step of '%s' must return its loss (a scalar tensor), got %s", session.file, describe(res[1]))
      end
      losses[#losses + 1] = loss
      local n = #losses
      if n % every == 0 or n == 1 or n == count then
        print(string.format("step %d: loss %.6g (%s ms%s)", n, loss, fmt_ms(ms), what and ", " .. what or ""))
      end
    end
    if what then
      compiles[#compiles + 1] = { what = what, s = ms / 1000 }
      if not training then print(repl.compile_line(compiles[#compiles])) end
    else
      times[#times + 1] = ms
      done = #times
    end
    if (training and #losses == count) or (not training and done == count) then break end
  end
  repl.interrupt_note = nil
  local steady = #times
  local sorted = table.move(times, 1, steady, 1, {})
  table.sort(sorted)
  local median -- nil when every call compiled (a training run can end so)
  if steady > 0 then
    median = steady % 2 == 1 and sorted[(steady + 1) // 2] or (sorted[steady // 2] + sorted[steady // 2 + 1]) / 2
  end
  local described = {}
  for i = 1, out.n do described[i] = describe(out[i]) end
  if training then
    local timing = steady > 0 and string.format("%s ms per step (min %s, steps that compiled nothing)", fmt_ms(median),
      fmt_ms(sorted[1])) or "no step without a compile to time"
    print(string.format("loss %.6g -> %.6g · %d step%s · %s · %s on %s", losses[1], losses[#losses], #losses,
      #losses == 1 and "" or "s", timing, session.mode, device))
  else
    local timing = steady > 0 and string.format("%s ms per call (min %s)", fmt_ms(median), fmt_ms(sorted[1]))
      or "no call without a compile to time"
    print(string.format("output %s · %d run%s · %s · %s on %s",
      out.n == 0 and "nothing" or table.concat(described, ", "), steady, steady == 1 and "" or "s",
      timing, session.mode, device))
  end
  local first = compiles[1] and compiles[1].what == "first call (compiling)" and compiles[1].s or nil
  return {
    output = out.n <= 1 and out[1] or out, runs = steady, times_ms = times,
    median_ms = median, min_ms = sorted[1], mode = session.mode, device = device, compile_s = first,
    compiles = compiles, losses = training and losses or nil,
  }
end)
