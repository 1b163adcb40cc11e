-- 22_repl_inspect.lua: the REPL commands that show what capture and the
-- compiler made of the session's model: :explain, :breaks, :recompiles and
-- :guards (capture), :kernels, :src and :check (the compiler). Each
-- compiles the model (mode default when the session is eager) and runs it
-- once if needed, as :run would (repl.model_inputs and repl.runner,
-- 21_repl_model.lua).
local kiln = ...
local repl = kiln.repl
local session = kiln.session
local fail = repl.error
local model_inputs, runner = repl.model_inputs, repl.runner -- 21_repl_model.lua

---------------------------------------------------------------------------
-- :explain, :breaks, :recompiles, :guards: what capture made of the model

-- The mode the inspection commands compile with when the session is eager.
local INSPECT_MODE = "default"

local function need_compile()
  if type(kiln.compile) ~= "function" then fail("this build has no kiln.compile: nothing to inspect") end
  if not session.model then fail("no model loaded (use :load FILE.lua)") end
end

-- In eager mode the inspection commands look at a compiled model that :run
-- does not use: say so, so that nobody takes it for what :run did.
local function eager_note()
  if session.mode == "eager" then
    print(string.format("(mode eager: compiled with mode %s for this inspection; :run stays eager)", INSPECT_MODE))
  end
end

-- The compiled model to inspect: the session's own (what :run calls) in a
-- compiled mode, compiled with the current mode when needed; in eager mode
-- one compiled with INSPECT_MODE, kept until the next :load so that later
-- inspections see the same calls.
local function inspection_target()
  need_compile()
  eager_note()
  if session.mode == "eager" then
    session.inspect = session.inspect or kiln.compile(session.model, { mode = INSPECT_MODE })
    return session.inspect
  end
  return runner()
end

-- inspection_target(), called at least once.
local function inspected()
  local cm = inspection_target()
  if cm:stats().calls == 0 then
    local inputs, n = model_inputs()
    cm(table.unpack(inputs, 1, n))
    -- the compiling call is done: :run need not time its next call apart
    if cm == session.compiled then session.warm = true end
  end
  return cm
end

-- The compiled function's name and definition line, as its messages show
-- them ("forward", "samples/breaks.lua:42").
local function compiled_name(cm, entry)
  local name, where = tostring(cm):match("^kiln%.Compiled (.-) %((.*)%), mode [%w%-]+$")
  return (entry and entry.fn) or name or "?", (entry and entry.where) or where or "?"
end

repl.register("explain", {
  usage = ":explain",
  summary = "graph count, break count, op count, each break with reason and source line",
  help = [[
Runs the loaded model once under capture with its inputs (as :run builds
them) through kiln.explain and prints its report: graph count, graph break
count, op count, each break with its reason and source line (and the lines
that called it), ops per graph and compile time. kiln.explain compiles with
mode default whatever the session's mode. From Lua, kiln.cmd.explain()
returns the report table.]],
}, function()
  need_compile()
  local inputs, n = model_inputs()
  eager_note()
  local quiet = kiln.explain_quiet
  kiln.explain_quiet = true
  local ok, r = pcall(kiln.explain, session.model, table.unpack(inputs, 1, n))
  kiln.explain_quiet = quiet
  if not ok then error(r, 0) end
  print(kiln.format_explain(r))
  return r
end)

repl.register("breaks", {
  usage = ":breaks",
  summary = "graph breaks with reason, file:line and user stack",
  help = [[
Prints each distinct graph break of the session's compiled model as
KILN_LOGS=graph_breaks does: where it happened, its reason and a hint, and
the user stack, innermost first. Compiles the model with the session's mode
(mode default when the session is eager) and runs it once if it has not run
yet. From Lua, kiln.cmd.breaks() returns cm:breaks().]],
}, function()
  local cm = inspected()
  local list = cm:breaks()
  if #list == 0 then
    print("no graph breaks")
    return list
  end
  local texts = {}
  for i, b in ipairs(list) do texts[i] = (tostring(b.message):gsub("\n+$", "")) end
  print(table.concat(texts, "\n\n"))
  return list
end)

