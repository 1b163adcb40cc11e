-- 10_nn.lua: kiln.nn, neural-network modules in plain Lua on top of the
-- tensor ops (luaopen_kiln runs this file with the kiln table as `...`).
--
--   local Block = kiln.nn.Module{name = "Block",
--     init = function(self, d) self.fc = kiln.nn.Linear(d, d) end,
--     forward = function(self, x) return self.fc(x):relu() end}
--   local m = Block(16)           -- calling a class constructs an instance
--   local y = m(x)                -- calling an instance runs forward
--
-- What a module holds is found from its fields, as PyTorch finds it from its
-- attributes: a field holding a module is a child, a field holding a tensor
-- is a parameter unless registered with self:register_buffer(name, t), and
-- plain Lua tables (lists of layers) are searched too. Fields whose names
-- begin with "_" are private and skipped. Names are dotted paths of field
-- names: "fc1.weight", "layers.2.bias".
--
-- Index naming: Sequential's children are its array entries 1, 2, 3, ..., so
-- model[1] is the first layer and its weight is named "1.weight" (PyTorch
-- counts from 0 and writes "0.weight"). load_safetensors and
-- save_safetensors take {index_base = 0} to read and write PyTorch's names.
--
-- Every order is deterministic: names are sorted per path component, with
-- numeric components in numeric order (2 before 10).
local kiln = ...

local nn = kiln.nn or {}
kiln.nn = nn

---------------------------------------------------------------------------
-- Errors at the user's line: kiln's own chunks (@kiln/...) are skipped, so
-- a bad argument to Linear points at the line that called it.

local function where()
  for level = 3, 60 do
    local info = debug.getinfo(level, "Slt")
    if not info then break end
    if info.currentline > 0 and not info.source:find("^@kiln/") then
      return info.short_src .. ":" .. info.currentline .. ": "
    end
    -- a tail call (`return nn.Linear(...)`) left no frame for the user's
    -- line: the next frame up is the caller's caller, a wrong line
    if info.istailcall then break end
  end
  return ""
end

-- A user's value as a message shows it: strings, numbers, booleans and nil
-- as themselves; anything else by its kind ("a table"), never by the
-- address tostring gives it ("table: 0x55..."), which means nothing to a
-- user and differs between runs. Later files use it as kiln.repl.describe_value.
local function show(v)
  local t = type(v)
  if t == "string" or t == "number" or t == "boolean" or t == "nil" then return tostring(v) end
  local mt = getmetatable(v)
  local name = type(mt) == "table" and rawget(mt, "__name")
  if name == "kiln.Tensor" then return "a tensor of shape {" .. table.concat(v:shape(), ",") .. "}" end
  if type(name) == "string" then return "a " .. name end
  return "a " .. t
end
kiln.repl = kiln.repl or {}
kiln.repl.describe_value = show

-- Arguments that are not strings or numbers are shown by show(): a %s of
-- a table would print its address.
local function fail(fmt, ...)
  local args = table.pack(...)
  for i = 1, args.n do
    if type(args[i]) ~= "string" and type(args[i]) ~= "number" then args[i] = show(args[i]) end
  end
  error(where() .. string.format(fmt, table.unpack(args, 1, args.n)), 0)
end

---------------------------------------------------------------------------
-- Small helpers

local TENSOR_MT = getmetatable(kiln.zeros({ 1 }, { device = "cpu" })) -- cpu: loading kiln starts no GPU work
local is_tensor = kiln.is_tensor or function(v)
  return type(v) == "userdata" and getmetatable(v) == TENSOR_MT
end

local FLOAT = { f32 = true, f64 = true, bf16 = true, f16 = true }

local function shape_str(shape)
  return "{" .. table.concat(shape, ",") .. "}"
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

local function check_count(v, what, fn, min)
  if math.type(v) ~= "integer" or v < (min or 1) then
    fail("%s: %s must be an integer >= %d, got %s", fn, what, min or 1, v)
  end
  return v
end

-- A size given as n or {h, w}, as a pair.
local function pair(v, what, fn, min)
  min = min or 1
  if type(v) == "table" then
    if #v ~= 2 or math.type(v[1]) ~= "integer" or math.type(v[2]) ~= "integer"
        or v[1] < min or v[2] < min then
      fail("%s: %s must be an integer >= %d or {h, w} of them", fn, what, min)
    end
    return { v[1], v[2] }
  end
  if math.type(v) ~= "integer" or v < min then
    fail("%s: %s must be an integer >= %d or {h, w} of them, got %s", fn, what, min, v)
  end
  return { v, v }
end

-- The options table (a new empty one for nil), whose keys must be in
-- `known`: the checker every API shares (scripting/kn_lua_util.c).
local function opts_table(opts, fn, known)
  return kiln._check_options(opts, fn, known)
end

---------------------------------------------------------------------------
-- Reproducible initialization: parameter k after nn.manual_seed(s) draws
-- from its own seeded stream, so a model built after the same seed has the
-- same weights whatever random calls came before.

