-- 61_events.lua: the session's compile record, as events: every call that
-- compiled (its phases, cache hits, why it recompiled), every graph break,
-- and every call that failed (its message). The session report shows them
-- as a timeline and a failures section (60_report.lua); KILN_TRACE=DIR also
-- writes them as JSON lines, one file per process, so that a job that is
-- not interactive can be debugged afterwards: kiln.report_from_trace(DIR,
-- "report.html"), or `kiln report DIR`, builds a page from the files.
--
-- The compiled callable's call path hands this file each traced call
-- (registry["kiln.on_traced_call"]) and each failed one
-- (registry["kiln.on_failure"], with the error) from kn_lua_compile.c; a
-- replayed call compiles nothing and is not an event.
local kiln = ...

local R = kiln._report
R.events = R.events or {}
local events = R.events
local MAX_EVENTS = 2000 -- the page keeps the latest; a trace file has all
local t0 = kiln.clock()
-- callable -> what its stats were after its last traced call
local seen = setmetatable({}, { __mode = "k" })

-- JSON, for the trace files (one object per line; sorted keys): kiln's
-- one writer and reader (05_json.lua)
local json, parse_json = kiln._json_encode, kiln._json_decode

---------------------------------------------------------------------------
-- KILN_TRACE=DIR

local trace_file
local function open_trace()
  if trace_file ~= nil then return trace_file or nil end
  local dir = os.getenv("KILN_TRACE")
  trace_file = false
  if not dir or dir == "" then return nil end
  os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "'")
  -- one file per process: the clock and a table's address tell processes apart
  local path = string.format("%s/kiln-trace-%d-%s.jsonl", dir, os.time(), tostring({}):match("0x(%x+)") or "0")
  local f, err = io.open(path, "w")
  if not f then
    io.stderr:write("kiln: KILN_TRACE: cannot write ", path, ": ", tostring(err), "\n")
    return nil
  end
  f:setvbuf("line")
  trace_file = f
  R.trace_path = path
  f:write(json({ event = "session", kiln = kiln.version, t = 0, date = os.date("!%Y-%m-%d %H:%M:%S UTC") }), "\n")
  return f
end

local function emit(ev)
  ev.t = kiln.clock() - t0
  events[#events + 1] = ev
  if #events > MAX_EVENTS then table.remove(events, 1) end
  local f = open_trace()
  if f then f:write(json(ev), "\n") end
end
R.emit = emit

---------------------------------------------------------------------------
-- The events of a call

-- The callable's stats, and the fields every event of it carries (its
-- name, line and mode as the report's identity() reads them).
local function identity(cm)
  local name, where, mode = R.identity(cm)
  return cm:stats(), { fn = name, where = where, mode = mode }
end

local function with(base, fields)
  local e = {}
  for k, v in pairs(base) do e[k] = v end
  for k, v in pairs(fields) do e[k] = v end
  return e
end

-- A traced call: a compile event when it built a version or plan, and the
-- breaks and recompiles it added.
local function on_traced_call(cm)
  local st, base = identity(cm)
  local before = seen[cm] or { version_misses = 0, breaks = 0, recompiles = 0 }
  local lc = cm:last_call()
  local breaks, recompiles = cm:breaks(), cm:recompiles()
  for i = before.breaks + 1, #breaks do
    local b = breaks[i]
    emit(with(base, { event = "break", category = b.category, reason = b.reason, at = b.where, stack = b.stack }))
  end
  local reasons
  for i = before.recompiles + 1, #recompiles do
    reasons = reasons or {}
    for _, r in ipairs(recompiles[i].reasons or {}) do reasons[#reasons + 1] = r end
  end
  if (st.version_misses or 0) > before.version_misses then
    local c = lc.compile_s or {}
    -- the kernels of the new version, by name and the ops they cover
    local ks = {}
    local okk, kernels = pcall(cm.kernels, cm)
    for i, k in ipairs(okk and kernels or {}) do ks[i] = { name = k.name, ops = k.ops, kind = k.kind } end
    emit(with(base, { event = "compile", kind = (before.version_misses == 0 and #recompiles == 0) and "first" or "recompile",
      reasons = reasons, graphs = lc.graph_count, graph_breaks = lc.graph_break_count, ops = lc.op_count,
      kernels = c.kernels, kernels_cached = c.kernels_cached, compile_s = c.total, phases = lc.phases,
      cuda_graph = st.cuda_graph, autotune_s = st.autotune_s, kernel_list = ks }))
  end
  seen[cm] = { version_misses = st.version_misses or 0, breaks = #breaks, recompiles = #recompiles }
end

local function on_failure(cm, message)
  local _, base = identity(cm)
  emit(with(base, { event = "failure", message = tostring(message) }))
end

do
  local ok, reg = pcall(debug.getregistry)
  if ok and type(reg) == "table" then
    reg["kiln.on_traced_call"] = function(cm) pcall(on_traced_call, cm) end
    reg["kiln.on_failure"] = function(cm, message) pcall(on_failure, cm, message) end
  end
end

---------------------------------------------------------------------------
-- A report from trace files

-- kiln.report_from_trace(path, out): the events of a trace file (or of every
-- kiln-trace-*.jsonl in a folder) as an HTML page: the functions, the
-- failures and the compile timeline. Returns out.
function kiln.report_from_trace(path, out)
  if type(path) ~= "string" or path == "" then
    error("kiln.report_from_trace: argument 1 must be a KILN_TRACE folder or one of its .jsonl files", 2)
  end
  if type(out) ~= "string" or not out:lower():match("%.html?$") then
    error("kiln.report_from_trace: argument 2 must be the page to write, a file name ending in .html", 2)
  end
  local files = {}
  if path:match("%.jsonl$") then
    files[1] = path
  else
    local p = io.popen("ls '" .. path:gsub("'", "'\\''") .. "' 2>/dev/null")
    for name in p:lines() do
      if name:match("^kiln%-trace%-.*%.jsonl$") then files[#files + 1] = path .. "/" .. name end
    end
    p:close()
  end
  if #files == 0 then error("kiln.report_from_trace: no kiln-trace-*.jsonl in '" .. path .. "' (run with KILN_TRACE=DIR)", 2) end
  local evs = {}
  for _, file in ipairs(files) do
    local f, err = io.open(file, "r")
    if not f then error("kiln.report_from_trace: cannot read " .. tostring(err), 2) end
    local n = 0
    for line in f:lines() do
      n = n + 1
      local ev, why = parse_json(line)
      if not ev then
        f:close()
        error(string.format("kiln.report_from_trace: %s:%d is not a trace line (%s)", file, n, why), 2)
      end
      ev.file = file
      evs[#evs + 1] = ev
    end
    f:close()
  end
  local text = R.trace_html(evs, files)
  local f, err = io.open(out, "wb")
  if not f then error("kiln.report_from_trace: cannot write '" .. out .. "': " .. tostring(err), 2) end
  f:write(text)
  f:close()
  return out
end
