-- report.lua: the session report (kiln.report, :report, KILN_REPORT) held
-- to issue 16 item 8, by parsing the HTML it writes:
--  * well-formed enough: every tag closed in order (void and self-closed
--    elements aside), every '<' starts a tag, a comment or the doctype;
--  * self-contained: no scripts, no external resources;
--  * for samples/breaks.lua compiled, called and timed: the summary row and
--    a section with each break (line, reason, hint), each guard of each
--    version, each kernel with its generated source, the timing rows, the
--    compile-time phases and cache figures, and both graph views as SVG,
--    each value taken from the callable's own API (cm:breaks(), ...);
--  * a function collected before the report is still there, marked so,
--    with its kernels;
--  * user strings are escaped (a source file named evil<b>&"x'.lua);
--  * a path that cannot be written is an error naming it, from Lua, from
--    :report (the session goes on), and from KILN_REPORT at exit;
--  * KILN_REPORT=file writes the report when a script ends.
local T = dofile("t/lib/tap.lua")

local cpu = function(shape, seed) return kiln.randn(shape, { seed = seed, device = "cpu" }) end
local tmpdir = os.tmpname()
os.remove(tmpdir)
assert(os.execute("mkdir -p '" .. tmpdir .. "'"))
local function cleanup() os.execute("rm -rf '" .. tmpdir .. "'") end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local ESC = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }
-- the escaping any correct HTML writer gives (written here, not taken from kiln)
local function esc(s) return (tostring(s):gsub("[&<>\"']", ESC)) end
local function has(html, s) return html:find(s, 1, true) ~= nil end

local VOID = { area = true, base = true, br = true, col = true, embed = true, hr = true, img = true, input = true,
  link = true, meta = true, source = true, track = true, wbr = true }

