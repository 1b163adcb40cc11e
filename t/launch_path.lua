-- launch_path.lua: the lean launch path of a replayed compiled call (issue
-- 13, item 4) keeps its results right. Over many calls on fresh random
-- inputs, in default and reduce-overhead: every call's results match a
-- float64 eager reference computed from its own inputs, and results handed
-- out earlier are not changed by later calls (the plan reuses its value
-- table and arena tensor headers between runs; a recording overwrites its
-- static outputs). And the replay guards, now walking pre-split parameter
-- paths and a flat list of module fields, still fail when they should: a
-- replaced parameter, a replaced submodule, a replaced nested table of
-- modules, a changed scalar field, a changed upvalue, a changed number
-- argument, a new shape; each call's result then follows the new state.
local T = dofile("t/lib/tap.lua")
local nn = kiln.nn

-- a and b (any dtype) agree within tol relative to b's largest magnitude;
-- NaN never does.
local function close(a, b, tol)
  if table.concat(a:shape(), ",") ~= table.concat(b:shape(), ",") then return false end
  local d = (a:cast("f64") - b:cast("f64")):abs():amax():item()
  local m = b:cast("f64"):abs():amax():item()
  return d == d and m == m and d <= (tol or 1e-5) * math.max(1, m)
end

-- Two results, one of them a view (a transpose) of a computed value, and
-- a reduction: several kernels, arena intermediates, outputs that escape.
local function f(x, w)
  local h = (x:matmul(w) + 0.5):relu()
  local g = h * x:sum(-1, true) - h:exp() * 0.25
  return g:t(), (g * g):sum(-1)
end

local seed = 100
local function fresh(shape)
  seed = seed + 1
  return kiln.randn(shape, { seed = seed })
end

local N = 40
for _, mode in ipairs({ "default", "reduce-overhead" }) do
  local cm = kiln.compile(f, { mode = mode })
  local outs, refs = {}, {}
  for i = 1, N do
    local x, w = fresh({ 5, 6 }), fresh({ 6, 6 })
    local a, b = cm(x, w)
    local ra, rb = f(x:cast("f64"), w:cast("f64"))
    outs[i], refs[i] = { a, b, a:cast("f64"), b:cast("f64") }, { ra, rb }
  end
  local right, kept, distinct = true, true, true
  for i = 1, N do
    local o, r = outs[i], refs[i]
    right = right and close(o[3], r[1]) and close(o[4], r[2])
    -- still the values they had when returned, after N - i more calls
    kept = kept and close(o[1], o[3], 0) and close(o[2], o[4], 0)
    if i > 1 then distinct = distinct and not close(outs[i - 1][1], o[1], 0) end
  end
  local s = cm:stats()
  T.ok(s.direct_replays >= N - 1, mode .. ": the calls after the first are direct replays (" .. s.direct_replays .. ")")
  T.ok(right, mode .. ": every call's results match the float64 eager reference of its inputs")
  T.ok(kept, mode .. ": results of call N are not changed by calls N+1.." .. N)
  T.ok(distinct, mode .. ": each call returns its own values (fresh inputs, different results)")
  local a1 = cm(fresh({ 5, 6 }), fresh({ 6, 6 }))
  local a2 = cm(fresh({ 5, 6 }), fresh({ 6, 6 }))
  T.ok(a1 ~= a2, mode .. ": two calls return two tensor objects")
end

-- ---- modules: the guards of a direct replay --------------------------------

local Block = nn.Module {
  name = "Block",
  init = function(self, d)
    self.fc1 = nn.Linear(d, d)
    self.layers = { nn.Linear(d, d), nn.Linear(d, d) }
    self.scale = 2
    self.opts = { shift = 0.5 }
  end,
  forward = function(self, x)
    local h = self.fc1(x):relu()
    h = self.layers[2](self.layers[1](h))
    return h * self.scale + self.opts.shift
  end,
}

for _, mode in ipairs({ "default", "reduce-overhead" }) do
  nn.manual_seed(7)
  local m = Block(4):eval() -- inference: in train mode a call keeps what backward needs and is not replayed
  local cm = kiln.compile(m, { mode = mode })
  local function check(what)
    local x = fresh({ 3, 4 })
    local y = cm(x)
    local ok = close(y, m(x), 1e-5)
    T.ok(ok, mode .. ": " .. what)
  end
  for _ = 1, 5 do cm(fresh({ 3, 4 })) end
  local d0 = cm:stats().direct_replays
  check("a module's replay matches eager")
  T.ok(cm:stats().direct_replays > d0, mode .. ": the module call is a direct replay")

  m.fc1.weight = fresh({ 4, 4 })
  check("a replaced parameter (fc1.weight) is seen")
  cm(fresh({ 3, 4 }))
  m.layers[2] = nn.Linear(4, 4)
  check("a replaced submodule in a list (layers[2]) is seen")
  cm(fresh({ 3, 4 }))
  m.layers = { nn.Linear(4, 4), nn.Linear(4, 4) }
  check("a replaced table of modules (layers) is seen")
  cm(fresh({ 3, 4 }))
  m.scale = 3
  check("a changed number field (scale) is seen")
  cm(fresh({ 3, 4 }))
  m.opts.shift = -1
  check("a changed number in a nested table (opts.shift) is seen")
  local before = cm:stats().direct_replays
  check("after all that, the module replays again")
  cm(fresh({ 3, 4 }))
  T.ok(cm:stats().direct_replays > before, mode .. ": and directly")
  local x5 = fresh({ 5, 4 })
  T.ok(close(cm(x5), m(x5), 1e-5), mode .. ": a new input shape is seen")
end

-- ---- functions: upvalues and number arguments ------------------------------

local k = 2
local function up(x, c) return (x * k + c):relu() end
local cu = kiln.compile(up)
local x = fresh({ 4, 4 })
for _ = 1, 3 do cu(x, 1) end
k = -3
T.ok(close(cu(x, 1), up(x:cast("f64"), 1)), "a changed upvalue is seen by the replay")
T.ok(close(cu(x, 4), up(x:cast("f64"), 4)), "a changed number argument is seen by the replay")
T.ok(close(cu(x, 4), up(x:cast("f64"), 4)), "and the new version replays right")

T.done()
