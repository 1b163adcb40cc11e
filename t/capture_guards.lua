-- capture_guards.lua: guards and recompilations of kiln.compile held to
-- docs/lua-api.md and docs/messages.md: one case per guard kind (tensor size, dim
-- count, dtype, device (needs a GPU), stride, a Lua number baked in as an
-- argument or a local, or read from an upvalue's table or a global (after
-- replays, default and reduce-overhead), graph structure, a replaced
-- module parameter, mode)
-- with the exact recompile message (taken from the error that
-- kiln.config.error_on_recompile raises) and the cm:recompiles() entry;
-- cm:guards() strings; kiln.config.cache_size_limit with its warning;
-- KILN_LOGS=recompiles in a child kiln process; names of values that cross
-- a graph break. Functions carry "-- @tag" comments; messages take their
-- lines from those tags. Size cases compile with {dynamic = false}, so they
-- keep testing exact-size guards once automatic dynamic shapes land.
local T = dofile("t/lib/tap.lua")

local SRC = debug.getinfo(1, "S").short_src -- "t/capture_guards.lua"
local LINE, _, at = T.tags()

local function skip(name, why)
  T.n = T.n + 1
  io.write("ok " .. T.n .. " # skip " .. name .. ": " .. why .. "\n")
end

local function cpu(shape, seed) return kiln.randn(shape, { seed = seed, device = "cpu" }) end

-- a and b agree within 1e-5 relative to b's largest magnitude; NaN never does.
local function close(a, b)
  if table.concat(a:shape(), ",") ~= table.concat(b:shape(), ",") or a.dtype ~= b.dtype then return false end
  local d = (a:cast("f32") - b:cast("f32")):abs():amax():item()
  local m = b:cast("f32"):abs():amax():item()
  return d == d and m == m and d <= 1e-5 * math.max(1, m)
end

