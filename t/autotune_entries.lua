-- autotune_entries.lua: autotune.tsv entries outside the search space
-- (issue 14). An edited file's "unroll=4096" used to be applied unmeasured
-- (and compile for minutes); now a cached choice must be one of the layouts
-- the search itself measures for that kernel: another is reported once,
-- ignored, and the kernel measured again. kiln.autotune.pin refuses one too.
local T = dofile("t/lib/tap.lua")

local cache = os.tmpname()
os.remove(cache)

-- A child process: tune (or reuse) f's kernels; print the counts, every
-- choice and the largest difference from eager (NaN never passes).
local CHILD = [[
kiln.config.autotune_budget_s = 20
local function f(x) return kiln.softmax((x * 2 + 1):tanh(), -1) end
local x = kiln.randn({6, 40}, {seed = 7, device = "cpu"})
local ref = f(x)
local cm = kiln.compile(f, {mode = "max-autotune-no-cudagraphs"})
local d = (cm(x) - ref):abs():amax():item()
if d ~= d then d = math.huge end
local st = cm:stats()
print(string.format("counts %d %d %.3g", st.autotune_cache_hits, st.autotune_kernels, d))
for _, k in ipairs(cm:autotune()) do print("choice", k.name, k.source, k.choice) end
]]

local function child()
  -- a bound on the time: the old code compiled unroll=4096 for minutes
  return T.child(CHILD, { env = string.format("KILN_CACHE_DIR='%s'", cache), timeout = 120 })
end

local out, rc = child()
T.is(rc, 0, "a first process tunes into an empty cache dir")
local hits, measured, d = out:match("counts (%d+) (%d+) (%S+)")
T.ok(tonumber(measured) and tonumber(measured) >= 1, "it measured its kernels: " .. out:sub(1, 200))
local file = cache .. "/autotune.tsv"
local fh = io.open(file, "r")
local text = fh and fh:read("a") or ""
if fh then fh:close() end

-- every generated kernel's choice becomes unroll=4096
local edited, n_edited = text:gsub("\n(%x+\t%x+\t)[^\t\n]+(\t[^\t\n]*\t[^\t\n]*\t[01]\tk%d+_[^\t\n]*\t)[^\n]*",
  "\n%1unroll=4096%2edited")
T.ok(n_edited >= 1, "the file has entries to edit: " .. n_edited)
fh = assert(io.open(file, "w"))
fh:write(edited)
fh:close()

local t0 = os.time()
out, rc = child()
T.is(rc, 0, "a process on the edited file finishes (exit status " .. tostring(rc) .. ")")
T.ok(os.time() - t0 < 60, "in less than a minute: " .. (os.time() - t0) .. " s")
hits, measured, d = out:match("counts (%d+) (%d+) (%S+)")
T.ok(tonumber(d) and tonumber(d) < 1e-5, "its result equals eager: " .. tostring(d))
T.is(tonumber(measured), n_edited, "every edited kernel was measured again")
local _, n_reports = out:gsub("is invalid: kernel k%d+_[%w_]+: choice 'unroll=4096' is not one of the layouts kiln searches", "")
T.is(n_reports, n_edited, "each invalid entry is reported once, naming the kernel, the choice and why: "
  .. (out:match("[^\n]*invalid[^\n]*") or out:sub(1, 300)))
T.like(out, "is not one of the layouts kiln searches for it on cpu: 'default', ", "the report lists the layouts it may have")
T.ok(not out:match("choice\t[^\n]*unroll=4096"), "no kernel runs with unroll=4096")

out, rc = child()
hits, measured, d = out:match("counts (%d+) (%d+) (%S+)")
T.ok(rc == 0 and tonumber(measured) == 0 and tonumber(hits) >= 1,
  "the next process takes the new choices from the file: " .. out:sub(1, 200))
T.ok(not out:match("invalid"), "and reports nothing")
T.ok(tonumber(d) and tonumber(d) < 1e-5, "its result equals eager: " .. tostring(d))

-- pinning: the same rule
kiln.config.cache_dir = cache .. "-pin"
local function f(x) return (x * 2 + 1):tanh() end
local cm = kiln.compile(f, {mode = "max-autotune-no-cudagraphs"})
local x = kiln.randn({6, 40}, {seed = 7, device = "cpu"})
cm(x)
local k = cm:autotune()[1]
T.ok(k ~= nil, "a tunable kernel to pin")
if k then
  T.raises(function() kiln.autotune.pin(k.name, "unroll=4096", cm) end,
    "choice 'unroll=4096' is not one of the layouts kiln searches for it on cpu",
    "kiln.autotune.pin refuses a layout outside the search space")
  T.is(kiln.autotune.pin(k.name, "unroll=4", cm), k.name, "and takes one inside it")
  local dd = (cm(x) - f(x)):abs():amax():item()
  T.ok(dd == dd and dd < 1e-5, "the pinned kernel's result equals eager: " .. dd)
end

os.execute("rm -rf '" .. cache .. "' '" .. cache .. "-pin'")
T.done()
