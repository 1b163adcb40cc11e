-- 12_optim.lua: kiln.optim (SGD, Adam, AdamW) and gradient clipping
-- (kiln.nn.utils.clip_grad_norm_).
--
--   local opt = kiln.optim.AdamW(model:parameters(), {lr = 1e-3})
--   opt:zero_grad(); loss:backward(); opt:step()
--
-- A step runs inside kiln.no_grad and writes every parameter and every
-- state tensor in place (copy_), so the tensors a model and a compiled
-- plan hold stay the ones that change. The updates follow PyTorch's
-- formulas (torch.optim, foreach off); parameters without a gradient are
-- skipped.
--
-- Fused steps (option fused, default true): an eager step runs the
-- updates of its f32 and f64 parameters whose state is made (every step
-- after the first) as one compiled function, the update code below traced
-- once, so each parameter's update is one generated kernel instead of a
-- dozen eager ops, the kernels a compiled training step runs for it. The
-- numbers that change every step (Adam's bias corrections) enter as a
-- tensor argument, so later steps replay the same plan. Inside a trace (a
-- compiled training step) the updates are traced as written.
local kiln = ...
local nn = kiln.nn
local optim = kiln.optim or {}
kiln.optim = optim

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

local function shape_str(t)
  return "{" .. table.concat(t:shape(), ",") .. "}"
end

local function zeros_like(p)
  return kiln.zeros(p:shape(), { dtype = p.dtype, device = p.device })
end

-- The parameters given to an optimizer or to clipping: a module, one
-- tensor, or a list of tensors, as a list.
local function tensor_list(v, fn, what)
  if nn.is_module(v) then return v:parameters() end
  if is_tensor(v) then return { v } end
  if type(v) ~= "table" then fail("%s: %s must be a list of tensors or a kiln.nn module, got %s", fn, what, type(v)) end
  local out = {}
  for i = 1, #v do
    if not is_tensor(v[i]) then fail("%s: %s entry %d is a %s, not a tensor", fn, what, i, type(v[i])) end
    out[i] = v[i]
  end
  return out
end

---------------------------------------------------------------------------
-- The optimizer class every algorithm shares

local Optimizer = {}
Optimizer.__index = Optimizer

-- Param groups from params (tensors, a module, or a list of groups
-- {params = ..., lr = ...}) and the defaults; each option checked.
local function make_groups(self, params, defaults)
  local fn = self.name
  local raw = params
  if type(params) == "table" and not nn.is_module(params) and type(params[1]) == "table" and not is_tensor(params[1]) then
    raw = params
  else
    raw = { { params = params } }
  end
  local groups, seen, n = {}, {}, 0
  for gi, g in ipairs(raw) do
    if type(g) ~= "table" then fail("%s: param group %d must be a table {params = ...}, got %s", fn, gi, type(g)) end
    local known = { "params" }
    for k in pairs(defaults) do known[#known + 1] = k end
    kiln._check_options(g, fn .. " param group " .. gi, known)
    local group = { params = tensor_list(g.params, fn, "params") }
    for k, v in pairs(defaults) do
      if g[k] ~= nil then group[k] = g[k] else group[k] = v end
    end
    for _, p in ipairs(group.params) do
      n = n + 1
      if not p.requires_grad or not p.is_leaf then
        fail("%s: parameter %d (a tensor of shape %s) %s; an optimizer updates leaf tensors that require grad "
          .. "(call p:requires_grad_() on it, or leave it out)", fn, n, shape_str(p),
          p.requires_grad and "is not a leaf (it was computed by " .. tostring(p.grad_fn) .. ")" or "does not require grad")
      end
      if seen[p] then fail("%s: parameter %d appears twice (first as parameter %d)", fn, n, seen[p]) end
      seen[p] = n
    end
    self.check(fn, group)
    groups[gi] = group
  end
  if n == 0 then fail("%s: got an empty parameter list", fn) end
  return groups
end

local function new_optimizer(cls, params, opts, defaults)
  local self = setmetatable({ name = cls.name, check = cls.check, prepare = cls.prepare, update = cls.update,
    state_keys = cls.state_keys, state = {} }, cls)
  opts = kiln._check_options(opts, cls.name, cls.options)
  local d = {}
  for k, v in pairs(defaults) do d[k] = v end
  for k, v in pairs(opts) do d[k] = v end
  self.defaults = d
  self.param_groups = make_groups(self, params, d)
  return self
end

-- opt:zero_grad(): every parameter's gradient forgotten (nil)
function Optimizer:zero_grad()
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do p:zero_grad() end
  end
  return self
end

-- opt:step([closure]): one update of every parameter that has a gradient;
-- with a closure (which recomputes the loss), returns its loss.
function Optimizer:step(closure)
  local loss
  if closure then loss = kiln.enable_grad(closure) end
  kiln.no_grad(function()
    local tracing = kiln.is_compiling()
    local fused = {} -- "device dtype" -> the updates that run fused
    for gi, g in ipairs(self.param_groups) do
      for _, p in ipairs(g.params) do
        local grad = p.grad
        if grad then
          local st = self.state[p]
          if not st then
            st = {}
            self.state[p] = st
          end
          local keys = self.state_keys(g)
          local ready = g.fused and not tracing and (p.dtype == "f32" or p.dtype == "f64")
          for _, k in ipairs(keys) do ready = ready and st[k] ~= nil end
          local k = self.prepare(p, st, g)
          if ready then
            local key = p.device .. " " .. p.dtype
            if not fused[key] then
              fused[key] = {}
              fused[#fused + 1] = key
            end
            local list = fused[key]
            list[#list + 1] = { p = p, grad = grad, st = st, g = g, gi = gi, keys = keys, k = k }
          else
            self.update(p, grad, st, g, k)
          end
        end
      end
    end
    -- at most 48 parameters a call: a call of up to 256 tensors (Adam's
    -- amsgrad: 5 a parameter) is one a direct replay takes
    for _, key in ipairs(fused) do
      local list = fused[key]
      for first = 1, #list, 48 do self:_fused_step(table.move(list, first, math.min(#list, first + 47), 1, {})) end
    end
  end)
  return loss
end

-- The updates of `items` (one device and dtype) as one call of a compiled
-- function made for their layout (which parameters, which groups, which
-- state tensors) and kept: its arguments are a tensor of the items'
-- per-step numbers, then each item's parameter, gradient and state
-- tensors. Made on first use, and again when the layout changes (a
-- parameter without a gradient this step, say).
function Optimizer:_fused_step(items)
  local sig, nums = {}, {}
  for i, it in ipairs(items) do
    sig[i] = string.format("%d:%d:%s", it.gi, #(it.k or {}), table.concat(it.keys, ","))
    for _, v in ipairs(it.k or {}) do nums[#nums + 1] = v end
  end
  local p1 = items[1].p
  sig = p1.device .. " " .. p1.dtype .. " " .. table.concat(sig, " ")
  self._fused = self._fused or {}
  local entry = self._fused[sig]
  if not entry then
    local layout, update = {}, self.update
    for i, it in ipairs(items) do layout[i] = { g = it.g, keys = it.keys, nk = #(it.k or {}) } end
    entry = kiln.compile(function(numbers, ...)
      local args, a, at = { ... }, 1, 0
      for _, l in ipairs(layout) do
        local p, grad, st = args[a], args[a + 1], {}
        a = a + 2
        for _, key in ipairs(l.keys) do
          st[key] = args[a]
          a = a + 1
        end
        local k
        if l.nk > 0 then
          k = {}
          for j = 1, l.nk do k[j] = numbers:slice(1, at + j, at + j):reshape({}) end
          at = at + l.nk
        end
        update(p, grad, st, l.g, k)
      end
    end)
    self._fused[sig] = entry
  end
  local args = { #nums > 0 and kiln.tensor(nums, { dtype = p1.dtype, device = p1.device }) or false }
  for _, it in ipairs(items) do
    args[#args + 1] = it.p
    args[#args + 1] = it.grad
    for _, key in ipairs(it.keys) do args[#args + 1] = it.st[key] end
  end
  entry(table.unpack(args))
end

-- The position of each parameter (1, 2, ... across the groups).
local function positions(self)
  local list = {}
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do list[#list + 1] = p end
  end
  return list
end

local function copy_value(v)
  if is_tensor(v) then return v:clone() end
  if type(v) == "table" then
    local c = {}
    for k, e in pairs(v) do c[k] = copy_value(e) end
    return c
  end
  return v
end

-- opt:state_dict(): {state = {[i] = {step =, exp_avg =, ...}}, param_groups
-- = {{lr =, ..., params = {1, 2, ...}}}}, PyTorch's layout with 1-based
-- parameter positions. A snapshot: its tensors are copies.
function Optimizer:state_dict()
  local state, groups, list = {}, {}, positions(self)
  for i, p in ipairs(list) do
    if self.state[p] then state[i] = copy_value(self.state[p]) end
  end
  local i = 0
  for gi, g in ipairs(self.param_groups) do
    local out = {}
    for k, v in pairs(g) do
      if k ~= "params" then out[k] = copy_value(v) end
    end
    out.params = {}
    for _ = 1, #g.params do
      i = i + 1
      out.params[#out.params + 1] = i
    end
    groups[gi] = out
  end
  return { state = state, param_groups = groups }
end

-- opt:load_state_dict(sd): hyperparameters and state from sd (as
-- state_dict makes it), checked against this optimizer's parameters first,
-- so a mismatch changes nothing.
function Optimizer:load_state_dict(sd)
  local fn = self.name .. ":load_state_dict"
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" then
    fail("%s: expected a table {state =, param_groups =} as state_dict() returns", fn)
  end
  if #sd.param_groups ~= #self.param_groups then
    fail("%s: %d param groups in the state dict, %d in the optimizer", fn, #sd.param_groups, #self.param_groups)
  end
  for gi, g in ipairs(self.param_groups) do
    local n = type(sd.param_groups[gi].params) == "table" and #sd.param_groups[gi].params or -1
    if n ~= #g.params then
      fail("%s: param group %d has %d parameters in the state dict, %d in the optimizer", fn, gi, n, #g.params)
    end
  end
  local list = positions(self)
  local state = sd.state or {}
  for i, st in pairs(state) do
    local p = list[i]
    if not p then fail("%s: state for parameter %s, but the optimizer has %d", fn, tostring(i), #list) end
    for k, v in pairs(st) do
      if is_tensor(v) and k ~= "step" and shape_str(v) ~= shape_str(p) then
        fail("%s: state '%s' of parameter %d has shape %s, the parameter %s", fn, k, i, shape_str(v), shape_str(p))
      end
    end
  end
  for gi, g in ipairs(self.param_groups) do
    for k, v in pairs(sd.param_groups[gi]) do
      if k ~= "params" then g[k] = copy_value(v) end
    end
  end
  self.state = {}
  for i, st in pairs(state) do
    local p, copy = list[i], {}
    for k, v in pairs(st) do
      -- a step count kept as a tensor (by a compiled step) stays f64
      local dtype = k == "step" and "f64" or p.dtype
      if is_tensor(v) then v = kiln.no_grad(function() return v:to({ dtype = dtype, device = p.device }):clone() end)
      else v = copy_value(v) end
      copy[k] = v
    end
    self.state[p] = copy
  end
  return self
end

function Optimizer:__tostring()
  local n = #positions(self)
  local parts = {}
  for k, v in pairs(self.param_groups[1]) do
    if k ~= "params" then
      parts[#parts + 1] = k .. "=" .. (type(v) == "table" and "{" .. table.concat(v, ", ") .. "}" or tostring(v))
    end
  end
  table.sort(parts)
  return string.format("%s(%d parameters, %s)", self.name, n, table.concat(parts, ", "))
end

local function check_number(fn, group, key, lo, hi)
  local v = group[key]
  if type(v) ~= "number" or not (v >= lo and v <= hi) then
    fail("%s: %s must be a number in [%g, %g], got %s", fn, key, lo, hi, tostring(v))
  end
end

-- A class: its name, options and their defaults (fused added), the group
-- check, and the three parts of a parameter's update:
--   prepare(p, st, g): the host's part, every step: makes the state (on the
--     first step) and counts the step; returns the step's numbers the
--     update reads (a list, or nil)
--   update(p, grad, st, g, k): the tensor math, writing p and st's tensors
--     in place; k holds prepare's numbers (Lua numbers, or 0-dim tensors
--     in a fused step)
--   state_keys(g): the names of st's tensors, in a fixed order
local function algorithm(name, defaults, check, prepare, update, state_keys)
  defaults.fused = true
  local group_check = function(fn, g)
    if type(g.fused) ~= "boolean" then fail("%s: fused must be true or false, got %s", fn, tostring(g.fused)) end
    check(fn, g)
  end
  local cls = setmetatable({ name = name, check = group_check, prepare = prepare, update = update,
    state_keys = state_keys, options = {} }, { __index = Optimizer })
  cls.__index = cls
  cls.__tostring = Optimizer.__tostring
  for k in pairs(defaults) do cls.options[#cls.options + 1] = k end
  table.sort(cls.options)
  optim[name] = function(params, opts) return new_optimizer(cls, params, opts, defaults) end
  return cls
end

---------------------------------------------------------------------------
-- SGD(params, {lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0,
-- nesterov = false, maximize = false})

algorithm("SGD", { lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false },
  function(fn, g)
    check_number(fn, g, "lr", 0, math.huge)
    check_number(fn, g, "momentum", 0, math.huge)
    check_number(fn, g, "dampening", -math.huge, math.huge)
    check_number(fn, g, "weight_decay", 0, math.huge)
    if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
      fail("%s: nesterov momentum needs momentum > 0 and dampening 0", fn)
    end
  end,
  function() return nil end,
  function(p, grad, st, g)
    local d = grad
    if g.maximize then d = -d end
    if g.weight_decay ~= 0 then d = d + p * g.weight_decay end
    if g.momentum ~= 0 then
      local buf = st.momentum_buffer
      if not buf then
        buf = d:clone()
        st.momentum_buffer = buf
      else
        buf:copy_(buf * g.momentum + d * (1 - g.dampening))
      end
      if g.nesterov then d = d + buf * g.momentum else d = buf end
    end
    p:copy_(p - d * g.lr)
  end,
  function(g) return g.momentum ~= 0 and { "momentum_buffer" } or {} end)

---------------------------------------------------------------------------
-- Adam and AdamW(params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8,
-- weight_decay = 0 (AdamW: 1e-2), amsgrad = false, maximize = false})

local function check_adam(fn, g)
  check_number(fn, g, "lr", 0, math.huge)
  check_number(fn, g, "eps", 0, math.huge)
  check_number(fn, g, "weight_decay", 0, math.huge)
  local b = g.betas
  if type(b) ~= "table" or type(b[1]) ~= "number" or type(b[2]) ~= "number" or not (b[1] >= 0 and b[1] < 1)
      or not (b[2] >= 0 and b[2] < 1) then
    fail("%s: betas must be {b1, b2} with each in [0, 1), got %s", fn, tostring(b))
  end
end

-- Adam's host part: the state on the first step, the step count, and
-- the step's numbers: lr / (1 - b1^t) and sqrt(1 - b2^t).
-- Traced (a compiled training step), the count is an f64 tensor on the
-- parameter's device that the graph increments in place, and the numbers
-- are computed from it in the graph (f64, then the parameter's dtype, the
-- precision a Lua number gets in the op-by-op update): the Lua state then
-- stays the same from call to call, so the next call can be a direct
-- replay, as PyTorch's capturable Adam keeps its step on the device.
-- Eager, the count is a Lua number again.
local function adam_prepare(p, st, g)
  if not st.exp_avg then
    st.step = 0
    st.exp_avg, st.exp_avg_sq = zeros_like(p), zeros_like(p)
    if g.amsgrad then st.max_exp_avg_sq = zeros_like(p) end
  end
  if kiln.is_compiling() then
    if not is_tensor(st.step) then st.step = kiln.tensor(st.step, { dtype = "f64", device = p.device }) end
    st.step:copy_(st.step + 1)
    local t = st.step
    local b1t = (t * math.log(g.betas[1])):exp()
    local b2t = (t * math.log(g.betas[2])):exp()
    return { (g.lr / (1 - b1t)):to(p.dtype), (1 - b2t):sqrt():to(p.dtype) }
  end
  if is_tensor(st.step) then st.step = st.step:item() end
  st.step = st.step + 1
  return { g.lr / (1 - g.betas[1] ^ st.step), math.sqrt(1 - g.betas[2] ^ st.step) }
end

local function adam_state_keys(g)
  return g.amsgrad and { "exp_avg", "exp_avg_sq", "max_exp_avg_sq" } or { "exp_avg", "exp_avg_sq" }
end

-- One Adam update; decoupled: AdamW's weight decay (p scaled by
-- 1 - lr * wd) instead of Adam's (wd * p added to the gradient).
local function adam_update(decoupled)
  return function(p, grad, st, g, k)
    local b1, b2 = g.betas[1], g.betas[2]
    if g.maximize then grad = -grad end
    if g.weight_decay ~= 0 then
      if decoupled then p:copy_(p * (1 - g.lr * g.weight_decay))
      else grad = grad + p * g.weight_decay end
    end
    local m, v = st.exp_avg, st.exp_avg_sq
    m:copy_(m + (grad - m) * (1 - b1)) -- lerp, as PyTorch
    v:copy_(v * b2 + grad * grad * (1 - b2))
    local second = v
    if g.amsgrad then
      st.max_exp_avg_sq:copy_(kiln.maximum(st.max_exp_avg_sq, v))
      second = st.max_exp_avg_sq
    end
    local denom = second:sqrt() / k[2] + g.eps
    p:copy_(p - m / denom * k[1])
  end
end

algorithm("Adam", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0, amsgrad = false, maximize = false },
  check_adam, adam_prepare, adam_update(false), adam_state_keys)
algorithm("AdamW", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2, amsgrad = false,
  maximize = false }, check_adam, adam_prepare, adam_update(true), adam_state_keys)

---------------------------------------------------------------------------
-- Gradient clipping

nn.utils = nn.utils or {}

-- clip_grad_norm_(params, max_norm [, norm_type = 2 [, {error_if_nonfinite = false}]]):
-- scale every gradient in place by max_norm / total_norm when the total
-- norm (of all gradients together) is above max_norm; returns the total
-- norm (a 0-dim tensor), as PyTorch.
function nn.utils.clip_grad_norm_(params, max_norm, norm_type, opts)
  local fn = "clip_grad_norm_"
  opts = kiln._check_options(opts, fn, { "error_if_nonfinite" })
  norm_type = norm_type or 2
  if type(max_norm) ~= "number" or not (max_norm >= 0) then
    fail("%s: max_norm must be a number >= 0, got %s", fn, tostring(max_norm))
  end
  if type(norm_type) ~= "number" or not (norm_type > 0) then
    fail("%s: norm_type must be a positive number (or math.huge), got %s", fn, tostring(norm_type))
  end
  local grads = {}
  for _, p in ipairs(tensor_list(params, fn, "params")) do
    if p.grad then grads[#grads + 1] = p.grad end
  end
  return kiln.no_grad(function()
    if #grads == 0 then return kiln.zeros({}) end
    local total
    for _, g in ipairs(grads) do
      local a = g:abs():to("f32")
      local part = norm_type == math.huge and a:amax() or (a ^ norm_type):sum()
      if total == nil then total = part
      elseif norm_type == math.huge then total = kiln.maximum(total, part)
      else total = total + part end
    end
    if norm_type ~= math.huge then total = total ^ (1 / norm_type) end
    if opts.error_if_nonfinite then
      local t = total:item()
      if t ~= t or t == math.huge then
        fail("%s: the total norm of the gradients is %s; with error_if_nonfinite = false they are scaled anyway", fn,
          tostring(t))
      end
    end
    local coef = kiln.minimum(max_norm / (total + 1e-6), kiln.ones({}, { device = total.device }))
    for _, g in ipairs(grads) do g:copy_(g * coef:to(g.dtype)) end
    return total
  end)
end

---------------------------------------------------------------------------
-- GradScaler: loss scaling for f16 training under kiln.autocast("f16"),
-- as torch.amp.GradScaler. f16 gradients underflow to zero below 6e-8
-- (6e-5 at full precision), so the loss is multiplied by a large scale
-- before backward and the gradients divided by it before the step; a step
-- whose gradients hold an inf or NaN (the scale was too large) is skipped
-- and the scale halved, and after growth_interval good steps it doubles.
--
--   local scaler = kiln.amp.GradScaler()
--   scaler:scale(loss):backward()
--   scaler:step(opt)      -- unscales, then steps unless a gradient is inf/NaN
--   scaler:update()
--
-- Reading whether a gradient is finite takes the values to the host, so in
-- a compiled step :step is a graph break, as it syncs in PyTorch.

kiln.amp = kiln.amp or {}
local GradScaler = {}
GradScaler.__index = GradScaler
GradScaler.__name = "kiln.amp.GradScaler"

function kiln.amp.GradScaler(opts)
  local fn = "GradScaler"
  opts = kiln._check_options(opts, fn, { "init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled" })
  local self = setmetatable({
    scale_value = opts.init_scale or 2.0 ^ 16,
    growth_factor = opts.growth_factor or 2.0,
    backoff_factor = opts.backoff_factor or 0.5,
    growth_interval = opts.growth_interval or 2000,
    enabled = opts.enabled ~= false,
    growth_tracker = 0,
    unscaled = {}, -- optimizer -> whether unscale_ ran this step
    found_inf = false,
  }, GradScaler)
  if type(self.scale_value) ~= "number" or not (self.scale_value > 0) or self.scale_value == math.huge then
    fail("%s: init_scale must be a positive finite number, got %s", fn, tostring(self.scale_value))
  end
  if type(self.growth_factor) ~= "number" or not (self.growth_factor > 1) then
    fail("%s: growth_factor must be a number > 1, got %s", fn, tostring(self.growth_factor))
  end
  if type(self.backoff_factor) ~= "number" or not (self.backoff_factor > 0 and self.backoff_factor < 1) then
    fail("%s: backoff_factor must be a number in (0, 1), got %s", fn, tostring(self.backoff_factor))
  end
  if math.type(self.growth_interval) ~= "integer" or self.growth_interval < 1 then
    fail("%s: growth_interval must be an integer >= 1, got %s", fn, tostring(self.growth_interval))
  end
  return self
end

-- scaler:scale(loss): the loss times the current scale (the loss itself
-- when disabled)
function GradScaler:scale(loss)
  if not is_tensor(loss) then fail("GradScaler:scale: expects the loss tensor, got %s", type(loss)) end
  if not self.enabled then return loss end
  return loss * self.scale_value
end

-- scaler:unscale_(opt): every gradient opt updates divided by the scale, in
-- place (before clip_grad_norm_, say); at most once a step
function GradScaler:unscale_(opt)
  if not self.enabled then return end
  if self.unscaled[opt] then fail("GradScaler:unscale_: already called for this optimizer since the last update()") end
  local inv = 1.0 / self.scale_value
  local bad = false
  kiln.no_grad(function()
    local check -- inf - inf and NaN - NaN are NaN: one sum says whether any is not finite
    for _, g in ipairs(opt.param_groups) do
      for _, p in ipairs(g.params) do
        local grad = p.grad
        if grad then
          local scaled = grad * inv
          grad:copy_(scaled)
          local part = (scaled - scaled):to("f32"):sum()
          check = check and check + part:to(check.device) or part
        end
      end
    end
    if check then
      local s = check:item() -- the one read of the values back to the host
      bad = s ~= s
    end
  end)
  self.unscaled[opt] = true
  self.found_inf = self.found_inf or bad
end

-- scaler:step(opt): unscale (unless done), then opt:step() unless a
-- gradient was inf or NaN; returns whether it stepped
function GradScaler:step(opt, ...)
  if not self.enabled then
    opt:step(...)
    return true
  end
  if not self.unscaled[opt] then self:unscale_(opt) end
  if self.found_inf then return false end
  opt:step(...)
  return true
end

-- scaler:update(): halve the scale after a skipped step, double it after
-- growth_interval steps in a row without one
function GradScaler:update()
  if not self.enabled then return end
  if self.found_inf then
    self.scale_value = self.scale_value * self.backoff_factor
    self.growth_tracker = 0
  else
    self.growth_tracker = self.growth_tracker + 1
    if self.growth_tracker == self.growth_interval then
      self.scale_value = self.scale_value * self.growth_factor
      self.growth_tracker = 0
    end
  end
  self.found_inf = false
  self.unscaled = {}
end

function GradScaler:get_scale() return self.enabled and self.scale_value or 1.0 end

GradScaler.__tostring = function(self)
  return string.format("GradScaler(scale=%g, growth_tracker=%d/%d)", self:get_scale(), self.growth_tracker,
    self.growth_interval)
end

return optim
