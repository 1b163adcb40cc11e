-- gradcheck.lua: autograd's gradients against central finite differences,
-- for the tests of core/autograd (t/autograd_ops.lua, t/cuda_autograd.lua).
--   local GC = dofile("t/lib/gradcheck.lua")
--   GC.seed(n)                      -- inputs are drawn from seed n onwards
--   local x = GC.rnd({3, 4})        -- f64 normal; GC.rnd(shape, 0.5): |x| + 0.5
--   local err, why = GC.check(f, {x, y}, {device = "cpu"})
-- check projects f's output on a fixed random tensor r (L = sum(f * r)),
-- takes dL/dinput from kiln.grad and compares each element with
-- (L(x + h) - L(x - h)) / 2h, in f64 on the CPU. err is the worst error
-- relative to max(1, |numeric|); NaN is the worst there is (math.huge).
-- Inputs that are not float (indices, masks) are passed as they are.
local GC = {}

local next_seed = 1

function GC.seed(n) next_seed = n end

function GC.rnd(shape, above)
  next_seed = next_seed + 1
  local t = kiln.randn(shape, { seed = next_seed, dtype = "f64", device = "cpu" })
  if above then t = t:abs() + above end
  return t
end

local function flatten(v, out)
  if type(v) ~= "table" then
    out[#out + 1] = v
    return out
  end
  for _, e in ipairs(v) do flatten(e, out) end
  return out
end

function GC.flat(t)
  t = t:to("cpu")
  if t:dim() == 0 then return { t:item() } end
  return flatten(t:tolist(), {})
end

local FLOAT = { f64 = true, f32 = true, bf16 = true, f16 = true }

-- opts: device (where f runs; inputs are moved there), h (step, 1e-6)
function GC.check(f, inputs, opts)
  opts = opts or {}
  local h, dev = opts.h or 1e-6, opts.device or "cpu"
  local n = #inputs
  local function on_device(list)
    local out = {}
    for i = 1, n do out[i] = list[i]:to(dev) end
    return out
  end
  local leaves, wrt = on_device(inputs), {}
  for i = 1, n do
    if FLOAT[inputs[i].dtype] then
      leaves[i] = leaves[i]:detach():requires_grad_()
      wrt[#wrt + 1] = leaves[i]
    end
  end
  local y = f(table.unpack(leaves, 1, n))
  local r = GC.rnd(y:shape()):to(dev):to(y.dtype)
  local grads = kiln.grad((y * r):sum(), wrt)
  local function loss(args)
    return kiln.no_grad(function() return (f(table.unpack(on_device(args), 1, n)) * r):sum():item() end)
  end
  local worst, why, k = 0, "", 0
  for i = 1, n do
    local x = inputs[i]
    if FLOAT[x.dtype] then
      k = k + 1
      local vals, shape, ga = GC.flat(x), x:shape(), GC.flat(grads[k])
      local args = { table.unpack(inputs, 1, n) }
      for j = 1, #vals do
        local v = vals[j]
        vals[j] = v + h
        args[i] = kiln.tensor(vals, { dtype = x.dtype }):reshape(shape)
        local lp = loss(args)
        vals[j] = v - h
        args[i] = kiln.tensor(vals, { dtype = x.dtype }):reshape(shape)
        local lm = loss(args)
        vals[j] = v
        local num = (lp - lm) / (2 * h)
        local err = math.abs(num - ga[j]) / math.max(1, math.abs(num))
        if err ~= err then err = math.huge end
        if err > worst then
          worst = err
          why = string.format("input %d, element %d: autograd %.10g, finite differences %.10g", i, j, ga[j], num)
        end
      end
    end
  end
  return worst, why
end

return GC
