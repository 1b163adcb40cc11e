-- t/compiled_training.lua: kiln.compile of a whole training step (forward,
-- loss, backward, optimizer step) against the same step run eagerly, for
-- 20 steps: an MLP and a conv net with BatchNorm in train mode, SGD with
-- momentum and AdamW, in the modes that run on the CPU; one joint graph;
-- parameters, .grad, optimizer state and running statistics written in
-- place (the same tensors); a graph break inside the forward; the
-- recompiles that name requires_grad and train/eval; kiln.compile(model)
-- with backward called outside; a failed step that leaves nothing half
-- updated; a module in train mode replayed, its results carrying the tape
-- backward needs (README's styles, a compiled loss in a training loop,
-- Dropout).
local T = dofile("t/lib/tap.lua")
local nn = kiln.nn
local F = nn.functional

-- the largest |a - b| over two tensors (NaN when either has one)
local S = dofile("t/lib/train_step.lua")
local maxdiff = S.maxdiff

-- every parameter of m1 within tol of m2's; NaN never passes
local function params_close(m1, m2, tol)
  local p1, p2 = m1:parameters(), m2:parameters()
  local worst = 0
  for i = 1, #p1 do
    local d = maxdiff(p1[i], p2[i])
    if not (d <= worst) then worst = d end
  end
  return worst <= tol, worst
end

local function mlp()
  return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))
end

