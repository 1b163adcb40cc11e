-- 50_graph.lua: drawing (docs/lua-api.md and docs/repl.md): kiln.render and the
-- REPL command :graph, on top of kiln.viz (scripting/kn_lua_viz.c, viz/).
--
-- Views: "captured" (each graph as traced, its breaks between) and "fused"
-- (the kernels after the passes; with the heat of the latest kiln.time or
-- :time of that compiled callable). Files: .svg (laid out by Graphviz's
-- dot) or .dot (the graph as DOT text, for other tools).
local kiln = ...

local V = kiln.viz
local P = kiln.profiler
local repl = kiln.repl
local fail = repl.error
local session = kiln.session

local is_compiled = repl.is_compiled

local RANKDIRS = { TB = true, LR = true, BT = true, RL = true }
local RANKDIR_NAMES = { "TB", "LR", "BT", "RL" }
local VIEWS = { "captured", "fused" }
local FORMATS = { "svg", "dot" }
local LABELS = { "plain", "lines" }
local OPTIONS = { "view", "format", "rankdir", "collapse", "labels", "timings", "inputs" }
local GRAPH_WORDS = { "captured", "fused", "text", "collapse", "lines", "lr", "tb", "bt", "rl" }

-- The format a file name asks for, or nil.
local function format_of(path)
  local ext = path:match("%.(%w+)$")
  ext = ext and ext:lower()
  if ext == "svg" then return "svg" end
  if ext == "dot" or ext == "gv" then return "dot" end
  return nil
end

-- The timing rows that colour the fused view: opts.timings (a kiln.time
-- result, kiln.profile rows, or a list of {name, median_us, pct,
-- roof_pct}), false for none, else the latest kiln.time of cm; and, from
-- a kiln.time result, the host's and the kernels' time per call.
local function timing_rows(cm, t, fname)
  if t == false then return nil end
  if t == nil then t = P.last_time and P.last_time[cm] end
  if t == nil then return nil end
  if type(t) ~= "table" then
    error(string.format("%s: opts.timings must be a kiln.time result or a list of kernel rows, got %s", fname,
      type(t)), 4)
  end
  local host
  if type(t.host_us) == "number" and type(t.kernel_us) == "number" then
    host = { host_us = t.host_us, kernel_us = t.kernel_us }
  end
  if type(t.kernels) == "table" then t = t.kernels end
  return t, host
end

-- Checked options: {view, format, rankdir, collapse, labels, timings,
-- inputs}, by the checker every API shares (kiln._check_options,
-- scripting/kn_lua_util.c).
local function check_opts(opts, fname)
  opts = kiln._check_options(opts, fname, OPTIONS)
  local view = kiln._check_name(opts.view or "fused", fname, "view", VIEWS)
  local labels = kiln._check_name(opts.labels or "plain", fname, "labels", LABELS)
  local format = opts.format
  if format ~= nil then kiln._check_name(format, fname, "format", FORMATS) end
  local rankdir = "TB"
  if opts.rankdir ~= nil then
    rankdir = type(opts.rankdir) == "string" and opts.rankdir:upper() or opts.rankdir
    if type(rankdir) ~= "string" or not RANKDIRS[rankdir] then
      kiln._check_name(opts.rankdir, fname, "rankdir", RANKDIR_NAMES)
    end
  end
  return { view = view, format = format, rankdir = rankdir, collapse = opts.collapse and true or false,
    labels = labels, timings = opts.timings, inputs = opts.inputs }
end

