-- t/autocast.lua: kiln.autocast and kiln.compile(f, {autocast = dtype})
-- (issue 33, item 3): inside it, matmul, conv2d and attention take their
-- f32 inputs in bf16 or f16 and give results in that dtype, while softmax,
-- log_softmax, layer_norm and the reductions take half inputs in f32, as
-- torch.autocast's lists do (batch_norm normalizes a half input into a
-- half result); f64 and integer inputs stay; every other op
-- promotes as always. The casts are ops of their own, so gradients come
-- back to f32 parameters in f32; a compiled callable's replays never mix a
-- trace made under autocast with a call outside it; a compiled training
-- step with {autocast = "bf16"} gives the eager autocast step's losses.
local T = dofile("t/lib/tap.lua")
local nn = kiln.nn
local F = nn.functional

local seed = 100
local function randn(shape, dt)
  seed = seed + 1
  return kiln.randn(shape, { seed = seed, dtype = dt or "f32" })
end

local function maxrel(a, b)
  a, b = a:to("f64"), b:to("f64")
  local d = (a - b):abs():amax():item() / math.max(1e-30, b:abs():amax():item())
  return d == d and d or math.huge
end

local x, w = randn({ 6, 16 }), randn({ 16, 5 })
local function bf(t) return t:to("bf16") end

-- the lists
local y = kiln.autocast("bf16", function() return x:matmul(w) end)
T.is(y.dtype, "bf16", "matmul of f32 inputs under autocast bf16: a bf16 result")
T.ok(maxrel(y, bf(x):matmul(bf(w))) == 0, "and the same numbers as the matmul of the bf16-rounded inputs")
T.is(kiln.autocast("f16", function() return x:matmul(w) end).dtype, "f16", "autocast f16: an f16 result")
local img, k = randn({ 1, 3, 6, 6 }), randn({ 4, 3, 3, 3 })
T.is(kiln.autocast("bf16", function() return kiln.conv2d(img, k, nil, { padding = 1 }) end).dtype, "bf16",
  "conv2d under autocast: bf16")
local q = randn({ 1, 2, 4, 8 })
T.is(kiln.autocast("bf16", function() return kiln.scaled_dot_product_attention(q, q, q) end).dtype, "bf16",
  "attention under autocast: bf16")
local h = bf(randn({ 3, 7 }))
for _, case in ipairs({
  { "softmax", function() return h:softmax(-1) end },
  { "log_softmax", function() return h:log_softmax(-1) end },
  { "layer_norm", function() return kiln.layer_norm(h, { 7 }) end },
  { "sum", function() return h:sum() end },
  { "mean", function() return h:mean(-1) end },
}) do
  local r = kiln.autocast("bf16", case[2])
  T.is(r.dtype, "f32", case[1] .. " of a bf16 input under autocast: computed and returned in f32")
  T.ok(maxrel(r, case[2]():to("f32")) <= 1e-2, case[1] .. ": the value of the op in bf16, within bf16's rounding")
end
-- batch_norm, as in torch.autocast: a bf16 input normalized with f32
-- statistics and parameters, a bf16 result (the f32 normalization rounded
-- once); a BatchNorm2d in train mode keeps f32 running statistics, and its
-- parameters get f32 gradients
do
  local xb = bf(randn({ 4, 3, 5, 5 }))
  local rm, rv = randn({ 3 }), randn({ 3 }):abs() + 0.5
  local r = kiln.autocast("bf16", function() return kiln.batch_norm(xb, rm, rv, nil, nil, 1e-5) end)
  T.is(r.dtype, "bf16", "batch_norm of a bf16 input under autocast: a bf16 result")
  local want = kiln.batch_norm(xb:to("f32"), rm, rv, nil, nil, 1e-5):to("bf16")
  T.ok(maxrel(r, want) == 0, "and the f32 normalization of its input, rounded to bf16 once")
  local bn = nn.BatchNorm2d(3):train()
  local xin = randn({ 4, 3, 5, 5 })
  local out = kiln.autocast("bf16", function() return bn(bf(xin)) end)
  T.is(out.dtype, "bf16", "a BatchNorm2d in train mode under autocast: a bf16 result")
  T.is(bn.running_var.dtype, "f32", "... its running statistics stay f32")
  kiln.autocast("bf16", function() return bn(bf(xin)):to("f32"):sum() end):backward()
  T.is(bn.weight.grad and bn.weight.grad.dtype, "f32", "... and its weight gets an f32 gradient")
end
T.is(kiln.autocast("bf16", function() return x:to("f64"):matmul(w:to("f64")) end).dtype, "f64",
  "f64 inputs stay f64")
T.is(kiln.autocast("bf16", function() return (h + x:slice(1, 1, 3):slice(2, 1, 7)) end).dtype, "f32",
  "other ops promote as always (bf16 + f32: f32)")

