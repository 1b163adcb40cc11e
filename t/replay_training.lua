-- t/replay_training.lua: the direct replay of compiled training steps
-- (forward, loss, backward and update in one call). Once the optimizer's
-- state exists, a step runs its cached graph without running the Lua
-- function: it repeats the in-place writes (parameters, state, step
-- counts), sets every .grad the backward set and clears those zero_grad
-- cleared. Checked against the same steps run eagerly: losses, parameters,
-- gradients and optimizer state, step by step; the loss a replay returns
-- (its backward already ran); a parameter without a gradient; gradients
-- accumulated over calls (no zero_grad inside: a call that adds to a
-- gradient traces); a .grad
-- assigned by hand (never replayed); a step count kept as a tensor that an
-- eager step and state_dict read back.
local T = dofile("t/lib/tap.lua")
local nn = kiln.nn
local F = nn.functional

local S = dofile("t/lib/train_step.lua")
local maxdiff = S.maxdiff

-- the worst difference over two lists of tensors, where false marks none
-- (a missing .grad: both lists must miss it)
local function list_diff(l1, l2)
  local worst = 0
  for i = 1, math.max(#l1, #l2) do
    local a, b = l1[i], l2[i]
    if (not a) ~= (not b) then return math.huge end
    if a then
      local d = maxdiff(a, b)
      if not (d <= worst) then worst = d end
    end
  end
  return worst
end

local function grads(m)
  local out = {}
  for i, p in ipairs(m:parameters()) do out[i] = p.grad or false end
  return out
end

local function grads_diff(m1, m2)
  return list_diff(grads(m1), grads(m2))
end

-- an MLP with a layer no loss depends on (its parameters get no gradient)
local Net = nn.Module {
  name = "Net",
  init = function(self)
    self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4))
    self.unused = nn.Linear(3, 3)
  end,
  forward = function(self, x) return self.body(x) end,
}

local x = kiln.randn({ 12, 6 }, { seed = 21 })
local y = kiln.tensor({ 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4 }, { dtype = "i64" })

local function pair(opt_fn)
  nn.manual_seed(7)
  local m1 = Net()
  nn.manual_seed(7)
  local m2 = Net()
  return m1, opt_fn(m1), m2, opt_fn(m2)
end

local step_of = S.step_of