-- The compiled callable to draw: cm itself, or fn compiled and called
-- once on opts.inputs.
local function to_compiled(fn, o, fname)
  if is_compiled(fn) then return fn end
  local callable = type(fn) == "function" or (type(fn) == "table" and getmetatable(fn) and getmetatable(fn).__call)
  if callable and type(o.inputs) == "table" then
    local cm = kiln.compile(fn)
    cm(table.unpack(o.inputs, 1, o.inputs.n or #o.inputs))
    return cm
  end
  error(string.format("%s: argument 1 must be a compiled callable (kiln.compile(f)) that has been called, got %s%s",
    fname, type(fn), callable and "; or pass opts.inputs = {x, ...} to compile and call it once here" or ""), 3)
end

-- kiln.render(cm_or_fn, path, opts): draws the view to path (.svg or .dot)
-- and returns the path; with path nil, returns the text (opts.format,
-- default svg).
function kiln.render(fn, path, opts)
  local fname = "kiln.render"
  if path ~= nil and type(path) ~= "string" then
    error(string.format("%s: argument 2 must be the output file name (\"out.svg\" or \"out.dot\"), got %s", fname,
      type(path)), 2)
  end
  local o = check_opts(opts, fname)
  local cm = to_compiled(fn, o, fname)
  local format = o.format
  if path and not format then
    format = format_of(path)
    if not format then
      error(string.format("%s: cannot tell the format of '%s' from its name: use a .svg or .dot file name, " ..
        "or opts.format = \"svg\" | \"dot\"", fname, path), 2)
    end
  end
  local timings, host
  if o.view == "fused" then timings, host = timing_rows(cm, o.timings, fname) end
  local r, err = V.render(cm, path, o.view, format or "svg", o.rankdir, o.collapse, timings, o.labels, host)
  if r == nil then error(fname .. ": " .. tostring(err), 2) end
  return r
end

-- kiln.outline(cm, opts): the text outline that :graph prints.
function kiln.outline(fn, opts)
  local o = check_opts(opts, "kiln.outline")
  local cm = to_compiled(fn, o, "kiln.outline")
  local timings, host
  if o.view == "fused" then timings, host = timing_rows(cm, o.timings, "kiln.outline") end
  local r, err = V.outline(cm, o.view, o.collapse, timings, host)
  if r == nil then error("kiln.outline: " .. tostring(err), 2) end
  return r
end

---------------------------------------------------------------------------
-- :graph

-- As :kernels and the other inspection commands (20_repl.lua) do: the
-- session's compiled model in a compiled mode, else one compiled with mode
-- default for inspection (session.inspect, shared with them), called once
-- when it has not been yet.
local INSPECT_MODE = "default"

local function inspected()
  if type(kiln.compile) ~= "function" then fail("this build has no kiln.compile: nothing to draw") end
  if not session.model then fail("no model loaded (use :load FILE.lua)") end
  local cm
  if session.mode == "eager" then
    print(string.format("(mode eager: compiled with mode %s for this drawing; :run stays eager)", INSPECT_MODE))
    session.inspect = session.inspect or kiln.compile(session.model, { mode = INSPECT_MODE })
    cm = session.inspect
  else
    if not session.compiled then
      session.compiled = kiln.compile(session.model, { mode = session.mode, fullgraph = session.fullgraph })
      session.warm = nil
    end
    cm = session.compiled
  end
  if cm:stats().calls == 0 then
    local device = repl.default_device()
    local inputs = session.spec.inputs({ device = device, dtype = "f32", small = session.small and true or false })
    if type(inputs) ~= "table" then
      fail("inputs(opts) of '%s' must return a list of inputs {x, ...}, got %s", tostring(session.file), type(inputs))
    end
    cm(table.unpack(inputs, 1, inputs.n or #inputs))
    if cm == session.compiled then session.warm = true end
  end
  return cm
end

local function temp_svg(view)
  local dir = os.getenv("TMPDIR")
  if not dir or dir == "" then dir = "/tmp" end
  local name = tostring(session.spec and session.spec.name or "model"):gsub("[^%w_%-]", "_")
  return string.format("%s/kiln-%s-%s.svg", dir, name, view)
end

repl.register("graph", {
  usage = ":graph [captured|fused] [FILE.svg|FILE.dot|text]",
  max_args = math.huge, -- it checks every word itself (collapse, lr, ...)
  summary = "draw the loaded model's graphs: outline here, picture in an SVG (breaks, kernels, timing heat)",
  help = [[
Draws the session's compiled model (compiled and run once if needed; mode
default when the session is eager). Views:
  fused     (default) one box per kernel with its name, kind and the ops it
            covers; edges between kernels carry the tensor's shape and
            bytes; after :time, each kernel's median time, share and roof%,
            coloured from cool to hot by its share of the time
  captured  each graph as traced: every op with its shape and dtype (source
            line in the tooltip), inputs, parameters and outputs, and a red
            node for each graph break with its category, reason and line
Where it goes:
  :graph [VIEW]            prints a text outline of the view and writes the
                           picture to a temporary SVG whose path is printed
  :graph [VIEW] text       the outline only
  :graph [VIEW] FILE.svg   the picture to FILE (FILE.dot: DOT text instead)
More words: collapse (a repeated run of ops or kernels, e.g. identical
blocks, drawn once with its count), lines (each node's file:line in its
label, each break's user stack), lr / tb (rank direction: left to right,
top to bottom). From Lua: kiln.render(cm, "out.svg", {view = "captured",
collapse = true, labels = "lines", rankdir = "LR"}) and kiln.outline(cm,
{view = ...}); kiln.cmd.graph(...) returns {view, path, outline}.]],
}, function(...)
  local view, path, text_only, collapse, rankdir, labels = "fused", nil, false, false, "TB", "plain"
  for _, w in ipairs({ ... }) do
    local lw = tostring(w):lower()
    if lw == "captured" or lw == "fused" then view = lw
    elseif lw == "text" then text_only = true
    elseif lw == "collapse" then collapse = true
    elseif lw == "lines" then labels = "lines"
    elseif RANKDIRS[lw:upper()] then rankdir = lw:upper()
    elseif format_of(tostring(w)) then
      if path then fail(":graph takes one file name, got '%s' and '%s'", path, tostring(w)) end
      path = tostring(w)
    else
      local near = kiln._did_you_mean(tostring(w), GRAPH_WORDS)
      fail("unknown word '%s' for :graph (expected captured, fused, text, collapse, lines, lr, tb, or FILE.svg / "
        .. "FILE.dot)%s", tostring(w), near and "; did you mean '" .. near .. "'?" or "")
    end
  end
  if text_only and path then fail(":graph: 'text' prints the outline only; leave it out to write %s", path) end
  local cm = inspected()
  local opts = { view = view, collapse = collapse, rankdir = rankdir, labels = labels }
  local result = { view = view }
  if not path then
    result.outline = kiln.outline(cm, opts)
    io.stdout:write(result.outline)
    if text_only then return result end
  end
  local ok, r = pcall(kiln.render, cm, path or temp_svg(view), opts)
  if not ok then fail("%s", (tostring(r):gsub("^kiln%.render: ", ""))) end
  result.path = r
  print(string.format("%s %s view: %s", path and "wrote the" or "drew the", view, r))
  return result
end)