local function convnet()
  return nn.Sequential(nn.Conv2d(3, 8, 3, { padding = 1 }), nn.BatchNorm2d(8), nn.ReLU(),
    nn.Conv2d(8, 8, 3, { stride = 2, padding = 1, bias = false }), nn.BatchNorm2d(8), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
end

local function make_opt(name, model)
  if name == "SGD" then return kiln.optim.SGD(model, { lr = 0.05, momentum = 0.9, weight_decay = 1e-3 }) end
  return kiln.optim.AdamW(model, { lr = 1e-2 })
end

-- the training step of model and opt: zero_grad, forward, loss, backward,
-- step (written here, not taken from t/lib/train_step.lua: cm:saved()'s
-- source lines below name this file)
local function step_of(model, opt)
  return function(x, y)
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    return loss
  end
end

-- Train two copies of build() (same seed) for `steps` steps, one eagerly
-- and one through kiln.compile(step, opts); returns the worst loss and
-- parameter differences, the models and the compiled callable.
local function train_both(build, opt_name, x, y, steps, opts)
  nn.manual_seed(3)
  local m1 = build()
  nn.manual_seed(3)
  local m2 = build()
  local eager = step_of(m1, make_opt(opt_name, m1))
  local cm = kiln.compile(step_of(m2, make_opt(opt_name, m2)), opts)
  local worst, first, last = 0, nil, nil
  for _ = 1, steps do
    local a, b = eager(x, y):item(), cm(x, y):item()
    local d = math.abs(a - b)
    if not (d <= worst) then worst = d end
    first = first or a
    last = a
  end
  local _, pworst = params_close(m1, m2, 0)
  return { loss = worst, params = pworst, m1 = m1, m2 = m2, cm = cm, first = first, last = last }
end

local x_mlp = kiln.randn({ 12, 6 }, { seed = 11 })
local y_mlp = kiln.tensor({ 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4 }, { dtype = "i64" })
local x_img = kiln.randn({ 4, 3, 8, 8 }, { seed = 12 })
local y_img = kiln.tensor({ 1, 2, 3, 4 }, { dtype = "i64" })

-- ---- compiled against eager, 20 steps ---------------------------------------

for _, case in ipairs({
  { "MLP", mlp, x_mlp, y_mlp, 1e-5 },
  { "conv net", convnet, x_img, y_img, 1e-4 },
}) do
  local label, build, x, y, tol = table.unpack(case)
  for _, opt_name in ipairs({ "SGD", "AdamW" }) do
    local r = train_both(build, opt_name, x, y, 20)
    local what = label .. " + " .. opt_name
    T.ok(r.loss <= tol, string.format("%s: 20 compiled steps give eager's losses (max difference %g)", what, r.loss))
    -- AdamW divides a gradient by its own running size, so a parameter
    -- whose gradient is rounding noise (the first conv's bias, which the
    -- BatchNorm after it cancels) steps by up to lr a step where the noise
    -- points. The noise differs where the two sides' kernels do: on Hopper
    -- the compiled step's f32 convolutions and their gradients run kiln's
    -- split-precision kernels, eager's cuDNN's strict ones. There such
    -- parameters (gradient under 1e-6 of the largest, on both sides) are
    -- left out; every other one must match.
    local pd, skipped = r.params, 0
    if opt_name == "AdamW" and x.device ~= "cpu" and kiln.device_info().cuda.devices[1].cc == "9.0" then
      local p1, p2, gmax = r.m1:parameters(), r.m2:parameters(), 0
      for _, p in ipairs(p1) do gmax = math.max(gmax, p.grad:abs():max():item()) end
      pd = 0
      for i = 1, #p1 do
        local noise = p1[i].grad:abs():max():item() <= 1e-6 * gmax and p2[i].grad:abs():max():item() <= 1e-6 * gmax
        if noise then skipped = skipped + 1
        else
          local d = maxdiff(p1[i], p2[i])
          if not (d <= pd) then pd = d end
        end
      end
    end
    T.ok(pd <= tol, string.format("%s: ... and eager's parameters after them (max difference %g; %d with a gradient of "
      .. "rounding noise left out)", what, pd, skipped))
    T.ok(r.last < r.first, string.format("%s: ... and it trains (loss %.4f -> %.4f)", what, r.first, r.last))
    local lc = r.cm:last_call()
    T.is(lc.graph_count, 1, what .. ": a step is one joint graph of forward, backward and update")
    T.is(lc.graph_break_count, 0, what .. ": ... with no break")
  end
end

-- the running statistics of BatchNorm in train mode: updated in place, as eagerly
do
  local r = train_both(convnet, "SGD", x_img, y_img, 3)
  local bn1, bn2 = r.m1[2], r.m2[2]
  T.ok(maxdiff(bn1.running_mean, bn2.running_mean) <= 1e-5 and maxdiff(bn1.running_var, bn2.running_var) <= 1e-5,
    "BatchNorm2d in a compiled step: its running statistics are eager's")
  T.is(bn2.num_batches_tracked:item(), 3, "... and num_batches_tracked counts the 3 steps")
end

-- ---- in place: the same tensors, written ------------------------------------

do
  nn.manual_seed(5)
  local model = mlp()
  local opt = kiln.optim.SGD(model, { lr = 0.1, momentum = 0.9 })
  local params = model:parameters()
  local before = params[1]:clone()
  local cm = kiln.compile(step_of(model, opt))
  cm(x_mlp, y_mlp)
  local buf = opt.state[params[1]].momentum_buffer
  cm(x_mlp, y_mlp)
  cm(x_mlp, y_mlp)
  local same = true
  for i, p in ipairs(model:parameters()) do same = same and rawequal(p, params[i]) end
  T.ok(same, "the parameters are the same tensors after compiled steps")
  T.ok(maxdiff(params[1], before) > 0, "... and their values changed")
  T.ok(rawequal(opt.state[params[1]].momentum_buffer, buf), "the momentum buffer is the same tensor, updated in place")
  T.ok(params[1].grad ~= nil and params[1].grad:shape()[1] == 16, "every parameter has its .grad after the step")
  T.is(cm:stats().replayable, "yes", "a training step is replayed directly once its state exists (t/replay_training.lua)")
end

-- .grad accumulated across compiled calls without zero_grad: in place, as eagerly
do
  nn.manual_seed(6)
  local m1, m2 = mlp(), nil
  nn.manual_seed(6)
  m2 = mlp()
  local function acc(model) return function(x, y) F.cross_entropy(model(x), y):backward() end end
  local cm = kiln.compile(acc(m2))
  local e = acc(m1)
  e(x_mlp, y_mlp)
  cm(x_mlp, y_mlp)
  local g = m2[1].weight.grad
  local first = g:clone()
  for _ = 1, 2 do
    e(x_mlp, y_mlp)
    cm(x_mlp, y_mlp)
  end
  T.ok(maxdiff(m1[1].weight.grad, m2[1].weight.grad) <= 1e-5, "backward three times without zero_grad: eager's summed .grad")
  T.ok(maxdiff(g, first * 3) <= 1e-5, "... accumulated into the same tensor (the .grad read after the first call holds the sum)")
end

-- ---- modes ------------------------------------------------------------------

-- max-autotune searches into a cache of its own, for 3 seconds at most
local cache = os.tmpname()
os.remove(cache)
kiln.config.cache_dir = cache
kiln.config.autotune_budget_s = 3
for _, mode in ipairs({ "reduce-overhead", "max-autotune" }) do
  local r = train_both(mlp, "AdamW", x_mlp, y_mlp, 5, { mode = mode })
  T.ok(r.loss <= 1e-5 and r.params <= 1e-5,
    string.format("mode %s: 5 compiled AdamW steps give eager's losses and parameters (%g, %g)", mode, r.loss, r.params))
end

-- ---- a graph break inside the forward ----------------------------------------

do
  local seen = {}
  local function broken_step(model, opt)
    return function(x, y)
      opt:zero_grad()
      local h = model[1](x):relu()
      seen[#seen + 1] = h:sum():item() -- a value read in the middle of the forward: a break
      local loss = F.cross_entropy(model[5](model[4](model[3](h))), y)
      loss:backward()
      opt:step()
      return loss
    end
  end
  nn.manual_seed(7)
  local m1 = mlp()
  nn.manual_seed(7)
  local m2 = mlp()
  local eager = broken_step(m1, make_opt("AdamW", m1))
  local cm = kiln.compile(broken_step(m2, make_opt("AdamW", m2)))
  local worst = 0
  for _ = 1, 20 do
    local d = math.abs(eager(x_mlp, y_mlp):item() - cm(x_mlp, y_mlp):item())
    if not (d <= worst) then worst = d end
  end
  local _, pw = params_close(m1, m2, 0)
  T.ok(worst <= 1e-5 and pw <= 1e-5,
    string.format("a break inside the forward: 20 steps still give eager's losses and parameters (%g, %g)", worst, pw))
  local b = cm:breaks()
  T.is(#b, 1, "... and the break is reported")
  T.like(b[1] and b[1].reason or "", "item needs the value", "... with its reason")
  T.is(cm:last_call().graph_count, 2, "... the step runs as two graphs, the backward in the second")
  local lc = cm:last_call()
  T.ok(lc.forward_graphs == 2 and lc.backward_graphs == 1,
    string.format("... cm:last_call() counts 2 graphs with forward ops and 1 with backward ops (%s, %s)",
      tostring(lc.forward_graphs), tostring(lc.backward_graphs)))
  local kept = nil
  for _, v in ipairs(cm:saved().values) do
    if v.kept and v.graph == 0 and v.op == "relu" then kept = v end
  end
  T.ok(kept and table.concat(kept.shape, ",") == "12,16",
    "... cm:saved() lists the relu output graph 0 kept for the backward in graph 1, marked kept")
end

-- ---- the parts of a joint graph, the ledger and kiln.explain ----------------

do
  nn.manual_seed(13)
  local model = mlp()
  local opt = kiln.optim.SGD(model, { lr = 0.01 })
  local step = step_of(model, opt)
  local cm = kiln.compile(step)
  cm(x_mlp, y_mlp)
  local parts = {}
  for _, n in ipairs(cm:graphs()[1].nodes) do parts[n.part] = (parts[n.part] or 0) + 1 end
  T.ok((parts.forward or 0) > 0 and (parts.backward or 0) > 0 and (parts.update or 0) > 0,
    string.format("cm:graphs() marks each node forward (%d), backward (%d) or update (%d)", parts.forward or 0,
      parts.backward or 0, parts.update or 0))
  local s = cm:saved()
  local sum, relu = 0, nil
  for _, v in ipairs(s.values) do
    sum = sum + v.bytes
    if v.op == "relu" then relu = v end
  end
  T.ok(relu and table.concat(relu.shape, ",") == "12,16" and relu.bytes == 12 * 16 * 4 and relu.dtype == "f32",
    "cm:saved() lists the relu output the backward reads: shape {12, 16}, 768 bytes")
  T.like(relu and relu.where or "", "^t/compiled_training%.lua:%d+$", "... with its source line")
  T.is(s.bytes, sum, "cm:saved().bytes is the sum of its values'")
  T.is(#s.recomputed, 0, "... and nothing is recomputed (activation_memory_budget 1, the default)")
  kiln.explain_quiet = true
  local r = kiln.explain(step, x_mlp, y_mlp)
  kiln.explain_quiet = nil
  T.like(kiln.format_explain(r), "Forward graphs: 1, backward graphs: 1",
    "kiln.explain counts the graphs with forward ops and with backward ops")
  local inference = kiln.compile(function(v) return model(v) end)
  kiln.no_grad(inference, x_mlp)
  T.is(inference:last_call().backward_graphs, 0, "an inference call has no backward graph")
  T.is(#inference:saved().values, 0, "... and saves nothing")
end

-- a training step written with plain tensors (no module, so no train
-- mode) and a break before its backward: the first call cannot know it
-- trains and says so; from the next call on it keeps the values
do
  local w = kiln.randn({ 6, 4 }, { seed = 4, requires_grad = true })
  local function step(v)
    w:zero_grad()
    local h = v:matmul(w):tanh() * 3 -- tanh's output: saved, nothing else holds it
    local _ = h:sum():item() -- a break
    local loss = (h * h):mean()
    loss:backward()
    kiln.no_grad(function() w:copy_(w - w.grad * 0.1) end)
    return loss
  end
  local cm = kiln.compile(step)
  local before = w:detach():clone()
  T.raises(function() cm(x_mlp) end, "kept no values for a backward in a later graph or after the call.*call it again",
    "plain tensors, a break before backward: the first call says the values were not kept, and to call again")
  T.is(maxdiff(w, before), 0, "... and wrote nothing")
  local l1, l2 = cm(x_mlp):item(), cm(x_mlp):item()
  T.ok(l2 < l1 and maxdiff(w, before) > 0, "... the next calls train")
end

-- ---- recompiles: requires_grad and train/eval --------------------------------

do
  nn.manual_seed(8)
  local model = mlp()
  local opt = kiln.optim.SGD(model, { lr = 0.01 })
  local cm = kiln.compile(step_of(model, opt))
  cm(x_mlp, y_mlp)
  cm(x_mlp, y_mlp)
  model[1].weight:requires_grad_(false)
  cm(x_mlp, y_mlp)
  local rc = cm:recompiles()
  T.like(rc[#rc] and table.concat(rc[#rc].reasons, "\n") or "",
    "tensor 'model%.1%.weight' requires_grad changed: expected true, actual false",
    "a parameter frozen between steps: the recompile names requires_grad")
  model[1].weight:requires_grad_(true)
  model:eval()
  cm(x_mlp, y_mlp)
  rc = cm:recompiles()
  T.like(rc[#rc] and table.concat(rc[#rc].reasons, "\n") or "", "train/eval mode changed: model%.training true %-> false",
    "model:eval() between steps: the recompile names train/eval mode")
  local guards = table.concat(cm:guards()[1].guards, "\n")
  T.like(guards, "model%.training == true", "the guards of a train-mode version say so")
  T.like(guards, "requires_grad", "... and which inputs require grad")
end

-- a parameter replaced between steps: a guard failure that names it
do
  nn.manual_seed(9)
  local model = mlp()
  local cm = kiln.compile(function(x, y) return F.cross_entropy(model(x), y) end)
  cm(x_mlp, y_mlp)
  model[3].weight = kiln.randn({ 16, 16 }, { seed = 1, requires_grad = true })
  cm(x_mlp, y_mlp)
  local rc = cm:recompiles()
  T.like(rc[#rc] and table.concat(rc[#rc].reasons, "\n") or "", "'model%.3%.weight' was replaced",
    "a parameter replaced between steps: the recompile names it")
end

-- ---- kiln.compile(model), backward outside ----------------------------------

do
  nn.manual_seed(10)
  local m1 = convnet()
  nn.manual_seed(10)
  local m2 = convnet()
  local cm = kiln.compile(m2)
  local o1, o2 = m1:parameters(), m2:parameters()
  local opt1, opt2 = kiln.optim.SGD(m1, { lr = 0.05 }), kiln.optim.SGD(m2, { lr = 0.05 })
  local worst = 0
  for _ = 1, 5 do
    opt1:zero_grad()
    opt2:zero_grad()
    local l1 = F.cross_entropy(m1(x_img), y_img)
    local l2 = F.cross_entropy(cm(x_img), y_img)
    l1:backward()
    l2:backward()
    for i = 1, #o1 do
      local d = maxdiff(o1[i].grad, o2[i].grad)
      if not (d <= worst) then worst = d end
    end
    opt1:step()
    opt2:step()
  end
  T.ok(worst <= 1e-4, string.format("kiln.compile(model) in train mode, backward outside: eager's gradients for 5 steps (%g)", worst))
  T.ok(cm:stats().replayable ~= "yes", "... its calls are traced, not replayed")
  nn.manual_seed(10)
  local lin = mlp()
  local clin = kiln.compile(lin)
  clin(x_mlp)
  T.is(clin:stats().replayable, "yes", "... a module without BatchNorm's writes replays, its result keeping its history")
  local n_kept = 0
  for _, v in ipairs(clin:saved().values) do n_kept = n_kept + (v.kept and 1 or 0) end
  T.ok(n_kept > 0, "... cm:saved() lists the values its graph kept for the backward after the call (" .. n_kept .. ")")
  m2:eval()
  T.raises(function() F.cross_entropy(cm(x_img), y_img):backward() end,
    "kept no values for a backward outside it",
    "in eval mode the compiled model keeps nothing for backward, and backward says so")
end

-- ---- a failed step leaves nothing half updated ------------------------------

do
  nn.manual_seed(12)
  local model = mlp()
  local opt = kiln.optim.SGD(model, { lr = 0.1, momentum = 0.9 })
  local fail = false
  local cm = kiln.compile(function(x, y)
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    if fail then error("boom") end
    return loss
  end)
  cm(x_mlp, y_mlp)
  local before = model[1].weight:clone()
  local buf = opt.state[model[1].weight].momentum_buffer:clone()
  fail = true
  T.raises(function() cm(x_mlp, y_mlp) end, "boom", "a step that raises after opt:step()")
  T.is(maxdiff(model[1].weight, before), 0, "... leaves the parameters as they were")
  T.is(maxdiff(opt.state[model[1].weight].momentum_buffer, buf), 0, "... and the optimizer state")
  fail = false
  cm(x_mlp, y_mlp)
  T.ok(maxdiff(model[1].weight, before) > 0, "... and the next step trains again")
end

-- an in-place write inside a compiled step to a tensor saved for backward:
-- the error eager backward gives, and nothing written
do
  local p = kiln.randn({ 3 }, { seed = 2, requires_grad = true })
  local cm = kiln.compile(function(v)
    local loss = (v * p):sum()
    kiln.no_grad(function() p:copy_(p * 2) end)
    loss:backward()
    return loss
  end)
  local before = p:clone()
  T.raises(function() cm(kiln.randn({ 4, 3 }, { seed = 3 })) end,
    "input 2 of mul %(at t/compiled_training%.lua:%d+%) %(shape {3}%), which its gradient needs, was modified in place",
    "a compiled step writing a tensor saved for backward: backward names the op and its line, as eagerly")
  T.ok(maxdiff(p, before) == 0 and p.grad == nil, "... and neither the tensor nor its .grad changed")
end

-- arguments that require grad: the traced function sees placeholders that
-- carry their autograd state
do
  local w = kiln.tensor({ 1, 2, 3 }, { requires_grad = true })
  local cg = kiln.compile(function(v) return kiln.grad((v * v):sum(), v) end)
  local g = cg(w):tolist()
  T.ok(g[1] == 2 and g[2] == 4 and g[3] == 6, "kiln.grad inside a compiled function, of an argument: 2w")
  local cb = kiln.compile(function(v)
    local y = (v * v):sum()
    y:backward()
    return y
  end)
  cb(w)
  cb(w)
  local acc = w.grad:tolist()
  T.ok(acc[1] == 4 and acc[2] == 8 and acc[3] == 12, "backward inside it twice: the argument's .grad accumulates 2w twice")
end

-- ---- copy_ inside a compiled function ----------------------------------------

do
  local t = kiln.zeros({ 3 })
  local cm = kiln.compile(function(v)
    t:copy_(v * 2)
    return t + 1 -- reads the new value
  end)
  local r = cm(kiln.tensor({ 1, 2, 3 }))
  local tl, rl = t:tolist(), r:tolist()
  T.ok(tl[1] == 2 and tl[2] == 4 and tl[3] == 6, "copy_ inside a compiled function writes the tensor once the graph ran")
  T.ok(rl[1] == 3 and rl[2] == 5 and rl[3] == 7, "... and later ops of the graph read the new value")
  local cm2 = kiln.compile(function(v)
    t:copy_(v)
    local l = t:tolist()
    return l[1] + l[2] + l[3]
  end)
  T.is(cm2(kiln.tensor({ 1, 1, 1 })), 3, "reading a written tensor's value inside the call breaks the graph and sees the write")
  T.like(cm2:breaks()[1] and cm2:breaks()[1].reason or "", "written in place", "... and the break says why")
end

-- ---- train mode, grad on: a call whose result carries history replays ------
-- README's styles (an nn.Sequential, a function reaching its layers through
-- upvalues, one through globals), in their default train mode: calls 2-5
-- replay without running Lua, and backward from a replayed result gives
-- eager's gradients (and a float64 reference's), the graph's kept values
-- standing in for the traced call's.

local function grads_of(model)
  local out = {}
  for i, p in ipairs(model:parameters()) do out[i] = p.grad and p.grad:to("f64") or kiln.zeros(p.shape, { dtype = "f64" }) end
  return out
end

-- the worst difference between two lists of gradients (NaN never passes)
local function grads_diff(a, b)
  local worst = 0
  for i = 1, #a do
    local d = maxdiff(a[i], b[i])
    if not (d <= worst) then worst = d end
  end
  return worst
end

do
  local xr = kiln.randn({ 8, 6 }, { seed = 21 })
  nn.manual_seed(20)
  local ref = mlp():to("f64") -- the float64 reference of the same weights
  ref(xr:to("f64")):pow(2):sum():backward()
  local want64 = grads_of(ref)
  nn.manual_seed(20)
  local seq = mlp()
  local l1, l3, l5 = seq[1], seq[3], seq[5]
  ct_fc1, ct_fc3, ct_fc5 = seq[1], seq[3], seq[5]
  local styles = {
    { "nn.Sequential", seq },
    { "upvalues", function(v) return l5(l3(l1(v):relu()):tanh()) end },
    { "globals", function(v) return ct_fc5(ct_fc3(ct_fc1(v):relu()):tanh()) end },
  }
  for _, style in ipairs(styles) do
    local name, f = style[1], style[2]
    local cm = kiln.compile(f)
    local ys = {}
    for i = 1, 5 do ys[i] = cm(xr) end
    T.is(cm:stats().direct_replays, 4, name .. ", train mode: calls 2-5 replay")
    T.is(cm:stats().replayable, "yes", name .. ": ... and it says so")
    T.ok(ys[4].grad_fn ~= nil, name .. ": a replayed result carries autograd history (" .. tostring(ys[4].grad_fn) .. ")")
    T.ok(maxdiff(ys[4], f(xr)) <= 1e-6, name .. ": a replayed result is eager's")
    seq:zero_grad()
    f(xr):pow(2):sum():backward()
    local eager = grads_of(seq)
    seq:zero_grad()
    ys[4]:pow(2):sum():backward()
    local replayed = grads_of(seq)
    T.ok(grads_diff(replayed, eager) <= 1e-5, string.format("%s: backward from a replayed result gives eager's gradients (%g)",
      name, grads_diff(replayed, eager)))
    T.ok(grads_diff(replayed, want64) <= 1e-4, string.format("%s: ... and the float64 reference's (%g)", name,
      grads_diff(replayed, want64)))
    -- each replay's history is its own: another one's backward, and the traced call's
    seq:zero_grad()
    ys[2]:pow(2):sum():backward()
    ys[1]:pow(2):sum():backward()
    local twice = {}
    for i, g in ipairs(eager) do twice[i] = g * 2 end
    T.ok(grads_diff(grads_of(seq), twice) <= 1e-5, string.format("%s: the traced call's and another replay's backward "
      .. "each add eager's gradients (%g)", name, grads_diff(grads_of(seq), twice)))
    T.raises(function() ys[2]:sum():backward() end, "already freed", name .. ": a second backward through a replayed call's graph says it was freed")
    local n = cm:stats().direct_replays
    local y = kiln.no_grad(function() return cm(xr) end)
    T.ok(y.grad_fn == nil, name .. ": under kiln.no_grad the call is traced again, its result without history")
    T.is(cm:stats().direct_replays, n, name .. ": ... not replayed from the training graph")
    seq:zero_grad()
  end
  ct_fc1, ct_fc3, ct_fc5 = nil, nil, nil
end

-- an argument that requires grad: a replay's history reaches this call's argument
do
  nn.manual_seed(22)
  local model = mlp()
  local cm = kiln.compile(model)
  local grads = {}
  for i = 1, 3 do
    local xa = kiln.randn({ 4, 6 }, { seed = 30 + i, requires_grad = true })
    cm(xa):sum():backward()
    local xe = kiln.randn({ 4, 6 }, { seed = 30 + i, requires_grad = true })
    model(xe):sum():backward()
    grads[i] = maxdiff(xa.grad, xe.grad)
  end
  T.is(cm:stats().direct_replays, 2, "an argument that requires grad: calls 2-3 replay")
  T.ok(grads[2] <= 1e-6 and grads[3] <= 1e-6, string.format("... and each call's argument gets eager's gradient (%g, %g)",
    grads[2], grads[3]))
  local before = cm:stats().direct_replays
  cm(kiln.randn({ 4, 6 }, { seed = 40 }))
  T.is(cm:stats().direct_replays, before, "an argument that no longer requires grad is traced again, not replayed")
end

-- a compiled loss in a training loop, backward and the optimizer's step
-- outside: calls 2-10 replay, reading the parameters as the step left them
do
  nn.manual_seed(3)
  local m1 = mlp()
  nn.manual_seed(3)
  local m2 = mlp()
  local o1, o2 = kiln.optim.AdamW(m1, { lr = 1e-2 }), kiln.optim.AdamW(m2, { lr = 1e-2 })
  local loss_of = kiln.compile(function(a, b) return F.cross_entropy(m2(a), b) end)
  local worst = 0
  for _ = 1, 10 do
    o1:zero_grad()
    o2:zero_grad()
    local l1, l2 = F.cross_entropy(m1(x_mlp), y_mlp), loss_of(x_mlp, y_mlp)
    l1:backward()
    l2:backward()
    o1:step()
    o2:step()
    local d = math.abs(l1:item() - l2:item())
    if not (d <= worst) then worst = d end
  end
  T.is(loss_of:stats().direct_replays, 9, "a compiled loss, backward and AdamW outside: calls 2-10 replay")
  local close, pworst = params_close(m1, m2, 1e-5)
  T.ok(worst <= 1e-5 and close, string.format("... and train as eagerly (loss %g, parameters %g)", worst, pworst))
end

-- Dropout in train mode: a replay draws its masks as an eager call from the
-- same seed does, and backward goes through the replay's mask
do
  nn.manual_seed(4)
  local d = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.5), nn.Linear(8, 3))
  local cd = kiln.compile(d)
  local worst = 0
  for i = 1, 4 do
    kiln.manual_seed(100 + i)
    local h = cd(x_mlp)
    d:zero_grad()
    h:pow(2):sum():backward()
    local replayed = grads_of(d)
    kiln.manual_seed(100 + i)
    local he = d(x_mlp)
    d:zero_grad()
    he:pow(2):sum():backward()
    for _, diff in ipairs({ maxdiff(h, he), grads_diff(replayed, grads_of(d)) }) do
      if not (diff <= worst) then worst = diff end
    end
  end
  T.is(cd:stats().direct_replays, 3, "Dropout in train mode: calls 2-4 replay")
  T.ok(worst <= 1e-6, string.format("... results and gradients are an eager call's from the same seed (%g)", worst))
end

T.done()
