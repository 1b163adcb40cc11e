-- t/optim.lua: kiln.optim (scripting/lua/12_optim.lua) against the update
-- formulas of SGD (momentum, dampening, nesterov, weight decay), Adam and
-- AdamW (amsgrad, maximize) computed here in Lua numbers for a few steps;
-- updates in place; state_dict round trips; param groups; gradient
-- clipping by norm; and each bad input.
local T = dofile("t/lib/tap.lua")

local function flat(t)
  local out = {}
  local function rec(v)
    if type(v) == "table" then
      for _, e in ipairs(v) do rec(e) end
    else
      out[#out + 1] = v
    end
  end
  rec(t:to("cpu"):tolist())
  return out
end

local function all_near(got, want, tol, name)
  local g = flat(got)
  local good, worst = #g == #want, 0
  for i = 1, #want do
    local d = math.abs(g[i] - want[i])
    if not (d <= tol) then good = false end
    if d > worst or d ~= d then worst = d end
  end
  return T.ok(good, string.format("%s (max error %g)", name, worst))
end

local P0 = { 1.0, -2.0, 0.5 }
-- the gradient at step k (made up, fixed): g_k[i] = 0.1 * k * i - 0.2
local function grad_at(k)
  local g = {}
  for i = 1, #P0 do g[i] = 0.1 * k * i - 0.2 end
  return g
end

-- Run `steps` steps of the optimizer made by make(p) on f64 parameters,
-- handing it grad_at(k) as the gradient; returns p's values.
local function run(make, steps)
  local p = kiln.tensor(P0, { dtype = "f64", requires_grad = true })
  local opt = make(p)
  for k = 1, steps do
    p.grad = kiln.tensor(grad_at(k), { dtype = "f64" })
    opt:step()
  end
  return p, opt
end

-- ---- SGD --------------------------------------------------------------------

local function sgd_ref(o, steps)
  local p, buf = { table.unpack(P0) }, nil
  for k = 1, steps do
    local g = grad_at(k)
    local d = {}
    for i = 1, #p do
      d[i] = g[i]
      if o.maximize then d[i] = -d[i] end
      d[i] = d[i] + (o.weight_decay or 0) * p[i]
    end
    if (o.momentum or 0) ~= 0 then
      if not buf then
        buf = { table.unpack(d) }
      else
        for i = 1, #p do buf[i] = o.momentum * buf[i] + (1 - (o.dampening or 0)) * d[i] end
      end
      for i = 1, #p do d[i] = o.nesterov and d[i] + o.momentum * buf[i] or buf[i] end
    end
    for i = 1, #p do p[i] = p[i] - o.lr * d[i] end
  end
  return p
end

for _, o in ipairs {
  { lr = 0.1 },
  { lr = 0.1, momentum = 0.9 },
  { lr = 0.05, momentum = 0.8, dampening = 0.3, weight_decay = 0.01 },
  { lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 0.1 },
  { lr = 0.1, momentum = 0.5, maximize = true },
} do
  local keys = {}
  for k, v in pairs(o) do keys[#keys + 1] = k .. "=" .. tostring(v) end
  table.sort(keys)
  local p = run(function(t) return kiln.optim.SGD({ t }, o) end, 4)
  all_near(p, sgd_ref(o, 4), 1e-12, "SGD{" .. table.concat(keys, ", ") .. "}: 4 steps as the formula")
end

-- ---- Adam, AdamW ------------------------------------------------------------

local function adam_ref(o, steps, decoupled)
  local b1, b2 = (o.betas or { 0.9, 0.999 })[1], (o.betas or { 0.9, 0.999 })[2]
  local eps, wd = o.eps or 1e-8, o.weight_decay or (decoupled and 1e-2 or 0)
  local p, m, v, vmax = { table.unpack(P0) }, { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 }
  for k = 1, steps do
    local g = grad_at(k)
    for i = 1, #p do
      local gi = o.maximize and -g[i] or g[i]
      if decoupled then p[i] = p[i] * (1 - o.lr * wd) else gi = gi + wd * p[i] end
      m[i] = b1 * m[i] + (1 - b1) * gi
      v[i] = b2 * v[i] + (1 - b2) * gi * gi
      vmax[i] = math.max(vmax[i], v[i])
      local mhat = m[i] / (1 - b1 ^ k)
      local vhat = (o.amsgrad and vmax[i] or v[i]) / (1 - b2 ^ k)
      p[i] = p[i] - o.lr * mhat / (math.sqrt(vhat) + eps)
    end
  end
  return p
end

for _, case in ipairs {
  { "Adam", { lr = 0.1 } },
  { "Adam", { lr = 0.01, betas = { 0.8, 0.99 }, eps = 1e-6, weight_decay = 0.1 } },
  { "Adam", { lr = 0.05, amsgrad = true } },
  { "Adam", { lr = 0.05, maximize = true } },
  { "AdamW", { lr = 0.1 } },
  { "AdamW", { lr = 0.05, weight_decay = 0.5, amsgrad = true } },
} do
  local name, o = case[1], case[2]
  local keys = {}
  for k, v in pairs(o) do keys[#keys + 1] = k .. "=" .. (type(v) == "table" and "{" .. table.concat(v, ",") .. "}" or tostring(v)) end
  table.sort(keys)
  local p, opt = run(function(t) return kiln.optim[name]({ t }, o) end, 5)
  all_near(p, adam_ref(o, 5, name == "AdamW"), 1e-12, name .. "{" .. table.concat(keys, ", ") .. "}: 5 steps as the formula")
  T.is(opt:state_dict().state[1].step, 5, name .. ": its state counts the steps")
end

-- ---- in place, skipping, zero_grad --------------------------------------------

local p = kiln.tensor({ 1, 2 }, { requires_grad = true })
local q = kiln.tensor({ 3, 4 }, { requires_grad = true })
local alias = p:detach() -- shares p's storage
local opt = kiln.optim.SGD({ p, q }, { lr = 0.5 })
p.grad = kiln.tensor({ 1, 1 })
opt:step()
all_near(alias, { 0.5, 1.5 }, 0, "a step writes the parameter in place: a view of it sees the update")
all_near(q, { 3, 4 }, 0, "a parameter without a gradient is left alone")
opt:zero_grad()
T.ok(p.grad == nil and p.is_leaf and p.requires_grad, "opt:zero_grad() forgets gradients; p stays a leaf")

-- a closure recomputes the loss
local c = kiln.tensor({ 2 }, { requires_grad = true })
local copt = kiln.optim.SGD({ c }, { lr = 0.25 })
local l = copt:step(function()
  copt:zero_grad()
  local loss = (c * c):sum()
  loss:backward()
  return loss
end)
T.ok(l:item() == 4 and c:item() == 1, "step(closure): returns the closure's loss and steps with its gradient")

-- param groups
local g1 = kiln.tensor({ 1 }, { requires_grad = true })
local g2 = kiln.tensor({ 1 }, { requires_grad = true })
local gopt = kiln.optim.SGD({ { params = { g1 } }, { params = { g2 }, lr = 1 } }, { lr = 0.1 })
g1.grad, g2.grad = kiln.ones({ 1 }), kiln.ones({ 1 })
gopt:step()
T.ok(math.abs(g1:item() - 0.9) < 1e-6 and g2:item() == 0, "param groups: each its own lr, the defaults fill the rest")

-- ---- state_dict -------------------------------------------------------------

local a1 = kiln.tensor(P0, { dtype = "f64", requires_grad = true })
local o1 = kiln.optim.Adam({ a1 }, { lr = 0.1 })
for k = 1, 2 do
  a1.grad = kiln.tensor(grad_at(k), { dtype = "f64" })
  o1:step()
end
local sd = o1:state_dict()
T.ok(sd.param_groups[1].lr == 0.1 and sd.param_groups[1].params[1] == 1 and sd.state[1].exp_avg ~= nil,
  "state_dict: PyTorch's layout (param_groups with positions, state per position)")
local a2 = kiln.tensor(flat(a1), { dtype = "f64", requires_grad = true })
local o2 = kiln.optim.Adam({ a2 }, { lr = 0.5 })
o2:load_state_dict(sd)
T.is(o2.param_groups[1].lr, 0.1, "load_state_dict: the hyperparameters come back")
for k = 3, 4 do
  a1.grad = kiln.tensor(grad_at(k), { dtype = "f64" })
  a2.grad = kiln.tensor(grad_at(k), { dtype = "f64" })
  o1:step()
  o2:step()
end
all_near(a2, flat(a1), 0, "load_state_dict: two more steps match the optimizer it came from")
all_near(a1, adam_ref({ lr = 0.1 }, 4), 1e-12, "... and the formula")
T.ok(sd.state[1].step == 2, "a state_dict is a snapshot: later steps do not change it")
T.raises(function() o2:load_state_dict({ param_groups = {} }) end,
  "Adam:load_state_dict: 0 param groups in the state dict, 1 in the optimizer", "load_state_dict: a group missing")
local bad = o1:state_dict()
bad.state[1].exp_avg = kiln.zeros({ 2 }, { dtype = "f64" })
T.raises(function() o2:load_state_dict(bad) end,
  "Adam:load_state_dict: state 'exp_avg' of parameter 1 has shape {2}, the parameter {3}",
  "load_state_dict: a state tensor of the wrong shape changes nothing")
T.is(o2:state_dict().state[1].step, 4, "... the optimizer kept its state")

-- ---- clip_grad_norm_ --------------------------------------------------------

local w1 = kiln.tensor({ 0, 0 }, { requires_grad = true })
local w2 = kiln.tensor({ 0 }, { requires_grad = true })
w1.grad, w2.grad = kiln.tensor({ 3, 0 }), kiln.tensor({ 4 })
local total = kiln.nn.utils.clip_grad_norm_({ w1, w2 }, 1)
T.ok(math.abs(total:item() - 5) < 1e-6, "clip_grad_norm_: returns the total norm (5)")
all_near(w1.grad, { 0.6, 0 }, 1e-6, "... and scales every gradient in place by max_norm / norm")
all_near(w2.grad, { 0.8 }, 1e-6, "... all of them together")
kiln.nn.utils.clip_grad_norm_({ w1, w2 }, 10)
all_near(w1.grad, { 0.6, 0 }, 1e-6, "a norm under max_norm leaves them")
local inf = kiln.nn.utils.clip_grad_norm_({ w1, w2 }, 0.4, math.huge)
T.ok(math.abs(inf:item() - 0.8) < 1e-6, "norm_type = math.huge: the largest magnitude")
all_near(w2.grad, { 0.4 }, 1e-6, "... scaled to max_norm")
T.raises(function() kiln.nn.utils.clip_grad_norm_({ w1 }, -1) end, "clip_grad_norm_: max_norm must be a number >= 0",
  "clip_grad_norm_: a negative max_norm")

-- ---- training converges ---------------------------------------------------------

kiln.manual_seed(11)
local model = kiln.nn.Sequential(kiln.nn.Linear(3, 16), kiln.nn.Tanh(), kiln.nn.Linear(16, 1))
local xs = kiln.randn({ 64, 3 }, { seed = 12 })
local ys = (xs:sum(2, true) * 0.5):sin()
local mopt = kiln.optim.Adam(model:parameters(), { lr = 0.02 })
local first, last
for step = 1, 150 do
  mopt:zero_grad()
  local loss = kiln.mse_loss(model(xs), ys)
  loss:backward()
  mopt:step()
  if step == 1 then first = loss:item() end
  last = loss:item()
end
T.ok(last < first / 10, string.format("a small regression trains: loss %.4f -> %.5f in 150 Adam steps", first, last))

-- ---- fused steps ----------------------------------------------------------------
-- An eager step runs the updates of f32/f64 parameters whose state is made
-- as one compiled function: one generated kernel a parameter, and the same
-- numbers as the op-by-op update (fused = false), bit for bit.

-- two parameters of different shapes trained on a small loss for `steps`
-- steps; skip(step) names a step where w2 gets no gradient
local function train(algo, o, steps, dtype, skip)
  local w1 = kiln.randn({ 4, 5 }, { seed = 21 }):to(dtype or "f32"):requires_grad_()
  local w2 = kiln.randn({ 5 }, { seed = 22 }):to(dtype or "f32"):requires_grad_()
  local opt = kiln.optim[algo]({ w1, w2 }, o)
  local x = kiln.randn({ 3, 4 }, { seed = 23 }):to(dtype or "f32")
  for step = 1, steps do
    opt:zero_grad()
    local y = x:matmul(w1)
    if not (skip and skip(step)) then y = y + w2 end
    y:tanh():sum():backward()
    opt:step()
  end
  return { w1, w2 }, opt
end

local function n_fused(opt)
  local n, kernels = 0, 0
  for _, cm in pairs(opt._fused or {}) do
    n = n + 1
    kernels = kernels + #cm:kernels()
  end
  return n, kernels
end

for _, case in ipairs {
  { "SGD", { lr = 0.1 } },
  { "SGD", { lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 0.1 } },
  { "SGD", { lr = 0.05, momentum = 0.8, dampening = 0.3, maximize = true } },
  { "Adam", { lr = 0.05, weight_decay = 0.1 } },
  { "Adam", { lr = 0.05, amsgrad = true, maximize = true } },
  { "AdamW", { lr = 0.05 } },
  { "AdamW", { lr = 0.05, weight_decay = 0.3, amsgrad = true } },
} do
  local algo, o = case[1], case[2]
  local keys = {}
  for k, v in pairs(o) do keys[#keys + 1] = k .. "=" .. tostring(v) end
  table.sort(keys)
  local name = algo .. "{" .. table.concat(keys, ", ") .. "}"
  local function with(fused)
    local c = { fused = fused }
    for k, v in pairs(o) do c[k] = v end
    return c
  end
  local a, oa = train(algo, with(false), 6)
  local b, ob = train(algo, with(true), 6)
  local worst = 0
  for i = 1, 2 do
    worst = math.max(worst, (a[i] - b[i]):abs():max():item())
    local sa, sb = oa.state[a[i]], ob.state[b[i]]
    for k, v in pairs(sa) do
      if type(v) ~= "number" then worst = math.max(worst, (v - sb[k]):abs():max():item()) end
    end
  end
  T.ok(worst == 0, name .. ": 6 fused steps give the op-by-op steps' parameters and state, bit for bit (max diff " .. worst .. ")")
  local nf, nk = n_fused(ob)
  T.ok(nf == 1 and nk == 2, name .. ": one compiled update, one kernel a parameter (" .. nf .. " functions, " .. nk .. " kernels)")
  T.is(n_fused(oa), 0, name .. ": fused = false compiles nothing")
end

-- a step where one parameter has no gradient: it is skipped, the others fused
local a = train("AdamW", { lr = 0.05, fused = false }, 6, "f32", function(step) return step == 4 end)
local b, ob = train("AdamW", { lr = 0.05 }, 6, "f32", function(step) return step == 4 end)
T.ok((a[1] - b[1]):abs():max():item() == 0 and (a[2] - b[2]):abs():max():item() == 0,
  "AdamW with no gradient for w2 at step 4: fused steps equal the op-by-op ones")
T.is(n_fused(ob), 2, "... in two compiled updates (both parameters; w1 alone)")
-- bf16 parameters step op by op (a step's numbers would round to bf16 as a tensor)
local _, oh = train("AdamW", { lr = 0.05 }, 3, "bf16")
T.is(n_fused(oh), 0, "bf16 parameters step op by op")
T.is(ob:state_dict().param_groups[1].fused, true, "state_dict: the group's fused flag, as PyTorch's")
-- 50 parameters: two calls (48 and 2), each replayed directly after its trace
do
  local function many(fused)
    local ps = {}
    for i = 1, 50 do ps[i] = kiln.randn({ 3 }, { seed = 300 + i }):requires_grad_() end
    local opt = kiln.optim.AdamW(ps, { lr = 0.05, fused = fused })
    for step = 1, 5 do
      opt:zero_grad()
      local loss = ps[1]:sum() * 0
      for i = 1, 50 do loss = loss + (ps[i] * ps[i]):sum() * (i / 50) end
      loss:backward()
      opt:step()
    end
    return ps, opt
  end
  local pa = many(false)
  local pb, om = many(true)
  local worst = 0
  for i = 1, 50 do worst = math.max(worst, (pa[i] - pb[i]):abs():max():item()) end
  local nf, nk = n_fused(om)
  local replays = 0
  for _, cm in pairs(om._fused) do replays = replays + cm:stats().direct_replays end
  T.ok(worst == 0 and nf == 2 and nk == 50 and replays >= 4,
    string.format("50 parameters: two compiled updates (%d), a kernel each (%d), replayed (%d times), equal to op by op (%g)",
      nf, nk, replays, worst))
end
T.raises(function() kiln.optim.Adam({ kiln.ones({ 2 }, { requires_grad = true }) }, { fused = "yes" }) end, "Adam: fused must be true or false, got yes",
  "fused that is not a boolean")

-- ---- bad input ----------------------------------------------------------------

T.raises(function() kiln.optim.SGD({ kiln.zeros({ 3 }) }) end,
  "SGD: parameter 1 %(a tensor of shape {3}%) does not require grad; an optimizer updates leaf tensors that require grad",
  "an optimizer given a tensor that does not require grad")
local leaf = kiln.ones({ 2 }, { requires_grad = true })
T.raises(function() kiln.optim.Adam({ leaf * 2 }) end, "Adam: parameter 1 %(a tensor of shape {2}%) is not a leaf %(it was computed by mul%)",
  "an optimizer given a tensor with history")
T.raises(function() kiln.optim.SGD({ leaf, leaf }) end, "SGD: parameter 2 appears twice %(first as parameter 1%)",
  "the same parameter twice")
T.raises(function() kiln.optim.SGD({}) end, "SGD: got an empty parameter list", "no parameters")
T.raises(function() kiln.optim.SGD({ leaf }, { lr = -1 }) end, "SGD: lr must be a number in %[0, inf%], got %-1",
  "a negative learning rate")
T.raises(function() kiln.optim.SGD({ leaf }, { nesterov = true }) end,
  "SGD: nesterov momentum needs momentum > 0 and dampening 0", "nesterov without momentum")
T.raises(function() kiln.optim.Adam({ leaf }, { betas = { 0.9, 1 } }) end, "Adam: betas must be {b1, b2} with each in %[0, 1%)",
  "betas out of range")
T.raises(function() kiln.optim.AdamW({ leaf }, { lr = 1, momentum = 0.9 }) end, "AdamW: unknown option 'momentum'",
  "an option the algorithm does not have")
T.raises(function() kiln.optim.SGD("weights") end, "SGD: params must be a list of tensors or a kiln.nn module",
  "params that are not tensors")

T.done()
