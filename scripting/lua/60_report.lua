-- 60_report.lua: the session report, one self-contained HTML page about
-- every function compiled in this Lua state (kiln.report, :report,
-- KILN_REPORT=file.html at exit), in the spirit of PyTorch's tlparse.
--
-- The registry: kiln.compile hands each new compiled callable to
-- registry["kiln.on_compiled"] (scripting/kn_lua_compile.c), which keeps an
-- entry per callable in creation order. The entry holds the callable weakly,
-- so a report does not keep models alive; a finalizer sentinel, reachable
-- only through the callable (an ephemeron table), takes a summary of it when
-- it is collected. Lua runs finalizers in the reverse order of their
-- setmetatable, and the sentinel is made after the callable, so the sentinel
-- runs first, while the callable's own __gc has not freed it yet.
--
-- The page is plain HTML with inline CSS: no scripts, no external files;
-- every user string is escaped; graphs are the SVG of kiln.render inlined
-- (drawn only for callables still alive: Graphviz's layout is too slow for
-- a finalizer). Sections are <details>, so a long report stays readable.
local kiln = ...

local repl = kiln.repl
local fail = repl.error
local P = kiln.profiler
local is_compiled = repl.is_compiled

local R = kiln._report or {}
kiln._report = R
R.entries = R.entries or {}
local entries = R.entries
-- callable -> sentinel, an ephemeron: the sentinel lives as long as the callable
R.sentinels = R.sentinels or setmetatable({}, { __mode = "k" })
-- callable -> entry
R.by_compiled = R.by_compiled or setmetatable({}, { __mode = "k" })

---------------------------------------------------------------------------
-- Summaries

-- "kiln.Compiled NAME (WHERE), mode MODE" -> NAME, WHERE, MODE
local function identity(cm)
  local ok, text = pcall(tostring, cm)
  if not ok then return "?", "?", "?" end
  local name, where, mode = text:match("^kiln%.Compiled (.-) %((.*)%), mode ([%w%-]+)$")
  return name or "?", where or "?", mode or "?"
end
R.identity = identity

local function try(cm, method, ...)
  local ok, r = pcall(cm[method], cm, ...)
  if ok then return r end
  return nil
end

-- The kiln.time result (or kiln.profile rows) :time / kiln.time left for cm:
-- {rows = {...}, total = Timing or nil}.
local function timing_of(cm)
  local t = P.last_time and P.last_time[cm]
  if type(t) ~= "table" then return nil end
  if type(t.kernels) == "table" then return { rows = t.kernels, total = t } end
  return { rows = t }
end

