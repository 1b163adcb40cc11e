-- autotune.lua: max-autotune's search (issue 6) on the default device (the
-- CPU's generated C kernels in CI; CUDA kernels and cuBLASLt/cuDNN variants
-- on the GPU machine): results equal eager; every tunable kernel measured,
-- with times and a winner no slower than the default; the choices saved in
-- a readable file that a second process reuses without measuring; a
-- corrupt file reported and ignored; the budget honoured; a wrong
-- candidate rejected and reported; pinning; KILN_LOGS=autotune's format;
-- the :autotune command.
local T = dofile("t/lib/tap.lua")

local KILN = os.getenv("KILN") or "build/kiln"

local function lit(s) return (tostring(s):gsub("%p", "%%%0")) end

local cache = os.tmpname()
os.remove(cache)
kiln.config.cache_dir = cache
kiln.config.autotune_budget_s = 120
local file = kiln.autotune.cache_path()
T.is(file, cache .. "/autotune.tsv", "kiln.autotune.cache_path() is autotune.tsv in kiln.config.cache_dir")

-- A small model with what kiln tunes: pointwise and row kernels, a matmul
-- (a library call), a transposed read.
local MODEL = [[
local kiln = rawget(_G, "kiln") or require("kiln")
local W = kiln.randn({64, 96}, {seed = 3})
local B = kiln.randn({96}, {seed = 4})
local function f(x)
  local h = kiln.gelu(kiln.matmul(x, W) + B)
  local s = kiln.softmax(h * 0.5, -1)
  local n = kiln.layer_norm(s + h, {96})
  return n:transpose(1, 2):contiguous() * 2 + 1
end
local x = kiln.randn({48, 64}, {seed = 5})
]]
local f, x = load(MODEL .. "\nreturn f, x")()
local ref = f(x)

local function maxdiff(a, b)
  if table.concat(a:shape(), ",") ~= table.concat(b:shape(), ",") then return math.huge end
  local d = (a:to("f32") - b:to("f32")):abs():amax():item()
  return d == d and d or math.huge -- NaN never passes
end

-- Run a kiln child on a chunk with env settings; output (stdout+stderr), status.
local function child(code, env)
  return T.child(code, { env = string.format("KILN_CACHE_DIR='%s' %s", cache, env or "") })
end

local function read_file(path)
  local fh = io.open(path, "r")
  if not fh then return nil end
  local s = fh:read("a")
  fh:close()
  return s
end

-- ---------------------------------------------------------------------------
-- The search

