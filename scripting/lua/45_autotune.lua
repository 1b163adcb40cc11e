-- 45_autotune.lua: max-autotune from Lua and the REPL: kiln.autotune
-- (results, pin, cache_path) and the :autotune command. The search runs in
-- C inside a max-autotune model's first call (core/compiler/kn_plan_tune.c);
-- cm:autotune() reports it and cm:autotune_pin(kernel, choice) overrides it.
local kiln = ...
local repl = kiln.repl
local session = kiln.session
local fail = repl.error

kiln.autotune = kiln.autotune or {}
local autotune = kiln.autotune

local function is_autotune_mode(mode)
  return type(mode) == "string" and mode:match("^max%-autotune") ~= nil
end

local function check_compiled(cm, what)
  if cm == nil then
    if session.compiled and is_autotune_mode(session.mode) then return session.compiled end
    fail("%s: give a compiled callable (kiln.compile(model, {mode = \"max-autotune\"})), or load a model and "
      .. "set :mode max-autotune", what)
  end
  if not repl.is_compiled(cm) then
    fail("%s: expected a compiled callable, got %s", what, type(cm))
  end
  return cm
end

-- kiln.autotune.results([cm]): what the search measured, per tunable
-- kernel (cm:autotune()); cm defaults to the session's model.
function autotune.results(cm)
  return check_compiled(cm, "kiln.autotune.results"):autotune()
end

