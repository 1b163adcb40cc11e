-- 11_losses.lua: kiln.nn.functional and the losses: cross_entropy,
-- nll_loss, mse_loss (also as kiln.cross_entropy, ... and the modules
-- kiln.nn.CrossEntropyLoss, NLLLoss, MSELoss).
--
-- Each loss is built from kiln's ops (log_softmax, gather, where, sums),
-- so autograd differentiates it and kiln.compile captures it like any
-- other code. Class indices are 1-based, as every index of kiln's
-- (x:max(2) returns them so); ignore_index (default -100, PyTorch's)
-- marks targets that count for nothing.
local kiln = ...
local nn = kiln.nn
local F = nn.functional or {}
nn.functional = F

local REDUCTIONS = { "mean", "sum", "none" }

local function where()
  for level = 3, 60 do
    local info = debug.getinfo(level, "Sl")
    if not info then break end
    if info.currentline > 0 and not info.source:find("^@kiln/") then
      return info.short_src .. ":" .. info.currentline .. ": "
    end
  end
  return ""
end

local function fail(fmt, ...)
  error(where() .. string.format(fmt, ...), 0)
end

local function is_tensor(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return mt and mt.__name == "kiln.Tensor"
end

local FLOAT = { f32 = true, f64 = true, bf16 = true, f16 = true }
local INDEX = { i32 = true, i64 = true }

local function shape_str(t)
  return "{" .. table.concat(t:shape(), ",") .. "}"
end

local function check_input(fn, input)
  if not is_tensor(input) then fail("%s: input must be a tensor, got %s", fn, type(input)) end
  if not FLOAT[input.dtype] then fail("%s: input must be a float tensor, got %s", fn, input.dtype) end
end

local function reduced(loss, reduction)
  if reduction == "sum" then return loss:sum() end
  if reduction == "mean" then return loss:mean() end
  return loss
end

-- mse_loss(input, target [, {reduction = "mean" | "sum" | "none"}]): (input - target)^2
function F.mse_loss(input, target, opts)
  opts = kiln._check_options(opts, "mse_loss", { "reduction" })
  local reduction = kiln._check_name(opts.reduction or "mean", "mse_loss", "reduction", REDUCTIONS)
  check_input("mse_loss", input)
  if not is_tensor(target) then fail("mse_loss: target must be a tensor, got %s", type(target)) end
  local si, st = shape_str(input), shape_str(target)
  if si ~= st then fail("mse_loss: input %s and target %s must have the same shape", si, st) end
  local d = input - target
  local loss = reduced(d * d, reduction)
  return loss -- not a tail call: see nll_loss
end

-- The class dim of input (2 for {N, C, ...}, 1 for an unbatched {C}) and
-- the checks every class-index loss makes.
local function class_layout(fn, input, target)
  check_input(fn, input)
  if input:dim() < 1 then fail("%s: input must have a class dim, got a 0-dim tensor", fn) end
  local cd = input:dim() == 1 and 1 or 2
  local want = input:shape()
  table.remove(want, cd)
  local ts = target:shape()
  if #ts ~= #want or table.concat(ts, ",") ~= table.concat(want, ",") then
    fail("%s: target of shape %s does not fit input %s (expected {%s}: the input's shape without its class dim %d)",
      fn, shape_str(target), shape_str(input), table.concat(want, ","), cd)
  end
  return cd
end

-- weight {C} reshaped to broadcast along the class dim of an input of rank nd
local function along_class(weight, cd, nd)
  local s = {}
  for d = 1, nd do s[d] = 1 end
  s[cd] = weight:numel()
  return weight:reshape(s)
end

local function check_weight(fn, weight, input, cd)
  if weight == nil then return nil end
  if not is_tensor(weight) or weight:dim() ~= 1 or weight:numel() ~= input:shape()[cd] then
    fail("%s: weight must be a tensor of %d class weights {%d}, got %s", fn, input:shape()[cd],
      input:shape()[cd], is_tensor(weight) and ("shape " .. shape_str(weight)) or type(weight))
  end
  return weight
end

-- The picked log-probabilities and what reductions need: the valid mask
-- (target ~= ignore_index, as input's dtype) and each target's weight.
local function pick(fn, logp, target, cd, weight, ignore_index)
  if not INDEX[target.dtype] then
    fail("%s: target must hold class indices (i32 or i64, 1-based), got %s", fn, target.dtype)
  end
  local valid = target:ne(ignore_index)
  local safe = kiln.where(valid, target, 1) -- ignored entries pick class 1, then count for nothing
  local ok, picked = pcall(logp.gather, logp, cd, safe:unsqueeze(cd))
  if not ok then fail("%s: target: %s", fn, tostring(picked):gsub("^.-:%d+: ", "")) end
  picked = picked:squeeze(cd)
  local validf = valid:cast(logp.dtype)
  local wt = validf
  if weight then wt = weight:index_select(1, safe:reshape({ -1 })):reshape(target:shape()) * validf end
  return picked, validf, wt
end

local function nll(fn, logp, target, cd, weight, ignore_index, reduction)
  local picked, _, wt = pick(fn, logp, target, cd, weight, ignore_index)
  local loss = -(picked * wt)
  if reduction == "none" then return loss end
  if reduction == "sum" then return loss:sum() end
  return loss:sum() / wt:sum() -- every ignored target: 0 / 0, NaN, as PyTorch
end

local NLL_OPTS = { "weight", "ignore_index", "reduction" }

-- nll_loss(log_probs, target [, {weight =, ignore_index = -100, reduction = "mean"}])
function F.nll_loss(input, target, opts)
  opts = kiln._check_options(opts, "nll_loss", NLL_OPTS)
  local reduction = kiln._check_name(opts.reduction or "mean", "nll_loss", "reduction", REDUCTIONS)
  if not is_tensor(target) then fail("nll_loss: target must be a tensor, got %s", type(target)) end
  local cd = class_layout("nll_loss", input, target)
  local weight = check_weight("nll_loss", opts.weight, input, cd)
  -- not a tail call: the trace names an op by the user's frame on the
  -- stack, but below a kiln frame reached by a tail call it takes the line
  -- it saw last (which, for a tail call between kiln's own functions, is
  -- the model's last line, not the loss's)
  local loss = nll("nll_loss", input, target, cd, weight, opts.ignore_index or -100, reduction)
  return loss
end

-- cross_entropy with class probabilities as the target (input's shape)
local function soft_cross_entropy(input, target, weight, ls, reduction)
  local cd = input:dim() == 1 and 1 or 2
  local C = input:shape()[cd]
  local logp = input:log_softmax(cd)
  if ls > 0 then target = target * (1 - ls) + ls / C end
  local terms = logp * target
  if weight then terms = terms * along_class(weight, cd, input:dim()) end
  local loss = -terms:sum(cd)
  if reduction == "none" then return loss end
  if reduction == "sum" then return loss:sum() end
  return loss:sum() / math.max(1, input:numel() // C) -- the mean over the batch, as PyTorch
end

-- cross_entropy(logits, target [, {weight =, ignore_index = -100,
-- reduction = "mean", label_smoothing = 0}]): log_softmax over the class
-- dim, then the negative log-likelihood of each target class (1-based
-- indices) or, for a float target of the input's shape, of the class
-- probabilities. With label smoothing e, the target puts 1 - e on its
-- class and e / C on every class, as PyTorch.
function F.cross_entropy(input, target, opts)
  opts = kiln._check_options(opts, "cross_entropy", { "weight", "ignore_index", "reduction", "label_smoothing" })
  local reduction = kiln._check_name(opts.reduction or "mean", "cross_entropy", "reduction", REDUCTIONS)
  local ls = opts.label_smoothing or 0
  if type(ls) ~= "number" or not (ls >= 0 and ls <= 1) then
    fail("cross_entropy: label_smoothing must be a number in [0, 1], got %s", tostring(ls))
  end
  if not is_tensor(target) then fail("cross_entropy: target must be a tensor, got %s", type(target)) end
  check_input("cross_entropy", input)
  if FLOAT[target.dtype] then
    if shape_str(target) ~= shape_str(input) then
      fail("cross_entropy: a float target holds class probabilities and must have the input's shape %s, got %s",
        shape_str(input), shape_str(target))
    end
    local cd = input:dim() == 1 and 1 or 2
    local loss = soft_cross_entropy(input, target, check_weight("cross_entropy", opts.weight, input, cd), ls, reduction)
    return loss -- not a tail call: see nll_loss
  end
  local cd = class_layout("cross_entropy", input, target)
  local weight = check_weight("cross_entropy", opts.weight, input, cd)
  local ignore_index = opts.ignore_index or -100
  local logp = input:log_softmax(cd)
  local loss = nll("cross_entropy", logp, target, cd, weight, ignore_index, reduction)
  if ls == 0 then return loss end
  -- the smoothing term: -sum_c w_c log p_c, zero at ignored targets
  local C = input:shape()[cd]
  local terms = weight and logp * along_class(weight, cd, input:dim()) or logp
  local _, validf, wt = pick("cross_entropy", logp, target, cd, weight, ignore_index)
  local smooth = -terms:sum(cd) * validf
  if reduction == "sum" then smooth = smooth:sum()
  elseif reduction == "mean" then smooth = smooth:sum() / wt:sum() end
  return loss * (1 - ls) + smooth * (ls / C)
end

-- dropout(x, p = 0.5, training = true): as nn.Dropout, from the seeded stream
function F.dropout(x, p, training)
  local d = nn.Dropout(p)
  if training == false then d:eval() end
  return d(x)
end

-- linear(x, weight {out, in} [, bias {out}]): x W^T + b, as nn.Linear
function F.linear(x, weight, bias)
  local y = x:matmul(weight:transpose(1, 2))
  if bias then y = y + bias end
  return y
end

for _, name in ipairs { "relu", "gelu", "silu", "tanh", "sigmoid", "softmax", "log_softmax", "layer_norm",
  "batch_norm", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "scaled_dot_product_attention" } do
  F[name] = F[name] or kiln[name]
end

for _, name in ipairs { "cross_entropy", "nll_loss", "mse_loss" } do kiln[name] = F[name] end

-- Loss modules: nn.CrossEntropyLoss{...}(input, target) and the others
-- take the functional form's options once.
local function loss_module(name, fn, known)
  return nn.Module {
    name = name,
    init = function(self, opts)
      self._opts = kiln._check_options(opts, name, known)
    end,
    forward = function(self, input, target) return fn(input, target, self._opts) end,
  }
end
nn.CrossEntropyLoss = loss_module("CrossEntropyLoss", F.cross_entropy,
  { "weight", "ignore_index", "reduction", "label_smoothing" })
nn.NLLLoss = loss_module("NLLLoss", F.nll_loss, NLL_OPTS)
nn.MSELoss = loss_module("MSELoss", F.mse_loss, { "reduction" })

return F
