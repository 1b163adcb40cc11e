-- t/lib/train_step.lua: what the training-step tests share.
--   local S = dofile("t/lib/train_step.lua")
--   S.step_of(model, opt): the step (zero_grad, forward, cross entropy,
--     backward, optimizer step) as a function of (x, y) returning the loss
--   S.maxdiff(a, b): max |a - b| over two tensors, in f64; NaN when either
--     holds a NaN (so a NaN never passes a bound)
--   S.params_diff(m1, m2): the largest |a - b| over two models' parameters
--     (infinite where either holds a NaN)
local F = kiln.nn.functional
local S = {}

function S.step_of(model, opt)
  return function(x, y)
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    return loss
  end
end

function S.maxdiff(a, b)
  local d = (a:to("f64") - b:to("f64")):abs()
  local nan = d:ne(d):to("f64"):sum():item() > 0
  return nan and 0 / 0 or d:amax():item()
end

function S.params_diff(m1, m2)
  local p1, p2 = m1:parameters(), m2:parameters()
  local worst = 0
  for i = 1, #p1 do
    local d = (p1[i]:to("f64") - p2[i]:to("f64")):abs():amax():item()
    if d ~= d then return math.huge end
    if d > worst then worst = d end
  end
  return worst
end

return S
