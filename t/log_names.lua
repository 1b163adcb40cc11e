-- log_names.lua: the log names of KILN_LOGS and kiln.log (issue 16, item
-- 6; issue 32, item 2). KILN_LOGS=help and kiln.log{"help"} list every name
-- with one line, and KILN_LOGS=help then ends the program (status 0); an
-- unknown name in KILN_LOGS is a warning and in kiln.log an error, each
-- naming all the valid ones and the one a typo meant; every listed name is
-- accepted by both.
local T = dofile("t/lib/tap.lua")
local KILN = os.getenv("KILN") or "build/kiln"

local function run(cmd)
  local p = io.popen(cmd)
  local out = p:read("a")
  local _, _, status = p:close()
  return out, status
end

local NAMES = { "graph_breaks", "recompiles", "guards", "fusion", "kernels", "passes", "cudagraphs", "autotune",
  "onnx", "library", "nvrtc", "all", "help" }
local LIST = table.concat(NAMES, ", ")

local help, help_status = run("KILN_LOGS=help " .. KILN .. " -e 'io.write(\"ran\")' 2>/dev/null")
T.like(help, "^kiln logs %(KILN_LOGS=name,name or kiln%.log{\"name\", %.%.%.}%):\n", "KILN_LOGS=help: a title, on stdout")
T.ok(not help:find("ran", 1, true), "KILN_LOGS=help: the list is all; the program does not run on")
T.is(help_status, 0, "KILN_LOGS=help: exits with status 0")
T.is(select(2, run("KILN_LOGS=fusion,help " .. KILN .. " -e 'os.exit(3)' 2>&1")), 0,
  "KILN_LOGS=fusion,help: help among other names exits 0 too")
local lines = {}
for name, what in help:gmatch("\n  (%S+) +([^\n]+)") do lines[#lines + 1] = { name, what } end
T.is(#lines, #NAMES, "KILN_LOGS=help: one line per log name")
for i, want in ipairs(NAMES) do
  T.ok(lines[i] and lines[i][1] == want and #lines[i][2] > 8, "KILN_LOGS=help lists '" .. want .. "' with a description")
end
T.like(help, "\n  fusion        why two kernels are two: every edge between kernels, naming both ops and lines\n",
  "KILN_LOGS=help: the fusion line (exact text)")

local from_lua = run(KILN .. " -e 'kiln.log{\"help\"} io.write(\"ran\")' 2>&1")
T.is(from_lua, help .. "ran", "kiln.log{\"help\"} prints the same list, and the program goes on")

T.is(run("KILN_LOGS=bogus " .. KILN .. " -e 'io.write(\"ran\")' 2>&1"),
  "kiln: KILN_LOGS: unknown log 'bogus' (known: " .. LIST .. ")\nran",
  "KILN_LOGS=bogus: a warning naming every valid log, and the program runs (exact text)")
T.is(run("KILN_LOGS=fusion,grpah_breaks " .. KILN .. " -e 'io.write(\"ran\")' 2>&1"),
  "kiln: KILN_LOGS: unknown log 'grpah_breaks' (known: " .. LIST .. "); did you mean 'graph_breaks'?\nran",
  "KILN_LOGS with a typo among good names: the typo is named, with the name it meant")

local ok, err = pcall(kiln.log, { "bogus" })
T.ok(not ok, "kiln.log{\"bogus\"} is an error")
T.is(tostring(err):gsub("^.-kiln%.log", "kiln.log"), "kiln.log: unknown log 'bogus' (known: " .. LIST .. ")",
  "kiln.log{\"bogus\"}: the error names all " .. #NAMES .. " logs (exact text)")
ok, err = pcall(kiln.log, { "recompile" })
T.like(tostring(err), "^t/log_names%.lua:%d+: kiln%.log: unknown log 'recompile' %(known: .*%); did you mean 'recompiles'%?$",
  "kiln.log{\"recompile\"}: at the caller's line, with the name it meant")
ok, err = pcall(kiln.log, { "library" })
T.like(tostring(err), "kiln%.log: 'library' is read from KILN_LOGS when the process starts: run with KILN_LOGS=library$",
  "kiln.log{\"library\"}: says it is a KILN_LOGS name")
for _, name in ipairs(NAMES) do
  if name ~= "library" and name ~= "nvrtc" and name ~= "help" then
    T.ok(pcall(kiln.log, { name }), "kiln.log accepts '" .. name .. "'")
  end
end
kiln.log{ "onnx" }
T.is(kiln.log_enabled("onnx"), true, "kiln.log_enabled: true for a log kiln.log turned on")
T.is(kiln.log_enabled("fusion"), false, "kiln.log_enabled: false for one it did not")
ok, err = pcall(kiln.log_enabled, "onxx")
T.like(tostring(err), "kiln%.log_enabled: unknown log 'onxx' %(known: .*%); did you mean 'onnx'%?$",
  "kiln.log_enabled: an unknown name is an error naming it and the name it meant")
kiln.log{}
T.is(kiln.log_enabled("onnx"), false, "kiln.log{}: every log off")
T.is(run("KILN_LOGS=onnx " .. KILN .. " -e 'io.write(tostring(kiln.log_enabled(\"onnx\")))' 2>&1"), "true",
  "KILN_LOGS=onnx: kiln.log_enabled(\"onnx\") is true")
T.is(run("KILN_LOGS=fusion,recompiles,all " .. KILN .. " -e 'io.write(\"ran\")' 2>&1"), "ran",
  "KILN_LOGS with valid names prints no warning")
T.done()