-- The recompile message of docs/messages.md.
-- `dynamic`: the numbers the recompilation made dynamic.
local function recompile_msg(name, where, graph, version, reasons, dynamic)
  local lines = {
    string.format("Recompiling %s (%s), graph %d, version %d", name, where, graph, version),
    "  triggered by the guard failure(s):",
  }
  for _, r in ipairs(reasons) do lines[#lines + 1] = "  - " .. r end
  for _, d in ipairs(dynamic or {}) do lines[#lines + 1] = "  " .. d .. " is dynamic from now on" end
  return table.concat(lines, "\n") .. "\n"
end

-- cm(...) with kiln.config.error_on_recompile set: the error text, or nil.
local function would_recompile(cm, ...)
  kiln.config.error_on_recompile = true
  local ok, err = pcall(cm, ...)
  kiln.config.error_on_recompile = false
  if ok then return nil end
  return tostring(err)
end

local function has(list, s)
  for _, v in ipairs(list or {}) do if v == s then return true end end
  return false
end

-- The guard strings of graph k, version v.
local function guards_of(cm, k, v)
  for _, e in ipairs(cm:guards()) do
    if e.graph == k and e.version == v then return e.guards end
  end
  return {}
end

-- ---- the functions under test --------------------------------------------

local function sized(x) -- @sized
  return x:exp() * 0.5
end

local function scaled(x, scale) -- @scaled
  return x * scale -- @scale_arg
end

local function scaled_local(x, cfg) -- @scaled_local
  local scale = cfg.scale
  return x:relu() * scale -- @scale_local
end

local function branchy(x, flag) -- @branchy
  local y = x:exp()
  if flag then y = y:relu() end -- @branch
  return y * 2
end

local Net = kiln.nn.Module {
  name = "Net",
  init = function(self) self.fc1 = kiln.nn.Linear(4, 3) end,
  forward = function(self, x) -- @net_forward
    return self.fc1(x):relu()
  end,
}

local knobs = { scale = 0.75 }
local function from_field(x) -- @from_field
  return x * knobs.scale -- @knob_use
end

GUARDED_SHIFT = 1.5
local function from_global(x) -- @from_global
  return x - GUARDED_SHIFT -- @global_shift
end

local function limited(x) -- @limited
  return x:exp()
end

local function residual(x) -- @residual
  local y = x:exp()
  kiln.graph_break()
  return x + y
end

local bias = cpu({ 4 }, 30)
local function with_upvalue(x) -- @upvalue
  return x + bias
end

-- ---- child modes, run by the KILN_LOGS and cache-limit tests below -------
if arg and arg[1] == "child-recompiles" then
  local cm = kiln.compile(sized, { dynamic = false })
  cm(cpu({ 2, 256, 4 }, 1))
  cm(cpu({ 2, 128, 4 }, 2))
  cm(cpu({ 2, 128, 4 }, 3)) -- no recompile: version 1 fits
  local cs = kiln.compile(scaled)
  cs(cpu({ 3 }, 4), 0.125)
  cs(cpu({ 3 }, 4), 0.25)
  os.exit(0)
elseif arg and arg[1] == "child-cache" then
  -- (a child, so that the warning goes to a stderr the test can read)
  kiln.config.cache_size_limit = 3
  local cm = kiln.compile(limited, { dynamic = false })
  local ok_all = true
  for n = 1, 3 do ok_all = close(cm(cpu({ n }, n)), limited(cpu({ n }, n))) and ok_all end
  local r = { recompiles3 = #cm:recompiles(), reasons2 = table.concat((cm:recompiles()[2] or {}).reasons or {}, "\n") }
  local before = cm:stats().eager_fallbacks
  for _, n in ipairs({ 4, 5, 1 }) do ok_all = close(cm(cpu({ n }, n)), limited(cpu({ n }, n))) and ok_all end
  r.ok_all, r.recompiles6, r.fallbacks = ok_all, #cm:recompiles(), cm:stats().eager_fallbacks - before
  r.versions = cm:stats().versions
  io.write(string.format("return {recompiles3 = %d, reasons2 = %q, ok_all = %s, recompiles6 = %d, fallbacks = %d, versions = %d}",
    r.recompiles3, r.reasons2, tostring(r.ok_all), r.recompiles6, r.fallbacks, r.versions))
  os.exit(0)
end

-- ---- one case per guard kind ---------------------------------------------

-- Runs case c: c.cm (kiln.compile(c.fn), compiled where c.fn is a local, so
-- that it is named after it) on args1, then on args2 (or after c.change(cm)),
-- which must recompile graph 0 to version 1 for c.reason.
local function guard_case(c)
  local cm = c.cm
  local a1, a2 = c.args1, c.args2 or c.args1
  local y1 = cm(table.unpack(a1))
  T.ok(close(y1, c.fn(table.unpack(a1))), c.label .. ": first call equals eager")
  if c.change then c.change(cm) end
  local msg = recompile_msg(c.name, at(c.where), 0, 1, { c.reason })
  local err = would_recompile(cm, table.unpack(a2))
  T.ok(err ~= nil and err:find(msg, 1, true) ~= nil, c.label .. ": the exact recompile message")
  if not (err and err:find(msg, 1, true)) then
    T.diag("got: " .. tostring(err))
    T.diag("expected to contain: " .. msg)
  end
  T.ok(err ~= nil and err:find("kiln.config.error_on_recompile", 1, true) ~= nil,
    c.label .. ": kiln.config.error_on_recompile raises and says so")
  T.is(#cm:recompiles(), 0, c.label .. ": the refused recompilation left no entry")
  local y2 = cm(table.unpack(a2))
  T.ok(close(y2, (c.eager2 or c.fn)(table.unpack(a2))), c.label .. ": recompiled call equals eager")
  local r = cm:recompiles()
  T.is(#r, 1, c.label .. ": one cm:recompiles() entry")
  r = r[1] or {}
  T.is(string.format("%s %s %s", r.graph, r.version, r.where), "0 1 " .. at(c.where),
    c.label .. ": entry graph 0, version 1, where = the definition line")
  T.is(table.concat(r.reasons or {}, "\n"), c.reason, c.label .. ": entry reasons")
  return cm
end

-- tensor size
do
  local x1, x2 = cpu({ 16, 256, 512 }, 1), cpu({ 16, 128, 512 }, 2)
  local cm = guard_case { label = "size", fn = sized, cm = kiln.compile(sized, { dynamic = false }), name = "sized", where = "sized",
    args1 = { x1 }, args2 = { x2 }, reason = "0/0: tensor 'x' size mismatch at dim 2: expected 256, actual 128" }
  T.ok(has(guards_of(cm, 0, 0), "tensor 'x' shape {16, 256, 512} dtype f32 device cpu contiguous"),
    "size: cm:guards() of version 0 has \"tensor 'x' shape {16, 256, 512} dtype f32 device cpu contiguous\"")
  T.ok(has(guards_of(cm, 0, 1), "tensor 'x' shape {16, 128, 512} dtype f32 device cpu contiguous"),
    "size: and version 1 its own shape")
  local hits = cm:stats().version_hits
  T.ok(close(cm(x1), sized(x1)) and cm:stats().version_hits == hits + 1 and #cm:recompiles() == 1,
    "size: the first shape again reuses version 0")
  local e = cm:guards()[1] or {}
  T.ok(e.graph == 0 and e.version == 0 and type(e.guards) == "table", "cm:guards() entries are {graph, version, guards}")
end

-- dim count
guard_case { label = "dim count", fn = sized, cm = kiln.compile(sized, { dynamic = false }), name = "sized", where = "sized",
  args1 = { cpu({ 4 }, 3) }, args2 = { cpu({ 2, 2 }, 4) },
  reason = "0/0: tensor 'x' dim count mismatch: expected 1, actual 2" }

-- dtype
guard_case { label = "dtype", fn = sized, cm = kiln.compile(sized), name = "sized", where = "sized",
  args1 = { cpu({ 3, 4 }, 5) }, args2 = { cpu({ 3, 4 }, 6):cast("f16") },
  reason = "0/0: tensor 'x' dtype mismatch: expected f32, actual f16" }

-- device
do
  local has_cuda = pcall(function() return cpu({ 1 }, 1):to("cuda") end)
  if has_cuda then
    guard_case { label = "device", fn = sized, cm = kiln.compile(sized), name = "sized", where = "sized",
      args1 = { cpu({ 3, 4 }, 7) }, args2 = { cpu({ 3, 4 }, 8):to("cuda") },
      reason = "0/0: tensor 'x' device mismatch: expected cpu, actual cuda" }
  else
    skip("device guard", "no CUDA tensors here (x:to('cuda') fails)")
  end
end

-- stride / contiguity: a transposed view
do
  local cm = guard_case { label = "stride", fn = sized, cm = kiln.compile(sized), name = "sized", where = "sized",
    args1 = { cpu({ 4, 8 }, 9) }, args2 = { cpu({ 8, 4 }, 10):transpose(1, 2) },
    reason = "0/0: tensor 'x' stride mismatch: expected contiguous, actual {1, 4}" }
  T.ok(has(guards_of(cm, 0, 1), "tensor 'x' shape {4, 8} dtype f32 device cpu strides {1, 4}"),
    "stride: the guard of the view's version names its strides")
end

-- a number argument baked in
do
  local x = cpu({ 5 }, 11)
  local cm = guard_case { label = "number argument", fn = scaled, cm = kiln.compile(scaled), name = "scaled", where = "scaled",
    args1 = { x, 0.125 }, args2 = { x, 0.25 },
    reason = "0/0: number 'scale' at " .. at("scale_arg") .. " changed: 0.125 -> 0.25" }
  T.ok(has(guards_of(cm, 0, 0), "number 'scale' at " .. at("scale_arg") .. " == 0.125"),
    "number argument: cm:guards() has the number's value")
end

-- a number local baked in
do
  local x = cpu({ 5 }, 12)
  guard_case { label = "number local", fn = scaled_local, cm = kiln.compile(scaled_local), name = "scaled_local", where = "scaled_local",
    args1 = { x, { scale = 0.125 } }, args2 = { x, { scale = 0.25 } },
    reason = "0/0: number 'scale' at " .. at("scale_local") .. " changed: 0.125 -> 0.25" }
end

-- graph structure: a branch on a Lua boolean argument taken differently
do
  local x = cpu({ 6 }, 13)
  guard_case { label = "graph structure", fn = branchy, cm = kiln.compile(branchy), name = "branchy", where = "branchy",
    args1 = { x, false }, args2 = { x, true },
    reason = "0/0: graph differs from version 0 from node 2 at " .. at("branch") }
end

-- a module parameter replaced
do
  local m = Net():to("cpu")
  local x = cpu({ 2, 4 }, 14)
  local cm = kiln.compile(m)
  guard_case { label = "parameter replaced", cm = cm, fn = function(v) return m(v) end, name = "forward",
    where = "net_forward", args1 = { x },
    change = function() m.fc1.weight = cpu({ 3, 4 }, 15) end,
    reason = "0/0: parameter 'fc1.weight' was replaced" }
  T.ok(has(guards_of(cm, 0, 0), "parameter 'fc1.weight' shape {3, 4} dtype f32 device cpu contiguous, same object, requires_grad"),
    "parameter: cm:guards() names it by its dotted name")
end

-- the mode
do
  local x = cpu({ 3 }, 16)
  local cm = guard_case { label = "mode changed", fn = sized, cm = kiln.compile(sized), name = "sized", where = "sized", args1 = { x },
    change = function(c) c:set_mode("max-autotune") end,
    reason = "0/0: mode changed: default -> max-autotune" }
  T.is(cm:mode(), "max-autotune", "cm:mode() after cm:set_mode")
  T.ok(has(guards_of(cm, 0, 0), "mode default") and has(guards_of(cm, 0, 1), "mode max-autotune"),
    "mode: each version guards its mode")
end

-- ---- kiln.config.cache_size_limit (3): shapes {1}, {2}, {3}, then {4}, {5}, {1}
do
  local kiln_bin = os.getenv("KILN") or "build/kiln"
  local errfile = os.tmpname()
  local p = io.popen("KILN_LOGS= '" .. kiln_bin .. "' " .. SRC .. " child-cache 2>'" .. errfile .. "'")
  local out = p:read("a")
  p:close()
  local f = io.open(errfile)
  local text = f and f:read("a") or ""
  if f then f:close() end
  os.remove(errfile)
  local okl, r = pcall(function() return assert(load(out))() end)
  if not okl then
    T.diag("child-cache printed: " .. out)
    r = {}
  end
  T.is(r.recompiles3, 2, "cache limit 3: three versions, two recompilations")
  T.is(r.reasons2,
    "0/1: tensor 'x' size mismatch at dim 1: expected 2, actual 3\n0/0: tensor 'x' size mismatch at dim 1: expected 1, actual 3",
    "a recompilation lists the failure against each cached version, newest first")
  T.ok(r.ok_all, "cache limit: every call, compiled or eager, equals eager")
  T.is(r.recompiles6, 2, "cache limit: falling back to eager adds no recompile entry")
  T.is(r.fallbacks, 3, "cache limit: eager_fallbacks counts each eager call (the graph stays eager)")
  T.is(r.versions, 3, "cache limit: no fourth version")
  T.is(text, "limited (" .. at("limited") .. ") hit kiln.config.cache_size_limit (3): graph 0 runs eagerly from now on\n"
    .. "  last reason: 0/2: tensor 'x' size mismatch at dim 1: expected 3, actual 4\n",
    "cache limit: the warning on stderr, once, exact text")
  T.is(kiln.config.cache_size_limit, 8, "kiln.config.cache_size_limit defaults to 8")
end

-- ---- kiln.config.error_on_recompile --------------------------------------
do
  local cm = kiln.compile(sized, { dynamic = false })
  local x = cpu({ 2, 3 }, 17)
  cm(x)
  kiln.config.error_on_recompile = true
  T.raises(function() cm(cpu({ 2, 5 }, 18)) end,
    "error_on_recompile is set and this call would recompile:\nRecompiling sized %(" .. at("sized"):gsub("%p", "%%%0")
      .. "%), graph 0, version 1\n  triggered by the guard failure%(s%):\n  %- 0/0: tensor 'x' size mismatch at dim 2: expected 3, actual 5",
    "error_on_recompile: raises with the recompile text")
  local ok = pcall(cm, x)
  kiln.config.error_on_recompile = false
  T.ok(ok and #cm:recompiles() == 0 and cm:stats().versions == 1,
    "error_on_recompile: a call that fits a cached version still runs; nothing was added")
end

-- ---- KILN_LOGS=recompiles ----------------------------------------------
do
  local kiln_bin = os.getenv("KILN") or "build/kiln"
  local p = io.popen("KILN_LOGS=recompiles '" .. kiln_bin .. "' " .. SRC .. " child-recompiles 2>&1 >/dev/null")
  local text = p:read("a")
  p:close()
  T.is(text, recompile_msg("sized", at("sized"), 0, 1, { "0/0: tensor 'x' size mismatch at dim 2: expected 256, actual 128" })
    .. recompile_msg("scaled", at("scaled"), 0, 1, { "0/0: number 'scale' at " .. at("scale_arg") .. " changed: 0.125 -> 0.25" },
      { "number 'scale' at " .. at("scale_arg") }),
    "KILN_LOGS=recompiles prints each recompilation on stderr, exact text")
  p = io.popen("KILN_LOGS= '" .. kiln_bin .. "' " .. SRC .. " child-recompiles 2>&1 >/dev/null")
  text = p:read("a")
  p:close()
  T.is(text, "", "without KILN_LOGS recompilations print nothing")
end

-- ---- names of values that cross a graph break, and of other tensors ------
do
  local cm = kiln.compile(residual, { dynamic = false })
  local x1, x2 = cpu({ 2 }, 19), cpu({ 3 }, 20)
  local ok = close(cm(x1), residual(x1)) and close(cm(x2), residual(x2))
  T.ok(ok, "a break between uses of an argument: results equal eager")
  local g1 = guards_of(cm, 1, 0)
  T.ok(has(g1, "tensor 'graph 0 output 0' shape {2} dtype f32 device cpu contiguous"),
    "a value an earlier graph computed is named 'graph K output N'")
  T.ok(has(g1, "tensor 'x' shape {2} dtype f32 device cpu contiguous"),
    "an argument used again after a break keeps its parameter name in the next graph")
  local reasons = {}
  for _, r in ipairs(cm:recompiles()) do reasons[#reasons + 1] = table.concat(r.reasons, "; ") end
  T.ok(has(reasons, "1/0: tensor 'x' size mismatch at dim 1: expected 2, actual 3"),
    "... and the next graph's recompile reason names it 'x'")
end
do
  local cm = kiln.compile(with_upvalue)
  local x = cpu({ 4 }, 21)
  T.ok(close(cm(x), with_upvalue(x)), "a tensor upvalue: results equal eager")
  local g0 = guards_of(cm, 0, 0)
  T.ok(has(g0, "tensor 'bias' shape {4} dtype f32 device cpu contiguous, same object"),
    "a tensor upvalue is named by its Lua name in the guards")
  bias = cpu({ 4 }, 22)
  local err = would_recompile(cm, x)
  local want = recompile_msg("with_upvalue", at("upvalue"), 0, 1, { "0/0: tensor 'bias' was replaced" })
  T.ok(err ~= nil and err:find(want, 1, true) ~= nil, "replacing a tensor upvalue: \"tensor 'bias' was replaced\"")
  T.ok(close(cm(x), with_upvalue(x)), "a replaced tensor upvalue: results use the new tensor")
end

-- ---- numbers read from an upvalue's table or a global -------------------
for _, mode in ipairs { "default", "reduce-overhead" } do
  local cf = kiln.compile(from_field, { mode = mode })
  local cg = kiln.compile(from_global, { mode = mode })
  local x = cpu({ 3 }, 23)
  cf(x); cf(x); cg(x); cg(x) -- the second calls replay
  T.ok(has(guards_of(cf, 0, 0), "number 'knobs.scale' at " .. at("knob_use") .. " == 0.75"),
    mode .. ": a number from an upvalue's table is a guard named by its field")
  T.ok(has(guards_of(cg, 0, 0), "number 'GUARDED_SHIFT' at " .. at("global_shift") .. " == 1.5"),
    mode .. ": a number from a global is a guard named by the global")
  knobs.scale, GUARDED_SHIFT = 1.25, -2.5
  local err = would_recompile(cf, x)
  local want = recompile_msg("from_field", at("from_field"), 0, 1,
    { "0/0: number 'knobs.scale' at " .. at("knob_use") .. " changed: 0.75 -> 1.25" })
  T.ok(err ~= nil and err:find(want, 1, true) ~= nil, mode .. ": knobs.scale changed after a replay: exact recompile message")
  err = would_recompile(cg, x)
  want = recompile_msg("from_global", at("from_global"), 0, 1,
    { "0/0: number 'GUARDED_SHIFT' at " .. at("global_shift") .. " changed: 1.5 -> -2.5" })
  T.ok(err ~= nil and err:find(want, 1, true) ~= nil, mode .. ": a global changed after a replay: exact recompile message")
  T.ok(close(cf(x), from_field(x)) and close(cg(x), from_global(x)), mode .. ": and the calls give the new results")
  knobs.scale, GUARDED_SHIFT = 0.75, 1.5
end

-- A call that reads more tensors made inside it than the version it was
-- compiled as (a training step's second call: the optimizer's state exists
-- now). Such tensors are named by line and count, so the reason is the
-- count and the new names, not a dtype "changing" between two tensors
-- that share a name.
do
  local state = {}
  local cm = kiln.compile(function(x)
    local y = x * 2
    if state.m then y = y + state.m * state.v else state.m, state.v = kiln.zeros({ 3 }), kiln.ones({ 3 }, { dtype = "f64" }) end
    return y
  end)
  local x = cpu({ 3 }, 5)
  cm(x)
  cm(x)
  local r = cm:recompiles()[1]
  local reason = r and r.reasons and r.reasons[1] or "none"
  T.like(reason, "the graph reads 3 tensors, version 0 read 1 %(new: 'tensor at ", "more tensors made inside the call: the count and the new names (" .. reason .. ")")
  T.ok(not reason:find("dtype", 1, true), "... not a dtype mismatch between two tensors named alike")
end

T.done()
