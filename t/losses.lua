-- t/losses.lua: the losses of scripting/lua/11_losses.lua (cross_entropy,
-- nll_loss, mse_loss, their nn modules) against their formulas computed
-- here in Lua numbers and against values PyTorch gives, their gradients,
-- the compiled form, and their bad inputs.
local T = dofile("t/lib/tap.lua")
local F = kiln.nn.functional

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

local function near(got, want, tol, name)
  if type(got) ~= "number" then got = got:item() end
  return T.near(got, want, tol, name)
end

local function all_near(got, want, tol, name)
  local g = flat(got)
  local good = #g == #want
  for i = 1, #want do good = good and math.abs(g[i] - want[i]) <= tol end
  return T.ok(good, name)
end

-- log_softmax of a Lua list
local function log_softmax(row)
  local mx = -math.huge
  for _, v in ipairs(row) do mx = math.max(mx, v) end
  local s = 0
  for _, v in ipairs(row) do s = s + math.exp(v - mx) end
  local out = {}
  for i, v in ipairs(row) do out[i] = v - mx - math.log(s) end
  return out
end

-- ---- mse_loss ---------------------------------------------------------------

local a = kiln.tensor({ 1, 2, 3 }, { requires_grad = true })
local b = kiln.tensor({ 1, 1, 1 })
near(F.mse_loss(a, b), 5 / 3, 1e-6, "mse_loss: mean of squared differences")
near(F.mse_loss(a, b, { reduction = "sum" }), 5, 1e-6, "mse_loss: sum")
all_near(F.mse_loss(a, b, { reduction = "none" }), { 0, 1, 4 }, 0, "mse_loss: none")
all_near(kiln.grad(F.mse_loss(a, b), a), { 0, 2 / 3, 4 / 3 }, 1e-6, "mse_loss: gradient 2 (x - y) / n")
T.ok(kiln.mse_loss == F.mse_loss and kiln.nn.MSELoss()(a, b):item() == F.mse_loss(a, b):item(),
  "mse_loss is kiln.mse_loss and nn.MSELoss")
T.raises(function() F.mse_loss(a, kiln.ones({ 2 })) end, "mse_loss: input {3} and target {2} must have the same shape",
  "mse_loss: shapes must match")
T.raises(function() F.mse_loss(a, b, { reduction = "avg" }) end, "mse_loss: unknown reduction 'avg'",
  "mse_loss: an unknown reduction")

-- ---- cross_entropy: values PyTorch gives ------------------------------------

-- F.cross_entropy(torch.tensor([[1., 2., 3.]]), torch.tensor([2])) = 0.4076 (class 3 here, 1-based)
local x1 = kiln.tensor({ { 1, 2, 3 } })
local t3 = kiln.tensor({ 3 }, { dtype = "i64" })
near(F.cross_entropy(x1, t3), 0.40760596444, 1e-6, "cross_entropy = 0.40761, as PyTorch")
-- ... with label_smoothing = 0.1: 0.5076
near(F.cross_entropy(x1, t3, { label_smoothing = 0.1 }), 0.50760596444, 1e-6,
  "cross_entropy with label_smoothing 0.1 = 0.50761, as PyTorch")
near(F.cross_entropy(kiln.tensor({ 1, 2, 3 }), kiln.tensor(3, { dtype = "i64" })), 0.40760596444, 1e-6,
  "an unbatched input {C} with a 0-dim target")

-- ---- cross_entropy against its formula ---------------------------------------

local logits = {
  { 0.5, -1.0, 2.0, 0.3 },
  { 1.5, 0.2, -0.7, 0.0 },
  { -0.3, 0.8, 0.1, 1.2 },
  { 0.0, 0.0, 3.0, -2.0 },
}
local targets = { 3, 1, -100, 4 }
local weight = { 1.0, 2.0, 0.5, 1.5 }
local X = kiln.tensor(logits, { requires_grad = true })
local Y = kiln.tensor(targets, { dtype = "i64" })
local W = kiln.tensor(weight)

-- the reference: per row, -w_t log p_t, with smoothing -sum_c w_c log p_c
local function reference(ls, use_w, reduction)
  local C = 4
  local per, wsum = {}, 0
  for i, row in ipairs(logits) do
    local lp, t = log_softmax(row), targets[i]
    if t == -100 then
      per[i] = 0
    else
      local wt = use_w and weight[t] or 1
      local smooth = 0
      for c = 1, C do smooth = smooth - (use_w and weight[c] or 1) * lp[c] end
      per[i] = { nll = -wt * lp[t], smooth = smooth }
      wsum = wsum + wt
    end
  end
  local nll, smooth, none = 0, 0, {}
  for i, e in ipairs(per) do
    if e == 0 then
      none[i] = 0
    else
      nll, smooth = nll + e.nll, smooth + e.smooth
      none[i] = (1 - ls) * e.nll + ls / C * e.smooth
    end
  end
  if reduction == "none" then return none end
  if reduction == "sum" then return (1 - ls) * nll + ls / C * smooth end
  return (1 - ls) * nll / wsum + ls / C * smooth / wsum
end