local init_seed, init_count = 0, 0

function nn.manual_seed(s)
  if math.type(s) ~= "integer" then fail("nn.manual_seed: seed must be an integer, got %s", s) end
  init_seed, init_count = s, 0
end

local function next_seed()
  init_count = init_count + 1
  return init_seed * 1000003 + init_count -- wraps on overflow, which is fine for a key
end

-- kiln.manual_seed also restarts initialization, as torch.manual_seed does.
local base_manual_seed = kiln.manual_seed
if base_manual_seed then
  kiln.manual_seed = function(s)
    base_manual_seed(s)
    nn.manual_seed(s)
  end
end

-- U(-bound, bound), PyTorch's default for Linear and Conv2d weights and biases
-- (kaiming_uniform with a = sqrt(5) reduces to bound = 1 / sqrt(fan_in)).
local function uniform(shape, bound)
  if bound == 0 then return kiln.zeros(shape) end -- fan_in 0: nothing to scale by
  return kiln.rand(shape, { seed = next_seed(), low = -bound, high = bound })
end

function nn.init_bound(fan_in)
  if math.type(fan_in) ~= "integer" or fan_in < 0 then
    fail("init_bound: fan_in must be an integer >= 0, got %s", fan_in)
  end
  return fan_in > 0 and 1 / math.sqrt(fan_in) or 0
end

---------------------------------------------------------------------------
-- Classes

local Base = {} -- the methods every module has