-- cm:autotune_pin(kernel, choice): the kernel's name, or nil and the
-- user's message for its error (no location, which the caller gives or
-- not, and no traceback of kiln's frames), the kernel it names also by its
-- number when the user gave one ("kernel 2 (k1_add_f32_64): ...").
local function pin(cm, kernel, choice)
  local ok, name = pcall(cm.autotune_pin, cm, kernel, choice)
  if ok then return name end
  local msg = tostring(name):gsub("^[^%s:]+:%d+: ", ""):gsub("^autotune pin: ", "")
  local list = math.type(kernel) == "integer" and cm:kernels() or {}
  local e = list[kernel]
  if e and msg:sub(1, #e.name + 7) == "kernel " .. e.name then
    msg = string.format("kernel %d (%s)%s", kernel, e.name, msg:sub(#e.name + 8))
  end
  return nil, msg
end

-- kiln.autotune.pin(kernel, choice [, cm]): run kernel (its number in
-- cm:kernels(), from 1, or its name) with choice ("default", a generated
-- kernel's "block=128 ept=4" or "unroll=4 tile=16", a library call's
-- "variant=N", or "unfused" for one whose epilogue is folded) from the
-- next call on, in this process and (saved as pinned in the cache file)
-- in later ones. Returns the kernel's name. Its errors are at the
-- caller's line, as every API's.
function autotune.pin(kernel, choice, cm)
  if type(choice) ~= "string" then
    error(string.format("kiln.autotune.pin(kernel, choice): choice must be a string, got %s", type(choice)), 2)
  end
  cm = check_compiled(cm, "kiln.autotune.pin")
  local name, why = pin(cm, kernel, choice)
  if not name then error("kiln.autotune.pin: " .. why, 2) end
  return name
end

-- kiln.autotune.cache_path(): the choice file in kiln.config.cache_dir.
function autotune.cache_path()
  return kiln._autotune_cache_path()
end

-- "12.3 us" / "-" for a time that was not measured.
local function us(v)
  if type(v) ~= "number" or v < 0 then return "-" end
  return v >= 100 and string.format("%.0f us", v) or string.format("%.1f us", v)
end

-- One line per tunable kernel: its choice, time against the default, where
-- the choice came from and how many candidates were measured.
local function summary_lines(list, stats)
  local rows = { { "#", "kernel", "choice", "time", "default", "speedup", "from", "tried" } }
  for _, k in ipairs(list) do
    local speed = (k.us and k.default_us and k.us > 0) and string.format("%.2fx", k.default_us / k.us) or "-"
    rows[#rows + 1] = { tostring(k.index), k.name, k.label, us(k.us), us(k.default_us), speed, k.source,
      tostring(#k.candidates) }
  end
  local w = {}
  for c = 1, 8 do
    w[c] = 0
    for _, r in ipairs(rows) do w[c] = math.max(w[c], #r[c]) end
  end
  local lines = {}
  for _, r in ipairs(rows) do
    lines[#lines + 1] = string.format("  %" .. w[1] .. "s  %-" .. w[2] .. "s  %-" .. w[3] .. "s  %" .. w[4]
      .. "s  %" .. w[5] .. "s  %" .. w[6] .. "s  %-" .. w[7] .. "s  %s", table.unpack(r))
  end
  lines[#lines + 1] = string.format("%d tunable kernels; search %.2f s, %d kernels measured, %d candidates, "
    .. "%d from the cache%s; budget %g s per model (kiln.config.autotune_budget_s); cache %s",
    #list, stats.autotune_s or 0, stats.autotune_kernels or 0, stats.autotune_candidates or 0,
    stats.autotune_cache_hits or 0, stats.autotune_stopped and (", stopped: " .. stats.autotune_stopped) or "",
    kiln.config.autotune_budget_s or 0, autotune.cache_path())
  return lines
end

-- Every candidate of one kernel, fastest first, rejected and failed last.
local function candidate_lines(k)
  local lines = { string.format("%s (kernel %d): %s, %s", k.name, k.index, k.label,
    k.source == "measured" and "measured now" or k.source) }
  local c = {}
  for i, x in ipairs(k.candidates) do c[i] = x end
  table.sort(c, function(a, b)
    local ta, tb = (a.status or not a.us) and math.huge or a.us, (b.status or not b.us) and math.huge or b.us
    if ta ~= tb then return ta < tb end
    return a.choice < b.choice
  end)
  local best = k.us
  for _, x in ipairs(c) do
    local mark = x.choice == k.choice and "*" or " "
    if x.status then
      lines[#lines + 1] = string.format("  %s %-44s  %s", mark, x.label, x.status)
    else
      lines[#lines + 1] = string.format("  %s %-44s  %9s  %4.0f%%  (%d runs)%s", mark, x.label, us(x.us),
        best and x.us and 100 * best / x.us or 0, x.reps or 0, x.choice == "default" and "  default" or "")
    end
  end
  if #c == 0 then lines[#lines + 1] = "  (no candidates measured in this process: the choice came from the cache file)" end
  return lines
end

-- Kernel K's row of cm:autotune() (K from :kernels), or a usage error
-- saying it has nothing to tune (`list`: the tunable kernels; empty when
-- none was searched, which cm:autotune_pin then explains).
local function tunable_row(cm, list, k)
  local e, idx = repl.find_kernel(cm:kernels(), k)
  for _, row in ipairs(list) do
    if row.index == idx then return row end
  end
  if #list > 0 then
    local numbers = {}
    for i, row in ipairs(list) do numbers[i] = tostring(row.index) end
    fail("kernel %d (%s) has nothing to tune on this device; the kernels that have: %s (see :autotune)", idx, e.name,
      table.concat(numbers, ", "))
  end
  return nil, idx
end

-- :autotune pin K CHOICE: a choice of several words ("block=128 ept=4",
-- quoted or not) is one choice.
local function pin_command(cm, k, ...)
  local words = table.pack(...)
  if k == nil or words.n == 0 then
    fail("usage: :autotune pin K CHOICE (K: a kernel's number from :autotune or its name; CHOICE as :autotune K "
      .. "lists them, or 'default')")
  end
  local choice = table.concat(words, " ", 1, words.n):gsub('^"(.*)"$', "%1"):gsub("^'(.*)'$", "%1")
  local row, idx = tunable_row(cm, cm:autotune(), k)
  local number = row and row.index or idx
  local name, why = pin(cm, number, choice)
  if not name then fail("cannot pin: %s", why) end
  print(string.format("pinned kernel %d (%s) to %s", number, name, choice))
  if kiln.cmd.time then return kiln.cmd.time(20) end
  return name
end

repl.register("autotune", {
  usage = ":autotune [K | pin K CHOICE]",
  max_args = 8, -- a choice may be several words: pin 3 block=128 ept=4
  summary = "max-autotune's choices: per kernel, or every candidate of kernel K; pin a choice",
  help = [[
In mode max-autotune (or max-autotune-no-cudagraphs) the first call of the
loaded model measures, for every kernel, the candidates (generated kernels:
block size, elements per thread, one warp or one block per row; on the CPU
unrolling and tiles; matmul and conv: cuBLASLt's algorithms with split-K and
cuDNN's engine configs; a fused epilogue also runs apart, "unfused"),
rejects those whose output differs from the default,
and keeps the fastest (the default unless another is at least 3% faster).
Choices persist in kiln.config.cache_dir (autotune.tsv) and later processes
reuse them. kiln.config.autotune_budget_s caps the search per model; Ctrl-C
stops it and keeps what was measured.
  :autotune            one line per kernel: choice, time, default's time, speedup
  :autotune K          every candidate of kernel K (number or name), fastest first
  :autotune pin K C    run kernel K with choice C ("default", "block=128 ept=4",
                       "variant=3", "unfused"; saved as pinned), then retime (:time)
KILN_LOGS=autotune prints each kernel's candidates as they are measured.
From Lua: kiln.autotune.results(), kiln.autotune.pin(kernel, choice [, cm]).]],
}, function(a, ...)
  -- a word too many is an error before anything runs, as for every command
  if a ~= "pin" and select("#", ...) > 0 then
    fail("':autotune K' takes one kernel, got extra '%s' (usage: :autotune [K | pin K CHOICE])",
      table.concat({ ... }, " "))
  end
  if not session.model then fail("no model loaded (use :load FILE.lua)") end
  if not is_autotune_mode(session.mode) then
    fail("mode is %s: autotuning runs in max-autotune (:mode max-autotune, then :run)", session.mode)
  end
  local cm = repl.inspected()
  if a == "pin" then return pin_command(cm, ...) end
  local list = cm:autotune()
  if a ~= nil then
    local k = tunable_row(cm, list, a)
    if not k then fail("kernel %s has nothing to tune: no kernel was searched (see :autotune)", a) end
    print(table.concat(candidate_lines(k), "\n"))
    return k
  end
  if #list == 0 then
    print("no tunable kernels")
    return list
  end
  print(table.concat(summary_lines(list, cm:stats()), "\n"))
  return list
end)