-- scope
T.is(x:matmul(w).dtype, "f32", "after kiln.autocast: f32 again")
T.is(kiln.autocast_dtype(), nil, "kiln.autocast_dtype() outside: nil")
T.is(kiln.autocast("bf16", kiln.autocast_dtype), "bf16", "inside: the dtype")
T.is(kiln.autocast("bf16", function() return kiln.autocast(false, function() return x:matmul(w) end) end).dtype, "f32",
  "kiln.autocast(false, fn) turns it off inside")
local ok, err = pcall(kiln.autocast, "bf16", function() error("boom", 0) end)
T.ok(not ok and err == "boom" and x:matmul(w).dtype == "f32", "an error inside: raised as it was, autocast restored")
ok, err = pcall(kiln.autocast, "f32", function() end)
T.like(tostring(err), "kiln%.autocast: unknown dtype 'f32' %(known: bf16, f16%)", "autocast('f32'): an error naming the dtypes")
ok, err = pcall(kiln.autocast, "bf16", 3)
T.ok(not ok and tostring(err):find("function expected"), "autocast without a function: an error saying so")

-- gradients: the casts are on the tape, so an f32 parameter gets an f32 gradient
do
  local wp = w:clone():requires_grad_()
  local loss = kiln.autocast("bf16", function() return x:matmul(wp):relu():sum() end)
  T.is(loss.dtype, "f32", "a sum under autocast: f32")
  loss:backward()
  local wq = w:clone():requires_grad_()
  bf(x):matmul(wq:to("bf16")):relu():to("f32"):sum():backward()
  T.ok(wp.grad.dtype == "f32" and maxrel(wp.grad, wq.grad) == 0,
    "the f32 parameter's gradient is f32 and that of the explicit casts")
end

-- compiled: a trace under autocast is never replayed outside it, nor the reverse
do
  local cm = kiln.compile(function(a, b) return a:matmul(b):relu() end)
  local plain = cm(x, w)
  plain = cm(x, w)
  local inside = kiln.autocast("bf16", cm, x, w)
  local again = cm(x, w)
  T.ok(plain.dtype == "f32" and inside.dtype == "bf16" and again.dtype == "f32",
    "one compiled callable: f32 outside autocast, bf16 inside, f32 after")
  T.ok(maxrel(inside, kiln.autocast("bf16", function() return x:matmul(w):relu() end)) == 0,
    "its autocast result equals eager's under autocast")
  local cma = kiln.compile(function(a, b) return a:matmul(b) end, { autocast = "bf16" })
  local r1, r2 = cma(x, w), cma(x, w)
  T.ok(r1.dtype == "bf16" and r2.dtype == "bf16" and cma:stats().direct_replays >= 1,
    "{autocast = 'bf16'}: every call (traced or replayed) in bf16")
  T.is(kiln.autocast_dtype(), nil, "and the caller's autocast is as it was")
  T.is(kiln.compile(function(a, b) return a:matmul(b) end, { autocast = false })(x, w).dtype, "f32",
    "{autocast = false}: off for its calls")
  ok, err = pcall(kiln.compile, function() end, { autocast = "f64" })
  T.like(tostring(err), "kiln%.compile: unknown autocast 'f64' %(known: bf16, f16%)", "a bad autocast option: an error")
end

-- a training step under autocast, eager and compiled: the same losses;
-- the master weights stay f32
do
  local function build()
    nn.manual_seed(7)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
  end
  local data, labels = randn({ 12, 16 }), kiln.randint(1, 5, { 12 }, { seed = 9 })
  local function step_of(m)
    local opt = kiln.optim.AdamW(m, { lr = 1e-2 })
    return function(xx, yy)
      opt:zero_grad()
      local loss = F.cross_entropy(m(xx), yy)
      loss:backward()
      opt:step()
      return loss
    end
  end
  local m1, m2 = build(), build()
  local eager = step_of(m1)
  local cm = kiln.compile(step_of(m2), { autocast = "bf16" })
  local worst, first, last, f32 = 0, nil, nil, true
  for _ = 1, 10 do
    local a = kiln.autocast("bf16", eager, data, labels)
    local b = cm(data, labels)
    f32 = f32 and a.dtype == "f32" and b.dtype == "f32"
    local d = math.abs(a:item() - b:item())
    if d > worst then worst = d end
    first, last = first or a:item(), a:item()
  end
  T.ok(worst <= 1e-5 and last < first, string.format("compiled autocast step = eager autocast step for 10 steps (worst %.3g), "
    .. "and it trains (%.4f -> %.4f)", worst, first, last))
  T.ok(f32, "every loss is f32 (cross entropy's log_softmax runs in f32)")
  T.is(m2:parameters()[1].dtype, "f32", "the parameters stay f32 (master weights)")
end

T.done()