local cm = kiln.compile(f, { mode = "max-autotune" })
local y = cm(x)
T.ok(maxdiff(y, ref) < 1e-4, "max-autotune's first call (the search) equals eager: " .. maxdiff(y, ref))
T.ok(maxdiff(cm(x), ref) < 1e-4, "its later calls equal eager")
local st = cm:stats()
local res = cm:autotune()
T.ok(#res >= 4, "cm:autotune() lists the tunable kernels: " .. #res)
T.is(st.autotune_kernels, #res, "every tunable kernel was measured (stats.autotune_kernels)")
T.ok(st.autotune_s > 0 and st.autotune_s < 120, "stats.autotune_s is the search time: " .. st.autotune_s)
T.is(st.autotune_cache_hits, 0, "nothing came from a cache on a fresh cache dir")
local cands, all_timed, winners_ok, defaults_first = 0, true, true, true
for _, k in ipairs(res) do
  T.is(k.source, "measured", k.name .. " was measured now")
  T.ok(#k.candidates >= 2, k.name .. " had " .. #k.candidates .. " candidates")
  -- measured: those the library refused to run (a tile that does not
  -- take this layout) or the contract rejected are listed, not measured
  for _, c in ipairs(k.candidates) do
    if not (c.status and (c.status:match("^failed") or c.status:match("^rejected"))) then cands = cands + 1 end
  end
  defaults_first = defaults_first and k.candidates[1].choice == "default"
  local best
  for _, c in ipairs(k.candidates) do
    if not c.status then
      all_timed = all_timed and type(c.us) == "number" and c.us > 0 and c.reps >= 5
      best = best and math.min(best, c.us) or c.us
    end
  end
  -- the winner is the fastest, or the default when no other is 3% faster
  winners_ok = winners_ok and k.us <= k.default_us
    and ((k.choice ~= "default" and k.us == best) or (k.choice == "default" and best >= k.default_us * 0.97 - 1e-9))
end
T.ok(defaults_first, "the default is the first candidate of every kernel")
for _ = 1, 3 do cm(x) end
local graph = cm:stats().cuda_graph
if kiln.cuda_available() then
  -- recorded on the second call; kept only when replaying measured faster
  T.ok(graph == "yes" or graph:match("^no: max%-autotune measured the plain run faster %(") ~= nil,
    "max-autotune keeps its CUDA graph or says it measured the plain run faster: " .. graph)
  T.ok(maxdiff(cm(x), ref) < 1e-4, "after that choice the results equal eager")
else
  T.like(graph, "^no: ", "on the CPU there is no CUDA graph, and cm:stats() says why: " .. graph)
end
T.ok(all_timed, "every valid candidate has a median of at least 5 timed runs")
T.ok(winners_ok, "every choice is no slower than its default")
T.is(st.autotune_candidates, cands, "stats.autotune_candidates counts the measured candidates")

-- ---------------------------------------------------------------------------
-- The file

local text = read_file(file)
T.ok(text ~= nil, "the choices are saved in " .. file)
text = text or ""
T.like(text, "^# kiln autotune cache v1\n", "it starts with its magic line")
T.like(text, "\n# device %x+ = [^\n]+; kiln ", "it names the device and kiln version")
local entries = {}
for line in text:gmatch("[^\n]+") do
  if not line:match("^#") then
    local f1, f2, choice, us, dus, pinned, name = line:match("^(%x+)\t(%x+)\t([^\t]+)\t([%d%.%-]+)\t([%d%.%-]+)\t([01])\t([^\t]+)\t")
    T.ok(f1 and #f1 == 16 and #f2 == 16, "entry line has keys, choice, times, pinned, name, label: " .. line:sub(1, 80))
    if name then entries[name] = { choice = choice, us = tonumber(us), default_us = tonumber(dus) } end
  end
end
local found = 0
for _, k in ipairs(res) do
  local e = entries[k.name]
  if e and e.choice == k.choice then found = found + 1 end
end
T.ok(found >= 1 and found <= #res, "each measured kernel's choice is in the file (" .. found .. " of " .. #res
  .. "; identical kernels share one line)")

-- ---------------------------------------------------------------------------
-- A second process reuses the file without measuring

local SECOND = MODEL .. [[
local cm = kiln.compile(f, {mode = "max-autotune"})
local y = cm(x)
local st = cm:stats()
print("hits", st.autotune_cache_hits, "measured", st.autotune_kernels, "candidates", st.autotune_candidates)
local src = {}
for _, k in ipairs(cm:autotune()) do src[#src + 1] = k.name .. "=" .. k.source .. ":" .. k.choice end
print("sources", table.concat(src, ","))
print("diff", (y - f(x)):abs():amax():item())
]]
local out, rc = child(SECOND)
T.is(rc, 0, "a second process runs")
local hits = tonumber(out:match("hits\t(%d+)"))
T.ok(hits and hits == #res, "the second process takes all " .. #res .. " choices from the file: " .. tostring(hits))
T.like(out, "measured\t0\tcandidates\t0", "and measures nothing")
T.ok(not out:match("=measured"), "no kernel is measured again")
for _, k in ipairs(res) do
  T.like(out, lit(k.name .. "=cached:" .. k.choice), k.name .. " runs its saved choice " .. k.choice)
end
local d = tonumber(out:match("diff\t(%S+)"))
T.ok(d and d < 1e-4, "its results equal eager: " .. tostring(d))

-- ---------------------------------------------------------------------------
-- KILN_LOGS=autotune, a rejected candidate (KILN_AUTOTUNE_FAULT), the budget

local FRESH = MODEL .. [[
kiln.config.autotune_budget_s = tonumber(os.getenv("BUDGET") or "120")
local cm = kiln.compile(f, {mode = os.getenv("MODE") or "max-autotune"})
local y = cm(x)
local st = cm:stats()
print("measured", st.autotune_kernels, "stopped", tostring(st.autotune_stopped))
local skipped = 0
for _, k in ipairs(cm:autotune()) do
  if k.source == "skipped" then skipped = skipped + 1 end
  for _, c in ipairs(k.candidates) do
    if c.choice == k.choice and c.status then print("BAD winner was rejected", k.name) end
  end
end
print("skipped", skipped, "kernels", #cm:autotune())
print("diff", (y - f(x)):abs():amax():item())
]]
local fresh = cache .. "-fault"
out, rc = child(FRESH, "KILN_CACHE_DIR=" .. fresh .. " KILN_LOGS=autotune KILN_AUTOTUNE_FAULT=1")
T.is(rc, 0, "a search with a faulty candidate runs")
T.like(out, "autotune k%d+_[%w_]+  [^\n]-  [%d%.]+ us  100%%", "KILN_LOGS=autotune prints each kernel: winner, time, 100%")
T.like(out, "  | [^|\n]- [%d%.]+ us  %d+%%", "and the other candidates with their time and % of the winner's speed")
T.like(out, "rejected: differs from the default: element %d+", "the corrupted candidate is rejected and reported")
T.ok(not out:match("BAD winner"), "a rejected candidate never wins")
d = tonumber(out:match("diff\t(%S+)"))
T.ok(d and d < 1e-4, "results with a rejected candidate equal eager: " .. tostring(d))

out, rc = child(FRESH, "KILN_CACHE_DIR=" .. cache .. "-budget BUDGET=0")
T.is(rc, 0, "a search with no budget runs")
T.like(out, "measured\t0\tstopped\tbudget", "a zero budget measures nothing and says why (stats.autotune_stopped)")
T.like(out, "autotuning stopped at kiln%.config%.autotune_budget_s: 0 kernels measured", "and tells the user")
local sk, nk = out:match("skipped\t(%d+)\tkernels\t(%d+)")
T.ok(sk and sk == nk, "every tunable kernel keeps its default, marked skipped: " .. tostring(sk) .. "/" .. tostring(nk))
d = tonumber(out:match("diff\t(%S+)"))
T.ok(d and d < 1e-4, "results without a search equal eager: " .. tostring(d))
T.ok(read_file(cache .. "-budget/autotune.tsv") == nil, "nothing unmeasured is saved")

out, rc = child(FRESH, "KILN_CACHE_DIR=" .. cache .. "-nocg MODE=max-autotune-no-cudagraphs")
T.like(out, "measured\t[1-9]", "max-autotune-no-cudagraphs searches too")
d = tonumber(out:match("diff\t(%S+)"))
T.ok(d and d < 1e-4, "and equals eager: " .. tostring(d))

-- ---------------------------------------------------------------------------
-- A corrupt file is reported and ignored (and rewritten)

local fh = assert(io.open(file, "w"))
fh:write("# kiln autotune cache v1\nthis line is not an entry\n")
fh:close()
out, rc = child(SECOND)
T.is(rc, 0, "a process with a corrupt cache file runs")
T.like(out, "autotune cache " .. lit(file) .. " is corrupt %(line 2: 1 fields instead of 8%); it is ignored",
  "the corrupt file is reported with the line and why")
T.like(out, "hits\t0\tmeasured\t" .. #res, "its entries are ignored: the kernels are measured again")
T.like(read_file(file) or "", "^# kiln autotune cache v1\n# one line", "and the file is rewritten whole")
fh = assert(io.open(file, "w"))
fh:write("# kiln autotune cache v1\n" .. ("0"):rep(16) .. "\t" .. ("1"):rep(16) .. "\tdefault\t1.0\t1.0\t0\tk0")
fh:close()
out = child(SECOND)
T.like(out, "is corrupt %(it is truncated", "a truncated file (no end to its last line) is reported too")

-- A well-formed line whose choice its kernel cannot use (an edited file) is
-- reported once, naming the choice, the kernel and why; the kernel is
-- measured again (an unparseable choice was dropped silently)
child(SECOND) -- a whole, valid file again
local text = read_file(file) or ""
local kname
text = text:gsub("\n(%x+\t%x+\t)([^\t\n]+)(\t[^\t\n]*\t[^\t\n]*\t[01]\t)([^\t\n]*)", function(keys, _, mid, name)
  if kname then return nil end
  kname = name
  return "\n" .. keys .. "banana=7" .. mid .. name
end, 1)
fh = assert(io.open(file, "w"))
fh:write(text)
fh:close()
T.ok(kname ~= nil, "an entry's choice is edited to banana=7: " .. tostring(kname))
out, rc = child(SECOND)
T.is(rc, 0, "a process with an unusable choice runs")
local said = "autotune cache " .. lit(file) .. ": the entry for kernel " .. lit(kname or "?") ..
  " %(choice 'banana=7'%) is invalid: [^\n]*banana[^\n]*; it is ignored and the kernel is measured again"
T.like(out, said, "the unusable choice is reported with the kernel")
local _, times = out:gsub(said, "")
T.is(times, 1, "once")
T.like(out, "measured\t[1-9]", "that kernel is measured again")

-- A budget that is no number of seconds is refused by name
kiln.config.autotune_budget_s = "fast"
T.raises(function() kiln.compile(function(v) return v + 1 end, { mode = "max-autotune" })(x) end,
  "kiln%.config%.autotune_budget_s must be a number of seconds >= 0, got string", "a budget that is a string is refused")
kiln.config.autotune_budget_s = -1
T.raises(function() kiln.compile(function(v) return v + 1 end, { mode = "max-autotune" })(x) end,
  "must be a number of seconds >= 0, got number %-1", "a negative budget is refused")
kiln.config.autotune_budget_s = 120

-- A cache dir that cannot be made (a file is in the way): said once, the
-- search still serves the process
local blocker = os.tmpname()
out, rc = child(FRESH, "KILN_CACHE_DIR=" .. blocker .. "/sub")
T.is(rc, 0, "a search whose cache dir cannot be made still runs")
T.like(out, "autotune cache: cannot create " .. lit(blocker) .. "/sub: Not a directory; the autotune choices last for this process only",
  "and says once that its choices are not saved")
local _, said = out:gsub("the autotune choices last for this process only", "")
T.is(said, 1, "once, not per kernel")
d = tonumber(out:match("diff\t(%S+)"))
T.ok(d and d < 1e-4, "its results equal eager: " .. tostring(d))
os.remove(blocker)

-- ---------------------------------------------------------------------------
-- Pinning

kiln._autotune_reload()
local pick
for _, k in ipairs(res) do
  for _, c in ipairs(k.candidates) do
    if not pick and c.choice ~= k.choice and not c.status then pick = { kernel = k, choice = c.choice } end
  end
end
T.ok(pick ~= nil, "some kernel has a valid candidate that did not win")
if pick then
  local name = kiln.autotune.pin(pick.kernel.name, pick.choice, cm)
  T.is(name, pick.kernel.name, "kiln.autotune.pin(name, choice, cm) returns the kernel's name")
  T.ok(maxdiff(cm(x), ref) < 1e-4, "after pinning " .. pick.kernel.name .. " to " .. pick.choice .. " the results equal eager")
  local after
  for _, k in ipairs(cm:autotune()) do if k.name == pick.kernel.name then after = k end end
  T.is(after and after.source, "pinned", "cm:autotune() shows it pinned")
  T.is(after and after.choice, pick.choice, "with the pinned choice")
  T.like(read_file(file) or "", lit(pick.choice) .. "\t%-1%.000\t[%d%.%-]+\t1\t" .. lit(pick.kernel.name),
    "the file keeps it, marked pinned")
  local i = pick.kernel.index
  T.is(cm:kernels()[i].name, pick.kernel.name, "cm:autotune()'s index is the kernel's place in cm:kernels(), from 1")
  T.is(cm:autotune_pin(i, "default"), pick.kernel.name, "cm:autotune_pin takes that number")
  T.ok(maxdiff(cm(x), ref) < 1e-4, "back to the default, results equal eager")
end
-- A library call's candidates are "default", "variant=N" and, with a fused
-- epilogue, "unfused" (where the library has one variant for a shape,
-- "unfused" comes second); a generated kernel's are layouts ("block=128").
local gen, lib
for _, k in ipairs(res) do
  local library, knobs = false, false
  for _, c in ipairs(k.candidates) do
    if c.choice:match("^variant=") or c.choice == "unfused" then library = true
    elseif c.choice:match("^%a+=") then knobs = true end
  end
  if library then lib = lib or k elseif knobs then gen = gen or k end
end
T.ok(gen ~= nil, "some tuned kernel is a generated one, with layouts to choose")
if gen then
  T.raises(function() kiln.autotune.pin(gen.name, "warp=2", cm) end,
    "kiln%.autotune%.pin: kernel [%w_]+: choice 'warp=2' is not one of the layouts kiln searches for it on %a+: 'default', ",
    "an unknown knob of a generated kernel is refused, with the choices it takes")
  T.raises(function() kiln.autotune.pin(gen.index, "warp=2", cm) end,
    "kiln%.autotune%.pin: kernel " .. gen.index .. " %(" .. lit(gen.name) .. "%): choice 'warp=2' is not one of",
    "given by number, the message names the kernel by number and name")
end
T.raises(function() kiln.autotune.pin(0, "default", cm) end,
  "kiln%.autotune%.pin: no kernel 0: this compiled callable has kernels 1 to " .. #cm:kernels()
    .. " %(cm:kernels%(%) lists them%)", "kernel 0 is refused: numbers start at 1")
T.raises(function() kiln.autotune.pin(#cm:kernels() + 1, "default", cm) end, "no kernel " .. (#cm:kernels() + 1) .. ":",
  "a number past the last kernel is refused")
T.raises(function() kiln.autotune.pin(1.5, "default", cm) end,
  "the kernel must be its number in cm:kernels%(%) or its name, got a fraction", "a fraction is refused")
if lib then -- on the GPU: matmul runs in cuBLASLt
  T.raises(function() kiln.autotune.pin(lib.name, "block=128", cm) end, "runs in a library: its choice is 'default', 'variant=N'",
    "a library kernel takes variants only")
end
T.raises(function() kiln.autotune.pin("k99_nothing", "default", cm) end, "no kernel named 'k99_nothing'",
  "an unknown kernel is refused by name")
T.raises(function() kiln.autotune.pin(res[1].name, 3, cm) end, "choice must be a string",
  "a choice that is not a string is refused")

-- ---------------------------------------------------------------------------
-- A fused epilogue (bias + ReLU in the matmul's library call) against the
-- two kernels apart: the "unfused" candidate. The CPU folds only with
-- KILN_CPU_FOLD_EPILOGUES=1 (what CI tests the folding with); CUDA always.

local FOLD = [[
kiln.config.autotune_budget_s = 120
local nn = kiln.nn
nn.manual_seed(1)
local m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32)):eval()
local x = kiln.randn({16, 64}, {seed = 2})
local ref = m(x)
local cm = kiln.compile(m, {mode = "max-autotune"})
local function diff() return (cm(x) - ref):abs():amax():item() end
print("diff", diff())
local folded = 0
for _, k in ipairs(cm:kernels()) do if k.epilogue then folded = folded + 1 end end
print("epilogues", cm:stats().library_epilogues, folded)
for _, k in ipairs(cm:autotune()) do
  local c = {}
  for _, x in ipairs(k.candidates) do c[#c + 1] = x.choice .. (x.status and "!" or "") end
  print("kernel", k.index, k.name, k.source, k.choice, table.concat(c, ","))
end
local mm = cm:kernels()[1].name
kiln.autotune.pin(mm, "unfused", cm)
print("unfused-pinned", diff(), cm:kernels()[1].epilogue == nil)
kiln.autotune.pin(mm, "default", cm)
print("default-pinned", diff(), cm:kernels()[1].epilogue ~= nil)
print("bad", pcall(kiln.autotune.pin, mm, "unroll=4", cm))
]]
out, rc = child(FOLD, "KILN_CACHE_DIR=" .. cache .. "-fold KILN_CPU_FOLD_EPILOGUES=1")
T.is(rc, 0, "a model with fused epilogues is tuned")
d = tonumber(out:match("diff\t(%S+)"))
T.ok(d and d < 1e-4, "its results equal eager: " .. tostring(d))
T.like(out, "kernel\t1\tk0_matmul[%w_]+\tmeasured\t[%w=]+\tdefault,[^\n]*unfused", "the matmul with the fused epilogue has an unfused candidate")
local e1, e2 = out:match("epilogues\t(%d+)\t(%d+)")
T.ok(e1 and e1 == e2, "cm:stats().library_epilogues agrees with cm:kernels()' epilogue fields: " .. tostring(e1) .. "/" .. tostring(e2))
local chose_unfused = out:match("kernel\t1\tk0_matmul[%w_]+\tmeasured\tunfused\t") ~= nil
if chose_unfused then -- its epilogue kernel then runs apart and is searched in the same call
  T.like(out, "kernel\t2\tk1_[%w_]+\tmeasured\t", "when unfused wins, the epilogue kernel is searched in the same call")
else
  T.ok(true, "the fused call won: its epilogue kernel never runs apart (nothing more to search)")
end
local du, uf = out:match("unfused%-pinned\t(%S+)\t(%a+)")
T.ok(tonumber(du) and tonumber(du) < 1e-4 and uf == "true",
  "pinned unfused: the epilogue runs as its own kernel, results equal eager: " .. tostring(du))
local dd, df = out:match("default%-pinned\t(%S+)\t(%a+)")
T.ok(tonumber(dd) and tonumber(dd) < 1e-4 and df == "true",
  "pinned back to default: the epilogue is folded again, results equal eager: " .. tostring(dd))
T.like(out, "bad\tfalse\t[^\n]*runs in a library: its choice is 'default', 'variant=N' %(N < 32%) or 'unfused'",
  "a generated kernel's knob on a library call is refused, naming the choices it takes")

-- ---------------------------------------------------------------------------
-- :autotune in the REPL

local p = io.popen(string.format("printf 'kiln.session.small = true\\n:load samples/transformer_block.lua\\n:autotune\\n"
  .. ":mode max-autotune\\n:run\\n:autotune\\n:autotune 1\\n' "
  .. "| KILN_CACHE_DIR='%s-repl' %s 2>&1", cache, KILN))
out = p:read("a")
p:close()
T.like(out, "mode is eager: autotuning runs in max%-autotune", ":autotune in another mode says how to get there")
T.like(out, "#  kernel%s+choice%s+time%s+default%s+speedup%s+from%s+tried", ":autotune prints the table header")
T.like(out, "tunable kernels?; search [%d%.]+ s, %d+ kernels measured", "and the summary line")
T.like(out, "%(kernel 1%): [^\n]+\n.-  %* ", ":autotune K lists kernel K's candidates, the chosen one starred")

-- :autotune pin's errors: messages, no traceback (simple_linear on the CPU:
-- kernel 1 is the matmul, a library call with nothing to choose; kernel 2
-- the bias add, generated)
local function repl_lines(lines)
  -- on the CPU even where a GPU is present: the expected texts are the CPU's kernels
  local pp = io.popen(string.format("printf '%s' | CUDA_VISIBLE_DEVICES= KILN_CACHE_DIR='%s-pin' %s 2>&1",
    table.concat(lines, "\\n"), cache, KILN))
  local text = pp:read("a")
  pp:close()
  return text
end
out = repl_lines({ ":load samples/simple_linear.lua", ":mode max-autotune", ":run 1", ":autotune pin",
  ":autotune pin 2", ":autotune pin 0 default", ":autotune pin 7 default", ":autotune pin 1 default",
  ":autotune pin 2 foo", ":autotune pin 2 unroll=2 tile=16", ":autotune 2 3", ":autotune 1" })
T.ok(not out:find("stack traceback", 1, true) and not out:find("frames inside kiln", 1, true),
  ":autotune pin's errors carry no traceback")
T.like(out, "usage: :autotune pin K CHOICE %(K: a kernel's number from :autotune or its name; CHOICE as :autotune K "
  .. "lists them, or 'default'%)\nusage: :autotune pin K CHOICE", "no kernel or no choice: the usage, saying what K and CHOICE are")
T.like(out, "no kernel 0: the model has kernels 1 to 2 %(see :kernels%)", "kernel 0: numbers start at 1")
T.like(out, "no kernel 7: the model has kernels 1 to 2", "a number past the last kernel")
T.like(out, "kernel 1 %(k0_matmul_f32_32x1024%) has nothing to tune on this device; the kernels that have: 2 %(see :autotune%)\n"
  .. "[^\n]*\n?cannot pin: kernel 2 %(k1_add_f32_32x1024%): choice 'foo' is not one of the layouts kiln searches for it "
  .. "on cpu: 'default', 'unroll=2'", "a kernel with nothing to tune, and an unknown choice with the ones it takes")
T.like(out, "pinned kernel 2 %(k1_add_f32_32x1024%) to unroll=2 tile=16", "a choice of two words is one choice")
T.like(out, "':autotune K' takes one kernel, got extra '3'", ":autotune K with a word too many")
T.like(out, "kernel 1 %(k0_matmul_f32_32x1024%) has nothing to tune on this device", ":autotune K of a kernel with nothing to tune")

os.execute("rm -rf '" .. cache .. "' '" .. cache .. "'-*")
T.done()