local function is_module(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__kiln_module") == true
end
nn.is_module = is_module

local collect -- defined below

-- A module's parameters require grad (its buffers do not), as PyTorch's
-- nn.Parameter: every floating-point parameter without history becomes a
-- leaf that requires grad once init has made it. A traced placeholder (a
-- module built inside a compiled function) cannot, and is left as it is.
local function params_require_grad(self)
  for _, e in ipairs(collect(self, true, false, true)) do
    local t = e.tensor
    if FLOAT[t.dtype] and t.is_leaf and not t.requires_grad then pcall(t.requires_grad_, t) end
  end
end

local function construct(cls, ...)
  local self = setmetatable({ training = true, _buffers = {} }, cls)
  local init = cls.init
  if init then init(self, ...) end
  params_require_grad(self)
  return self
end

local module_tostring -- defined below

-- m(x) calls m:forward(x). Not as a tail call: then Lua still knows the
-- callee's name ('forward') for tracebacks and graph-break user stacks.
local function pass(...) return ... end
local function call_forward(self, ...) return pass(self:forward(...)) end

-- kiln.nn.Module{name =, init = function(self, ...), forward = function(self, ...),
-- extends = <class>, other methods...} returns a class.
function nn.Module(def)
  if type(def) ~= "table" then
    fail("kiln.nn.Module expects a table {init = function(self, ...), forward = function(self, ...)}, got %s", type(def))
  end
  if def.name ~= nil and type(def.name) ~= "string" then
    fail("kiln.nn.Module: 'name' must be a string, got %s", type(def.name))
  end
  local parent = def.extends or Base
  if parent ~= Base and not (type(parent) == "table" and rawget(parent, "__kiln_module")) then
    fail("kiln.nn.Module: 'extends' must be a module class")
  end
  local cls = {}
  for k, v in pairs(def) do
    if k ~= "extends" and k ~= "name" then cls[k] = v end
  end
  cls.__kiln_name = def.name or (parent ~= Base and parent.__kiln_name) or "Module"
  cls.__kiln_module = true
  cls.__index = cls
  cls.__name = "kiln.nn." .. cls.__kiln_name
  -- metamethods are looked up raw, so they are set (or inherited) here
  cls.__call = def.__call or rawget(parent, "__call") or call_forward
  cls.__tostring = def.__tostring or rawget(parent, "__tostring") or module_tostring
  return setmetatable(cls, {
    __index = parent,
    __call = construct,
    __tostring = function() return "kiln.nn class " .. cls.__kiln_name end,
  })
end

function Base:forward()
  fail("%s has no forward method", getmetatable(self).__kiln_name)
end

function Base:extra_repr()
  return ""
end

---------------------------------------------------------------------------
-- Parameter tables: a table of tensors (an ONNX module's `params`, by name)
-- that counts its writes. Reads, writes, pairs and # work as on a plain
-- table; the entries live in a store behind the metatable, whose
-- __newindex counts every write in __kiln_replay_version. A compiled call's
-- direct replay then checks that count, one compare, instead of every entry
-- (kn_lua_replay.c: snap_versioned). rawset on the table itself bypasses
-- the store: the replay sees such an entry as a change all the same.

function nn.param_table(init)
  local store, mt = {}, nil
  mt = {
    __kiln_replay_store = store,
    __kiln_replay_version = 0,
    __index = store,
    __newindex = function(_, k, v)
      store[k] = v
      mt.__kiln_replay_version = mt.__kiln_replay_version + 1
    end,
    __pairs = function() return next, store, nil end,
    __len = function() return #store end,
  }
  for k, v in pairs(init or {}) do store[k] = v end
  return setmetatable({}, mt)
end

local function is_param_table(t)
  local mt = getmetatable(t)
  return type(mt) == "table" and rawget(mt, "__kiln_replay_store") ~= nil
end
nn.is_param_table = is_param_table

---------------------------------------------------------------------------
-- Walking a module's fields

-- The name of field k, or nil when the field is not part of the module.
local function key_name(k)
  if type(k) == "string" then
    if k:sub(1, 1) ~= "_" then return k end
  elseif math.type(k) == "integer" then
    return tostring(k)
  end
  return nil
end

-- Integer keys first, in numeric order, then strings in byte order.
local function key_less(a, b)
  local ia, ib = math.type(a) == "integer", math.type(b) == "integer"
  if ia ~= ib then return ia end
  return a < b
end

-- Depth-first over the fields of t in sorted order. on_tensor(owner, key,
-- tensor, name, is_buffer); on_module(module, name). With shallow, child
-- modules are reported but not entered. A module or table reachable twice is
-- visited once, under its first name.
local function walk(t, prefix, seen, on_tensor, on_module, shallow)
  local keys = {}
  for k, v in pairs(t) do
    if key_name(k) and (is_tensor(v) or type(v) == "table") then keys[#keys + 1] = k end
  end
  table.sort(keys, key_less)
  local buffers = is_module(t) and rawget(t, "_buffers") or nil
  for _, k in ipairs(keys) do
    local v, name = t[k], prefix .. key_name(k)
    if is_tensor(v) then
      if on_tensor then on_tensor(t, k, v, name, buffers ~= nil and buffers[k] == true) end
    elseif not seen[v] then
      if is_module(v) then
        seen[v] = true
        if on_module then on_module(v, name) end
        if not shallow then walk(v, name .. ".", seen, on_tensor, on_module, shallow) end
      elseif getmetatable(v) == nil or is_param_table(v) then
        seen[v] = true
        walk(v, name .. ".", seen, on_tensor, on_module, shallow)
      end
    end
  end
end

-- Entries {name, owner, key, tensor, buffer} of params and/or buffers.
function collect(self, want_params, want_buffers, dedupe)
  local list, seen_t = {}, {}
  walk(self, "", { [self] = true }, function(owner, key, t, name, is_buffer)
    if (is_buffer and want_buffers) or (not is_buffer and want_params) then
      if dedupe and seen_t[t] then return end
      seen_t[t] = true
      list[#list + 1] = { name = name, owner = owner, key = key, tensor = t, buffer = is_buffer }
    end
  end)
  return list
end

local function iterate(list, field)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e.name, e[field] end
  end
end

-- for name, p in m:named_parameters() do ... end (each tensor once)
function Base:named_parameters()
  return iterate(collect(self, true, false, true), "tensor")
end

-- The parameter tensors, as a list, in named_parameters' order.
function Base:parameters()
  local out = {}
  for _, e in ipairs(collect(self, true, false, true)) do out[#out + 1] = e.tensor end
  return out
end

function Base:named_buffers()
  return iterate(collect(self, false, true, true), "tensor")
end

function Base:buffers()
  local out = {}
  for _, e in ipairs(collect(self, false, true, true)) do out[#out + 1] = e.tensor end
  return out
end

-- name -> tensor for every parameter and buffer (what the safetensors file holds).
function Base:state_dict()
  local sd = {}
  for _, e in ipairs(collect(self, true, true, false)) do sd[e.name] = e.tensor end
  return sd
end

local function module_list(self, shallow)
  local list = {}
  walk(self, "", { [self] = true }, nil, function(m, name) list[#list + 1] = { name = name, module = m } end, shallow)
  return list
end

-- Direct children (through plain tables: "layers.1"), as (name, module).
function Base:named_children()
  return iterate(module_list(self, true), "module")
end

function Base:children()
  local out = {}
  for _, e in ipairs(module_list(self, true)) do out[#out + 1] = e.module end
  return out
end

-- Every module below and including self ("" is self), as (name, module).
function Base:named_modules()
  local list = module_list(self, false)
  table.insert(list, 1, { name = "", module = self })
  return iterate(list, "module")
end

function Base:modules()
  local out = {}
  for _, m in self:named_modules() do out[#out + 1] = m end
  return out
end

-- Store t as field `name`, saved and moved with the module but not a parameter.
function Base:register_buffer(name, t)
  if type(name) ~= "string" or not key_name(name) then
    fail("register_buffer: name must be a string not starting with '_', got %s", name)
  end
  if t ~= nil and not is_tensor(t) then fail("register_buffer: '%s' must be a tensor, got %s", name, type(t)) end
  rawget(self, "_buffers")[name] = true
  self[name] = t
  return self
end

-- Call fn(module) on every module (self included); returns self.
function Base:apply(fn)
  for _, m in self:named_modules() do fn(m) end
  return self
end

function Base:train(mode)
  if mode == nil then mode = true end
  for _, m in self:named_modules() do rawset(m, "training", mode and true or false) end
  return self
end

function Base:eval()
  return self:train(false)
end

-- Forget every parameter's gradient (p.grad becomes nil, as PyTorch's
-- zero_grad(set_to_none=True)); returns self.
function Base:zero_grad()
  for _, p in ipairs(self:parameters()) do p:zero_grad() end
  return self
end

-- A tensor that takes old's place as a parameter: a leaf that requires
-- grad when old did (a conversion or a loaded value has no history).
local function as_param(new, old)
  if old.requires_grad and old.is_leaf and not new.requires_grad then
    new = new:detach():requires_grad_()
  end
  return new
end

---------------------------------------------------------------------------
-- :to(device | dtype | {device=, dtype=}): in place, returns self. As
-- PyTorch, a dtype converts only floating-point tensors, so index buffers
-- stay integers.

local function canonical_dtype(name)
  local ok, t = pcall(kiln.zeros, { 0 }, { dtype = name })
  if not ok then
    local near = kiln._did_you_mean(tostring(name), { "cpu", "cuda", "f32", "f64", "bf16", "f16" })
    fail("to: '%s' is neither a device (cpu, cuda) nor a dtype%s", name,
      near and "; did you mean '" .. near .. "'?" or "")
  end
  return t.dtype
end

function Base:to(...)
  local dev, dt
  for i = 1, select("#", ...) do
    local a = select(i, ...)
    if type(a) == "table" then
      kiln._check_options(a, "to", { "device", "dtype" })
      dev, dt = a.device or dev, a.dtype or dt
    elseif type(a) == "string" then
      if a == "cpu" or a == "cuda" or a:match("^cuda:%d+$") then dev = a else dt = a end
    else
      fail("to: expected a device, a dtype or {device =, dtype =}, got %s", type(a))
    end
  end
  if dt then
    dt = canonical_dtype(dt)
    if not FLOAT[dt] then fail("to: modules only convert to floating-point dtypes, got %s", dt) end
  end
  local done = {}
  kiln.no_grad(function()
    for _, e in ipairs(collect(self, true, true, false)) do
      local t = done[e.tensor]
      if not t then
        t = e.tensor
        if dev and t.device ~= dev:gsub(":%d+$", "") then t = t:to(dev) end
        if dt and FLOAT[t.dtype] and t.dtype ~= dt then t = t:to(dt) end
        if t ~= e.tensor then t = as_param(t, e.tensor) end
        done[e.tensor] = t
      end
      e.owner[e.key] = t
    end
  end)
  return self
end

---------------------------------------------------------------------------
-- Saving and loading

-- Shift the numeric components of a dotted name by `delta`.
local function shift_indices(name, delta)
  if delta == 0 then return name end
  local parts = {}
  for part in (name .. "."):gmatch("([^.]*)%.") do
    if part:match("^%d+$") then part = tostring(math.tointeger(tonumber(part)) + delta) end
    parts[#parts + 1] = part
  end
  return table.concat(parts, ".")
end

local function index_base(opts, fn)
  local b = opts.index_base or 1
  if b ~= 0 and b ~= 1 then fail("%s: index_base must be 0 (PyTorch names) or 1, got %s", fn, b) end
  return b
end

local function name_list(names, max)
  if #names <= max then return table.concat(names, ", ") end
  return table.concat(names, ", ", 1, max) .. string.format(", ... (%d more)", #names - max)
end

-- m:save_safetensors(path [, {index_base = 0, metadata = {k = "v"}}]): every
-- parameter and buffer under its dotted name.
function Base:save_safetensors(path, opts)
  opts = opts_table(opts, "save_safetensors", { "index_base", "metadata" })
  local delta = index_base(opts, "save_safetensors") - 1
  local sd = {}
  for name, t in pairs(self:state_dict()) do sd[shift_indices(name, delta)] = t end
  kiln.save_safetensors(path, sd, opts.metadata)
  return self
end

-- m:load_safetensors(path [, {strict = true, index_base = 1}]): replace every
-- parameter and buffer by the file's tensor of the same name, converted to
-- the dtype and device the model has. With strict (the default), missing and
-- unexpected names are an error; a wrong shape always is. One error lists
-- every problem. Returns self, missing names, unexpected names.
function Base:load_safetensors(path, opts)
  opts = opts_table(opts, "load_safetensors", { "strict", "index_base" })
  local delta = 1 - index_base(opts, "load_safetensors")
  local file = kiln.load_safetensors(path)
  local from_file = {}
  for name, t in pairs(file) do from_file[shift_indices(name, delta)] = t end
  local entries = collect(self, true, true, false)
  local missing, unexpected, wrong, known = {}, {}, {}, {}
  for _, e in ipairs(entries) do
    local t = from_file[e.name]
    known[e.name] = true
    if t == nil then
      missing[#missing + 1] = e.name
    elseif not same_shape(t:shape(), e.tensor:shape()) then
      wrong[#wrong + 1] = string.format("%s (model %s, file %s)", e.name, shape_str(e.tensor:shape()), shape_str(t:shape()))
    end
  end
  for name in pairs(from_file) do
    if not known[name] then unexpected[#unexpected + 1] = shift_indices(name, -delta) end
  end
  table.sort(unexpected)
  local strict = opts.strict ~= false
  if #wrong > 0 or (strict and (#missing > 0 or #unexpected > 0)) then
    local lines = { string.format("load_safetensors: '%s' does not match the %s model:", path,
      getmetatable(self).__kiln_name) }
    if #missing > 0 then lines[#lines + 1] = "  missing keys (in the model, not in the file): " .. name_list(missing, 20) end
    if #unexpected > 0 then lines[#lines + 1] = "  unexpected keys (in the file, not in the model): " .. name_list(unexpected, 20) end
    if #wrong > 0 then lines[#lines + 1] = "  wrong shapes: " .. name_list(wrong, 20) end
    fail("%s", table.concat(lines, "\n"))
  end
  local replaced = {} -- a tensor shared under two names stays shared
  for _, e in ipairs(entries) do
    local t = from_file[e.name]
    if t then
      local new = replaced[e.tensor]
      if not new then
        new = t
        if new.dtype ~= e.tensor.dtype then new = new:to(e.tensor.dtype) end
        if new.device ~= e.tensor.device then new = new:to(e.tensor.device) end
        new = as_param(new, e.tensor)
        replaced[e.tensor] = new
      end
      e.owner[e.key] = new
    end
  end
  return self, missing, unexpected
end

---------------------------------------------------------------------------
-- tostring: a PyTorch-like tree
--   Sequential(
--     (1): Linear(in_features=4, out_features=2, bias=true)
--     (2): ReLU()
--   )

module_tostring = function(self)
  local head = getmetatable(self).__kiln_name .. "("
  local extra = self:extra_repr()
  local kids = module_list(self, true)
  if #kids == 0 then return head .. extra .. ")" end
  local lines = { head }
  if extra ~= "" then lines[#lines + 1] = "  " .. extra end
  for _, c in ipairs(kids) do
    lines[#lines + 1] = "  (" .. c.name .. "): " .. tostring(c.module):gsub("\n", "\n  ")
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

---------------------------------------------------------------------------
-- Layers

-- Linear(in, out [, {bias = true}]): y = x W^T + b, W of shape {out, in}.
-- A module's shape error names the module as its user built it and where
-- it sits ("Linear(16 -> 8) (3rd in Sequential): input's last dim is 32,
-- expected 16"), instead of the op's "matmul: shapes {4,32} and {8,16}".
local function ordinal(i)
  local teen = i % 100 >= 11 and i % 100 <= 13
  return i .. (not teen and ({ "st", "nd", "rd" })[i % 10] or "th")
end

local function shape_fail(self, label, fmt, ...)
  local pos = rawget(self, "_kiln_position")
  -- the user's line that called the model: a module's forward is reached
  -- through kiln's own tail calls, which where() stops at
  local at = ""
  for level = 3, 60 do
    local info = debug.getinfo(level, "Sl")
    if not info then break end
    if info.currentline > 0 and not info.source:find("^@kiln/") then
      at = info.short_src .. ":" .. info.currentline .. ": "
      break
    end
  end
  error(at .. string.format("%s%s: " .. fmt, label, pos and (" (" .. pos .. ")") or "", ...), 0)
end

-- x's size along dim (negative: from the end), when x is a tensor of that rank.
local function size_at(x, dim)
  if getmetatable(x) == nil or type(x) ~= "userdata" or type(x.dim) ~= "function" then return nil end
  local s = x:shape()
  local d = dim < 0 and #s + 1 + dim or dim
  return s[d], #s
end

nn.Linear = nn.Module {
  name = "Linear",
  init = function(self, in_features, out_features, opts)
    check_count(in_features, "in_features", "Linear", 0)
    check_count(out_features, "out_features", "Linear", 0)
    opts = opts_table(opts, "Linear", { "bias" })
    self.in_features, self.out_features = in_features, out_features
    local bound = nn.init_bound(in_features)
    self.weight = uniform({ out_features, in_features }, bound)
    if opts.bias ~= false then self.bias = uniform({ out_features }, bound) end
  end,
  forward = function(self, x)
    local last = size_at(x, -1)
    if last and last ~= self.in_features then
      shape_fail(self, string.format("Linear(%d -> %d)", self.in_features, self.out_features),
        "input's last dim is %d, expected %d", last, self.in_features)
    end
    local y = x:matmul(self.weight:transpose(1, 2))
    if self.bias then y = y + self.bias end
    return y
  end,
  extra_repr = function(self)
    return string.format("in_features=%d, out_features=%d, bias=%s", self.in_features,
      self.out_features, tostring(self.bias ~= nil))
  end,
}

-- Conv2d(in, out, kernel [, {stride = 1, padding = 0, dilation = 1, groups = 1, bias = true}])
nn.Conv2d = nn.Module {
  name = "Conv2d",
  init = function(self, in_channels, out_channels, kernel_size, opts)
    check_count(in_channels, "in_channels", "Conv2d")
    check_count(out_channels, "out_channels", "Conv2d")
    opts = opts_table(opts, "Conv2d", { "stride", "padding", "dilation", "groups", "bias" })
    local groups = check_count(opts.groups or 1, "groups", "Conv2d")
    if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
      fail("Conv2d: in_channels (%d) and out_channels (%d) must be divisible by groups (%d)",
        in_channels, out_channels, groups)
    end
    self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
    self.kernel_size = pair(kernel_size, "kernel_size", "Conv2d")
    self.stride = pair(opts.stride or 1, "stride", "Conv2d")
    self.padding = pair(opts.padding or 0, "padding", "Conv2d", 0)
    self.dilation = pair(opts.dilation or 1, "dilation", "Conv2d")
    local kh, kw = self.kernel_size[1], self.kernel_size[2]
    local bound = nn.init_bound(in_channels // groups * kh * kw)
    self.weight = uniform({ out_channels, in_channels // groups, kh, kw }, bound)
    if opts.bias ~= false then self.bias = uniform({ out_channels }, bound) end
  end,
  forward = function(self, x)
    local c, rank = size_at(x, 2)
    if rank and (rank ~= 4 or c ~= self.in_channels) then
      local label = string.format("Conv2d(%d -> %d, %s)", self.in_channels, self.out_channels,
        table.concat(self.kernel_size, "x"))
      if rank ~= 4 then shape_fail(self, label, "input has %d dims, expected 4 (N, C, H, W)", rank) end
      shape_fail(self, label, "input has %d channels (dim 2), expected %d", c, self.in_channels)
    end
    return kiln.conv2d(x, self.weight, self.bias,
      { stride = self.stride, padding = self.padding, dilation = self.dilation, groups = self.groups })
  end,
  extra_repr = function(self)
    local s = string.format("%d, %d, kernel_size=%s, stride=%s", self.in_channels, self.out_channels,
      shape_str(self.kernel_size), shape_str(self.stride))
    if self.padding[1] ~= 0 or self.padding[2] ~= 0 then s = s .. ", padding=" .. shape_str(self.padding) end
    if self.dilation[1] ~= 1 or self.dilation[2] ~= 1 then s = s .. ", dilation=" .. shape_str(self.dilation) end
    if self.groups ~= 1 then s = s .. ", groups=" .. self.groups end
    if not self.bias then s = s .. ", bias=false" end
    return s
  end,
}

-- BatchNorm2d(C [, {eps = 1e-5, momentum = 0.1, affine = true}]). Training
-- normalizes with the batch's statistics and updates the running ones in
-- place (unbiased variance, as PyTorch); eval uses the running statistics.
-- momentum = false gives the cumulative average (PyTorch's momentum=None).
nn.BatchNorm2d = nn.Module {
  name = "BatchNorm2d",
  init = function(self, num_features, opts)
    check_count(num_features, "num_features", "BatchNorm2d")
    opts = opts_table(opts, "BatchNorm2d", { "eps", "momentum", "affine" })
    self.num_features = num_features
    self.eps = opts.eps or 1e-5
    if opts.momentum == nil then self.momentum = 0.1 else self.momentum = opts.momentum end
    self.affine = opts.affine ~= false
    if self.affine then
      self.weight = kiln.ones({ num_features })
      self.bias = kiln.zeros({ num_features })
    end
    self:register_buffer("running_mean", kiln.zeros({ num_features }))
    self:register_buffer("running_var", kiln.ones({ num_features }))
    self:register_buffer("num_batches_tracked", kiln.zeros({}, { dtype = "i64" }))
  end,
  forward = function(self, x)
    if x:dim() ~= 4 then fail("BatchNorm2d: expected a 4-D input {N, C, H, W}, got shape %s", shape_str(x:shape())) end
    if not self.training then
      return kiln.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.eps)
    end
    local n = x:numel() // self.num_features
    if n <= 1 then
      fail("BatchNorm2d: training needs more than 1 value per channel, got input shape %s", shape_str(x:shape()))
    end
    local mean = x:mean({ 1, 3, 4 })
    local var = x:var({ 1, 3, 4 }, { correction = 0 })
    local y = kiln.batch_norm(x, mean, var, self.weight, self.bias, self.eps)
    -- the running statistics are buffers, updated in place and without
    -- history (inside a compiled function too: the graph writes them once
    -- it ran); a buffer copy_ refuses (another dtype's) is replaced instead
    local function update(name, value)
      local buf = self[name]
      value = value:to(buf.dtype)
      if not pcall(buf.copy_, buf, value) then self[name] = value end
    end
    kiln.no_grad(function()
      update("num_batches_tracked", self.num_batches_tracked + 1)
      local m = self.momentum
      if not m then m = 1 / self.num_batches_tracked:item() end
      update("running_mean", self.running_mean * (1 - m) + mean * m)
      update("running_var", self.running_var * (1 - m) + var * (m * n / (n - 1)))
    end)
    return y
  end,
  extra_repr = function(self)
    return string.format("%d, eps=%g, momentum=%s, affine=%s", self.num_features, self.eps,
      self.momentum and string.format("%g", self.momentum) or "false", tostring(self.affine))
  end,
}

-- LayerNorm(d or {shape} [, {eps = 1e-5, elementwise_affine = true, bias = true}])
nn.LayerNorm = nn.Module {
  name = "LayerNorm",
  init = function(self, shape, opts)
    if math.type(shape) == "integer" then shape = { shape } end
    if type(shape) ~= "table" or #shape == 0 then
      fail("LayerNorm: normalized shape must be an integer or a table of integers, got %s", shape)
    end
    for i = 1, #shape do check_count(shape[i], "normalized shape entry " .. i, "LayerNorm") end
    opts = opts_table(opts, "LayerNorm", { "eps", "elementwise_affine", "bias" })
    self.normalized_shape = { table.unpack(shape) }
    self.eps = opts.eps or 1e-5
    self.elementwise_affine = opts.elementwise_affine ~= false
    if self.elementwise_affine then
      self.weight = kiln.ones(self.normalized_shape)
      if opts.bias ~= false then self.bias = kiln.zeros(self.normalized_shape) end
    end
  end,
  forward = function(self, x)
    local w, b = self.weight, self.bias
    if b and not w then w = kiln.ones(self.normalized_shape, { dtype = x.dtype, device = x.device }) end
    return kiln.layer_norm(x, self.normalized_shape, w, b, self.eps)
  end,
  extra_repr = function(self)
    return string.format("%s, eps=%g, elementwise_affine=%s", shape_str(self.normalized_shape), self.eps,
      tostring(self.elementwise_affine))
  end,
}

-- Embedding(n, d): rows of an {n, d} table picked by 1-based integer
-- indices of any shape; the result has the indices' shape plus d.
nn.Embedding = nn.Module {
  name = "Embedding",
  init = function(self, num_embeddings, embedding_dim)
    check_count(num_embeddings, "num_embeddings", "Embedding")
    check_count(embedding_dim, "embedding_dim", "Embedding")
    self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
    self.weight = kiln.randn({ num_embeddings, embedding_dim }, { seed = next_seed() })
  end,
  forward = function(self, idx)
    if not is_tensor(idx) then fail("Embedding: indices must be a tensor, got %s", type(idx)) end
    local shape = idx:shape()
    local flat = idx:dim() == 1 and idx or idx:reshape({ -1 })
    local out = self.weight:index_select(1, flat)
    shape[#shape + 1] = self.embedding_dim
    if #shape == 2 then return out end
    return out:reshape(shape)
  end,
  extra_repr = function(self)
    return string.format("%d, %d", self.num_embeddings, self.embedding_dim)
  end,
}

-- Dropout(p = 0.5): identity in eval; in training zeroes each element with
-- probability p and scales the rest by 1 / (1 - p).
nn.Dropout = nn.Module {
  name = "Dropout",
  init = function(self, p)
    p = p or 0.5
    -- written so that NaN fails too (every comparison with NaN is false)
    if type(p) ~= "number" or not (p >= 0 and p <= 1) then
      fail("Dropout: p must be a number in [0, 1], got %s", p)
    end
    self.p = p
  end,
  forward = function(self, x)
    if not self.training or self.p == 0 then return x end
    -- all dropped: zeros, also where x is inf or NaN (x * 0 is NaN there)
    if self.p == 1 then return kiln.zeros(x:shape(), { dtype = x.dtype, device = x.device }) end
    local keep = kiln.rand(x:shape(), { device = x.device }):ge(self.p)
    return kiln.where(keep, x * (1 / (1 - self.p)), 0)
  end,
  extra_repr = function(self) return string.format("p=%g", self.p) end,
}

-- Sequential(m1, m2, ...) or Sequential{m1, m2, ...}: children 1, 2, ...
-- (model[1] is the first), applied in order.
nn.Sequential = nn.Module {
  name = "Sequential",
  init = function(self, ...)
    local mods = table.pack(...)
    if mods.n == 1 and type(mods[1]) == "table" and not is_module(mods[1]) then
      mods = table.pack(table.unpack(mods[1]))
    end
    for i = 1, mods.n do
      if not is_module(mods[i]) then fail("Sequential: argument %d is a %s, not a kiln.nn module", i, type(mods[i])) end
      self[i] = mods[i]
      rawset(mods[i], "_kiln_position", ordinal(i) .. " in Sequential")
    end
  end,
  forward = function(self, x)
    for i = 1, #self do
      x = self[i](x)
    end
    return x
  end,
  -- Append a module (Torch7's add); returns self.
  add = function(self, m)
    if not is_module(m) then fail("Sequential:add: expected a kiln.nn module, got %s", type(m)) end
    self[#self + 1] = m
    rawset(m, "_kiln_position", ordinal(#self) .. " in Sequential")
    return self
  end,
}

-- Stateless layers: one op each.
local function simple(name, fn, repr)
  return nn.Module { name = name, forward = function(_, x) return fn(x) end, extra_repr = repr }
end

nn.ReLU = simple("ReLU", function(x) return x:relu() end)
nn.SiLU = simple("SiLU", function(x) return x:silu() end)
nn.Tanh = simple("Tanh", function(x) return x:tanh() end)
nn.Sigmoid = simple("Sigmoid", function(x) return x:sigmoid() end)
nn.Identity = simple("Identity", function(x) return x end)

-- GELU([{approximate = "none" | "tanh"}]): the erf form by default, as PyTorch.
nn.GELU = nn.Module {
  name = "GELU",
  init = function(self, opts)
    opts = opts_table(opts, "GELU", { "approximate" })
    self.approximate = kiln._check_name(opts.approximate or "none", "GELU", "approximation", { "none", "tanh" })
  end,
  forward = function(self, x)
    if self.approximate == "none" then return x:gelu() end
    return x:gelu_tanh()
  end,
  extra_repr = function(self) return "approximate='" .. self.approximate .. "'" end,
}

local function dim_module(name, method)
  return nn.Module {
    name = name,
    init = function(self, dim) self.dim = dim or -1 end,
    forward = function(self, x) return x[method](x, self.dim) end,
    extra_repr = function(self) return "dim=" .. self.dim end,
  }
end
nn.Softmax = dim_module("Softmax", "softmax")
nn.LogSoftmax = dim_module("LogSoftmax", "log_softmax")

-- Flatten(start = 2, end = -1): dims start..end into one (dim 1 is the batch).
nn.Flatten = nn.Module {
  name = "Flatten",
  init = function(self, start_dim, end_dim)
    self.start_dim, self.end_dim = start_dim or 2, end_dim or -1
  end,
  forward = function(self, x) return x:flatten(self.start_dim, self.end_dim) end,
  extra_repr = function(self) return string.format("start_dim=%d, end_dim=%d", self.start_dim, self.end_dim) end,
}

nn.AdaptiveAvgPool2d = nn.Module {
  name = "AdaptiveAvgPool2d",
  init = function(self, output_size) self.output_size = pair(output_size, "output_size", "AdaptiveAvgPool2d") end,
  forward = function(self, x) return kiln.adaptive_avg_pool2d(x, self.output_size) end,
  extra_repr = function(self) return "output_size=" .. shape_str(self.output_size) end,
}

local function pool_module(name, fn)
  return nn.Module {
    name = name,
    init = function(self, kernel_size, opts)
      opts = opts_table(opts, name, { "stride", "padding", "ceil_mode" })
      self.kernel_size = pair(kernel_size, "kernel_size", name)
      self.stride = pair(opts.stride or kernel_size, "stride", name)
      self.padding = pair(opts.padding or 0, "padding", name, 0)
      self.ceil_mode = opts.ceil_mode and true or false
    end,
    forward = function(self, x)
      return kiln[fn](x, self.kernel_size, { stride = self.stride, padding = self.padding, ceil_mode = self.ceil_mode })
    end,
    extra_repr = function(self)
      return string.format("kernel_size=%s, stride=%s, padding=%s", shape_str(self.kernel_size),
        shape_str(self.stride), shape_str(self.padding))
    end,
  }
end
nn.MaxPool2d = pool_module("MaxPool2d", "max_pool2d")
nn.AvgPool2d = pool_module("AvgPool2d", "avg_pool2d")

-- The built-in layers take one tensor: say so at the user's line instead of
-- failing inside kiln's own code with "attempt to call a nil value".
local function is_tensor(x)
  local mt = type(x) == "userdata" and getmetatable(x)
  return mt and mt.__name == "kiln.Tensor"
end
for _, name in ipairs { "Linear", "Conv2d", "BatchNorm2d", "LayerNorm", "Embedding", "ReLU", "SiLU",
  "Tanh", "Sigmoid", "GELU", "Dropout", "Softmax", "LogSoftmax", "Flatten", "AdaptiveAvgPool2d",
  "MaxPool2d", "AvgPool2d" } do
  local cls = nn[name]
  local forward = rawget(cls, "forward")
  cls.forward = function(self, x, ...)
    if not is_tensor(x) then fail("%s: expected a tensor as input, got %s", name, type(x)) end
    return forward(self, x, ...)
  end
end

return nn
