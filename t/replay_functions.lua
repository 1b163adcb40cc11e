-- replay_functions.lua: a compiled function that reaches its modules
-- through upvalues, globals or tables of layers (README's style) replays
-- like a compiled module: the tensors it read are found again through
-- what it can read (guarded by the replay's snapshot: same objects in the
-- same places), named by their path (fc1.weight, layers.2.bias), and
-- in-place changes are seen. What cannot be replayed says which tensor
-- and what to do. The modules are in eval mode (inference); in train mode
-- with grad on a replay also keeps what backward needs and rebuilds the
-- result's history (t/compiled_training.lua).
local T = dofile("t/lib/tap.lua")
local nn = kiln.nn
local x = kiln.randn({8, 16}, { seed = 1 })

local function maxdiff(a, b) return (a - b):abs():amax():item() end

local function guards_text(cm)
  local lines = {}
  for _, g in ipairs(cm:guards()) do
    for _, s in ipairs(g.guards) do lines[#lines + 1] = s end
  end
  return table.concat(lines, "\n")
end

-- upvalues
do
  local fc1, fc2 = nn.Linear(16, 32), nn.Linear(32, 4)
  local f = function(v) return fc2(fc1(v):relu()) end
  local cm = kiln.compile(f)
  cm(x)
  T.is(cm:stats().replayable, "yes", "train mode: a call whose result carries autograd history is replayable too")
  fc1:eval()
  fc2:eval()
  for _ = 1, 5 do cm(x) end
  local st = cm:stats()
  T.like(table.concat(cm:recompiles()[1].reasons, "\n"), "train/eval mode changed: fc%d%.training true %-> false",
    "train mode, then eval: a recompile naming the module")
  T.is(st.replayable, "yes", "upvalue modules: the function is replayable")
  T.is(st.direct_replays, 4, "upvalue modules: calls 2-5 replay")
  T.is(maxdiff(cm(x), f(x)), 0, "upvalue modules: a replay gives eager's answer")
  local g = guards_text(cm)
  T.like(g, "tensor 'fc1%.weight' shape {32, 16}", "upvalue modules: parameters named by path (fc1.weight)")
  T.like(g, "tensor 'fc2%.bias' shape {4}", "upvalue modules: and fc2.bias")
  T.ok(not g:find("tensor at ", 1, true), "upvalue modules: no parameter is named by a source line")
  -- in place (as an optimizer's step, outside autograd): the replay reads
  -- the tensor as it is now
  kiln.no_grad(function() fc1.weight:copy_(fc1.weight * 2) end)
  local before = cm:stats().direct_replays
  T.is(maxdiff(cm(x), f(x)), 0, "an in-place change of fc1.weight: the next call sees it")
  T.is(cm:stats().direct_replays, before + 1, "... and still replays")
  -- swapped: a different tensor in the field is a recompile, named
  fc2.weight = kiln.randn({ 4, 32 }, { seed = 7 })
  T.is(maxdiff(cm(x), f(x)), 0, "fc2.weight swapped for another tensor: the answer follows")
  local rc = cm:recompiles()
  T.like(rc[#rc] and table.concat(rc[#rc].reasons, "\n") or "", "fc2%.weight", "... a recompile naming fc2.weight")
  cm(x)
  cm(x)
  T.is(cm:stats().direct_replays, before + 3, "... and the new version replays (the swap's call traced)")
end

-- globals, and a table of layers
do
  rf_fc1, rf_fc2 = nn.Linear(16, 32):eval(), nn.Linear(32, 4):eval()
  local function g(v) return rf_fc2(rf_fc1(v):relu()) end
  local cm = kiln.compile(g)
  for _ = 1, 4 do cm(x) end
  T.is(cm:stats().direct_replays, 3, "global modules: calls 2-4 replay")
  T.is(maxdiff(cm(x), g(x)), 0, "global modules: a replay gives eager's answer")
  T.like(guards_text(cm), "tensor 'rf_fc1%.weight'", "global modules: named by the global's name")
  rf_fc1, rf_fc2 = nil, nil

  local layers = { nn.Linear(16, 16):eval(), nn.Linear(16, 16):eval(), nn.Linear(16, 4):eval() }
  local function h(v)
    for _, l in ipairs(layers) do v = l(v):relu() end
    return v
  end
  local ch = kiln.compile(h)
  for _ = 1, 4 do ch(x) end
  T.is(ch:stats().direct_replays, 3, "a table of layers: calls 2-4 replay")
  T.like(guards_text(ch), "tensor 'layers%.3%.weight' shape {4, 16}", "a table of layers: layers.3.weight")
  T.is(maxdiff(ch(x), h(x)), 0, "a table of layers: a replay gives eager's answer")
end

-- globals as the REPL has them: the result kept in a global (y = cm(x))
-- does not stop the replay; a global tensor the graph reads is compared
do
  rf_W = kiln.randn({ 16, 4 }, { seed = 5 })
  local function hw(v) return v:matmul(rf_W) end
  local ch = kiln.compile(hw)
  for _ = 1, 5 do rf_y = ch(x) end
  T.ok(ch:stats().direct_replays >= 3, "a result kept in a global: the calls still replay ("
    .. ch:stats().direct_replays .. " of 5)")
  rf_W = kiln.randn({ 16, 4 }, { seed = 6 })
  T.is(maxdiff(ch(x), x:matmul(rf_W)), 0, "a global tensor the graph reads, swapped: the answer follows")
  rf_W, rf_y = nil, nil
end

-- a tensor no value the function can see holds: said, with what to do
do
  local hidden = kiln.randn({ 16, 4 }, { seed = 3 })
  local src = setmetatable({}, { __index = function() return hidden end })
  local function k(v) return v:matmul(src.w) end
  local ck = kiln.compile(k)
  for _ = 1, 3 do ck(x) end
  T.is(ck:stats().direct_replays, 0, "a tensor reached through a metamethod: no replay")
  T.like(ck:stats().replayable, "^it reads tensor '.-', which no upvalue, global or table it can reach holds",
    "... replayable names the tensor")
  T.like(ck:stats().replayable, "pass it as an argument, or keep it in a module$", "... and says what to do")
  T.is(maxdiff(ck(x), k(x)), 0, "... and the traced calls are right")
end
-- a break's user stack names its functions (stack.functions, beside the lines)
do
  local function inner(v) if v:sum():item() > 0 then return v * 2 end return v end
  local function outer(v) return inner(v) + 1 end
  local co = kiln.compile(outer)
  co(x)
  local b = co:breaks()[1]
  T.ok(b and type(b.stack.functions) == "table" and #b.stack.functions == #b.stack,
    "a break's stack.functions has a name per frame")
  T.is(b and b.stack.functions[1], "inner", "... the innermost is the function the break is in")
end

-- a function only a global names (made from a string: no source line to
-- read its name from): named as Lua's tracebacks name it
rf_named = load("return function(v) return v:relu() end", "=typed")()
T.is(kiln.compile(rf_named):stats().name, "rf_named", "a compiled global function is named by its global")
rf_named = nil
-- a global the function reads that was nil when it was traced, defined
-- after some replays: the next call sees it (kiln watches the globals for
-- new keys); also where the user's own metatable is on the globals table
-- (kiln's watch gives way and the replay counts the globals instead)
for _, users_metatable in ipairs({ false, true }) do
  local what = users_metatable and "with the user's metatable on _G" or "kiln's watch"
  if users_metatable then setmetatable(_G, { __index = function() return nil end }) end
  local function late(v)
    if RF_LATE_SCALE then return v * RF_LATE_SCALE end
    return v:relu()
  end
  local cl = kiln.compile(late)
  for _ = 1, 3 do cl(x) end
  T.is(cl:stats().direct_replays, 2, what .. ": calls 2-3 replay")
  RF_LATE_SCALE = 3
  T.is(maxdiff(cl(x), x * 3), 0, what .. ": a global defined after the replays is seen at the next call")
  RF_UNRELATED = 1 -- a new global the function does not read: traced once, then replays again
  local before = cl:stats().direct_replays
  cl(x)
  cl(x)
  T.ok(cl:stats().direct_replays > before, what .. ": an unrelated new global: replays go on")
  RF_LATE_SCALE, RF_UNRELATED = nil, nil
  if users_metatable then setmetatable(_G, nil) end
end

-- what a replay walks: every table the function can reach, each compared
-- entry by entry in the order lua_next gives after the trace. Any change
-- traces the call (and the answer follows); an equal value does not.
do
  local long = string.rep("gelu-tanh ", 8) -- longer than Lua's interned strings
  local cfg = { scale = 2, kind = long, inner = { shift = 1 } }
  local function fw(v)
    local y = v * cfg.scale + cfg.inner.shift
    if cfg.kind == long and cfg.extra then y = y + cfg.extra end
    return y
  end
  local cw = kiln.compile(fw)
  local function replays_after(change, what, want_replay)
    local r0 = cw:stats().direct_replays
    change()
    T.is(maxdiff(cw(x), fw(x)), 0, what .. ": a call gives eager's answer")
    local r1 = cw:stats().direct_replays
    cw(x)
    T.is(cw:stats().direct_replays, r1 + 1, what .. ": the call after it replays")
    if want_replay then T.is(r1, r0 + 1, what .. ": the call itself replays")
    else T.is(r1, r0, what .. ": the call itself traces") end
  end
  for _ = 1, 3 do cw(x) end
  T.is(cw:stats().direct_replays, 2, "a config table: calls 2-3 replay")
  replays_after(function() cfg.kind = string.rep("gelu-tanh ", 8) end, "a long string swapped for an equal copy", true)
  replays_after(function() cfg.scale = 3 end, "a number changed", false)
  replays_after(function() cfg.scale = 3.0 end, "an integer made the equal float", false)
  replays_after(function() cfg.inner.shift = -1 end, "a nested table's field changed", false)
  replays_after(function() cfg.inner = { shift = -1 } end, "a nested table swapped for an equal one", false)
  replays_after(function() cfg.extra = 5 end, "a key added that the function reads", false)
  replays_after(function() cfg.extra = nil end, "that key removed", false)
  replays_after(function() cfg.kind = "relu" end, "a string changed", false)
end

-- an ONNX model's parameters (its flat params table): guarded by the
-- table's walk; one swapped for another tensor is seen at the next call
do
  local m, ins = dofile("t/lib/real_tiny.lua")("bert_tiny")
  local cm = kiln.compile(m)
  for _ = 1, 4 do cm(table.unpack(ins)) end
  -- (the first call caches index constants in the module: the second traces)
  T.is(cm:stats().direct_replays, 2, "ONNX BERT: calls 3-4 replay")
  local name
  for k, p in pairs(m.params) do
    if p.dtype == "f32" and #p:shape() == 2 and (not name or k < name) then name = k end
  end
  m.params[name] = m.params[name] * 2
  local want = kiln.no_grad(m, table.unpack(ins))
  local got = cm(table.unpack(ins))
  local before_swap = kiln.no_grad(function() return maxdiff(got, want) / want:abs():amax():item() end)
  T.ok(before_swap < 1e-5, "ONNX BERT: parameter '" .. name .. "' swapped: the answer follows (rel err "
    .. before_swap .. ")")
  local before = cm:stats().direct_replays
  cm(table.unpack(ins))
  T.is(cm:stats().direct_replays, before + 1, "ONNX BERT: ... and the new version replays")
end

T.done()
