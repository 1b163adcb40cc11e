-- t/autograd.lua: autograd's Lua API (scripting/kn_lua_autograd.c over
-- core/autograd): requires_grad, backward, .grad and its accumulation,
-- kiln.grad, kiln.no_grad, modules' parameters, and each bad input with
-- its message: a non-scalar without a gradient, a graph already freed, an
-- in-place write to a tensor saved for backward (nothing half updated), an
-- op without a derivative, a compiled call's output; and the training
-- pieces of kiln.nn: Dropout and BatchNorm2d in train mode.
local T = dofile("t/lib/tap.lua")
local LINE = T.tags()

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

local function close(got, want, tol)
  local g, w = flat(got), type(want) == "table" and want or flat(want)
  if #g ~= #w then return false end
  for i = 1, #g do
    if not (math.abs(g[i] - w[i]) <= tol) then return false end
  end
  return true
end

-- ---- flags ------------------------------------------------------------

local x = kiln.randn({ 2, 3 }, { seed = 1, requires_grad = true })
T.ok(x.requires_grad and x.is_leaf and x.grad == nil and x.grad_fn == nil, "randn{requires_grad = true}: a leaf")
T.ok(not kiln.zeros({ 2 }).requires_grad, "tensors do not require grad by default")
local z = kiln.zeros({ 2 })
T.ok(z:requires_grad_() == z and z.requires_grad, "x:requires_grad_() sets it and returns x")
z.requires_grad = false
T.ok(not z.requires_grad, "x.requires_grad = false clears it")
T.raises(function() kiln.arange(3):requires_grad_() end,
  "requires_grad_: only floating%-point tensors can require gradients, got i64", "an integer tensor cannot require grad")
T.raises(function() kiln.zeros({ 2 }, { requires_grad = 1 }) end, "zeros: requires_grad must be a boolean",
  "requires_grad must be a boolean")
local y = x * 2
T.ok(y.requires_grad and not y.is_leaf and y.grad_fn == "mul", "x * 2 has history: grad_fn 'mul'")
T.raises(function() y:requires_grad_(false) end, "only a leaf tensor's flag can be changed; this one was made by mul",
  "requires_grad_(false) on a tensor with history")
T.raises(function() x.foo = 1 end, "a tensor has no field 'foo' to set", "only requires_grad and grad can be set")
local d = y:detach()
T.ok(not d.requires_grad and d.is_leaf and close(d, y, 0), "detach: the same values, no history")

-- ---- backward and .grad ---------------------------------------------------

local a = kiln.tensor({ 1, 2, 3 }, { requires_grad = true })
local loss = (a * a):sum()
loss:backward()
T.ok(close(a.grad, { 2, 4, 6 }, 0), "d/da sum(a * a) = 2a (a repeated input)")
T.is(a.grad.dtype, "f32", "the gradient has a's dtype")
local g1 = a.grad;
((a * a):sum()):backward()
T.ok(close(a.grad, { 4, 8, 12 }, 0), "a second backward adds to .grad")
T.ok(close(g1, { 2, 4, 6 }, 0), "... into a new tensor: the first .grad read is unchanged")
a:zero_grad()
T.is(a.grad, nil, "x:zero_grad() forgets the gradient (nil)")
a.grad = kiln.ones({ 3 })
T.ok(close(a.grad, { 1, 1, 1 }, 0), "x.grad = tensor sets it")
T.raises(function() a.grad = kiln.ones({ 2 }) end, "grad: a gradient of shape {2} for a tensor of shape {3}",
  "x.grad = a tensor of another shape")
a.grad = nil
T.is(a.grad, nil, "x.grad = nil clears it")

local m = kiln.randn({ 2, 3 }, { seed = 2, requires_grad = true })
local v = m * 3
v:backward(kiln.full({ 2, 3 }, 2))
T.ok(close(m.grad, { 6, 6, 6, 6, 6, 6 }, 0), "y:backward(grad) for a non-scalar y")
T.raises(function() (m * 3):backward() end, -- @nonscalar
  "backward: the tensor has shape {2,3} %(6 elements%); a gradient can be implied only for a one%-element tensor",
  "backward on a non-scalar without a gradient")
