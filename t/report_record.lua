-- report_record.lua: the session report as a debugging record (issue 32,
-- item 5) and the compile trace (item 6). A script compiles one function
-- three times, recompiles on a shape change, breaks, fails inside a
-- compiled call and leaves a function never called; its report has the
-- failure with its message, the compile timeline with the recompile's
-- reason, the three compiles folded into one row, the never-called one
-- apart, and the current model first. Run with KILN_TRACE=DIR, the same
-- events are JSON lines that kiln.report_from_trace and `kiln report DIR`
-- turn into a page.
local T = dofile("t/lib/tap.lua")
local KILN = os.getenv("KILN") or "build/kiln"
local R = kiln._report

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))

local script = dir .. "/job.lua"
local f = assert(io.open(script, "w"))
f:write([[
local nn = kiln.nn
local fc = nn.Linear(8, 4)
local function forward(x) return fc(x):relu() end
for _ = 1, 3 do
  local cm = kiln.compile(forward)
  cm(kiln.randn({2, 8}))
end
local cm = kiln.compile(forward)
cm(kiln.randn({2, 8}))
cm(kiln.randn({5, 8}))                    -- a shape change: a recompile
local function breaks(x) if x:sum():item() > 0 then return x * 2 end return x end
kiln.compile(breaks)(kiln.randn({4}))
local unused = kiln.compile(function(x) return x + 1 end)
local function bad(x) return x:matmul(kiln.randn({3, 3})) end
local ok, err = pcall(kiln.compile(bad), kiln.randn({2, 8}))
assert(not ok)
kiln.session.compiled = cm                -- the current model, as the REPL sets it
kiln.report(arg[1])
]])
f:close()

local html_path = dir .. "/report.html"
local out = T.output(string.format("KILN_TRACE='%s/trace' %s %s '%s' 2>&1", dir, KILN, script, html_path))
T.is(out, "", "the job runs without a message")
local fh = assert(io.open(html_path, "rb"))
local html = fh:read("a")
fh:close()

local failures = html:match('<h2 id="failures">Failures</h2>(.-)<h2')
T.ok(failures and failures:find("1 compiled call failed", 1, true), "Failures: the failed call is counted")
T.ok(failures and failures:find("matmul", 1, true) and failures:find("job.lua:14", 1, true),
  "Failures: the error's message and its line (job.lua:14)")
T.ok(failures and failures:find(">bad<", 1, true), "Failures: the function that failed is named")

local timeline = html:match('<h2 id="timeline">Compile timeline</h2>(.-)<h2')
T.ok(timeline and timeline:find("first compile", 1, true), "timeline: the first compiles")
T.ok(timeline and timeline:find("recompile: ", 1, true) and timeline:find("dim 1", 1, true),
  "timeline: the recompile with the guard that failed (dim 1)")
T.ok(timeline and timeline:find("graph break at ", 1, true), "timeline: the graph break")
T.ok(timeline and timeline:find("kernel source", 1, true) or timeline:find("capture", 1, true),
  "timeline: each compile's phases")

local summary = html:match('<h2 id="summary">Summary</h2>(.-)<h2')
T.ok(summary ~= nil, "a summary")
local first_row = summary and summary:match("<tbody><tr>(.-)</tr>")
T.ok(first_row and first_row:find("▶ forward", 1, true), "the current model's row comes first (▶)")
T.ok(first_row and first_row:find('<td>live</td>', 1, true) and first_row:find('<td>default</td><td class="num">4</td>', 1, true),
  "... with its 4 compiles folded into one row")
local apart = summary and summary:match("<details><summary>(.-)</summary>")
T.like(apart or "", "^1 more function: kiln&#39;s own or never called$", "the never-called function is apart, collapsed")
T.ok(html:find("compiled 4 times; the latest is shown", 1, true), "the function's section says how many compiles")
T.ok(html:find("<td>bad</td>", 1, true) and html:find("its last call failed", 1, true),
  "the failed function says its last call failed, not 'not called yet'")

-- the trace files
local p = io.popen("ls '" .. dir .. "/trace'")
local files = {}
for name in p:lines() do files[#files + 1] = name end
p:close()
T.is(#files, 1, "KILN_TRACE: one file for the process")
T.like(files[1] or "", "^kiln%-trace%-.*%.jsonl$", "KILN_TRACE: named kiln-trace-*.jsonl")
local counts = {}
for line in io.lines(dir .. "/trace/" .. (files[1] or "none")) do
  local ev = kiln._json_decode(line)
  if ev then counts[ev.event] = (counts[ev.event] or 0) + 1 end
end
T.is(counts.session, 1, "the trace starts with a session line")
T.is(counts.failure, 1, "the trace has the failure")
T.ok((counts.compile or 0) >= 6, "the trace has every compile (" .. tostring(counts.compile) .. ")")
T.is(counts["break"], 1, "the trace has the break")
local with_kernels = false
for line in io.lines(dir .. "/trace/" .. (files[1] or "none")) do
  local ev = kiln._json_decode(line)
  if ev and ev.event == "compile" and type(ev.kernel_list) == "table" and ev.kernel_list[1]
    and type(ev.kernel_list[1].name) == "string" then with_kernels = true end
end
T.ok(with_kernels, "a compile event lists the version's kernels by name")

local page = kiln.report_from_trace(dir .. "/trace", dir .. "/from_trace.html")
fh = assert(io.open(page, "rb"))
local th = fh:read("a")
fh:close()
T.ok(th:find("matmul", 1, true) and th:find('<h2 id="timeline">', 1, true), "kiln.report_from_trace: the failure and the timeline")
T.like(T.output(string.format("%s report '%s/trace' '%s/cli.html' 2>&1", KILN, dir, dir)), "^wrote .*cli%.html\n$",
  "`kiln report DIR OUT` writes the page")
T.raises(function() kiln.report_from_trace(dir, dir .. "/x.html") end, "no kiln%-trace%-%*%.jsonl in",
  "a folder without trace files: the error says what to run")
os.execute("rm -rf '" .. dir .. "'")
T.done()
