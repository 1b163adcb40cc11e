-- capture_breaks.lua: graph breaks of kiln.compile held to docs/messages.md:
-- one case per break kind (`<`, `<=`, :item(), :tolist(), tostring, x:nonzero(),
-- kiln.graph_break(), kiln.eager) with the exact message, the cm:breaks()
-- fields and the results of the uncompiled function; KILN_LOGS=graph_breaks
-- (a child kiln process), fullgraph = true, and kiln.explain's report and
-- text on a function with several breaks. The functions under test carry
-- "-- @tag" comments; the expected messages take their lines from those tags.
local T = dofile("t/lib/tap.lua")

local SRC = debug.getinfo(1, "S").short_src -- "t/capture_breaks.lua"
local LINE, _, at = T.tags()


local function cpu(shape, seed) return kiln.randn(shape, { seed = seed, device = "cpu" }) end

local function is_tensor(v) return type(v) == "userdata" and getmetatable(v).__name == "kiln.Tensor" end

-- a and b agree within tol relative to b's largest magnitude; NaN never does.
local function close(a, b, tol)
  if is_tensor(a) and is_tensor(b) then
    if table.concat(a:shape(), ",") ~= table.concat(b:shape(), ",") or a.dtype ~= b.dtype then return false end
    if a:numel() == 0 then return true end
    local d = (a:cast("f32") - b:cast("f32")):abs():amax():item()
    local m = b:cast("f32"):abs():amax():item()
    return d == d and m == m and d <= (tol or 1e-5) * math.max(1, m)
  end
  return a == b
end

local function all_close(got, want, tol)
  if got.n ~= want.n then return false end
  for i = 1, want.n do
    if not close(got[i], want[i], tol) then return false end
  end
  return true
end

-- ---- the functions under test (their lines appear in the messages) -----

local function lt_branch(x)
  local y = x * 2
  if y:sum() < 0 then -- @lt
    y = -y
  end
  return y + 1
end

local function le_branch(x)
  local m = x:amax()
  if m <= 0.5 then -- @le
    return x * 0
  end
  return x:relu()
end

local function item_scale(x)
  local m = x:abs():amax():item() -- @item
  return x / m
end

local function tolist_total(x)
  local values = (x + 1):tolist() -- @tolist
  local total = 0
  for _, v in ipairs(values) do total = total + v end
  return x * total, total
end

local function tostring_fn(x)
  local y = x:relu()
  local text = tostring(y) -- @tostring
  return y * 2, text
end

local function nonzero_fn(x)
  local idx = x:relu():nonzero() -- @nonzero
  return idx, x * 2
end

local function explicit_fn(x)
  local y = x:exp()
  kiln.graph_break() -- @explicit
  return y * 3
end

local eager_ran_with_values = 0
local function sigmoid_helper(v)
  -- would break the graph if it were captured; kiln.eager runs it as is
  eager_ran_with_values = eager_ran_with_values + (v:sum():item() == v:sum():item() and 1 or 0)
  return v:sigmoid()
end
local eager_sigmoid = kiln.eager(sigmoid_helper)
local function uses_eager(x)
  local y = x * 2
  local z = eager_sigmoid(y) -- @eager
  return z + y
end

-- Calls a compiled function from a named Lua function (not a tail call), so
-- the user stack shows the caller of the compiled function.
local function call_compiled(cm, ...)
  local r = table.pack(cm(...)) -- @call
  return table.unpack(r, 1, r.n)
end

local HINT_BRANCH = "keep the branch inside the graph with kiln.where, or move it out of the compiled function"
local HINT_READ = "keep the computation in tensor ops, or move the read out of the compiled function"
local DDCF = "data-dependent control flow"

local CASES = {
  { tag = "lt", fn = lt_branch, name = "lt_branch", category = DDCF,
    reason = "Tensor.__lt needs the value of a traced tensor", hint = HINT_BRANCH, args = { cpu({ 4, 8 }, 1) } },
  { tag = "le", fn = le_branch, name = "le_branch", category = DDCF,
    reason = "Tensor.__le needs the value of a traced tensor", hint = HINT_BRANCH, args = { cpu({ 4, 8 }, 2) } },
  { tag = "item", fn = item_scale, name = "item_scale", category = DDCF,
    reason = "Tensor.item needs the value of a traced tensor", hint = HINT_READ, args = { cpu({ 3, 5 }, 3) } },
  { tag = "tolist", fn = tolist_total, name = "tolist_total", category = DDCF,
    reason = "Tensor.tolist needs the value of a traced tensor", hint = HINT_READ, args = { cpu({ 6 }, 4) } },
  { tag = "tostring", fn = tostring_fn, name = "tostring_fn", category = DDCF,
    reason = "Tensor.__tostring needs the value of a traced tensor", hint = HINT_READ, args = { cpu({ 2, 3 }, 5) } },
  { tag = "nonzero", fn = nonzero_fn, name = "nonzero_fn", category = "unsupported op",
    reason = "Tensor.nonzero has a data-dependent output shape",
    hint = "compute a mask and use kiln.where or masked_fill instead", args = { cpu({ 3, 4 }, 6) } },
  { tag = "explicit", fn = explicit_fn, name = "explicit_fn", category = "explicit break",
    reason = "kiln.graph_break() called", hint = "remove the call to keep this code in one graph",
    args = { cpu({ 5 }, 7) } },
  { tag = "eager", fn = uses_eager, name = "uses_eager", category = "eager function",
    reason = "kiln.eager function 'sigmoid_helper' always runs uncompiled",
    hint = "drop kiln.eager to capture the function into the graph", args = { cpu({ 2, 2 }, 8) } },
}