T.raises(function() (m * 3):backward(kiln.ones({ 2 })) end,
  "backward: the gradient has shape {2} but the tensor has shape {2,3}", "a gradient of the wrong shape")

local r = kiln.tensor({ 1, 2 }, { requires_grad = true })
local sq = (r * r):sum() -- @retained
sq:backward({ retain_graph = true })
sq:backward()
T.ok(close(r.grad, { 4, 8 }, 0), "retain_graph: a second backward through the same graph")
local ok, err = pcall(sq.backward, sq)
T.ok(not ok and err:find("backward: the graph was already freed: an earlier backward through mul %(at " ..
  "t/autograd.lua:" .. LINE.retained .. "%) released the tensors it saved; pass {retain_graph = true}"),
  "backward twice through freed buffers: an error naming the op and its line")
local lone = kiln.tensor({ 5 }, { requires_grad = true })
lone:backward()
T.ok(close(lone.grad, { 1 }, 0) and close(kiln.grad(lone, lone), { 1 }, 0), "backward from a leaf itself: its gradient is 1")
local plain = (r + 1):sum()
plain:backward()
plain:backward()
T.ok(true, "a graph that saved nothing can run backward twice")

-- ---- in-place writes ------------------------------------------------------

local data = kiln.tensor({ 1, 2, 3 })
local w = kiln.tensor({ 1, 1, 1 }, { requires_grad = true })
local out = (data * w):sum() -- @saved
data:copy_(kiln.tensor({ 5, 5, 5 }))
ok, err = pcall(out.backward, out)
T.ok(not ok and err:find("backward: input 1 of mul %(at t/autograd.lua:" .. LINE.saved ..
  "%) %(shape {3}%), which its gradient needs, was modified in place after mul used it"),
  "an in-place write to a tensor saved for backward is refused, naming the op: " .. tostring(err))
T.is(w.grad, nil, "... and nothing was half updated: w.grad is still nil")
T.raises(function() w:copy_(kiln.zeros({ 3 })) end,
  "copy_: the tensor requires grad and an in%-place write would not be recorded; write it inside kiln.no_grad",
  "copy_ into a tensor that requires grad, outside no_grad")
kiln.no_grad(function() w:copy_(kiln.zeros({ 3 })) end)
T.ok(close(w, { 0, 0, 0 }, 0), "... and inside kiln.no_grad it writes (an optimizer's step)")
T.raises(function() (w * 2):copy_(kiln.zeros({ 3 })) end,
  "copy_: the tensor has autograd history %(mul made it%)", "copy_ into a tensor with history")
T.raises(function() kiln.zeros({ 3 }):copy_(w * 2) end,
  "copy_: the source requires grad but an in%-place copy records no gradient", "copy_ from a tensor that requires grad")

-- ---- no history -----------------------------------------------------------

T.raises(function() (w:gt(0)):cast("f32"):sum():backward() end,
  "backward: the tensor does not require grad: it comes from gt, which is not differentiable %(its result is bool%)",
  "backward through a comparison names it")
T.raises(function()
  local _, i = w:max(1)
  i:cast("f32"):backward()
end, "it comes from max, which is not differentiable %(its result is i64%)", "max's indices carry no gradient")
T.raises(function() kiln.ones({ 1 }):sum():backward() end,
  "backward: the tensor does not require grad and has no history: nothing it was computed from requires grad",
  "backward from a tensor without history")
local ng = kiln.no_grad(function()
  T.ok(not kiln.is_grad_enabled(), "inside kiln.no_grad grad mode is off")
  return (w * 2):sum()
end)
T.ok(kiln.is_grad_enabled() and not ng.requires_grad, "no_grad: its result has no history, grad mode back on")
T.raises(function() ng:backward() end, "it was computed inside kiln.no_grad", "backward from a no_grad result says so")
pcall(kiln.no_grad, function() error("boom") end)
T.ok(kiln.is_grad_enabled(), "an error inside kiln.no_grad restores grad mode")
local eg = kiln.no_grad(function() return kiln.enable_grad(function() return w * 2 end) end)
T.ok(eg.requires_grad, "kiln.enable_grad records inside a no_grad")
T.ok(not kiln.no_grad(kiln.nn.Linear(2, 2), kiln.ones({ 2 })).requires_grad, "kiln.no_grad(module, x) calls the module")
local n1, n2 = kiln.no_grad(function(p, q) return p + 1, q end, 1, "two")
T.ok(n1 == 2 and n2 == "two", "kiln.no_grad passes arguments and returns every result")