for _, ls in ipairs { 0, 0.2 } do
  for _, use_w in ipairs { false, true } do
    for _, red in ipairs { "mean", "sum", "none" } do
      local got = F.cross_entropy(X, Y, { weight = use_w and W or nil, label_smoothing = ls, reduction = red })
      local want = reference(ls, use_w, red)
      local name = string.format("cross_entropy, label_smoothing %g, %s weights, ignore_index, %s", ls,
        use_w and "with" or "no", red)
      if red == "none" then all_near(got, want, 1e-5, name) else near(got, want, 1e-5, name) end
    end
  end
end

-- the gradient of the mean loss: (softmax - one-hot) / (rows that count)
local g = kiln.grad(F.cross_entropy(X, Y), X)
local want = {}
for i, row in ipairs(logits) do
  local lp = log_softmax(row)
  for c = 1, 4 do
    local v = 0
    if targets[i] ~= -100 then v = (math.exp(lp[c]) - (c == targets[i] and 1 or 0)) / 3 end
    want[#want + 1] = v
  end
end
all_near(g, want, 1e-6, "cross_entropy's gradient: (softmax - one-hot) / n, zero at ignored rows")

-- nll_loss on log-probabilities is cross_entropy on logits
near(F.nll_loss(X:log_softmax(2), Y, { weight = W }), F.cross_entropy(X, Y, { weight = W }):item(), 1e-6,
  "nll_loss of log_softmax = cross_entropy")
T.ok(kiln.nll_loss == F.nll_loss and kiln.cross_entropy == F.cross_entropy, "the losses are also kiln.*")
near(kiln.nn.CrossEntropyLoss({ label_smoothing = 0.2 })(X, Y), reference(0.2, false, "mean"), 1e-5,
  "nn.CrossEntropyLoss takes the options once")
near(kiln.nn.NLLLoss()(X:log_softmax(2), Y), reference(0, false, "mean"), 1e-5, "nn.NLLLoss")

-- class probabilities as the target
local P = kiln.tensor({ { 0.2, 0.3, 0.5 }, { 1, 0, 0 } })
local L2 = kiln.tensor({ { 1, 2, 3 }, { 0, 1, -1 } })
local ref = 0
for i, row in ipairs({ { 1, 2, 3 }, { 0, 1, -1 } }) do
  local lp, p = log_softmax(row), ({ { 0.2, 0.3, 0.5 }, { 1, 0, 0 } })[i]
  for c = 1, 3 do ref = ref - p[c] * lp[c] end
end
near(F.cross_entropy(L2, P), ref / 2, 1e-6, "cross_entropy with class probabilities: the batch mean")

-- {N, C, d}: the class dim is 2
local K = kiln.randn({ 2, 3, 4 }, { seed = 3 })
local KT = kiln.randint(1, 4, { 2, 4 }, { seed = 4 })
local flat_loss = F.cross_entropy(K:permute({ 1, 3, 2 }):reshape({ 8, 3 }), KT:reshape({ 8 }))
near(F.cross_entropy(K, KT), flat_loss:item(), 1e-6, "cross_entropy on {N, C, d}: the class dim is 2")

-- compiled: the same loss, captured
local cm = kiln.compile(function(l, t) return F.cross_entropy(l, t, { label_smoothing = 0.1 }) end)
local lx = kiln.randn({ 8, 5 }, { seed = 5 })
local lt = kiln.randint(1, 6, { 8 }, { seed = 6 })
near(cm(lx, lt), F.cross_entropy(lx, lt, { label_smoothing = 0.1 }):item(), 1e-5,
  "cross_entropy compiles: the compiled loss equals eager")

-- ---- bad input --------------------------------------------------------------

T.raises(function() F.cross_entropy(X, kiln.tensor({ 1, 9, 1, 1 }, { dtype = "i64" })) end,
  "cross_entropy: target: gather: index 9", "a class index out of range")
T.raises(function() F.cross_entropy(X, kiln.tensor({ 1, 2 }, { dtype = "i64" })) end,
  "cross_entropy: target of shape {2} does not fit input {4,4} %(expected {4}", "a target of the wrong shape")
T.raises(function() F.cross_entropy(X, kiln.ones({ 4, 3 })) end,
  "cross_entropy: a float target holds class probabilities and must have the input's shape {4,4}, got {4,3}",
  "class probabilities of the wrong shape")
T.raises(function() F.cross_entropy(X, Y, { label_smoothing = 1.5 }) end,
  "cross_entropy: label_smoothing must be a number in %[0, 1%], got 1.5", "label_smoothing out of range")
T.raises(function() F.cross_entropy(X, Y, { weight = kiln.ones({ 3 }) }) end,
  "cross_entropy: weight must be a tensor of 4 class weights {4}, got shape {3}", "class weights of the wrong size")
T.raises(function() F.cross_entropy(X, Y, { smoothing = 0.1 }) end,
  "cross_entropy: unknown option 'smoothing'", "an unknown option")
T.raises(function() F.nll_loss(X, kiln.tensor({ 1, 2, 3, 4 }, { dtype = "bool" })) end,
  "nll_loss: target must hold class indices %(i32 or i64, 1%-based%), got bool", "a target that is not indices")

T.done()