-- What the report shows of cm, as plain tables: taken at report time for a
-- live callable, and by its sentinel when it is collected. drawings: also
-- the SVG views (live callables only).
local function summarize(cm, drawings)
  local s = {}
  s.name, s.where, s.mode = identity(cm)
  s.stats = try(cm, "stats") or {}
  s.breaks = try(cm, "breaks") or {}
  s.recompiles = try(cm, "recompiles") or {}
  s.guards = try(cm, "guards") or {}
  s.kernels = try(cm, "kernels") or {}
  s.autotune = try(cm, "autotune") or {}
  s.timing = timing_of(cm)
  if drawings then
    -- the whole program as C, and as CUDA where a GPU is the default device
    -- (a callable does not say which device its latest call ran on)
    s.programs = {}
    local okd, dev = pcall(kiln.default_device)
    for _, target in ipairs(okd and tostring(dev):match("^cuda") and { "c", "cuda" } or { "c" }) do
      local text = try(cm, "source", target)
      if type(text) == "string" and text:find("%S") then s.programs[#s.programs + 1] = { target = target, text = text } end
    end
  end
  s.views = {}
  local called = type(s.stats.calls) == "number" and s.stats.calls > 0
  for _, view in ipairs({ "captured", "fused" }) do
    local v = { view = view }
    if not called then
      v.note = "not called: nothing to draw"
    else
      local ok, outline = pcall(kiln.outline, cm, { view = view })
      v.outline = ok and outline or nil
      if drawings then
        local okr, svg = pcall(kiln.render, cm, nil, { view = view, format = "svg" })
        if okr then v.svg = svg else v.note = "not drawn: " .. tostring(svg) end
      else
        v.note = "not drawn: the function was collected before the report (its outline is kept)"
      end
    end
    s.views[#s.views + 1] = v
  end
  return s
end

-- Collected functions keep their full summary (kernel sources, outlines)
-- only for the latest few: a program that compiles thousands of short-lived
-- functions (a fuzz test, kiln.explain in a loop) must not grow without
-- bound. Older ones keep their name, line, mode, counters, breaks and
-- recompiles.
R.detailed_collected = R.detailed_collected or 32
R.detailed = R.detailed or {}

local function trim(summary)
  summary.guards, summary.kernels, summary.autotune, summary.timing = {}, {}, {}, nil
  summary.views = {}
  summary.trimmed = true
end

-- registry["kiln.on_compiled"]: a new compiled callable.
local function track(cm)
  if R.by_compiled[cm] then return end
  local entry = { index = #entries + 1, ref = setmetatable({ cm }, { __mode = "v" }) }
  entry.name, entry.where, entry.mode = identity(cm)
  entries[#entries + 1] = entry
  R.by_compiled[cm] = entry
  R.sentinels[cm] = setmetatable({ cm = cm, entry = entry }, {
    __gc = function(sentinel)
      local ok, s = pcall(summarize, sentinel.cm, false)
      sentinel.entry.summary = ok and s or { name = sentinel.entry.name, where = sentinel.entry.where,
        mode = sentinel.entry.mode, error = tostring(s) }
      sentinel.entry.collected = true
      local d = R.detailed
      d[#d + 1] = sentinel.entry
      if #d > R.detailed_collected then trim(table.remove(d, 1).summary) end
    end,
  })
end

do
  local ok, reg = pcall(debug.getregistry)
  if ok and type(reg) == "table" then reg["kiln.on_compiled"] = track end
end

---------------------------------------------------------------------------
-- HTML

local ESC = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }

-- Text for HTML content or a quoted attribute. Control characters other
-- than tab and newline (a NUL in a file name) are not allowed in HTML: they
-- become U+FFFD.
local function h(v)
  local s = tostring(v == nil and "" or v)
  s = s:gsub("[&<>\"']", ESC)
  s = s:gsub("[%z\1-\8\11\12\14-\31\127]", "\239\191\189")
  return s
end
R.escape = h

-- The <svg> element of Graphviz's output, without the XML prolog and
-- DOCTYPE that only a separate file may have.
local function svg_element(text)
  local i = text:find("<svg", 1, true)
  return i and text:sub(i) or nil
end

local function fmt_s(x)
  if type(x) ~= "number" then return "-" end
  return string.format("%.3f", x)
end

local function fmt_num(x, f)
  if type(x) ~= "number" then return "-" end
  return string.format(f or "%.1f", x)
end

local CSS = [[
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d1d1f;background:#fff;max-width:1400px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:16px;margin:0}
.meta{color:#555;margin:0 0 16px}
table{border-collapse:collapse;margin:6px 0 10px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f7f7f7;border:1px solid #e3e3e3;padding:8px;overflow:auto;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;white-space:pre}
details{margin:6px 0}
details>summary{cursor:pointer;font-weight:600}
section.fn{border:1px solid #ccc;border-radius:6px;padding:10px 14px;margin:14px 0}
section.fn>details>summary{font-size:16px}
.tag{display:inline-block;border-radius:4px;padding:0 6px;font-size:12px;font-weight:600;margin-left:6px}
.live{background:#e3f3e3;color:#1b5e20}
.dead{background:#eee;color:#555}
.warn{background:#fdecea;color:#8a1c12}
.ok{color:#1b5e20}
.note{color:#666;font-style:italic}
.svg{overflow:auto;border:1px solid #e3e3e3;padding:6px;background:#fff}
.svg svg{max-width:100%;height:auto}
]]

local Html = {}
Html.__index = Html

local function new_html() return setmetatable({ parts = {} }, Html) end
function Html:add(...) for _, p in ipairs({ ... }) do self.parts[#self.parts + 1] = p end end
function Html:text() return table.concat(self.parts) end

-- A table: head is a list of column titles, rows lists of cells (escaped
-- here); numeric[c] right-aligns column c.
function Html:table(head, rows, numeric)
  numeric = numeric or {}
  self:add("<table><thead><tr>")
  for _, c in ipairs(head) do self:add("<th>", h(c), "</th>") end
  self:add("</tr></thead><tbody>")
  for _, r in ipairs(rows) do
    self:add("<tr>")
    for c = 1, #head do
      self:add(numeric[c] and "<td class=\"num\">" or "<td>", h(r[c]), "</td>")
    end
    self:add("</tr>")
  end
  self:add("</tbody></table>")
end

function Html:pre(text) self:add("<pre>", h(text), "</pre>") end

-- <details> with a summary (escaped) and a body function.
function Html:details(summary, body, open, class)
  self:add("<details", class and (" class=\"" .. class .. "\"") or "", open and " open" or "", "><summary>", h(summary),
    "</summary>")
  body()
  self:add("</details>")
end

local function plural(n, word, many)
  return string.format("%d %s", n, n == 1 and word or (many or word .. "s"))
end

local function compile_total(c)
  if type(c) ~= "table" then return nil end
  return (c.capture or 0) + (c.passes or 0) + (c.codegen or 0) + (c.backend or 0)
end

local function section_stats(out, s)
  local st = s.stats or {}
  local c = st.compile_s or {}
  out:add("<h4>Compile time and caches</h4>")
  out:table({ "what", "value" }, {
    { "compile time (s), all phases", fmt_s(compile_total(c)) },
    { "capture (s)", fmt_s(c.capture) },
    { "passes (s)", fmt_s(c.passes) },
    { "codegen (s)", fmt_s(c.codegen) },
    { "backend compile (s)", fmt_s(c.backend) },
    { "calls", st.calls or "-" },
    { "graphs / versions", string.format("%s / %s", st.graphs or "-", st.versions or "-") },
    { "version cache hits / misses", string.format("%s / %s", st.version_hits or "-", st.version_misses or "-") },
    { "kernel cache hits / misses (persistent, whole process)",
      string.format("%s / %s", st.cache_hits or "-", st.cache_misses or "-") },
    { "kernels", st.kernels or "-" },
    { "replayable (runs without re-running Lua)", st.replayable or "-" },
    { "direct replays", st.direct_replays or "-" },
    { "CUDA graph", st.cuda_graph or "-" },
    { "eager fallbacks (cache limit)", st.eager_fallbacks or "-" },
    { "peak memory (bytes)", st.peak_bytes or "-" },
  })
end

local function section_breaks(out, s)
  local list = s.breaks or {}
  out:add("<h4>Graph breaks (", tostring(#list), ")</h4>")
  if #list == 0 then
    out:add("<p class=\"ok\">no graph breaks: one graph</p>")
    return
  end
  local rows = {}
  for i, b in ipairs(list) do
    rows[i] = { i, b.where, b.category, b.reason, b.hint, table.concat(b.stack or {}, " <- ") }
  end
  out:table({ "#", "at", "category", "reason", "hint", "user stack (innermost first)" }, rows, { true })
  out:details("messages as printed", function()
    local texts = {}
    for i, b in ipairs(list) do texts[i] = (tostring(b.message or ""):gsub("\n+$", "")) end
    out:pre(table.concat(texts, "\n\n"))
  end)
end

local function section_recompiles(out, s)
  local list = s.recompiles or {}
  out:add("<h4>Recompiles (", tostring(#list), ")</h4>")
  if #list == 0 then
    out:add("<p class=\"ok\">no recompilations</p>")
    return
  end
  local rows = {}
  for i, r in ipairs(list) do
    rows[i] = { i, r.graph, r.version, table.concat(r.reasons or {}, "\n") }
  end
  out:add("<p>Each row: the graph, the version compiled, and the guard each cached version (graph/version) failed.</p>")
  out:table({ "#", "graph", "new version", "failed guards" }, rows, { true, true, true })
end

local function section_guards(out, s)
  local list = s.guards or {}
  out:add("<h4>Guards (", plural(#list, "version"), ")</h4>")
  if #list == 0 then
    out:add("<p class=\"note\">no compiled versions</p>")
    return
  end
  for _, v in ipairs(list) do
    out:details(string.format("graph %d, version %d: %s", v.graph or -1, v.version or -1,
      plural(#(v.guards or {}), "guard")), function()
      out:pre(table.concat(v.guards or {}, "\n"))
    end)
  end
end

local function section_kernels(out, s)
  local list = s.kernels or {}
  out:add("<h4>Kernels (", tostring(#list), ")</h4>")
  if #list == 0 then
    out:add("<p class=\"note\">no kernels</p>")
    return
  end
  local rows = {}
  for i, k in ipairs(list) do
    rows[i] = { i, k.graph or 0, k.name, k.kind, k.shape_kind or "-",
      table.concat(k.ops or {}, ", ") .. (k.covers and (" = " .. k.covers) or "") }
  end
  out:table({ "#", "graph", "kernel", "kind", "group", "ops" }, rows, { true, true })
  for _, o in ipairs(list.once or {}) do
    out:add("<p>computed once per version, not per call: ", h(o.ops), " (", h(o.where or "?"), ")</p>")
  end
  for i, k in ipairs(list) do
    if k.source then
      out:details(string.format("source of kernel %d, %s", i, k.name), function() out:pre(k.source) end)
    end
  end
  for _, p in ipairs(s.programs or {}) do
    out:details(string.format("the whole program, every graph's kernels as one %s file (cm:source(\"%s\"))",
      p.target == "cuda" and "CUDA" or "C", p.target), function() out:pre(p.text) end)
  end
end

local function section_timing(out, s)
  out:add("<h4>Timings</h4>")
  local t = s.timing
  if not t then
    out:add("<p class=\"note\">not timed: run :time or kiln.time(cm, ...) before the report</p>")
    return
  end
  local rows = {}
  for i, k in ipairs(t.rows) do
    -- a compiled callable's rows carry their kernel's number (:kernels); a
    -- sub-row (work done for a kernel) has none
    local num = k.number or (k.sub and "" or (t.rows.numbered and "-" or i))
    rows[i] = { num, ((k.label or k.name):gsub("^%s+", "")), k.kind, k.calls, fmt_num(k.median_us, "%.2f"), fmt_num(k.pct), fmt_num(k.gbps),
      fmt_num(k.gflops), fmt_num(k.roof_pct, "%.0f") }
  end
  out:table({ "#", "kernel", "kind", "calls", "median us", "%", "GB/s", "GFLOP/s", "roof%" }, rows,
    { true, false, false, true, true, true, true, true, true })
  local r = t.total
  if r then
    out:add("<p>", h(string.format("total %.1f us per call (device), host overhead %.0f us, %d kernels, device %s",
      (r.median_ms or 0) * 1000, r.host_us or 0, r.launches or 0, tostring(r.device))), "</p>")
  end
end

local function section_autotune(out, s)
  local list = s.autotune or {}
  if #list == 0 then return end
  out:add("<h4>Autotune choices (", tostring(#list), ")</h4>")
  local rows = {}
  for i, k in ipairs(list) do
    local speed = (k.us and k.default_us and k.us > 0) and string.format("%.2fx", k.default_us / k.us) or "-"
    rows[i] = { k.index, k.name, k.label, fmt_num(k.us, "%.2f"), fmt_num(k.default_us, "%.2f"), speed, k.source,
      #(k.candidates or {}) }
  end
  out:table({ "#", "kernel", "choice", "us", "default us", "speedup", "from", "candidates" }, rows,
    { true, false, false, true, true, true, false, true })
end

local function section_graphs(out, s)
  out:add("<h4>Graphs</h4>")
  for _, v in ipairs(s.views or {}) do
    out:details(v.view .. " view", function()
      if v.svg then
        local el = svg_element(v.svg)
        if el then out:add("<div class=\"svg\">", el, "</div>") end
      end
      if v.note then out:add("<p class=\"note\">", h(v.note), "</p>") end
      if v.outline then out:pre(v.outline) end
    end, v.view == "captured")
  end
end

local function function_section(out, entry, s)
  local st = s.stats or {}
  local nb, nr = #(s.breaks or {}), #(s.recompiles or {})
  out:add("<section class=\"fn\" id=\"fn-", tostring(entry.index), "\">")
  out:add("<details open><summary>", h(string.format("%d. %s (%s), mode %s", entry.index, s.name or entry.name,
    s.where or entry.where, s.mode or entry.mode)), "</summary>")
  out:add("<p>", entry.collected and "<span class=\"tag dead\">collected</span>" or "<span class=\"tag live\">live</span>")
  if nb > 0 then out:add("<span class=\"tag warn\">", h(plural(nb, "graph break")), "</span>") end
  if nr > 0 then out:add("<span class=\"tag warn\">", h(plural(nr, "recompile")), "</span>") end
  if (st.eager_fallbacks or 0) > 0 then out:add("<span class=\"tag warn\">eager fallbacks</span>") end
  out:add("</p>")
  if s.error then out:add("<p class=\"note\">summary failed: ", h(s.error), "</p>") end
  section_stats(out, s)
  section_breaks(out, s)
  section_recompiles(out, s)
  if s.trimmed then
    out:add("<p class=\"note\">", h(string.format("guards, kernels, timings and graphs dropped: only the latest %d "
      .. "collected functions keep them", R.detailed_collected)), "</p>")
  else
    section_guards(out, s)
    section_kernels(out, s)
    section_timing(out, s)
    section_autotune(out, s)
    section_graphs(out, s)
  end
  out:add("</details></section>")
end

-- The summaries of every entry: live callables now (with drawings),
-- collected ones as their sentinel left them.
local function gather()
  local list = {}
  for _, e in ipairs(entries) do
    local cm = e.ref[1]
    local s
    if cm ~= nil and not e.collected then
      local ok, r = pcall(summarize, cm, true)
      s = ok and r or { error = tostring(r) }
    else
      s = e.summary or { error = "no summary was kept" }
    end
    list[#list + 1] = { entry = e, summary = s }
  end
  return list
end

-- ---- the record: failures and the compile timeline (61_events.lua's events)

local function phases_text(p)
  if type(p) ~= "table" or type(kiln.format_phases) ~= "function" then return "-" end
  local ok, line = pcall(kiln.format_phases, p, "")
  return ok and (line:gsub("^: ", "")) or "-"
end

local function section_failures(out, evs)
  local rows = {}
  for _, e in ipairs(evs) do
    if e.event == "failure" then
      rows[#rows + 1] = { fmt_s(e.t), tostring(e.fn), tostring(e.where), tostring(e.mode), tostring(e.message) }
    end
  end
  out:add("<h2 id=\"failures\">Failures</h2>")
  if #rows == 0 then
    out:add("<p class=\"ok\">no compiled call failed</p>")
    return
  end
  out:add("<p>", h(plural(#rows, "compiled call") .. " failed; each message says where (file:line) and why:"), "</p>")
  out:table({ "t s", "function", "defined at", "mode", "error" }, rows, { true })
end

local function section_timeline(out, evs)
  local rows = {}
  for _, e in ipairs(evs) do
    if e.event == "compile" or e.event == "break" then
      local what = e.event == "break" and string.format("graph break at %s: %s", tostring(e.at), tostring(e.reason))
        or e.kind == "recompile" and ("recompile: " .. table.concat(e.reasons or { "?" }, "; "))
        or "first compile"
      rows[#rows + 1] = { fmt_s(e.t), tostring(e.fn), tostring(e.mode), what,
        e.event == "compile" and fmt_s(e.phases and e.phases.total or e.compile_s) or "",
        e.event == "compile" and string.format("%s (%s cached)", tostring(e.kernels or "-"), tostring(e.kernels_cached or "-")) or "",
        e.event == "compile" and phases_text(e.phases) or "" }
    end
  end
  out:add("<h2 id=\"timeline\">Compile timeline</h2>")
  if #rows == 0 then
    out:add("<p class=\"note\">nothing compiled yet</p>")
    return
  end
  out:add("<p>", h("every call that compiled (its phases add up to the call) and every graph break, in order; "
    .. "t is seconds since the session started"), "</p>")
  out:table({ "t s", "function", "mode", "what", "call s", "kernels", "phases" }, rows, { true, false, false, false, true })
end

-- A page from trace events (kiln.report_from_trace): the functions seen,
-- the failures and the timeline.
function R.trace_html(evs, files)
  local out = new_html()
  out:add("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
    "<title>kiln trace report</title><style>", CSS, "</style></head><body>")
  out:add("<h1>kiln trace report</h1>")
  out:add("<p class=\"meta\">", h(string.format("%s from %s", plural(#evs, "event"), table.concat(files, ", "))), "</p>")
  local fns, order = {}, {}
  for _, e in ipairs(evs) do
    if e.fn then
      local key = tostring(e.fn) .. "|" .. tostring(e.where) .. "|" .. tostring(e.mode)
      if not fns[key] then
        fns[key] = { e.fn, e.where, e.mode, 0, 0, 0, 0 }
        order[#order + 1] = key
      end
      local r = fns[key]
      if e.event == "compile" then r[4] = r[4] + 1 end
      if e.event == "compile" and e.kind == "recompile" then r[5] = r[5] + 1 end
      if e.event == "break" then r[6] = r[6] + 1 end
      if e.event == "failure" then r[7] = r[7] + 1 end
    end
  end
  local rows = {}
  for i, key in ipairs(order) do rows[i] = fns[key] end
  out:add("<h2 id=\"summary\">Functions</h2>")
  out:table({ "function", "defined at", "mode", "compiles", "recompiles", "breaks", "failures" }, rows,
    { false, false, false, true, true, true, true })
  section_failures(out, evs)
  section_timeline(out, evs)
  out:add("</body></html>\n")
  return out:text()
end

-- The entries in the order a debugging session reads them: the session's
-- current model first, then the newest; compiles of one function (same
-- name, line and mode) folded into one group; kiln's own functions and
-- those never called apart, collapsed.
local function arrange(list)
  local session = kiln.session or {}
  local current = {}
  for _, cm in ipairs({ session.compiled, session.inspect }) do
    if cm ~= nil and R.by_compiled[cm] then current[R.by_compiled[cm]] = true end
  end
  local groups, by_key = {}, {}
  for _, x in ipairs(list) do
    local s = x.summary
    local key = table.concat({ tostring(s.name or x.entry.name), tostring(s.where or x.entry.where),
      tostring(s.mode or x.entry.mode) }, "|")
    local g = by_key[key]
    if not g then
      g = { items = {} }
      by_key[key] = g
      groups[#groups + 1] = g
    end
    g.items[#g.items + 1] = x
    g.latest = x -- entries come in creation order
    g.current = g.current or current[x.entry]
  end
  local main, apart = {}, {}
  for _, g in ipairs(groups) do
    local s, e = g.latest.summary, g.latest.entry
    local where = tostring(s.where or e.where)
    local called = false
    for _, x in ipairs(g.items) do called = called or ((x.summary.stats or {}).calls or 0) > 0 end
    g.internal = where:match("^kiln/") ~= nil or where:match("^%[C%]") ~= nil or where == "?"
    if g.internal or not called then
      g.why_apart = g.internal and "kiln's own" or "never called"
      apart[#apart + 1] = g
    else
      main[#main + 1] = g
    end
  end
  table.sort(main, function(a, b)
    if (a.current or false) ~= (b.current or false) then return a.current == true end
    return a.latest.entry.index > b.latest.entry.index
  end)
  return main, apart
end

local function summary_rows(groups)
  local rows = {}
  for i, g in ipairs(groups) do
    local x = g.latest
    local s, st = x.summary, x.summary.stats or {}
    rows[i] = { x.entry.index, (g.current and "▶ " or "") .. tostring(s.name or x.entry.name), s.where or x.entry.where,
      s.mode or x.entry.mode, #g.items, x.entry.collected and "collected" or "live", st.calls or "-", st.graphs or "-",
      st.versions or "-", #(s.breaks or {}), #(s.recompiles or {}), st.kernels or "-",
      fmt_s(compile_total(st.compile_s)), st.replayable or "-" }
  end
  return rows
end

local function group_sections(out, groups)
  for _, g in ipairs(groups) do
    if #g.items > 1 then
      out:add("<p class=\"note\">", h(string.format("%s (%s): compiled %d times; the latest is shown", tostring(
        g.latest.summary.name or g.latest.entry.name), tostring(g.latest.summary.where or g.latest.entry.where),
        #g.items)), "</p>")
    end
    function_section(out, g.latest.entry, g.latest.summary)
  end
end

-- The whole page as a string.
function R.html()
  local list = gather()
  local out = new_html()
  local live = 0
  for _, x in ipairs(list) do if not x.entry.collected then live = live + 1 end end
  out:add("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
    "<title>kiln session report</title><style>", CSS, "</style></head><body>")
  out:add("<h1>kiln session report</h1>")
  local dev = "?"
  pcall(function() dev = kiln.default_device() end)
  out:add("<p class=\"meta\">", h(string.format("kiln %s · written %s · default device %s · %s (%d live, %d collected)",
    tostring(kiln.version), os.date("!%Y-%m-%d %H:%M:%S UTC"), dev, plural(#list, "compiled function"), live,
    #list - live)), "</p>")
  local session = kiln.session or {}
  if session.name then
    out:add("<p class=\"meta\">", h(string.format("REPL session: model %s from %s, mode %s%s", tostring(session.name),
      tostring(session.file), tostring(session.mode), session.small and ", small inputs" or "")), "</p>")
  end
  if R.trace_path then out:add("<p class=\"meta\">", h("KILN_TRACE: " .. R.trace_path), "</p>") end
  local main, apart = arrange(list)
  local head = { "#", "function", "defined at", "mode", "compiles", "state", "calls", "graphs", "versions", "breaks",
    "recompiles", "kernels", "compile s", "replayable" }
  local numeric = { true, false, false, false, true, false, true, true, true, true, true, true, true }
  out:add("<h2 id=\"summary\">Summary</h2>")
  if #list == 0 then
    out:add("<p class=\"note\">no compiled functions in this session: kiln.compile(f) (or :mode default and :run) ",
      "makes one</p>")
  else
    out:add("<p class=\"note\">", h("the session's current model first (▶), then the newest; compiles of one "
      .. "function are one row (compiles)"), "</p>")
    out:table(head, summary_rows(main), numeric)
    if #apart > 0 then
      out:details(plural(#apart, "more function") .. ": kiln's own or never called", function()
        out:table(head, summary_rows(apart), numeric)
      end, false)
    end
  end
  section_failures(out, R.events or {})
  section_timeline(out, R.events or {})
  out:add("<h2 id=\"functions\">Compiled functions</h2>")
  group_sections(out, main)
  if #apart > 0 then
    out:details(plural(#apart, "more function") .. ": kiln's own or never called", function() group_sections(out, apart) end,
      false)
  end
  out:add("</body></html>\n")
  return out:text()
end

-- kiln.report(path): write the page; returns the path.
function kiln.report(path)
  if type(path) ~= "string" or path == "" then
    error(string.format("kiln.report: argument 1 must be the output file name (\"report.html\"), got %s",
      type(path) == "string" and "''" or type(path)), 2)
  end
  -- as kiln.render asks for .svg or .dot: a name that is not a page's (a
  -- stray word, a typo for another argument) must not become a file
  local ext = path:match("%.(%w+)$")
  ext = ext and ext:lower()
  if ext ~= "html" and ext ~= "htm" then
    error(string.format("kiln.report: the report is an HTML page: give a file name ending in .html, got '%s'", path), 2)
  end
  local text = R.html()
  local f, err = io.open(path, "wb")
  if not f then
    error(string.format("kiln.report: cannot write '%s': %s", path,
      tostring(err):match(": ([^:]*)$") or tostring(err)), 2)
  end
  local ok, werr = f:write(text)
  local closed, cerr = f:close()
  if not ok or not closed then
    error(string.format("kiln.report: cannot write '%s': %s", path, tostring(werr or cerr)), 2)
  end
  return path
end

-- How many compiled functions the report has (for messages).
function R.count() return #entries end

repl.register("report", {
  usage = ":report FILE.html",
  summary = "write the session report: every compiled function's graphs, breaks, guards, kernels (one HTML page)",
  help = [[
Writes one self-contained HTML page (no scripts, no external files) about
every function compiled in this session, live or already collected: the
summary table, then per function its compile time by phase and cache hits,
graph breaks with source lines and hints, recompiles with the guards that
failed, the guards of every version, the kernels with their generated
source, the timings of the latest :time or kiln.time, max-autotune's
choices, and the captured and fused graphs (SVG drawings for functions
still alive, text outlines for all). KILN_REPORT=FILE.html writes it when
kiln exits. From Lua: kiln.report(path) returns the path.]],
}, function(path)
  if path == nil or path == "" then fail("usage: :report FILE.html (the file to write)") end
  local ok, r = pcall(kiln.report, path)
  if not ok then fail("%s", (tostring(r):gsub("^kiln%.report: ", ""))) end
  print(string.format("wrote the session report: %s (%s)", r, plural(#entries, "compiled function")))
  return r
end)

---------------------------------------------------------------------------
-- KILN_REPORT=file.html: the report at exit

-- Called by the kiln program before it closes the state (repl/kn_repl.c).
-- Returns the path written, or nil when KILN_REPORT is not set.
function repl.exit_report()
  local path = os.getenv("KILN_REPORT")
  if path == nil or path == "" or R.exit_written then return nil end
  R.exit_written = true
  return kiln.report(path)
end

-- Elsewhere (require "kiln" from another program), the state's closing
-- writes it: this sentinel is made before any compiled callable, so it is
-- finalized after all of them, when each has left its summary.
if R.exit_sentinel == nil then
  R.exit_sentinel = setmetatable({}, {
    __gc = function()
      local path = os.getenv("KILN_REPORT")
      if path == nil or path == "" or R.exit_written then return end
      R.exit_written = true
      local ok, err = pcall(kiln.report, path)
      if not ok then io.stderr:write("kiln: ", tostring(err), "\n") end
    end,
  })
end
