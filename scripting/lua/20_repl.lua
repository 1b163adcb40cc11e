-- 20_repl.lua: the REPL's `:` command table (kiln.cmd.NAME, registered
-- with kiln.repl.register, which keeps :help and kiln.cmd in step), the
-- session the commands share (kiln.session), usage errors, the helpers the
-- later files share through kiln.repl, and the helpers the C REPL
-- (repl/kn_repl.c) calls: kiln.repl.command runs a `:` line,
-- kiln.repl.show prints results, kiln.repl.complete gives tab completions.
-- luaopen_kiln runs this file with the kiln table as `...`, so it works the
-- same in the kiln program and under the stock lua5.4 (require "kiln").
--
-- The commands come in groups, one file each, run in file-name order, which
-- is the order :help lists them in: 21_repl_model.lua (:load, :mode,
-- :fullgraph, :run), 22_repl_inspect.lua (:explain, :breaks, :recompiles,
-- :guards, :kernels, :src, :check), 23_repl_system.lua (:device, :help,
-- :quit, the banner); later files (40_timing.lua, 45_autotune.lua,
-- 50_graph.lua, 60_report.lua) add theirs the same way (38_steady.lua has
-- the helpers that time compiling calls apart).
local kiln = ...

local repl = kiln.repl or {}
kiln.repl = repl
local cmd = kiln.cmd or {}
kiln.cmd = cmd

-- The globals of this Lua state, whatever the user later does to _G.
local G = _ENV

-- The modes a compiled model can run in (:mode sets them; tab completion
-- offers them after :mode).
local MODES = { "eager", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs" }
repl.modes = MODES

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

-- :help fits in HELP_WIDTH columns: usages up to USAGE_WIDTH wide share
-- their line with the summary, a longer one has a line of its own, and
-- summaries wrap at word boundaries under the summary column.
local HELP_WIDTH, USAGE_WIDTH = 100, 20

-- `text` in lines of at most `width` characters (a longer word alone).
local function wrap(text, width)
  local lines, line = {}, ""
  for word in text:gmatch("%S+") do
    if line ~= "" and utf8.len(line) + 1 + utf8.len(word) > width then
      lines[#lines + 1] = line
      line = word
    else
      line = line == "" and word or (line .. " " .. word)
    end
  end
  if line ~= "" or #lines == 0 then lines[#lines + 1] = line end
  return lines
end

-- The command list, a command a line or two (for :help and kiln --help).
function repl.help_text()
  local rows, width = {}, 0
  for _, name in ipairs(order) do
    if cmd[name] then
      local c = commands[name]
      rows[#rows + 1] = c
      if #c.usage <= USAGE_WIDTH then width = math.max(width, #c.usage) end
    end
  end
  local indent = string.rep(" ", 2 + width + 2)
  local lines = {}
  for _, c in ipairs(rows) do
    local summary = wrap(c.summary, HELP_WIDTH - #indent)
    if #c.usage > width then
      lines[#lines + 1] = "  " .. c.usage
      lines[#lines + 1] = indent .. summary[1]
    else
      lines[#lines + 1] = string.format("  %-" .. width .. "s  %s", c.usage, summary[1])
    end
    for i = 2, #summary do lines[#lines + 1] = indent .. summary[i] end
  end
  lines[#lines + 1] = "Each command is also a Lua function: kiln.cmd.run(3), kiln.load(path)."
  lines[#lines + 1] = ":help CMD shows the details of one command."
  return table.concat(lines, "\n") .. "\n"
end

-- The error for a command that does not exist: the list is :help's, and a
-- near miss is named (":kernls" -> did you mean ':kernels'?).
function repl.unknown_command(name)
  local names = {}
  for _, n in ipairs(order) do
    if cmd[n] then names[#names + 1] = n end
  end
  local near = kiln._did_you_mean(name, names)
  fail("unknown command ':%s' (try :help)%s", name, near and "; did you mean ':" .. near .. "'?" or "")
end

-- The registry entry of command `name` ({usage, summary, help, max_args};
-- :help shows it), or nil.
function repl.command_info(name)
  return commands[name]
end

-- Run one `:` line: split on whitespace into a name and string arguments,
-- then call kiln.cmd[name](args...).
function repl.command(line)
  local name, rest = tostring(line):match("^%s*:(%S*)(.*)$")
  if not name then fail("not a command: '%s' (commands start with ':')", line) end
  if name == "" then fail("empty command (try :help)") end
  local f = cmd[name]
  if f == nil then repl.unknown_command(name) end
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

-- for later files (21_repl_model, 40_timing, 45_autotune, 50_graph)
repl.is_callable, repl.is_tensor, repl.is_compiled = is_callable, is_tensor, is_compiled

local function fmt_bytes(n)
  if type(n) ~= "number" then return "? memory" end
  if n >= 2 ^ 30 then return string.format("%.1f GiB", n / 2 ^ 30) end
  return string.format("%.0f MiB", n / 2 ^ 20)
end

local function default_device()
  if type(kiln.default_device) == "function" then return kiln.default_device() end
  return "cpu"
end

-- shared with the later Lua parts of kiln (21_repl_model.lua,
-- 23_repl_system.lua, 40_timing.lua)
repl.fmt_bytes, repl.default_device = fmt_bytes, default_device

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
