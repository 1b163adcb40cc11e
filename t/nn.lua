-- t/nn.lua: kiln.nn modules (scripting/lua/10_nn.lua) against small cases
-- computed by hand, plus naming, state, :to, save/load and error messages.
local T = dofile("t/lib/tap.lua")
local nn = kiln.nn

local tmpdir = os.getenv("TMPDIR") or "/tmp"
local function tmpfile(name)
  return string.format("%s/kn_nn_%d_%s", tmpdir, math.random(1 << 30), name)
end
math.randomseed(os.time())

-- Every element of t (nested list) near the nested list want.
local function near_list(got, want, tol, name)
  local flat_g, flat_w = {}, {}
  local function flat(x, out)
    if type(x) == "table" then for _, v in ipairs(x) do flat(v, out) end else out[#out + 1] = x end
  end
  flat(got, flat_g)
  flat(want, flat_w)
  local good = #flat_g == #flat_w
  local worst = 0
  for i = 1, math.min(#flat_g, #flat_w) do
    local d = math.abs(flat_g[i] - flat_w[i])
    if not (d <= tol) then good = false end
    if d > worst or d ~= d then worst = d end
  end
  return T.ok(good, name .. string.format(" (max error %g)", worst))
end

local function maxdiff(a, b)
  return (a - b):abs():amax():item()
end

local function names_of(iter)
  local out = {}
  for name in iter do out[#out + 1] = name end
  return table.concat(out, " ")
end

local function shape(t) return table.concat(t:shape(), ",") end

---------------------------------------------------------------------------
-- Linear

do
  local m = nn.Linear(3, 2)
  m.weight = kiln.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
  m.bias = kiln.tensor({ 0.5, -1 })
  local x = kiln.tensor({ { 1, 0, -1 }, { 2, 1, 0 } })
  -- x W^T + b: {1,0,-1}.{1,2,3} = -2, .{4,5,6} = -2; {2,1,0} -> 4, 13
  near_list(m(x):tolist(), { { -1.5, -3 }, { 4.5, 12 } }, 1e-6, "Linear: x W^T + b by hand")
  T.is(shape(m(kiln.ones({ 4, 5, 3 }))), "4,5,2", "Linear on a 3-D input keeps the leading dims")
  T.is(names_of(m:named_parameters()), "bias weight", "Linear parameters: bias, weight")
  T.is(tostring(m), "Linear(in_features=3, out_features=2, bias=true)", "tostring(Linear)")

  local nb = nn.Linear(3, 2, { bias = false })
  T.is(names_of(nb:named_parameters()), "weight", "bias = false: no bias parameter")
  nb.weight = kiln.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
  near_list(nb(x):tolist(), { { -2, -2 }, { 4, 13 } }, 1e-6, "Linear without bias")

  local big = nn.Linear(400, 300)
  local bound = 1 / math.sqrt(400)
  T.ok(big.weight:abs():amax():item() <= bound and big.bias:abs():amax():item() <= bound,
    "default init lies in U(-1/sqrt(in), 1/sqrt(in))")
  T.ok(big.weight:abs():amax():item() > 0.9 * bound, "and spans that range")
  T.near(big.weight:mean():item(), 0, 0.005, "with mean about 0")
  T.near(big.weight:var():item(), bound * bound / 3, 0.05 * bound * bound / 3, "and variance bound^2/3")

  nn.manual_seed(7)
  local a = nn.Linear(8, 4)
  nn.manual_seed(7)
  local b = nn.Linear(8, 4)
  local c = nn.Linear(8, 4)
  T.is(maxdiff(a.weight, b.weight) + maxdiff(a.bias, b.bias), 0, "the same seed gives the same weights")
  T.ok(maxdiff(b.weight, c.weight) > 0, "the next layer gets other weights")
  kiln.manual_seed(7)
  local d = nn.Linear(8, 4)
  T.is(maxdiff(a.weight, d.weight), 0, "kiln.manual_seed restarts initialization too")
end

---------------------------------------------------------------------------
-- Conv2d

do
  local m = nn.Conv2d(1, 1, 3)
  m.weight = kiln.ones({ 1, 1, 3, 3 })
  m.bias = kiln.zeros({ 1 })
  local x = kiln.arange(1, 17, { dtype = "f32" }):reshape({ 1, 1, 4, 4 }) -- 1..16 row by row
  -- sums of the four 3x3 windows
  near_list(m(x):tolist(), { { { { 54, 63 }, { 90, 99 } } } }, 1e-5, "Conv2d 3x3 on a known 4x4")

  local s = nn.Conv2d(1, 1, 3, { stride = 2, padding = 1 })
  s.weight = kiln.ones({ 1, 1, 3, 3 })
  s.bias = kiln.ones({ 1 })
  -- windows centred at (1,1), (1,3), (3,1), (3,3) with zero padding, plus 1
  near_list(s(x):tolist(), { { { { 15, 31 }, { 58, 100 } } } }, 1e-5, "Conv2d stride 2 padding 1 with bias")

  local lap = nn.Conv2d(1, 1, 3, { bias = false })
  lap.weight = kiln.tensor({ { { { 0, 1, 0 }, { 1, -4, 1 }, { 0, 1, 0 } } } })
  local q = {}
  for i = 1, 5 do
    q[i] = {}
    for j = 1, 5 do q[i][j] = i * i + 3 * j end
  end
  -- the discrete Laplacian of i^2 + 3j is 2 everywhere
  near_list(lap(kiln.tensor({ { q } })):tolist(), { { { { 2, 2, 2 }, { 2, 2, 2 }, { 2, 2, 2 } } } }, 1e-4,
    "Conv2d Laplacian of a quadratic is 2")

  local g = nn.Conv2d(4, 6, 1, { groups = 2 })
  T.is(shape(g.weight), "6,2,1,1", "grouped conv weight is {out, in/groups, kh, kw}")
  T.is(shape(g(kiln.ones({ 2, 4, 5, 5 }))), "2,6,5,5", "grouped conv runs")
  T.raises(function() nn.Conv2d(3, 4, 3, { groups = 2 }) end, "t/nn.lua:%d+: Conv2d: in_channels %(3%) and out_channels %(4%) must be divisible by groups %(2%)",
    "bad groups: an error at the caller's line")
  T.is(tostring(nn.Conv2d(3, 32, 3, { stride = 2, padding = 1, bias = false })),
    "Conv2d(3, 32, kernel_size={3,3}, stride={2,2}, padding={1,1}, bias=false)", "tostring(Conv2d)")
  local bound = 1 / math.sqrt(3 * 3 * 3)
  local w = nn.Conv2d(3, 16, 3).weight
  T.ok(w:abs():amax():item() <= bound and w:abs():amax():item() > 0.8 * bound, "Conv2d init bound 1/sqrt(in*kh*kw)")
end

---------------------------------------------------------------------------
-- BatchNorm2d

do
  local bn = nn.BatchNorm2d(2):eval()
  bn.running_mean = kiln.tensor({ 1, 2 })
  bn.running_var = kiln.tensor({ 4, 9 })
  bn.weight = kiln.tensor({ 2, 1 })
  bn.bias = kiln.tensor({ 0, 1 })
  local x = kiln.tensor({ { { { 3, 5 } }, { { 2, 8 } } } }) -- {1, 2, 1, 2}
  local s4 = math.sqrt(4 + 1e-5)
  near_list(bn(x):tolist(), { { { { 2 * 2 / s4, 2 * 4 / s4 } }, { { 1, 6 / math.sqrt(9 + 1e-5) + 1 } } } }, 1e-5,
    "BatchNorm2d eval uses the running statistics")

  local tr = nn.BatchNorm2d(1)
  T.ok(tr.training, "modules start in training mode")
  local xb = kiln.tensor({ { { { 1, 2 } } }, { { { 3, 4 } } } }) -- {2, 1, 1, 2}: mean 2.5, biased var 1.25
  local sd = math.sqrt(1.25 + 1e-5)
  near_list(tr(xb):tolist(), { { { { -1.5 / sd, -0.5 / sd } } }, { { { 0.5 / sd, 1.5 / sd } } } }, 1e-5,
    "BatchNorm2d training normalizes with the batch statistics")
  T.near(tr.running_mean:item(), 0.25, 1e-6, "running mean: 0.9 * 0 + 0.1 * 2.5")
  T.near(tr.running_var:item(), 0.9 + 0.1 * 5 / 3, 1e-6, "running var uses the unbiased variance (5/3)")
  T.is(tr.num_batches_tracked:item(), 1, "num_batches_tracked counts training batches")
  T.is(tr.num_batches_tracked.dtype, "i64", "num_batches_tracked is i64, as PyTorch")
  tr:eval()
  local y = tr(xb)
  near_list(y:tolist(), { { { { (1 - 0.25) / math.sqrt(tr.running_var:item() + 1e-5), (2 - 0.25) / math.sqrt(tr.running_var:item() + 1e-5) } } },
    { { { (3 - 0.25) / math.sqrt(tr.running_var:item() + 1e-5), (4 - 0.25) / math.sqrt(tr.running_var:item() + 1e-5) } } } },
    1e-5, "after :eval() the updated running statistics are used")
  T.is(tr.num_batches_tracked:item(), 1, "eval does not count batches")

  local cum = nn.BatchNorm2d(1, { momentum = false })
  cum(xb)
  T.near(cum.running_mean:item(), 2.5, 1e-6, "momentum = false: cumulative average (first batch: the batch mean)")
  T.is(names_of(tr:named_parameters()), "bias weight", "BatchNorm2d parameters")
  T.is(names_of(tr:named_buffers()), "num_batches_tracked running_mean running_var", "BatchNorm2d buffers")
  T.raises(function() nn.BatchNorm2d(1)(kiln.ones({ 1, 1, 1, 1 })) end, "more than 1 value per channel",
    "training on one value per channel is an error")
  T.raises(function() nn.BatchNorm2d(1)(kiln.ones({ 1, 4 })) end, "expected a 4%-D input", "BatchNorm2d needs 4-D input")
  local na = nn.BatchNorm2d(3, { affine = false })
  T.is(#na:parameters(), 0, "affine = false: no parameters")
  T.is(shape(na(kiln.randn({ 2, 3, 2, 2 }, { seed = 1 }))), "2,3,2,2", "and still runs")
end

---------------------------------------------------------------------------
-- LayerNorm, Embedding, activations, Dropout

do
  local ln = nn.LayerNorm(3)
  local x = kiln.tensor({ { 1, 2, 3 }, { 2, 2, 2 } })
  local r = 1 / math.sqrt(2 / 3 + 1e-5)
  near_list(ln(x):tolist(), { { -r, 0, r }, { 0, 0, 0 } }, 1e-5, "LayerNorm normalizes the last dim")
  ln.weight = kiln.tensor({ 1, 2, 3 })
  ln.bias = kiln.tensor({ 0, 0, 1 })
  near_list(ln(x):tolist(), { { -r, 0, 3 * r + 1 }, { 0, 0, 1 } }, 1e-5, "LayerNorm weight and bias")
  local ln2 = nn.LayerNorm({ 2, 2 })
  near_list(ln2(kiln.tensor({ { { 1, 3 }, { 1, 3 } } })):tolist(), { { { -1, 1 }, { -1, 1 } } }, 1e-4,
    "LayerNorm over a {2,2} shape")
  T.is(tostring(ln), "LayerNorm({3}, eps=1e-05, elementwise_affine=true)", "tostring(LayerNorm)")

  local emb = nn.Embedding(3, 2)
  T.is(shape(emb.weight), "3,2", "Embedding weight {n, d}")
  emb.weight = kiln.tensor({ { 1, 1 }, { 2, 2 }, { 3, 3 } })
  local idx = kiln.tensor({ { 3, 1 }, { 2, 2 } }, { dtype = "i64" })
  local e = emb(idx)
  T.is(shape(e), "2,2,2", "Embedding output: index shape plus d")
  near_list(e:tolist(), { { { 3, 3 }, { 1, 1 } }, { { 2, 2 }, { 2, 2 } } }, 0, "Embedding picks rows by 1-based index")
  near_list(emb(kiln.tensor({ 2 }, { dtype = "i32" })):tolist(), { { 2, 2 } }, 0, "Embedding with a 1-D i32 index")
  T.raises(function() emb(kiln.tensor({ 4 }, { dtype = "i64" })) end, "out of range", "an index past n is an error")

  local v = kiln.tensor({ -1, 0, 1 })
  near_list(nn.ReLU()(v):tolist(), { 0, 0, 1 }, 0, "ReLU")
  near_list(nn.GELU()(v):tolist(), { -0.15865525393, 0, 0.84134474607 }, 1e-6, "GELU, erf form")
  near_list(nn.GELU({ approximate = "tanh" })(v):tolist(), { -0.15880800939, 0, 0.84119199061 }, 1e-6, "GELU, tanh form")

  local drop = nn.Dropout(0.5)
  local ones = kiln.ones({ 4000 })
  local y = drop(ones)
  local zeros = y:eq(0):cast("f32"):sum():item()
  local twos = y:eq(2):cast("f32"):sum():item()
  T.is(zeros + twos, 4000, "Dropout in training: every element is 0 or 1/(1-p)")
  T.ok(zeros > 1800 and zeros < 2200, "about p of them are zero (" .. zeros .. ")")
  T.ok(maxdiff(drop(ones), y) > 0, "a new mask on each call")
  drop:eval()
  T.ok(rawequal(drop(ones), ones), "Dropout in eval is the identity")
  T.ok(rawequal(nn.Dropout(0)(ones), ones), "Dropout(0) is the identity")
  T.raises(function() nn.Dropout(1.5) end, "p must be a number in %[0, 1%]", "Dropout p out of range")
end

---------------------------------------------------------------------------
-- Sequential, naming, user modules

do
  nn.manual_seed(1)
  local seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2, { bias = false }))
  T.is(names_of(seq:named_parameters()), "1.bias 1.weight 3.weight", "Sequential names children 1, 2, 3")
  T.ok(rawequal(seq[1].weight, seq:parameters()[2]), "seq[1] is the first layer")
  T.is(tostring(seq), [[
Sequential(
  (1): Linear(in_features=3, out_features=4, bias=true)
  (2): ReLU()
  (3): Linear(in_features=4, out_features=2, bias=false)
)]], "tostring(Sequential)")
  local x = kiln.randn({ 5, 3 }, { seed = 2 })
  local manual = seq[3](seq[1](x):relu())
  T.is(maxdiff(seq(x), manual), 0, "Sequential applies its children in order")
  local t = nn.Sequential({ nn.ReLU(), nn.ReLU() })
  T.is(#t:children(), 2, "Sequential{...} takes a list too")
  t:add(nn.Tanh())
  T.is(#t:children(), 3, "Sequential:add appends")
  T.raises(function() nn.Sequential(nn.ReLU(), 3) end, "t/nn.lua:%d+: Sequential: argument 2 is a number, not a kiln.nn module",
    "Sequential rejects non-modules")

  local layers = {}
  for i = 1, 11 do layers[i] = nn.Linear(1, 1, { bias = false }) end
  local s11 = nn.Sequential(layers)
  local ns = {}
  for name in s11:named_parameters() do ns[#ns + 1] = name end
  T.is(table.concat(ns, " ", 1, 3) .. " ... " .. ns[11], "1.weight 2.weight 3.weight ... 11.weight",
    "numeric names sort as numbers (2 before 10)")

  local Block = nn.Module {
    name = "Block",
    init = function(self, d)
      self.fc2 = nn.Linear(d, d)
      self.fc1 = nn.Linear(d, d)
      self.layers = { nn.Linear(d, 1), nn.Linear(1, d) }
      self.scale = kiln.ones({ d })
      self:register_buffer("steps", kiln.zeros({}, { dtype = "i64" }))
      self._cache = kiln.zeros({ d }) -- private: not a parameter
      self.d = d
    end,
    forward = function(self, x)
      return self.fc2(self.fc1(x):relu()) * self.scale
    end,
  }
  local b = Block(4)
  T.is(names_of(b:named_parameters()),
    "fc1.bias fc1.weight fc2.bias fc2.weight layers.1.bias layers.1.weight layers.2.bias layers.2.weight scale",
    "named_parameters: dotted names in sorted order, through plain tables")
  T.is(#b:parameters(), 9, "parameters() lists the tensors")
  T.is(names_of(b:named_buffers()), "steps", "register_buffer makes a buffer")
  local sd = b:state_dict()
  T.ok(sd.steps ~= nil and sd["fc1.weight"] ~= nil and sd._cache == nil, "state_dict has parameters and buffers")
  T.is(names_of(b:named_children()), "fc1 fc2 layers.1 layers.2", "named_children")
  T.is(names_of(b:named_modules()), " fc1 fc2 layers.1 layers.2", "named_modules starts with the module itself")
  T.is(shape(b(kiln.ones({ 2, 4 }))), "2,4", "instances are callable (forward)")
  T.is(tostring(b), [[
Block(
  (fc1): Linear(in_features=4, out_features=4, bias=true)
  (fc2): Linear(in_features=4, out_features=4, bias=true)
  (layers.1): Linear(in_features=4, out_features=1, bias=true)
  (layers.2): Linear(in_features=1, out_features=4, bias=true)
)]], "tostring of a user module")

  local shared = nn.Linear(2, 2)
  local tied = nn.Module { forward = function(self, x) return self.a(self.b(x)) end }()
  tied.a, tied.b = shared, shared
  T.is(names_of(tied:named_parameters()), "a.bias a.weight", "a module reachable twice counts once")

  b:eval()
  T.ok(not b.training and not b.fc1.training and not b.layers[2].training, "eval() reaches every module")
  b:train()
  T.ok(b.training and b.layers[1].training, "train() too")

  local Sub = nn.Module { name = "Sub", extends = nn.Linear,
    forward = function(self, x) return nn.Linear.forward(self, x) * 2 end }
  local sub = Sub(2, 2)
  T.is(maxdiff(sub(kiln.ones({ 1, 2 })), nn.Linear.forward(sub, kiln.ones({ 1, 2 })) * 2), 0,
    "extends: a subclass reuses its parent's init and methods")
  T.raises(function() nn.Module { }()(kiln.ones({ 1 })) end, "Module has no forward method", "a module without forward")
  T.raises(function() nn.Linear(-1, 2) end, "t/nn.lua:%d+: Linear: in_features must be an integer >= 0, got %-1",
    "errors name the caller's line")
  T.raises(function() nn.Module(3) end, "kiln.nn.Module expects a table", "Module needs a table")
end

---------------------------------------------------------------------------
-- :to

do
  local m = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm2d(3))
  T.ok(rawequal(m:to("bf16"), m), ":to returns the module")
  T.is(m[1].weight.dtype, "bf16", ":to(dtype) converts parameters")
  T.is(m[2].running_var.dtype, "bf16", "and float buffers")
  T.is(m[2].num_batches_tracked.dtype, "i64", "but not integer buffers")
  m:to({ dtype = "f32", device = "cpu" })
  T.is(m[1].weight.dtype .. " " .. m[1].weight.device, "f32 cpu", ":to{dtype=, device=}")
  T.raises(function() m:to("i32") end, "modules only convert to floating%-point dtypes", ":to(int dtype) is refused")
  T.raises(function() m:to("nope") end, "'nope' is neither a device", ":to(unknown) is refused")
end

---------------------------------------------------------------------------
-- save / load

do
  nn.manual_seed(11)
  local a = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 3))
  a[2].running_mean = kiln.tensor({ 0.5, -0.5 })
  local path = tmpfile("a.safetensors")
  a:save_safetensors(path)
  local file = kiln.load_safetensors(path)
  local keys = {}
  for k in pairs(file) do keys[#keys + 1] = k end
  table.sort(keys)
  T.is(table.concat(keys, " "), "1.bias 1.weight 2.bias 2.num_batches_tracked 2.running_mean 2.running_var 2.weight 4.bias 4.weight",
    "the file holds parameters and buffers under their names")

  nn.manual_seed(12)
  local b = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 3)):eval()
  a:eval()
  local x = kiln.randn({ 2, 1, 4, 4 }, { seed = 5 })
  T.ok(maxdiff(a(x), b(x)) > 0, "two seeds give two models")
  T.ok(rawequal(b:load_safetensors(path), b), "load_safetensors returns the module")
  T.is(maxdiff(a(x), b(x)), 0, "after loading, the outputs are identical")
  T.is(maxdiff(b[2].running_mean, kiln.tensor({ 0.5, -0.5 })), 0, "buffers are loaded")

  -- PyTorch names: numeric components count from 0
  local tpath = tmpfile("torch.safetensors")
  a:save_safetensors(tpath, { index_base = 0, metadata = { format = "pt" } })
  local tf, meta = kiln.load_safetensors(tpath)
  T.ok(tf["0.weight"] ~= nil and tf["3.bias"] ~= nil and tf["1.weight"] ~= nil and meta.format == "pt",
    "index_base = 0 writes PyTorch's names (0.weight) and the metadata")
  local c = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 3)):eval()
  c:load_safetensors(tpath, { index_base = 0 })
  T.is(maxdiff(a(x), c(x)), 0, "and reads them back")

  -- dtype conversion on load
  local bpath = tmpfile("bf16.safetensors")
  local half = nn.Linear(2, 2):to("bf16")
  half:save_safetensors(bpath)
  local full = nn.Linear(2, 2)
  full:load_safetensors(bpath)
  T.is(full.weight.dtype, "f32", "loading converts to the model's dtype")
  T.is(maxdiff(full.weight, half.weight:to("f32")), 0, "with the file's values")

  -- mismatches: one error that lists every problem
  local nobias = tmpfile("nobias.safetensors")
  nn.Linear(3, 2, { bias = false }):save_safetensors(nobias)
  T.raises(function() nn.Linear(3, 2):load_safetensors(nobias) end,
    "t/nn.lua:%d+: load_safetensors: '[^']*nobias.safetensors' does not match the Linear model:\n  missing keys %(in the model, not in the file%): bias$",
    "a missing key is named")
  T.raises(function() nn.Linear(4, 2, { bias = false }):load_safetensors(nobias) end,
    "wrong shapes: weight %(model {2,4}, file {2,3}%)", "a wrong shape is named with both shapes")
  local m = nn.Sequential(nn.Linear(3, 2, { bias = false }))
  local okl, err = pcall(function() m:load_safetensors(nobias) end)
  T.ok(not okl and err:find("missing keys %(in the model, not in the file%): 1.weight")
    and err:find("unexpected keys %(in the file, not in the model%): weight"), "missing and unexpected in one message")
  local _, missing, unexpected = nn.Linear(3, 2):load_safetensors(nobias, { strict = false })
  T.is(table.concat(missing, ",") .. "|" .. table.concat(unexpected, ","), "bias|", "strict = false returns what was missing")
  T.raises(function() nn.Linear(4, 2):load_safetensors(nobias, { strict = false }) end, "wrong shapes",
    "strict = false still refuses a wrong shape")
  T.raises(function() nn.Linear(3, 2):load_safetensors(tmpfile("absent.safetensors")) end,
    "absent.safetensors: cannot open", "a missing file is named")

  for _, p in ipairs({ path, tpath, bpath, nobias }) do os.remove(p) end
end

T.done()