-- The design's break message: where, reason, hint, then the user stack
-- (innermost first) as {where, function name or false for the main chunk}.
local function message(c, frames)
  local lines = {
    "Graph break in user code at " .. frames[1][1],
    "  Reason: " .. c.category .. ": " .. c.reason,
    "  Hint: " .. c.hint,
    "  User stack:",
  }
  for _, f in ipairs(frames) do
    lines[#lines + 1] = "    " .. f[1] .. (f[2] and (" in function '" .. f[2] .. "'") or " in main chunk")
  end
  return table.concat(lines, "\n") .. "\n"
end

local function frames_of(c)
  return { { at(c.tag), c.name }, { at("call"), "call_compiled" }, { at("main_call"), false } }
end

-- ---- child mode: KILN_LOGS=graph_breaks, run by the test below ----------
if arg and arg[1] == "child-logs" then
  for _, i in ipairs({ 1, 7 }) do
    local c = CASES[i]
    local cm = kiln.compile(c.fn)
    for _ = 1, 2 do call_compiled(cm, table.unpack(c.args)) end -- @child_call
  end
  os.exit(0)
end

-- ---- one case per break kind ---------------------------------------------
for _, c in ipairs(CASES) do
  local want = table.pack(c.fn(table.unpack(c.args)))
  local cm = kiln.compile(c.fn)
  local got = table.pack(call_compiled(cm, table.unpack(c.args))) -- @main_call
  T.ok(all_close(got, want), c.tag .. ": compiled results equal the uncompiled function's")
  local list = cm:breaks()
  T.is(#list, 1, c.tag .. ": one graph break")
  local b = list[1] or { stack = {} }
  T.is(b.category, c.category, c.tag .. ": category '" .. c.category .. "'")
  T.is(b.reason, c.reason, c.tag .. ": reason")
  T.is(b.where, at(c.tag), c.tag .. ": where is the line of the break")
  T.is(table.concat(b.stack, " "), at(c.tag) .. " " .. at("call") .. " " .. at("main_call"),
    c.tag .. ": stack lists file:line strings, innermost first, through the caller of the compiled function")
  T.is(b.message, message(c, frames_of(c)), c.tag .. ": the exact break message")
  -- a second call: the same results, no new distinct break, the versions reused
  local hits = cm:stats().version_hits
  local got2 = table.pack(call_compiled(cm, table.unpack(c.args)))
  T.ok(all_close(got2, want), c.tag .. ": second call gives the same results")
  T.is(#cm:breaks(), 1, c.tag .. ": cm:breaks() keeps distinct breaks (still one after two calls)")
  local reused = cm:stats().version_hits > hits and #cm:recompiles() == 0
  if c.tag == "eager" then
    local r = cm:recompiles()[1]
    T.ok(reused, c.tag .. ": second call reuses the cached versions (a tensor the eager function made is guarded by shape, not identity)")
    if not reused and r then T.diag(table.concat(r.reasons, "\n")) end
  else
    T.ok(reused, c.tag .. ": second call reuses the cached versions")
  end
end
T.is(eager_ran_with_values, 3, "the kiln.eager function ran uncompiled (its :item() did not break): once eager, twice compiled")

-- results that differ between branches: each side of `<` equals eager
do
  local cm = kiln.compile(lt_branch)
  local pos, neg = cpu({ 3 }, 11):abs() + 0.5, -(cpu({ 3 }, 12):abs() + 0.5)
  T.ok(close(cm(pos), lt_branch(pos)) and close(cm(neg), lt_branch(neg)), "both sides of a data-dependent branch equal eager")
end

-- ---- KILN_LOGS=graph_breaks: each distinct break printed once, to stderr -
do
  local kiln_bin = os.getenv("KILN") or "build/kiln"
  local p = io.popen("KILN_LOGS=graph_breaks '" .. kiln_bin .. "' " .. SRC .. " child-logs 2>&1 >/dev/null")
  local text = p:read("a")
  p:close()
  local function child(c)
    return message(c, { { at(c.tag), c.name }, { at("call"), "call_compiled" }, { at("child_call"), false } })
  end
  T.is(text, child(CASES[1]) .. child(CASES[7]), "KILN_LOGS=graph_breaks prints each break once on stderr, exact text")
  p = io.popen("KILN_LOGS= '" .. kiln_bin .. "' " .. SRC .. " child-logs 2>&1 >/dev/null")
  text = p:read("a")
  p:close()
  T.is(text, "", "without KILN_LOGS nothing is printed")
end

-- ---- fullgraph = true ---------------------------------------------------
local after_break = 0
local function fullgraph_fn(x)
  local y = x:exp()
  if y:sum() > 1 then -- @fg
    after_break = after_break + 1
  end
  return y
end
do
  local cm = kiln.compile(fullgraph_fn, { fullgraph = true })
  local x = cpu({ 4 }, 13)
  local ok, err = pcall(call_compiled, cm, x) -- @fg_call
  err = tostring(err)
  -- (the frame of call_compiled, called by pcall, is left out: see "frame names" below)
  local report = message({ category = DDCF, reason = "Tensor.__lt needs the value of a traced tensor", hint = HINT_BRANCH },
    { { at("fg"), "fullgraph_fn" } })
  T.ok(not ok, "fullgraph: the first break raises an error")
  T.ok(err:find(report, 1, true) ~= nil, "fullgraph: the error carries the break report")
  T.ok(err:find("\n    " .. at("call") .. " in function ", 1, true) ~= nil
    and err:find("\n    " .. at("fg_call") .. " in main chunk\n", 1, true) ~= nil,
    "fullgraph: the report's user stack goes on to the caller and the main chunk")
  T.like(err, "fullgraph=true", "fullgraph: the error says fullgraph is set")
  T.is(after_break, 0, "fullgraph: nothing after the break ran")
  local ok2, err2 = pcall(cm, x)
  T.ok(not ok2 and tostring(err2):find("Tensor.__lt needs the value", 1, true) ~= nil,
    "fullgraph: a second call raises the same break (the failed call left no capture open)")
  local cm2 = kiln.compile(explicit_fn, { fullgraph = true })
  T.raises(function() cm2(cpu({ 2 }, 14)) end, "explicit break: kiln%.graph_break%(%) called",
    "fullgraph: kiln.graph_break() raises too")
  local cm3 = kiln.compile(function(v) return (v * 2):relu() end, { fullgraph = true })
  local v = cpu({ 3 }, 16)
  local ok3, y3 = pcall(cm3, v)
  T.ok(ok3 and close(y3, (v * 2):relu()) and #cm3:breaks() == 0, "fullgraph: a function without breaks runs")
end

-- ---- kiln.explain on a function with several breaks ----------------------
local function several(x)
  local y = x * 2 + 1
  kiln.graph_break() -- @sev_explicit
  local z = y:relu()
  if z:sum() < 0 then z = -z end -- @sev_lt
  return z * 3
end
do
  local printed = {}
  local saved_print = print
  print = function(...)
    local t = table.pack(...)
    for i = 1, t.n do t[i] = tostring(t[i]) end
    printed[#printed + 1] = table.concat(t, "\t")
  end
  local x = cpu({ 4, 4 }, 17)
  local ok, r = pcall(kiln.explain, several, x) -- @explain_call
  print = saved_print
  T.ok(ok, "kiln.explain runs")
  r = ok and r or { ops_per_graph = {}, break_reasons = {} }
  T.is(r.graph_count, 3, "explain: graph_count 3")
  T.is(r.graph_break_count, 2, "explain: graph_break_count 2")
  T.is(r.op_count, 6, "explain: op_count 6 (mul add | relu sum lt | mul)")
  T.is(table.concat(r.ops_per_graph, ","), "2,3,1", "explain: ops_per_graph {2, 3, 1}")
  T.is(#r.break_reasons, 2, "explain: two break_reasons")
  local b1, b2 = r.break_reasons[1] or { stack = {} }, r.break_reasons[2] or { stack = {} }
  T.is(b1.category .. "|" .. b1.reason .. "|" .. b1.where, "explicit break|kiln.graph_break() called|" .. at("sev_explicit"),
    "explain: first break: category, reason, where")
  T.is(table.concat(b1.stack, " "), at("sev_explicit") .. " " .. at("explain_call"), "explain: first break's stack")
  T.is(b2.category .. "|" .. b2.reason .. "|" .. b2.where,
    DDCF .. "|Tensor.__lt needs the value of a traced tensor|" .. at("sev_lt"), "explain: second break")
  T.ok(type(r.compile_time_s) == "number" and r.compile_time_s >= 0 and r.compile_time_s < 5,
    "explain: compile_time_s is a number of seconds")
  local text = table.concat(printed, "\n")
  T.is(text, kiln.format_explain(r), "explain prints kiln.format_explain of its report")
  local lines = {}
  for l in (text .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = l end
  T.is(table.concat(lines, "\n", 1, 4), "Graph count: 3\nGraph break count: 2\nOp count: 6\nBreak reasons:",
    "explain text: counts, then 'Break reasons:'")
  local i2
  for i = 5, #lines do if lines[i]:find("^  2%. ") then i2 = i end end
  T.ok(lines[5] and lines[5]:find("  1. explicit break at " .. at("sev_explicit"), 1, true) == 1
    and lines[5]:find("kiln.graph_break() called", 1, true) ~= nil,
    "explain text: '  1. explicit break at FILE:LINE' with its reason")
  T.ok(i2 and lines[i2]:find("  2. " .. DDCF .. " at " .. at("sev_lt"), 1, true) == 1,
    "explain text: '  2. data-dependent control flow at FILE:LINE'")
  T.is(lines[#lines - 2], "Ops per graph: 2, 3, 1", "explain text: ops per graph")
  T.like(lines[#lines], "^Call time: %d+%.%d%d s = capture %d+%.%d%d", "explain text: the call's phases, last")
  T.like(lines[#lines - 1], "^Compile time: %d+%.%d%d s %(capture %d+%.%d%d, passes %d+%.%d%d, codegen %d+%.%d%d, "
    .. "backend compile %d+%.%d%d[^)]*%)?%)$", "explain text: compile time line")

  kiln.explain_quiet = true
  printed = {}
  print = function(...) printed[#printed + 1] = select("#", ...) end
  local r0 = kiln.explain(function(v) return (v + 1):exp() end, x)
  print = saved_print
  kiln.explain_quiet = nil
  T.is(#printed, 0, "explain: kiln.explain_quiet prints nothing")
  T.ok(r0.graph_count == 1 and r0.graph_break_count == 0 and r0.op_count == 2 and #r0.break_reasons == 0,
    "explain: no breaks: 1 graph, 0 breaks, 2 ops")
  T.ok(not kiln.format_explain(r0):find("Break reasons", 1, true), "explain text: no 'Break reasons:' without breaks")
  -- a table that only looks like a report: the field it lacks, by name
  local ok1, e1 = pcall(kiln.format_explain, { break_reasons = {} })
  T.ok(not ok1 and tostring(e1):find("the report's graph_count must be a number, got nil", 1, true),
    "format_explain of a partial report names the missing field: " .. tostring(e1))
  local bad = {}
  for k, v in pairs(r0) do bad[k] = v end
  bad.break_reasons = { { category = "x", where = "f.lua:1", reason = "r", stack = { {} } } }
  local ok2, e2 = pcall(kiln.format_explain, bad)
  T.ok(not ok2 and tostring(e2):find("break_reasons[1].stack[1] must be a string, got table", 1, true),
    "format_explain names a bad stack entry: " .. tostring(e2))
  kiln.explain_quiet = true
  local re = kiln.explain(function(v)
    kiln.graph_break()
    return v + 1
  end, x)
  kiln.explain_quiet = nil
  T.ok(re.graph_count == 1 and re.graph_break_count == 1 and table.concat(re.ops_per_graph, ",") == "1",
    "explain: a break before any op makes no empty graph")
end

-- ---- frame names -----------------------------------------------------------
local function break_inside(v) -- @pcall_def
  kiln.graph_break() -- @pcall_inner
  return v
end
local function through_pcall(x)
  local _, y = pcall(break_inside, x * 2) -- @pcall_outer
  return y + 1
end
do
  local cm = kiln.compile(through_pcall)
  local x = cpu({ 2 }, 18)
  T.ok(close(cm(x), through_pcall(x)), "a break inside a pcall'd function: results equal eager")
  local b = cm:breaks()[1] or { stack = {}, message = "" }
  T.is(table.concat(b.stack, " ", 1, 2), at("pcall_inner") .. " " .. at("pcall_outer"), "the stack goes through pcall")
  local inner = b.message:match("\n    " .. at("pcall_inner"):gsub("%p", "%%%0") .. " ([^\n]*)") or "?"
  T.is(inner, "in function <" .. SRC .. ":" .. LINE.pcall_def .. ">",
    "a function called through pcall is named as Lua names it, <file:line>")
end

T.done()
