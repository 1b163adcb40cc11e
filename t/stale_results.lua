-- stale_results.lua: a compiled function never answers from its cache what
-- an eager run would compute differently (issue 14, class 4), in the
-- default and the reduce-overhead modes, traced and replayed:
-- - unseeded random ops draw new numbers at every call, exactly the eager
--   stream (Dropout masks differ between calls, with eager's statistics);
--   seeded ones repeat;
-- - a conv + batch norm folded at compile time follows copy_ on the conv's
--   weight and bias and the batch norm's running mean, variance, weight
--   and bias;
-- - a number read from an upvalue's table (cfg.scale), a global and a
--   global table's field are guarded: a change gives the new result and a
--   recompile whose reason names the value.
-- References are eager runs on fresh random inputs.
local T = dofile("t/lib/tap.lua")

local SRC = debug.getinfo(1, "S").short_src
local _, _, at = T.tags()
local MODES = { "default", "reduce-overhead" }

-- a and b have the same shape and agree within tol relative to b's largest
-- magnitude; NaN never does.
local function close(a, b, tol)
  if table.concat(a:shape(), ",") ~= table.concat(b:shape(), ",") then return false end
  local d = (a:cast("f64") - b:cast("f64")):abs():amax():item()
  local m = b:cast("f64"):abs():amax():item()
  return d == d and m == m and d <= (tol or 1e-5) * math.max(1, m)
end

local function same(a, b) return close(a, b, 0) end

local function fresh_seed() return math.random(1, 1 << 30) end
math.randomseed(os.time())

-- ---- unseeded random ops: fresh numbers every call, the eager stream -----
local function noisy(x) -- @noisy
  return x + kiln.rand({ 6 })
end

for _, mode in ipairs(MODES) do
  local cm = kiln.compile(noisy, { mode = mode })
  local x = kiln.zeros({ 6 })
  local seed = fresh_seed()
  kiln.manual_seed(seed)
  local want = {}
  for i = 1, 4 do want[i] = kiln.rand({ 6 }) end
  kiln.manual_seed(seed)
  local got = {}
  for i = 1, 4 do got[i] = cm(x) end
  local all = true
  for i = 1, 4 do all = all and same(got[i], want[i]) end
  T.ok(all, mode .. ": four calls (trace, then replays) draw the eager stream's next numbers each time")
  T.ok(not same(got[3], got[4]), mode .. ": two replays differ")
  T.ok(cm:stats().direct_replays >= 2, mode .. ": and they were replays (no Lua run): "
    .. tostring(cm:stats().direct_replays))
  -- compiled and eager draws interleave as one stream
  kiln.manual_seed(seed)
  cm(x)
  T.ok(same(kiln.rand({ 6 }), want[2]), mode .. ": an eager draw after a compiled call continues the stream")
  -- a new seed between calls: the replay follows it, no recompile
  kiln.manual_seed(seed + 1)
  local a = kiln.rand({ 6 })
  kiln.manual_seed(seed + 1)
  T.ok(same(cm(x), a), mode .. ": kiln.manual_seed between calls is followed")
  T.is(#cm:recompiles(), 0, mode .. ": without recompiling")
end

-- traced at every call (replay off): each trace's counters reach the plan
-- built from the first trace
do
  kiln.config.replay = false
  local cm = kiln.compile(noisy)
  local x = kiln.zeros({ 6 })
  local seed = fresh_seed()
  kiln.manual_seed(seed)
  local want = {}
  for i = 1, 3 do want[i] = kiln.rand({ 6 }) end
  kiln.manual_seed(seed)
  local ok = true
  for i = 1, 3 do ok = same(cm(x), want[i]) and ok end
  T.ok(ok and cm:stats().direct_replays == 0, "replay off: every traced call draws the eager stream's next numbers")
  T.is(cm:stats().versions, 1, "replay off: from one compiled version")
  kiln.config.replay = nil
end

local function seeded(x) -- @seeded
  return x + kiln.randn({ 5 }, { seed = 1234 })
end

for _, mode in ipairs(MODES) do
  local cm = kiln.compile(seeded, { mode = mode })
  local x = kiln.zeros({ 5 })
  local want = kiln.randn({ 5 }, { seed = 1234 })
  local r1, r2, r3 = cm(x), cm(x), cm(x)
  T.ok(same(r1, want) and same(r2, want) and same(r3, want),
    mode .. ": a seeded random op gives its seed's numbers at every call")
end

-- Dropout: a new mask at every call, with eager's statistics
for _, mode in ipairs(MODES) do
  local p, n = 0.3, 20000
  local drop = kiln.nn.Dropout(p)
  local cm = kiln.compile(drop, { mode = mode })
  local x = kiln.randn({ n }, { seed = fresh_seed() }):abs() + 0.5 -- never 0
  local masks, fracs, scaled_ok = {}, {}, true
  for i = 1, 4 do
    local y = cm(x)
    masks[i] = y:eq(0)
    fracs[i] = masks[i]:cast("f64"):sum():item() / n
    -- kept elements are x / (1 - p), exactly as eagerly
    local kept = kiln.where(masks[i], 0, x * (1 / (1 - p)))
    scaled_ok = scaled_ok and same(y, kept)
  end
  local eager = drop(x):eq(0):cast("f64"):sum():item() / n
  -- binomial: 5 standard deviations of a fraction of n draws
  local tol = 5 * math.sqrt(p * (1 - p) / n)
  local stats_ok = math.abs(eager - p) < tol
  for i = 1, 4 do stats_ok = stats_ok and math.abs(fracs[i] - p) < tol end
  T.ok(stats_ok, string.format("%s: Dropout(%g) drops %.4f %.4f %.4f %.4f of the elements (eager %.4f)", mode, p,
    fracs[1], fracs[2], fracs[3], fracs[4], eager))
  local differ = true
  for i = 2, 4 do
    -- two independent masks differ in about 2 p (1 - p) of the elements
    local d = masks[i]:ne(masks[i - 1]):cast("f64"):sum():item() / n
    differ = differ and math.abs(d - 2 * p * (1 - p)) < 2 * tol
  end
  T.ok(differ, mode .. ": each call's mask is new (independent of the previous one)")
  T.ok(scaled_ok, mode .. ": kept elements are scaled by 1 / (1 - p)")
  drop:eval()
  T.ok(same(cm(x), x), mode .. ": eval() after compiled training calls: identity")
end

-- ---- batch norm folded into the conv follows in-place writes -------------
local function randn(shape) return kiln.randn(shape, { seed = fresh_seed() }) end

for _, mode in ipairs(MODES) do
  local model = kiln.nn.Sequential(kiln.nn.Conv2d(3, 4, 3, { padding = 1 }), kiln.nn.BatchNorm2d(4))
  model:eval()
  local conv, bn = model[1], model[2]
  bn.running_mean:copy_(randn({ 4 }))
  bn.running_var:copy_(randn({ 4 }):abs() + 0.5)
  local cm = kiln.compile(model, { mode = mode })
  local x = randn({ 2, 3, 5, 5 })
  T.ok(close(cm(x), model(x), 1e-4), mode .. ": conv + batch norm in eval: equals eager")
  local folded = true
  for _, k in ipairs(cm:kernels()) do
    if tostring(k.name or k):find("batch_norm") then folded = false end
  end
  T.ok(folded, mode .. ": the batch norm was folded into the conv (no batch_norm kernel)")
  local targets = {
    { "conv.weight", conv.weight, function() return randn({ 4, 3, 3, 3 }) end },
    { "conv.bias", conv.bias, function() return randn({ 4 }) end },
    { "bn.running_mean", bn.running_mean, function() return randn({ 4 }) end },
    { "bn.running_var", bn.running_var, function() return randn({ 4 }):abs() + 0.25 end },
    { "bn.weight", bn.weight, function() return randn({ 4 }) end },
    { "bn.bias", bn.bias, function() return randn({ 4 }) end },
  }
  for _, tg in ipairs(targets) do
    local before = cm(x)
    kiln.no_grad(function() tg[2]:copy_(tg[3]()) end) -- parameters are written outside autograd
    local after, want = cm(x), model(x)
    T.ok(close(after, want, 1e-4) and not close(before, want, 1e-4),
      mode .. ": copy_ into " .. tg[1] .. ": the next call uses the new values")
    T.ok(close(cm(x), want, 1e-4), mode .. ": ... and so does the call after it")
  end
  T.is(#cm:recompiles(), 0, mode .. ": an in-place write rebuilds the plan, not a new version")
  -- loading a file puts new tensors in the module: the identity guards see them
  local other = kiln.nn.Sequential(kiln.nn.Conv2d(3, 4, 3, { padding = 1 }), kiln.nn.BatchNorm2d(4))
  other[2].running_mean:copy_(randn({ 4 }))
  local path = os.tmpname()
  other:save_safetensors(path)
  model:load_safetensors(path)
  os.remove(path)
  T.ok(close(cm(x), model(x), 1e-4) and close(cm(x), other:eval()(x), 1e-4),
    mode .. ": after load_safetensors the compiled model gives the loaded model's result")
end

-- ---- numbers from upvalue tables and globals are guarded -----------------
local cfg = { scale = 2 }
local function by_field(x) -- @by_field
  return x * cfg.scale -- @field_use
end

SCALE = 2
local function by_global(x) -- @by_global
  return x * SCALE -- @global_use
end

CFG = { shift = 4 } -- numbers are named by value: a value no other name holds
local function by_global_field(x) -- @by_global_field
  return x + CFG.shift -- @global_field_use
end

local opts = { relu = false }
local function helper(x) return opts.relu and x:relu() or x:neg() end
local function by_helper(x) -- @by_helper
  return helper(x) * 2
end

for _, mode in ipairs(MODES) do
  local x = randn({ 7 })
  cfg.scale, SCALE, CFG.shift, opts.relu = 2, 2, 4, false
  local cf = kiln.compile(by_field, { mode = mode })
  local cg = kiln.compile(by_global, { mode = mode })
  local cgf = kiln.compile(by_global_field, { mode = mode })
  local ch = kiln.compile(by_helper, { mode = mode })
  for _ = 1, 3 do cf(x); cg(x); cgf(x); ch(x) end -- traced, then replayed
  T.ok(cf:stats().direct_replays >= 2 and cg:stats().direct_replays >= 2, mode .. ": unchanged values replay")
  cfg.scale, SCALE, CFG.shift, opts.relu = 3, 5, -1, true
  T.ok(same(cf(x), x * 3), mode .. ": cfg.scale changed from 2 to 3: the new result")
  T.is(cf:recompiles()[1] and cf:recompiles()[1].reasons[1],
    "0/0: number 'cfg.scale' at " .. at("field_use") .. " changed: 2 -> 3", mode .. ": explained, naming cfg.scale")
  T.ok(same(cg(x), x * 5), mode .. ": a global changed from 2 to 5: the new result")
  T.is(cg:recompiles()[1] and cg:recompiles()[1].reasons[1],
    "0/0: number 'SCALE' at " .. at("global_use") .. " changed: 2 -> 5", mode .. ": explained, naming SCALE")
  T.ok(same(cgf(x), x + -1), mode .. ": a global table's field changed: the new result")
  T.is(cgf:recompiles()[1] and cgf:recompiles()[1].reasons[1],
    "0/0: number 'CFG.shift' at " .. at("global_field_use") .. " changed: 4 -> -1", mode .. ": explained, naming CFG.shift")
  T.ok(same(ch(x), x:relu() * 2), mode .. ": a flag in a helper's upvalue table changed the graph: the new result")
  -- and back: the first versions fit again
  cfg.scale, SCALE = 2, 2
  T.ok(same(cf(x), x * 2) and same(cg(x), x * 2), mode .. ": changed back: the first version's result")
  T.is(#cf:recompiles() + #cg:recompiles(), 2, mode .. ": without compiling again")
  -- a field added later (nil when traced) is seen too
  cfg.extra = 1
  T.ok(same(cf(x), x * 2), mode .. ": a field added to the table: still right")
end

-- a nested table replaced by another one holding a new value
do
  local holder = { cfg = { scale = 2 } }
  local cm = kiln.compile(function(x) return x * holder.cfg.scale end)
  local x = randn({ 3 })
  cm(x); cm(x); cm(x)
  holder.cfg = { scale = 7 }
  T.ok(same(cm(x), x * 7), "a nested table replaced after replays: the new table's value")
end

-- a module held in an upvalue: its training flag is guarded on replay
do
  local drop = kiln.nn.Dropout(0.5)
  local cm = kiln.compile(function(x) return drop(x) * 1 end)
  local x = kiln.ones({ 1000 })
  drop:eval()
  cm(x); cm(x); cm(x)
  drop:train()
  local zeros = cm(x):eq(0):cast("f64"):sum():item()
  T.ok(zeros > 350 and zeros < 650, "an upvalue module switched to train(): the replay sees it (" .. zeros .. " dropped)")
end

-- a function that can reach more Lua values than a replay checks is traced
-- at every call, and still right
do
  local big = { scale = 2 }
  for i = 1, 5000 do big[i] = i end
  local cm = kiln.compile(function(x) return x * big.scale end)
  local x = randn({ 3 })
  cm(x); cm(x)
  T.like(cm:stats().replayable, "more Lua values than a replay checks", "a huge table reachable: not replayed")
  big.scale = 3
  T.ok(same(cm(x), x * 3), "... and a changed field is still seen")
end

T.done()