-- nil when the tags balance, else the first problem.
local function tag_problem(html)
  local stack, i = {}, 1
  while true do
    local lt = html:find("<", i, true)
    if not lt then break end
    if html:sub(lt, lt + 3) == "<!--" then
      local close = html:find("-->", lt + 4, true)
      if not close then return "a comment that never ends at byte " .. lt end
      i = close + 3
    elseif html:sub(lt, lt + 1) == "<!" or html:sub(lt, lt + 1) == "<?" then
      local gt = html:find(">", lt, true)
      if not gt then return "an unterminated declaration" end
      i = gt + 1
    else
      local slash, name = html:match("^<(/?)([%a][%w:%-]*)", lt)
      if not name then return string.format("a bare '<' at byte %d: %q", lt, html:sub(lt, lt + 30)) end
      -- the tag ends at the first '>' outside quotes
      local j, quote = lt + 1, nil
      while j <= #html do
        local c = html:sub(j, j)
        if quote then
          if c == quote then quote = nil end
        elseif c == '"' or c == "'" then
          quote = c
        elseif c == ">" then
          break
        end
        j = j + 1
      end
      if j > #html then return "an unterminated tag <" .. name end
      local self_closed = html:sub(j - 1, j - 1) == "/"
      name = name:lower()
      if slash == "/" then
        local top = table.remove(stack)
        if top ~= name then
          return string.format("</%s> closes <%s> at byte %d", name, tostring(top), lt)
        end
      elseif not self_closed and not VOID[name] then
        stack[#stack + 1] = name
      end
      i = j + 1
    end
  end
  if #stack > 0 then return "unclosed <" .. table.concat(stack, "> <") .. ">" end
  return nil
end

local function well_formed(html, what)
  local p = tag_problem(html)
  T.ok(p == nil, what .. ": tags balance" .. (p and (" (" .. p .. ")") or ""))
  local lower = html:lower()
  T.ok(not lower:find("<script", 1, true) and not lower:find("<link", 1, true) and not lower:find("src=", 1, true)
    and not lower:find("@import", 1, true) and not lower:find("href=\"http", 1, true)
    and not lower:find("url(", 1, true), what .. ": no scripts, no external resources")
end

-- The checker itself must catch what it is for.
T.ok(tag_problem("<p><b>x</p>") ~= nil, "checker: misnested tags are caught")
T.ok(tag_problem("<p>a < b</p>") ~= nil, "checker: a bare '<' is caught")
T.ok(tag_problem("<p>x<br><img src=\"a\"/></p>") == nil, "checker: void and self-closed elements pass")

---------------------------------------------------------------------------
-- samples/breaks.lua, compiled, called, timed

kiln.session.small = false
local spec = kiln.load("samples/breaks.lua", { quiet = true })
spec.model:to("cpu") -- the inputs here are on the CPU, also on a GPU machine
local cm = kiln.compile(spec.model)
local x = cpu({ 8, 16 }, 1)
cm(x)
cm(x)
local timing = kiln.time(cm, x, { iters = 3, warmup = 1, profile_iters = 2 })
local path = tmpdir .. "/breaks.html"
T.is(kiln.report(path), path, "kiln.report returns the path")
local html = read(path)
T.ok(html ~= nil and #html > 1000, "the report was written")
html = html or ""
well_formed(html, "breaks.lua")
T.ok(has(html, "<!DOCTYPE html>") and has(html, '<meta charset="utf-8">'), "a UTF-8 HTML5 page")
T.ok(has(html, "REPL session: model breaks from samples/breaks.lua, mode eager"), "the REPL session's model and mode")
T.ok(has(html, 'id="summary"') and has(html, 'id="fn-1"'), "the summary and the function's section")
T.ok(has(html, esc("1. forward (samples/breaks.lua:42), mode default")), "the function by name, line and mode")
for _, h4 in ipairs({ "Compile time and caches", "Graph breaks (1)", "Recompiles (0)", "Guards (3 versions)",
  "Kernels (" .. #cm:kernels() .. ")", "Timings", "Graphs" }) do
  T.ok(has(html, "<h4>" .. esc(h4) .. "</h4>"), "section " .. h4)
end

local b = cm:breaks()[1]
T.is(b.where, "samples/breaks.lua:14", "the sample breaks at line 14 (what the report must show)")
T.ok(has(html, "<td>" .. esc(b.where) .. "</td>") and has(html, "<td>" .. esc(b.reason) .. "</td>")
  and has(html, "<td>" .. esc(b.hint) .. "</td>"), "the break's line, reason and hint are table cells")
T.ok(has(html, esc(table.concat(b.stack, " <- "))), "the break's user stack")
T.ok(has(html, esc((b.message:gsub("\n+$", "")))), "the break's message as printed")

local missing = {}
for _, v in ipairs(cm:guards()) do
  for _, g in ipairs(v.guards) do
    if not has(html, esc(g)) then missing[#missing + 1] = g end
  end
end
T.is(#missing, 0, "every guard of every version is there" .. (missing[1] and (": missing " .. missing[1]) or ""))

local kernels, sources, nsrc = cm:kernels(), 0, 0
missing = {}
for i, k in ipairs(kernels) do
  if not has(html, "<td>" .. esc(k.name) .. "</td>") then missing[#missing + 1] = k.name end
  if k.source then
    nsrc = nsrc + 1
    if has(html, esc(string.format("source of kernel %d, %s", i, k.name))) and has(html, esc(k.source)) then
      sources = sources + 1
    end
  end
end
T.is(#missing, 0, "every kernel is listed" .. (missing[1] and (": missing " .. missing[1]) or ""))
T.ok(nsrc > 0 and sources == nsrc, string.format("every generated kernel's source (%d of %d)", sources, nsrc))
T.ok(has(html, '<tr><td class="num">1</td><td class="num">' .. (kernels[1].graph or 0) .. "</td><td>"
  .. esc(kernels[1].name) .. "</td>"), "the kernels are numbered from 1, as :kernels numbers them")
T.ok(has(html, esc(cm:source("c"))), "the whole program as cm:source(\"c\") gives it")

local trows = 0
for _, k in ipairs(timing.kernels) do
  if has(html, "<td class=\"num\">" .. tostring(k.number) .. "</td><td>" .. esc(k.name) .. "</td><td>" .. esc(k.kind)
      .. "</td><td class=\"num\">" .. k.calls
      .. "</td><td class=\"num\">" .. string.format("%.2f", k.median_us) .. "</td>") then
    trows = trows + 1
  end
end
T.ok(#timing.kernels > 0 and trows == #timing.kernels,
  string.format("every timed kernel's row with its number and median (%d of %d)", trows, #timing.kernels))

local st = cm:stats()
T.ok(has(html, "<td>calls</td><td>" .. st.calls .. "</td>"), "the call count")
T.ok(has(html, string.format("<td>capture (s)</td><td>%.3f</td>", st.compile_s.capture))
  and has(html, string.format("<td>backend compile (s)</td><td>%.3f</td>", st.compile_s.backend)),
  "compile time by phase")
T.ok(has(html, string.format("<td>%d / %d</td>", st.cache_hits, st.cache_misses)), "the kernel cache hits and misses")
T.ok(has(html, "<td>" .. esc(st.replayable) .. "</td>"), "why it is not replayable")
local _, nsvg = html:gsub("<svg", "")
T.is(nsvg, 2, "the captured and the fused views are inline SVG")
T.ok(not has(html, "<?xml") and not has(html, "<!DOCTYPE svg"), "the SVGs lost their file prolog")
T.ok(has(html, "k0_matmul_f32_8x16"), "the fused drawing names the kernels")

---------------------------------------------------------------------------
-- a collected function, and escaping

do
  local gone = kiln.compile(function(v) return (v * 3):relu():sum(-1) end)
  gone(cpu({ 4, 8 }, 2))
end
collectgarbage()
collectgarbage()

local evil_name = "evil<b>&\"x'.lua"
local chunk = assert(load([[
return function(v)
  local h = v:relu()
  if h:sum() > 0 then h = h * 2 end -- a break, at this file's line 3
  return h
end]], "@" .. evil_name))
local evil = kiln.compile(chunk())
evil(cpu({ 3 }, 3))
local path2 = tmpdir .. "/evil.html"
kiln.report(path2)
local html2 = read(path2) or ""
well_formed(html2, "escaping")
T.ok(has(html2, esc(evil_name .. ":3")) and not has(html2, "evil<b>"), "a file name with < & \" ' is escaped")
T.ok(has(html2, "collected</span>"), "the collected function is marked collected")
T.ok(has(html2, "<td>k0_mul_relu_sum_f32_4</td>"), "the collected function keeps its kernels")
T.ok(has(html2, "the function was collected before the report"), "and says why it has no drawing")
T.ok(has(html2, 'id="fn-' .. 3 .. '"'), "each function has its own section")

-- only the latest few collected functions keep their details
local keep = kiln._report.detailed_collected
kiln._report.detailed_collected = 1
for i = 1, 2 do
  local c = kiln.compile(function(v) return v - i end)
  c(cpu({ 2 }, 10 + i))
  c = nil -- luacheck: ignore
  collectgarbage()
  collectgarbage()
end
local trimmed = kiln._report.html()
kiln._report.detailed_collected = keep
T.ok(has(trimmed, "guards, kernels, timings and graphs dropped: only the latest 1 collected functions keep them"),
  "an older collected function is trimmed, and says so")
well_formed(trimmed, "trimmed")

---------------------------------------------------------------------------
-- a recompile with its failed guard, and max-autotune's choices

local rc = kiln.compile(function(v) return v * 2 end, { dynamic = false })
rc(cpu({ 2 }, 4))
rc(cpu({ 3 }, 5))
local tuned = kiln.compile(function(v) return (v * 3):relu():sum(-1) end, { mode = "max-autotune" })
tuned(cpu({ 4, 64 }, 6))
local path3 = tmpdir .. "/more.html"
kiln.report(path3)
local html3 = read(path3) or ""
well_formed(html3, "recompile and autotune")
local rcs = rc:recompiles()
T.is(#rcs, 1, "the shape change recompiled once (what the report must show)")
T.ok(has(html3, "<h4>Recompiles (1)</h4>") and has(html3, esc(rcs[1].reasons[1])),
  "the recompile with its failed guard: " .. tostring(rcs[1].reasons[1]))
local choices = tuned:autotune()
if #choices == 0 then
  T.n = T.n + 1
  io.write("ok " .. T.n .. " # skip autotune section: no tunable kernels on this device\n")
else
  local shown = 0
  for _, k in ipairs(choices) do
    if has(html3, "<td>" .. esc(k.name) .. "</td><td>" .. esc(k.label) .. "</td>") then shown = shown + 1 end
  end
  T.ok(has(html3, "<h4>Autotune choices (" .. #choices .. ")</h4>") and shown == #choices,
    string.format("max-autotune's choice of each kernel (%d of %d)", shown, #choices))
end

---------------------------------------------------------------------------
-- paths that cannot be written

local bad = tmpdir .. "/no/such/dir/r.html"
T.raises(function() kiln.report(bad) end, "kiln%.report: cannot write '" .. bad:gsub("%p", "%%%0") .. "': No such file",
  "kiln.report names the path it cannot write")
T.raises(function() kiln.report(42) end, "argument 1 must be the output file name", "a path that is not a string")
T.raises(function() kiln.report(tmpdir .. "/x") end, "give a file name ending in %.html, got '.*/x'",
  "a name that is not an HTML page's is refused")
T.ok(read(tmpdir .. "/x") == nil, "and nothing is written")
local ok, err = pcall(kiln.repl.command, ":report " .. bad)
T.ok(not ok and tostring(err) == "cannot write '" .. bad .. "': No such file or directory",
  ":report names the path, one line: " .. tostring(err))
T.ok(pcall(kiln.repl.command, ":report " .. tmpdir .. "/again.html") and read(tmpdir .. "/again.html") ~= nil,
  "the session goes on: the next :report writes")
local okh, herr = pcall(kiln.repl.command, ":report")
T.ok(not okh and tostring(herr):find("usage: :report FILE.html", 1, true) ~= nil, ":report with no file: usage")

---------------------------------------------------------------------------
-- KILN_REPORT at exit, in a child kiln

local kiln_prog = arg[-1]
local script = tmpdir .. "/child.lua"
local f = assert(io.open(script, "w"))
f:write("local cm = kiln.compile(function(v) return v * 5 end, {mode = 'default'})\n",
  "cm(kiln.randn({2}, {device = 'cpu'}))\n")
f:close()
local out = tmpdir .. "/exit.html"
local cmd = string.format("KILN_REPORT='%s' '%s' '%s' 2>'%s/child.err'", out, kiln_prog, script, tmpdir)
local okx = os.execute(cmd)
local exit_html = read(out) or ""
T.ok(okx and #exit_html > 0, "KILN_REPORT wrote the report when the script ended")
T.ok(has(exit_html, esc(script .. ":1")), "with the script's function")
T.like(read(tmpdir .. "/child.err") or "", "wrote the session report to " .. out:gsub("%p", "%%%0"),
  "and said where")
local okb = os.execute(string.format("KILN_REPORT='%s' '%s' '%s' 2>'%s/child.err'", bad, kiln_prog, script, tmpdir))
T.ok(not okb, "an unwritable KILN_REPORT fails the exit status")
T.like(read(tmpdir .. "/child.err") or "", "cannot write '" .. bad:gsub("%p", "%%%0") .. "'", "naming the path")

cleanup()
T.done()
