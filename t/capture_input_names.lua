-- capture_input_names.lua: tensors that capture finds under one name (two
-- unnamed module fields read on one line, as a module called from a plain
-- function does: "tensor at FILE:LINE") get distinct names, so that
-- versions, which match a call's inputs by name, do not take one for the
-- other and recompile on every call. Checked against eager on fresh random
-- inputs, with the guard strings and the recompile count.
local T = dofile("t/lib/tap.lua")
local LINE, SRC, at = T.tags()

local function cpu(shape, seed) return kiln.randn(shape, { seed = seed, device = "cpu" }) end

local function close(a, b)
  local d = (a - b):abs():amax():item()
  local m = b:abs():amax():item()
  return d == d and m == m and d <= 1e-5 * math.max(1, m)
end

-- a plain table of tensors (a module's are named by path: fc.weight, below)
local lin = kiln.nn.Linear(8, 3):to("cpu") -- cpu inputs, also on a GPU machine
local fc = { weight = lin.weight, bias = lin.bias }
local cm = kiln.compile(function(x)
  return x:matmul(fc.weight:transpose(1, 2)) + fc.bias -- @fields
end)
local ok = true
for i = 1, 4 do
  local x = cpu({ 4, 8 }, 100 + i)
  local want = x:matmul(fc.weight:transpose(1, 2)) + fc.bias
  ok = ok and close(cm(x), want)
end
T.ok(ok, "compiled equals eager on 4 fresh inputs")
T.is(#cm:recompiles(), 0, "no recompiles: weight and bias are told apart")
local guards = cm:guards()
T.is(#guards, 1, "one version")
local text = table.concat(guards[1].guards, "\n")
T.ok(text:find("tensor 'tensor at " .. at("fields") .. "' shape {3, 8}", 1, true) ~= nil,
  "the weight keeps the plain name")
T.ok(text:find("tensor 'tensor at " .. at("fields") .. " (2)' shape {3}", 1, true) ~= nil,
  "the bias gets a number")

-- the same fields of a module: named by their path
local cm_mod = kiln.compile(function(x)
  return x:matmul(lin.weight:transpose(1, 2)) + lin.bias
end)
cm_mod(cpu({ 4, 8 }, 99))
local mod_text = table.concat(cm_mod:guards()[1].guards, "\n")
T.ok(mod_text:find("tensor 'lin.weight' shape {3, 8}", 1, true) ~= nil, "a module's weight is named by its path")
T.ok(mod_text:find("tensor 'lin.bias' shape {3}", 1, true) ~= nil, "a module's bias is named by its path")

-- a module called from a plain function: the README's tour
local model = kiln.nn.Linear(8, 3):to("cpu")
local cm2 = kiln.compile(function(x) return model(x):relu() end)
for i = 1, 3 do cm2(cpu({ 2, 8 }, 200 + i)) end
T.is(#cm2:recompiles(), 0, "a module called from a compiled function does not recompile")
T.is(cm2:stats().versions, 1, "one version")
T.done()