-- ---- kiln.grad ------------------------------------------------------------

local p = kiln.tensor({ 1, 2 }, { requires_grad = true })
local q = kiln.tensor({ 3, 4 }, { requires_grad = true })
local h = p * q
local gp = kiln.grad((h * p):sum(), p, { retain_graph = true })
T.ok(close(gp, { 6, 16 }, 0) and p.grad == nil, "kiln.grad(out, x): d/dp sum(p^2 q) = 2pq; .grad untouched")
local gs = kiln.grad((h * h):sum(), { h, q }, { retain_graph = true })
T.ok(close(gs[1], { 6, 16 }, 0) and close(gs[2], { 2 * 3 * 1, 2 * 4 * 4 }, 0),
  "kiln.grad with a list: a tensor with history and a leaf")
T.raises(function() kiln.grad((p * 2):sum(), { p, q }) end, "grad: input 2 was not used to compute the outputs",
  "an unused input is an error")
local gu = kiln.grad((p * 2):sum(), { p, q }, { allow_unused = true })
T.ok(close(gu[1], { 2, 2 }, 0) and gu[2] == nil, "allow_unused: nil for it")
T.raises(function() kiln.grad((p * 2):sum(), kiln.ones({ 2 })) end, "grad: input 1 does not require grad",
  "kiln.grad of an input that does not require grad")
local go = kiln.grad(p * 3, p, { grad_outputs = kiln.tensor({ 1, 10 }) })
T.ok(close(go, { 3, 30 }, 0), "kiln.grad with grad_outputs")
local two = kiln.grad({ p:sum(), (p * p):sum() }, p)
T.ok(close(two, { 3, 5 }, 0), "kiln.grad of two outputs adds their gradients")

-- ---- dtypes ---------------------------------------------------------------

for _, dt in ipairs { "bf16", "f16", "f64" } do
  local hx = kiln.tensor({ 1, 2, 3 }, { dtype = dt, requires_grad = true })
  ;((hx * hx):sum() * 0.5):backward()
  T.ok(hx.grad.dtype == dt and close(hx.grad, { 1, 2, 3 }, 1e-2), dt .. ": the gradient has the leaf's dtype")
end
local mixed = kiln.tensor({ 1, 2 }, { requires_grad = true })
;(mixed * kiln.tensor({ 3, 4 }, { dtype = "f64" })):sum():backward()
T.ok(mixed.grad.dtype == "f32" and close(mixed.grad, { 3, 4 }, 0), "f32 times f64: the f32 leaf gets an f32 gradient")

-- ---- a long tape ----------------------------------------------------------

local chain = kiln.tensor({ 1 }, { requires_grad = true })
local c = chain
for _ = 1, 20000 do c = c + 0 end
c:sum():backward()
T.ok(close(chain.grad, { 1 }, 0), "backward through a chain of 20000 ops")
c = nil
collectgarbage()
T.ok(true, "releasing it frees the tape without recursion")

-- ---- modules --------------------------------------------------------------

kiln.manual_seed(3)
local model = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.ReLU(), kiln.nn.Linear(4, 2))
local all = true
for _, t in ipairs(model:parameters()) do all = all and t.requires_grad and t.is_leaf end
T.ok(all, "kiln.nn modules' parameters require grad")
local bn = kiln.nn.BatchNorm2d(2)
T.ok(bn.weight.requires_grad and not bn.running_mean.requires_grad, "BatchNorm2d: weight requires grad, buffers do not")
local Custom = kiln.nn.Module { name = "Custom", init = function(self) self.scale = kiln.ones({ 2 }) end,
  forward = function(self, v) return v * self.scale end }