repl.register("recompiles", {
  usage = ":recompiles",
  summary = "recompilations with the failed guards of each cached version",
  help = [[
Prints each recompilation of the session's compiled model, oldest first, as
KILN_LOGS=recompiles does: the function, graph and new version, then the
guard that failed against each cached version (K/V: graph K, version V),
the newest first. Says "no recompilations" when there were none. Compiles
and runs the model once if needed (mode default when the session is eager).
From Lua, kiln.cmd.recompiles() returns cm:recompiles().]],
}, function()
  local cm = inspected()
  local list = cm:recompiles()
  if #list == 0 then
    print("no recompilations")
    return list
  end
  local lines = {}
  for _, r in ipairs(list) do
    local name, where = compiled_name(cm, r)
    lines[#lines + 1] = string.format("Recompiling %s (%s), graph %d, version %d", name, where, r.graph, r.version)
    lines[#lines + 1] = "  triggered by the guard failure(s):"
    for _, reason in ipairs(r.reasons) do lines[#lines + 1] = "  - " .. reason end
    for _, number in ipairs(r.dynamic or {}) do lines[#lines + 1] = "  " .. number .. " is dynamic from now on" end
  end
  print(table.concat(lines, "\n"))
  return list
end)

repl.register("guards", {
  usage = ":guards",
  summary = "the guards of each cached version of each graph",
  help = [[
Prints, for each graph of the session's compiled model and each cached
version of it, the guards a call must pass to reuse that version: the mode,
each input tensor and parameter (shape, dtype, device, layout), each Lua
number baked into the graph and the graph's structure. Compiles and runs
the model once if needed (mode default when the session is eager). From Lua,
kiln.cmd.guards() returns cm:guards().]],
}, function()
  local cm = inspected()
  local list = cm:guards()
  if #list == 0 then
    print("no compiled versions (the model ran no tensor ops)")
    return list
  end
  local name, where = compiled_name(cm)
  local lines = {}
  for _, v in ipairs(list) do
    lines[#lines + 1] = string.format("Guards of %s (%s), graph %d, version %d:", name, where, v.graph, v.version)
    for _, g in ipairs(v.guards) do lines[#lines + 1] = "  " .. g end
  end
  print(table.concat(lines, "\n"))
  return list
end)

---------------------------------------------------------------------------
-- :kernels, :src, :check: what the compiler made of the model

-- The kernels of the inspected model (compiled and run once if needed), as
-- cm:kernels() lists them: the latest version of each graph, in order.
-- Their number in :kernels, :src, :time and :autotune is their position in
-- that list, from 1 as everything a user counts in kiln (dims, chunks,
-- breaks). The kN_ of a kernel's name is something else: the generated
-- function's place in its own graph's program, from 0, which the compiler
-- gives it (names restart at k0 in each graph).
local function inspected_kernels()
  local cm = inspected()
  return cm, cm:kernels()
end

-- Kernel K of the list: its number (a number, or a string of digits) or
-- its name; a usage error for anything else. Returns the entry and its
-- number.
local function find_kernel(list, k)
  local how = "see :kernels"
  if #list == 0 then fail("the model has no kernels (it ran no tensor ops)") end
  local i = math.tointeger(tonumber(k))
  if i ~= nil then
    if i < 1 or i > #list then
      local range = #list == 1 and "kernel 1" or string.format("kernels 1 to %d", #list)
      fail("no kernel %d: the model has %s (%s)", i, range, how)
    end
    return list[i], i
  end
  if tonumber(k) ~= nil then fail("no kernel %s: a kernel's number is a whole number from :kernels", tostring(k)) end
  local found = {}
  for j, e in ipairs(list) do
    if e.name == k then found[#found + 1] = j end
  end
  if #found == 0 then fail("no kernel named '%s' (%s)", k, how) end
  if #found > 1 then
    local idx = {}
    for j, f in ipairs(found) do idx[j] = tostring(f) end
    fail("kernel name '%s' is in several graphs: give its number (%s)", k, table.concat(idx, ", "))
  end
  return list[found[1]], found[1]
end

-- for later files' commands (45_autotune.lua)
repl.inspected, repl.find_kernel = inspected, find_kernel

repl.register("kernels", {
  usage = ":kernels",
  summary = "the compiled kernels of the loaded model: number, name, kind, ops",
  help = [[
Lists the kernels of the current version of each graph of the session's
compiled model, in the order they run: the number (from 1, for :src,
:time and :autotune), the graph when
there are several, the kernel's name, its kind ("generated": C or CUDA that
kiln wrote for this graph; "cpu": a library call or a reference op), its
group (pointwise, row, library, reference) and the op nodes it covers; a
node a pass made from several ops (attention) lists those ops and lines.
Compiles and runs the model once if needed (mode default when the session
is eager). With kiln.config.compiler = false the graph runs op by op: one
cpu kernel per op. Values that depend only on shapes and constants (a
causal mask) are computed once when a version is compiled, not per call:
they are listed after the kernels. From Lua, kiln.cmd.kernels() returns
cm:kernels() (its field `once` lists those values).]],
}, function()
  local cm, list = inspected_kernels()
  if #list == 0 then
    print("no kernels (the model ran no tensor ops)")
    return list
  end
  local graphs, ngen = {}, 0
  for _, k in ipairs(list) do
    graphs[k.graph or 0] = true
    if k.kind == "generated" then ngen = ngen + 1 end
  end
  local ngraphs = 0
  for _ in pairs(graphs) do ngraphs = ngraphs + 1 end
  local rows = { { "#", "graph", "kernel", "kind", "group", "ops" } }
  for i, k in ipairs(list) do
    -- ops of an imported (ONNX) model also name the nodes they came from
    local nodes, seen = {}, {}
    for _, w in ipairs(k.wheres or {}) do
      local n = w:match(":node '(.-)' %(")
      if n and not seen[n] then seen[n] = true; nodes[#nodes + 1] = n end
    end
    rows[#rows + 1] = { tostring(i), tostring(k.graph or 0), k.name, k.kind, k.shape_kind or "-",
      table.concat(k.ops or {}, ", ") .. (k.covers and (" = " .. k.covers) or "")
        .. (#nodes > 0 and ("  [" .. table.concat(nodes, ", ") .. "]") or "") }
  end
  local cols = ngraphs > 1 and { 1, 2, 3, 4, 5, 6 } or { 1, 3, 4, 5, 6 }
  local width = {}
  for _, c in ipairs(cols) do
    width[c] = 0
    for _, r in ipairs(rows) do width[c] = math.max(width[c], #r[c]) end
  end
  local lines = {}
  for _, r in ipairs(rows) do
    local parts = {}
    for j, c in ipairs(cols) do
      if c == 1 then parts[j] = string.format("%" .. width[c] .. "s", r[c])
      elseif j == #cols then parts[j] = r[c]
      else parts[j] = string.format("%-" .. width[c] .. "s", r[c]) end
    end
    lines[#lines + 1] = "  " .. table.concat(parts, "  ")
  end
  for _, o in ipairs(list.once or {}) do
    lines[#lines + 1] = string.format("  computed once per version, not per call: %s -> %s {%s} (%s)", o.ops, o.dtype,
      table.concat(o.shape, ", "), o.where or "?")
  end
  local nk = #list
  lines[#lines + 1] = string.format("%d kernel%s (%d generated, %d cpu) in %d graph%s%s",
    nk, nk == 1 and "" or "s", ngen, nk - ngen, ngraphs, ngraphs == 1 and "" or "s",
    kiln.config and kiln.config.compiler == false and "; kiln.config.compiler = false: op by op" or "")
  print(table.concat(lines, "\n"))
  return list
end)

-- A kernel's own function out of its source (the prelude of helpers that
-- every generated kernel carries comes before it).
local function kernel_function(src, name)
  local i = src:find("\n[^\n]*" .. name:gsub("%p", "%%%0") .. "%(")
  return i and src:sub(i + 1) or src
end

-- The kernel's statements with the op and source line each computes, where
-- the statements map one to one onto the kernel's ops (each op one value,
-- in order, after the loads); a header names them all in any case.
local function annotated(body, e, i)
  local ops, wheres = e.ops or {}, e.wheres or {}
  local lines, computed = {}, {}
  for line in (body .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
  if lines[#lines] == "" then lines[#lines] = nil end
  for n, line in ipairs(lines) do
    if line:match("^%s*const [%w_]+ v%d+ = ") and not line:match("= %(p%d+%[[^%]]*%]%);%s*$") then
      computed[#computed + 1] = n
    end
  end
  if #computed == #ops and #ops > 0 then
    for j, n in ipairs(computed) do lines[n] = lines[n] .. string.format("  /* %s at %s */", ops[j], tostring(wheres[j])) end
  end
  local covers = {}
  for j, op in ipairs(ops) do covers[j] = string.format("%s (%s)", op, tostring(wheres[j])) end
  return string.format("/* kernel %d %s: %s; ':src %d full' adds the prelude */\n", i, e.name, table.concat(covers, ", "), i)
    .. table.concat(lines, "\n") .. "\n"
end

repl.register("src", {
  usage = ":src K [full]",
  summary = "the generated source of kernel K (number from :kernels, or name)",
  help = [[
Prints the source kiln generated for kernel K of the session's compiled
model (K: the number that :kernels shows, or the kernel's name): its
function, with a comment naming the ops it computes and their source
lines, each statement tagged with its op where they map one to one.
:src K full prints the whole unit, with the prelude of helpers every
generated kernel carries. Library calls and reference ops have no
generated source. Compiles and runs the model once if needed (mode default
when the session is eager). The whole program of a graph, for C or CUDA,
is cm:source("c") or cm:source("cuda"). From Lua, kiln.cmd.src(K) returns
what it printed.]],
}, function(k, full)
  if k == nil or k == "" then fail("usage: :src K [full] (K: a kernel's number from :kernels, or its name)") end
  if full ~= nil and full ~= "full" then fail("usage: :src K [full]: the second word may only be 'full', got '%s'", tostring(full)) end
  local _, list = inspected_kernels()
  local e, i = find_kernel(list, k)
  if e.source == nil then
    local what
    if e.kind == "generated" then what = "a generated kernel whose source could not be rendered"
    elseif e.shape_kind == "library" then what = "a library call"
    elseif e.shape_kind == "reference" then what = "a reference op (the cpu backend's own code)"
    elseif e.shape_kind == nil then what = "an op run op by op (kiln.config.compiler = false)"
    else what = "a " .. tostring(e.kind) .. " kernel" end
    fail("kernel %d (%s) is %s: no generated source", i, e.name, what)
  end
  local src = tostring(e.source)
  if full == nil then src = annotated(kernel_function(src, e.name), e, i) end
  io.stdout:write(src, src:sub(-1) == "\n" and "" or "\n")
  return src
end)

repl.register("precision", {
  usage = ":precision",
  summary = "the precision ledger: each f32 library kernel's error against float64",
  help = [[
Runs the session's compiled model once on its inputs (as :run builds them)
and measures every f32 matmul, convolution and attention kernel on the
inputs it got: its error against a float64 computation of the same op,
and the error of a true-f32 computation (f32 FMA on the CPU), both relative
to the reference's largest magnitude. "ieee" marks a kernel within twice
the true-f32 error, the contract of kiln.config.f32_precision = "ieee";
"floor" one within it only by its floor of 4e-7 (over twice the true-f32
error, but small); "no" one outside it (TF32, for one). Compiles the model if needed (mode
default when the session is eager). From Lua, kiln.cmd.precision() returns
the rows of cm:precision.]],
}, function()
  local cm = inspection_target()
  local inputs, n = model_inputs()
  local led = cm:precision(table.unpack(inputs, 1, n))
  if cm == session.compiled then session.warm = true end
  if not led.measured then
    print("precision ledger: nothing compiled ran (the model runs eager or op by op)")
    return led
  end
  if #led == 0 then
    print("precision ledger: no f32 matmul, convolution or attention kernel")
    return led
  end
  -- the columns as wide as their longest entry: an engine's name says its
  -- tile ("wg128x192"), which a cut would change into another's
  local wk, we = #"kernel", #"engine"
  for _, r in ipairs(led) do
    wk, we = math.max(wk, #r.name), math.max(we, #r.engine)
  end
  local head = "%4s  %-" .. wk .. "s %-" .. we .. "s %10s %10s %10s  %s"
  local row = "%4d  %-" .. wk .. "s %-" .. we .. "s %10.2e %10.2e %10.2e  %s"
  print(string.format(head, "#", "kernel", "engine", "max err", "rms err", "true f32", "ieee"))
  local floors = 0
  for _, r in ipairs(led) do
    print(string.format(row, r.kernel, r.name, r.engine, r.max_err, r.rms_err, r.f32_max_err,
      r.by_floor and "floor" or r.meets and "yes" or "no"))
    if r.by_floor then floors = floors + 1 end
  end
  if floors > 0 then
    print(string.format("floor: %d kernel%s over twice the true-f32 error, within the contract by its floor of 4e-7 "
      .. "of the largest value (docs/precision.md)", floors, floors == 1 and "" or "s"))
  end
  return led
end)

repl.register("check", {
  usage = ":check",
  summary = "run the model once comparing every kernel with the reference",
  help = [[
Runs the session's compiled model once on its inputs (as :run builds them)
with the numerics check: each kernel's outputs are compared with the
reference ops on the same inputs, and the first kernel that diverges is
named with its op nodes and their source lines. Prints "numerics check:
every kernel agrees with the reference", or the kernel that differs (and
then the command fails). Compiles the model if needed (mode default when the
session is eager). kiln.config.check_numerics = true checks every call.
From Lua, kiln.cmd.check() returns the report {ok, message, checks} of
cm:check.]],
}, function()
  local cm = inspection_target()
  local inputs, n = model_inputs()
  local report = cm:check(table.unpack(inputs, 1, n))
  if cm == session.compiled then session.warm = true end
  if type(report) ~= "table" then fail("cm:check returned %s, not a report", type(report)) end
  print("numerics check: " .. tostring(report.message))
  if not report.ok then
    fail("numerics check failed: the compiled model differs from the reference")
  end
  return report
end)
