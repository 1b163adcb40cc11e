-- 30_compile.lua: kiln.explain and the report formats of docs/messages.md,
-- on top of the C compiled callable (scripting/kn_lua_compile.c).
local kiln = ...

local function fmt_s(x) return string.format("%.2f", x) end

-- "backend compile 0.00 (6 of 6 kernels from the cache)": why a backend
-- compile was short.
local function backend_text(c)
  local text = "backend compile " .. fmt_s(c.backend)
  local n, cached = c.kernels or 0, c.kernels_cached or 0
  if n > 0 and cached > 0 then
    text = text .. string.format(" (%d of %d kernel%s from the cache)", cached, n, n == 1 and "" or "s")
  end
  return text
end

-- The text kiln.explain prints for a report.
function kiln.format_explain(r)
  if type(r) ~= "table" or type(r.break_reasons) ~= "table" then
    error("kiln.format_explain: expected the report table kiln.explain returns, got " .. type(r), 2)
  end
  -- a table that only looks like a report names the field it lacks,
  -- instead of failing inside the formatting
  local function need(t, where, field, kind)
    if type(t[field]) ~= kind then
      error(string.format("kiln.format_explain: the report's %s%s must be a %s, got %s", where, field, kind,
        type(t[field])), 3)
    end
  end
  for _, f in ipairs({ "graph_count", "graph_break_count", "op_count", "compile_time_s" }) do need(r, "", f, "number") end
  need(r, "", "ops_per_graph", "table")
  need(r, "", "compile_s", "table")
  for _, f in ipairs({ "capture", "passes", "codegen", "backend" }) do need(r.compile_s, "compile_s.", f, "number") end
  for i, b in ipairs(r.break_reasons) do
    local where = string.format("break_reasons[%d].", i)
    if type(b) ~= "table" then
      error(string.format("kiln.format_explain: the report's break_reasons[%d] must be a table, got %s", i, type(b)), 2)
    end
    for _, f in ipairs({ "category", "where", "reason" }) do need(b, where, f, "string") end
    need(b, where, "stack", "table")
    for j, w in ipairs(b.stack) do
      if type(w) ~= "string" then
        error(string.format("kiln.format_explain: the report's %sstack[%d] must be a string, got %s", where, j, type(w)), 2)
      end
    end
  end
  local lines = {
    "Graph count: " .. r.graph_count,
    "Graph break count: " .. r.graph_break_count,
    "Op count: " .. r.op_count,
  }
  -- a training step: how many of the graphs hold forward ops and how many
  -- backward ops (a joint graph holds both)
  if math.type(r.backward_graphs) and r.backward_graphs > 0 then
    lines[#lines + 1] = string.format("Forward graphs: %d, backward graphs: %d", r.forward_graphs or 0, r.backward_graphs)
  end
  if #r.break_reasons > 0 then
    lines[#lines + 1] = "Break reasons:"
    for i, b in ipairs(r.break_reasons) do
      lines[#lines + 1] = string.format("  %d. %s at %s: %s", i, b.category, b.where, b.reason)
      for j, w in ipairs(b.stack) do
        if j > 1 then lines[#lines + 1] = "       from " .. w end
      end
    end
  end
  local ops = {}
  for i, n in ipairs(r.ops_per_graph) do ops[i] = tostring(n) end
  lines[#lines + 1] = "Ops per graph: " .. (#ops > 0 and table.concat(ops, ", ") or "none")
  local c = r.compile_s
  lines[#lines + 1] = string.format("Compile time: %s s (capture %s, passes %s, codegen %s, %s)",
    fmt_s(r.compile_time_s), fmt_s(c.capture), fmt_s(c.passes), fmt_s(c.codegen), backend_text(c))
  if type(r.phases) == "table" then lines[#lines + 1] = kiln.format_phases(r.phases, "Call time") end
  return table.concat(lines, "\n")
end

-- The phases of a call (cm:last_call().phases, cm:stats().first_call), in
-- the order a first call meets them, as one line: "TITLE: 4.21 s = start-up
-- 0.61 + capture 1.20 + ...", the phases adding up to the total.
local PHASES = {
  { "startup", "CUDA/cuDNN/cuBLASLt start-up" }, { "capture", "capture" }, { "passes", "passes" },
  { "source", "kernel source" }, { "nvrtc", "kernel compile" }, { "library_plans", "cuDNN/cuBLASLt plans" },
  { "autotune", "autotune" }, { "run", "run" },
}
function kiln.format_phases(p, title)
  if type(p) ~= "table" then
    error("kiln.format_phases: expected the phases of a call (cm:stats().first_call, cm:last_call().phases), got "
      .. type(p), 2)
  end
  if title ~= nil and type(title) ~= "string" then error("kiln.format_phases: title must be a string, got " .. type(title), 2) end
  title = title or "Call time"
  local parts, sum = {}, 0
  for _, ph in ipairs(PHASES) do
    local v = math.type(p[ph[1]]) and p[ph[1]] or 0
    sum = sum + v
    if v >= 0.0005 then parts[#parts + 1] = string.format("%s %s", ph[2], fmt_s(v)) end
  end
  return string.format("%s: %s s = %s", title, fmt_s(math.type(p.total) and p.total or sum), #parts > 0 and table.concat(parts, " + ") or "0")
end

-- kiln.explain(fn_or_module, ...): run once under capture and report the
-- graphs and breaks (docs/messages.md). Prints the report unless
-- kiln.explain_quiet is set, and returns it.
function kiln.explain(fn, ...)
  local cm = kiln.compile(fn)
  cm(...)
  local r = cm:last_call()
  local c = r.compile_s
  -- all of the call's capture and compile work; the phases are parts of it
  r.compile_time_s = c.total or (c.capture + c.passes + c.codegen + c.backend)
  if not kiln.explain_quiet then print(kiln.format_explain(r)) end
  return r
end