-- in default mode and in reduce-overhead, whose replays on a GPU run a
-- recording (by default one that writes the parameters
-- and the optimizer's state itself: t/record_writes.sh)
for _, case in ipairs({
  { "AdamW", function(m) return kiln.optim.AdamW(m, { lr = 1e-2 }) end },
  { "Adam amsgrad", function(m) return kiln.optim.Adam(m, { lr = 1e-2, amsgrad = true, weight_decay = 1e-3 }) end },
  { "SGD momentum", function(m) return kiln.optim.SGD(m, { lr = 0.05, momentum = 0.9 }) end },
  { "AdamW", function(m) return kiln.optim.AdamW(m, { lr = 1e-2 }) end, "reduce-overhead" },
  { "SGD momentum", function(m) return kiln.optim.SGD(m, { lr = 0.05, momentum = 0.9 }) end, "reduce-overhead" },
}) do
  local mode = case[3] or "default"
  local name = case[1] .. (case[3] and " (" .. case[3] .. ")" or "")
  local m1, opt1, m2, opt2 = pair(case[2])
  local eager, cm = step_of(m1, opt1), kiln.compile(step_of(m2, opt2), { mode = mode })
  local worst_loss, worst_params, worst_grads = 0, 0, 0
  local plans_before_replays
  for _ = 1, 20 do
    if cm:stats().direct_replays == 0 then plans_before_replays = cm:stats().plans end
    local a, b = eager(x, y):item(), cm(x, y):item()
    worst_loss = math.max(worst_loss, math.abs(a - b))
    if a ~= a or b ~= b then worst_loss = math.huge end
    worst_params = math.max(worst_params, list_diff(m1:parameters(), m2:parameters()))
    worst_grads = math.max(worst_grads, grads_diff(m1, m2))
  end
  local st = cm:stats()
  T.ok(st.direct_replays >= 15, string.format("%s: later steps are direct replays (%d of 20; %s)", name,
    st.direct_replays, st.replayable))
  T.is(st.plans, plans_before_replays, name .. ": replays run the plan the trace built (no second plan of the graph)")
  T.ok(worst_loss <= 1e-6, string.format("%s: every step's loss is eager's (max difference %g)", name, worst_loss))
  T.ok(worst_params <= 1e-6, string.format("%s: ... and so are the parameters after each step (%g)", name, worst_params))
  T.ok(worst_grads <= 1e-6, string.format("%s: ... and every .grad the step leaves (%g)", name, worst_grads))
  T.ok(m2.unused.weight.grad == nil, name .. ": a parameter the loss does not depend on has no .grad, as eagerly")
  local s1, s2 = opt1.state[m1.body[1].weight], opt2.state[m2.body[1].weight]
  if s1.exp_avg then
    T.ok(maxdiff(s1.exp_avg, s2.exp_avg) <= 1e-6 and maxdiff(s1.exp_avg_sq, s2.exp_avg_sq) <= 1e-9,
      name .. ": the moments are eager's")
    T.is(s2.step:item(), 20, name .. ": the step count, a tensor in a compiled step, counts every replayed step")
    T.is(s1.step, 20, name .. ": ... as the eager count does")
  else
    T.ok(maxdiff(s1.momentum_buffer, s2.momentum_buffer) <= 1e-6, name .. ": the momentum buffer is eager's")
  end
  -- the loss a replayed step returns: its backward ran inside the step
  local loss = cm(x, y)
  eager(x, y)
  T.ok(not loss.requires_grad, name .. ": the loss a replayed step returns carries no history")
  local ok, err = pcall(function() loss:backward() end)
  T.ok(not ok and tostring(err):match("its own backward") ~= nil, name .. ": ... and a second backward says why: "
    .. tostring(err):sub(1, 100))
end

-- the compiled AdamW step's update: per parameter, one one-element kernel
-- (the step count and both bias corrections: kn_fusion.joins) beside the
-- parameter's update kernel, where each of the three had a kernel of its own
do
  local m1, opt1, m2, opt2 = pair(function(m) return kiln.optim.AdamW(m, { lr = 1e-2 }) end)
  local eager, cm = step_of(m1, opt1), kiln.compile(step_of(m2, opt2))
  local worst = 0
  for _ = 1, 4 do
    worst = math.max(worst, math.abs(eager(x, y):item() - cm(x, y):item()))
    worst = math.max(worst, list_diff(m1:parameters(), m2:parameters()))
  end
  local scalars, ops = 0, nil
  for _, k in ipairs(cm:kernels()) do
    if k.part == "update" then
      if k.name:find("_scalar$") then
        scalars = scalars + 1
        ops = ops or table.concat(k.ops, ",")
      end
    end
  end
  T.is(scalars, 4, "AdamW compiled: one one-element kernel for each of the 4 parameters with a gradient (three before)")
  T.like(ops or "", "^add,.*exp.*sqrt", "... each computing the step count (add) and both bias corrections: " .. tostring(ops))
  T.ok(worst <= 1e-6, string.format("... with eager's losses and parameters (max difference %g)", worst))
end

-- a .grad set by hand between calls on a parameter the step's zero_grad
-- clears but no loss reaches: cleared again by a replay, as eagerly
do
  local m1, opt1, m2, opt2 = pair(function(m) return kiln.optim.AdamW(m, { lr = 1e-2 }) end)
  local eager, cm = step_of(m1, opt1), kiln.compile(step_of(m2, opt2))
  for _ = 1, 3 do
    eager(x, y)
    cm(x, y)
  end
  m1.unused.weight.grad = kiln.ones({ 3, 3 })
  m2.unused.weight.grad = kiln.ones({ 3, 3 })
  local before = cm:stats().direct_replays
  eager(x, y)
  cm(x, y)
  T.ok(cm:stats().direct_replays == before + 1, "a step after a .grad set by hand is still a replay")
  T.ok(m1.unused.weight.grad == nil and m2.unused.weight.grad == nil,
    "... and clears that .grad as the step's zero_grad does eagerly")
end

-- gradients accumulated over calls (zero_grad outside, every second call):
-- a call whose backward adds to an existing .grad traces (it reads the old
-- gradient, and a replay recorded from a call that started from none is
-- refused when there is one); either way eager's gradients
do
  local m1, opt1, m2, opt2 = pair(function(m) return kiln.optim.SGD(m, { lr = 0.05 }) end)
  local function acc(model)
    return function(xx, yy)
      local loss = F.cross_entropy(model(xx), yy)
      loss:backward()
      return loss
    end
  end
  local e, cm = acc(m1), kiln.compile(acc(m2))
  local worst = 0
  for i = 1, 8 do
    if i % 2 == 1 then
      opt1:zero_grad()
      opt2:zero_grad()
    end
    e(x, y)
    cm(x, y)
    worst = math.max(worst, grads_diff(m1, m2))
    if i % 2 == 0 then
      opt1:step()
      opt2:step()
    end
  end
  T.ok(worst <= 1e-6, string.format("accumulated gradients over calls are eager's at every call (%g)", worst))
  T.like(cm:stats().replayable, "no upvalue, global or table", "... the calls that add to a gradient trace (the old gradient is found in no table), and say why")
end

-- a .grad assigned inside the call: never replayed, and says so
do
  nn.manual_seed(7)
  local m = Net()
  local z = kiln.zeros({ 3, 3 })
  local cm = kiln.compile(function(xx, yy)
    local loss = F.cross_entropy(m(xx), yy)
    loss:backward()
    m.unused.weight.grad = z
    return loss
  end)
  for _ = 1, 3 do cm(x, y) end
  T.is(cm:stats().direct_replays, 0, "a call that assigns a .grad by hand is not replayed")
  T.like(cm:stats().replayable, "assigns a tensor's .grad", "... and cm:stats().replayable says why")
end

-- the step count kept as a tensor by compiled steps: an eager step after
-- them continues it, and state_dict / load_state_dict carry it
do
  local m1, opt1, m2, opt2 = pair(function(m) return kiln.optim.AdamW(m, { lr = 1e-2 }) end)
  local eager, cm = step_of(m1, opt1), kiln.compile(step_of(m2, opt2))
  local eager2 = step_of(m2, opt2)
  for _ = 1, 4 do
    eager(x, y)
    cm(x, y)
  end
  for _ = 1, 2 do
    eager(x, y)
    eager2(x, y)
  end
  T.ok(list_diff(m1:parameters(), m2:parameters()) <= 1e-6, "eager steps after compiled ones continue them")
  T.is(opt2.state[m2.body[1].weight].step, 6, "... with the step count back as a number (4 compiled + 2 eager)")
  cm(x, y)
  local sd = opt2:state_dict()
  T.is(sd.state[1].step:item(), 7, "state_dict after a compiled step holds its count (a tensor)")
  local opt3 = kiln.optim.AdamW(m2, { lr = 1e-2 })
  opt3:load_state_dict(sd)
  T.is(opt3.state[m2.body[1].weight].step.dtype, "f64", "load_state_dict keeps a tensor count in f64")
end

T.done()
