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

---------------------------------------------------------------------------
-- JSON, for the trace files (one object per line; sorted keys)

local function json(v)
  local t = type(v)
  if t == "nil" then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    return math.type(v) == "integer" and tostring(v) or string.format("%.6g", v)
  end
  if t == "string" then
    return '"' .. v:gsub('[%c"\\]', function(c)
      local named = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r" }
      return named[c] or string.format("\\u%04x", c:byte())
    end) .. '"'
  end
  if t == "table" then
    if #v > 0 or next(v) == nil then
      local parts = {}
      for i = 1, #v do parts[i] = json(v[i]) end
      return "[" .. table.concat(parts, ",") .. "]"
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = json(k) .. ":" .. json(v[k]) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return json(tostring(v))
end

-- The reader of those lines: objects, arrays, strings, numbers, booleans
-- and null, as json() writes them. Returns the value, or nil and why.
local function parse_json(s)
  local pos = 1
  local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
  local value
  local function str()
    local out, i = {}, pos + 1
    while true do
      local c = s:sub(i, i)
      if c == "" then error("unterminated string", 0) end
      if c == '"' then break end
      if c == "\\" then
        local e = s:sub(i + 1, i + 1)
        if e == "u" then
          out[#out + 1] = utf8.char(tonumber(s:sub(i + 2, i + 5), 16))
          i = i + 6
        else
          out[#out + 1] = ({ n = "\n", t = "\t", r = "\r", b = "\b", f = "\f" })[e] or e
          i = i + 2
        end
      else
        out[#out + 1] = c
        i = i + 1
      end
    end
    pos = i + 1
    return table.concat(out)
  end
  function value()
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      local obj = {}
      pos = pos + 1
      ws()
      if s:sub(pos, pos) == "}" then pos = pos + 1 return obj end
      while true do
        ws()
        local k = str()
        ws()
        if s:sub(pos, pos) ~= ":" then error("':' expected at " .. pos, 0) end
        pos = pos + 1
        obj[k] = value()
        ws()
        local d = s:sub(pos, pos)
        pos = pos + 1
        if d == "}" then return obj end
        if d ~= "," then error("',' or '}' expected at " .. (pos - 1), 0) end
      end
    elseif c == "[" then
      local arr = {}
      pos = pos + 1
      ws()
      if s:sub(pos, pos) == "]" then pos = pos + 1 return arr end
      while true do
        arr[#arr + 1] = value()
        ws()
        local d = s:sub(pos, pos)
        pos = pos + 1
        if d == "]" then return arr end
        if d ~= "," then error("',' or ']' expected at " .. (pos - 1), 0) end
      end
    elseif c == '"' then
      return str()
    end
    for word, v in pairs({ ["true"] = true, ["false"] = false, null = json }) do
      if s:sub(pos, pos + #word - 1) == word then
        pos = pos + #word
        if v == json then return nil end
        return v
      end
    end
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
    if not num or num == "" then error("unexpected '" .. c .. "' at " .. pos, 0) end
    pos = pos + #num
    return math.tointeger(tonumber(num)) or tonumber(num)
  end
  local ok, v = pcall(value)
  if not ok then return nil, v end
  return v
end
R.parse_json = parse_json

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