T.ok(Custom().scale.requires_grad, "a user module's tensor fields are parameters: they require grad")
local xin = kiln.randn({ 5, 3 }, { seed = 4 })
model(xin):sum():backward()
local have = 0
for _, t in ipairs(model:parameters()) do have = have + (t.grad and 1 or 0) end
T.is(have, 4, "backward through a model gives every parameter a gradient")
model:zero_grad()
T.is(model[1].weight.grad, nil, "module:zero_grad() forgets them")
model:to("f64")
T.ok(model[1].weight.dtype == "f64" and model[1].weight.requires_grad and model[1].weight.is_leaf,
  "module:to(dtype): parameters stay leaves that require grad")

-- the same model, compiled: in train mode (grad mode on) the compiled call
-- keeps what backward needs; in eval mode it keeps nothing and says so
local lin = kiln.nn.Linear(3, 2)
local cm = kiln.compile(function(v) return lin(v):sum() end)
local xs = kiln.randn({ 4, 3 }, { seed = 5 })
local compiled = cm(xs)
T.ok(close(compiled, lin(xs):sum(), 1e-5), "a compiled call with parameters that require grad: same value")
compiled:backward()
local g_compiled = lin.weight.grad
lin:zero_grad()
lin(xs):sum():backward()
T.ok(close(g_compiled, lin.weight.grad, 1e-6), "backward from a compiled call's output (train mode): eager's gradient")
lin:zero_grad()
lin:eval()
T.raises(function() cm(xs):backward() end,
  "it was computed by a compiled function that kept no values for a backward outside it",
  "in eval mode backward from a compiled call's output says why it cannot")
lin:train()
local outside = lin(xs):sum()
local inside = kiln.compile(function() outside:backward() end)
inside()
T.ok(close(lin.weight.grad, g_compiled, 1e-6), "backward inside a compiled function, of a tape recorded outside it")
lin:zero_grad()
local lin_out = lin(xs) * 1
local moved = lin_out:to(lin_out.device) -- the same device: no copy, history kept
T.ok(moved.requires_grad, "x:to(its own device) keeps the history")

-- ---- Dropout and BatchNorm2d in train mode ---------------------------------

local drop = kiln.nn.Dropout(0.5)
local dx = kiln.ones({ 200 }, { requires_grad = true })
kiln.manual_seed(7)
local d1 = drop(dx)
kiln.manual_seed(7)
local d2 = drop(dx)
T.ok(close(d1, d2, 0), "Dropout in train mode: the same seed drops the same elements")
local kept = 0
for _, e in ipairs(flat(d1)) do kept = kept + (e ~= 0 and 1 or 0) end
T.ok(kept > 60 and kept < 140, "... about half of them (" .. kept .. " of 200 kept)")
d1:sum():backward()
T.ok(close(dx.grad, d1, 0), "... and its gradient is the mask scaled by 1 / (1 - p)")
drop:eval()
T.ok(drop(dx) == dx, "Dropout in eval mode is the identity")

local bnt = kiln.nn.BatchNorm2d(2, { momentum = 0.5 })
local bx = kiln.randn({ 4, 2, 3, 3 }, { seed = 8 }) * 2 + 1
local running = bnt.running_mean
local by = bnt(bx)
T.ok(rawequal(bnt.running_mean, running) and bnt.num_batches_tracked:item() == 1,
  "BatchNorm2d train: the running statistics are updated in place (the same tensors)")
local bmean, bvar = bx:mean({ 1, 3, 4 }), bx:var({ 1, 3, 4 })
T.ok(close(bnt.running_mean, bmean * 0.5, 1e-5), "BatchNorm2d train: running mean = (1 - m) 0 + m batch mean")
T.ok(close(bnt.running_var, bvar * 0.5 + 0.5, 1e-4), "... running var from the unbiased batch variance")
T.ok(not bnt.running_mean.requires_grad and bnt.running_mean.is_leaf, "... the running statistics keep no history")
T.ok(close(by:mean({ 1, 3, 4 }), { 0, 0 }, 1e-5), "... the output is normalized with the batch statistics")
;(by * by):sum():backward()
T.ok(bnt.weight.grad ~= nil and bnt.bias.grad ~= nil, "... its weight and bias get gradients")

T.done()
