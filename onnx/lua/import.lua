-- kiln.onnx: ONNX models as kiln modules.
--
--   local m = kiln.onnx.load("model.onnx" [, {sizes = {N = 1, T = 128}}])
--   local y = m(x)                -- eager; kiln.compile(m) captures it
--
-- The C side (onnx/kn_lua_onnx.c, onnx/reader/kn_onnx.c) reads and validates
-- the file; here the graph is interpreted node by node with kiln's own
-- tensor ops (the op table is filled by the ops_*.lua beside this file, by group), so capture, compile, explain, render and time see the same
-- ops a Lua model would make. Small integer values computed from shapes
-- (Shape -> Gather -> Concat -> Reshape) and Constants are kept as Lua
-- "known" values and folded here, so they neither break a graph nor make
-- sizes dynamic; a tensor is made of one only where a tensor op needs it.
-- While a node runs, the ops it makes carry "FILE:node 'NAME' (OP)" as
-- their source location (kiln.onnx.where).
local kiln = ...
local onnx = kiln.onnx

local FLOAT = { f32 = true, f64 = true, bf16 = true, f16 = true }
local ONNX_TYPES = { [1] = "f32", [6] = "i32", [7] = "i64", [9] = "bool", [10] = "f16", [11] = "f64", [16] = "bf16" }
local ONNX_TYPE_NAMES = { "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING", "BOOL",
  "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16" }

-- An error raised for something kiln does not implement: the message says
-- "unsupported", which the conformance runner counts apart from failures.
local Unsupported = {}
local function unsupported(fmt, ...)
  error(setmetatable({ msg = "unsupported: " .. string.format(fmt, ...) }, Unsupported), 0)
end

local function is_tensor(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return mt and mt.__name == "kiln.Tensor" or false
end

---------------------------------------------------------------------------
-- Known values: {known = true, dtype =, shape = {...}, v = {flat values}}

local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

local function known(dtype, shape, v) return { known = true, dtype = dtype, shape = shape, v = v } end
local function is_known(x) return type(x) == "table" and x.known end

local function flatten_list(t, out)
  if type(t) ~= "table" then out[#out + 1] = t; return out end
  for _, e in ipairs(t) do flatten_list(e, out) end
  return out
end

-- The largest tensor kept as a known value when read back from a tensor.
local KNOWN_MAX = 64

-- A known value of x (tensor or known); reading a traced tensor is a graph
-- break, as :tolist() is anywhere.
local function to_known(x)
  if is_known(x) then return x end
  local list = x:tolist()
  local v = flatten_list(list, {})
  if x:dim() == 0 then v = { list } end
  local vals = {}
  for i, e in ipairs(v) do
    if e == true then e = 1 elseif e == false then e = 0 end
    vals[i] = e
  end
  return known(x.dtype, x:shape(), vals)
end

-- The run in progress: {device =, file =, short =, opset =, params =,
-- consts =}, empty between runs. One table for the whole state, refilled by
-- each call, so the op files can hold it as an upvalue.
local ctx = {}

-- The flat values v (row-major) as nested tables of the given shape.
local function nest(v, shape, dim, at)
  if dim > #shape then return v[at + 1] end
  local inner = 1
  for d = dim + 1, #shape do inner = inner * shape[d] end
  local out = {}
  for k = 0, shape[dim] - 1 do out[k + 1] = nest(v, shape, dim + 1, at + k * inner) end
  return out
end

-- A tensor of Lua values (index lists, interpolation weights, known values
-- a tensor op needs). The same values give the same tensor object on every
-- call (cached in the module): while tracing, a new object per call would
-- be a new graph input each time, and the version's guards would not match.
-- The cached tensor is made in one step from nested tables, a real tensor
-- from the first call on: made by a traced op (a reshape of a flat one), the
-- first call's graph would compute it and the later calls' take it as an
-- input, a different graph, one recompile on the second call.
local function const_tensor(vals, dtype, shape)
  local dev = ctx.device
  local v = vals
  if dtype == "bool" then
    v = {}
    for i, e in ipairs(vals) do v[i] = e ~= 0 end
  end
  if numel(shape) == 0 then
    -- nested tables cannot hold a 0 before the last dim: a fresh (traced)
    -- empty tensor each call, the same graph every time
    return kiln.zeros(shape, { dtype = dtype, device = dev })
  end
  local key = dtype .. "|" .. tostring(dev) .. "|" .. table.concat(shape, ",") .. "|" .. table.concat(vals, ",")
  local cache = ctx.consts
  local t = cache and cache[key]
  if t then return t end
  t = kiln.tensor(nest(v, shape, 1, 0), { dtype = dtype, device = dev })
  -- the same object at every call: a compiled call may fold what it
  -- computes from it (position embeddings gathered once, not per call)
  if cache then cache[key] = kiln._keep(t) end
  return t
end

local function to_tensor(x)
  if not is_known(x) then return x end
  if #x.shape == 0 then
    -- a scalar is a constant of the graph, not an input
    local v = x.v[1]
    if x.dtype == "bool" then v = v ~= 0 end
    return kiln.full({}, v, { dtype = x.dtype, device = ctx.device })
  end
  return const_tensor(x.v, x.dtype, x.shape)
end

local function ints(x, what)
  if x == nil then return nil end
  local k = to_known(x)
  local out = {}
  for i, e in ipairs(k.v) do
    if math.type(e) ~= "integer" then
      local f = math.tointeger(e)
      if not f then error(string.format("%s: expected integers, got %s", what or "value", tostring(e)), 0) end
      e = f
    end
    out[i] = e
  end
  return out
end

local function scalar(x)
  local k = to_known(x)
  return k.v[1]
end

local function shape_of(x) return is_known(x) and x.shape or x:shape() end
local function dtype_of(x) return x.dtype end

local function norm_axis(a, rank, what)
  if a < 0 then a = a + rank end
  if a < 0 or a >= rank then error(string.format("%s: axis %d out of range for rank %d", what or "axis", a, rank), 0) end
  return a
end

---------------------------------------------------------------------------
-- Known-value arithmetic (shapes and small constants)

local function known_index(shape, flat)
  -- the multi-index of flat position flat (0-based)
  local idx = {}
  for d = #shape, 1, -1 do
    idx[d] = flat % shape[d]
    flat = flat // shape[d]
  end
  return idx
end

local function broadcast_shapes(a, b)
  local n = math.max(#a, #b)
  local out = {}
  for i = 1, n do
    local da = a[#a - n + i] or 1
    local db = b[#b - n + i] or 1
    if da ~= db and da ~= 1 and db ~= 1 then
      error(string.format("shapes {%s} and {%s} do not broadcast", table.concat(a, ","), table.concat(b, ",")), 0)
    end
    out[i] = da == 1 and db or da
  end
  return out
end

local function known_at(k, idx, out_rank)
  local off, stride = 0, 1
  for d = #k.shape, 1, -1 do
    local i = idx[out_rank - #k.shape + d]
    if k.shape[d] == 1 then i = 0 end
    off = off + i * stride
    stride = stride * k.shape[d]
  end
  return k.v[off + 1]
end

local INT = { i32 = true, i64 = true }

local function known_map(args, dtype, f)
  local shape = args[1].shape
  for i = 2, #args do shape = broadcast_shapes(shape, args[i].shape) end
  local n = numel(shape)
  local v = {}
  for p = 0, n - 1 do
    local idx = known_index(shape, p)
    local xs = {}
    for i, a in ipairs(args) do xs[i] = known_at(a, idx, #shape) end
    v[p + 1] = f(table.unpack(xs))
  end
  return known(dtype, shape, v)
end

local function trunc_div(a, b)
  if math.type(a) == "integer" and math.type(b) == "integer" then
    if b == 0 then error("integer division by zero", 0) end
    local q = a // b
    if q < 0 and q * b ~= a then q = q + 1 end
    return q
  end
  return a / b
end

local KNOWN_BINARY = {
  Add = function(a, b) return a + b end,
  Sub = function(a, b) return a - b end,
  Mul = function(a, b) return a * b end,
  Div = trunc_div,
}
local KNOWN_COMPARE = {
  Equal = function(a, b) return a == b and 1 or 0 end,
  Greater = function(a, b) return a > b and 1 or 0 end,
  Less = function(a, b) return a < b and 1 or 0 end,
  GreaterOrEqual = function(a, b) return a >= b and 1 or 0 end,
  LessOrEqual = function(a, b) return a <= b and 1 or 0 end,
}

---------------------------------------------------------------------------
-- Helpers on tensors

local function dims_1based(axes) local out = {}; for i, a in ipairs(axes) do out[i] = a + 1 end; return out end

local function full_like_shape(shape, value, dtype)
  return kiln.full(shape, value, { dtype = dtype, device = ctx.device })
end

local function cat(list, axis)
  local keep = {}
  for _, t in ipairs(list) do keep[#keep + 1] = t end
  if #keep == 1 then return keep[1] end
  return kiln.cat(keep, axis + 1)
end

-- Gather positions idx (0-based Lua list, each in range) along axis.
local function take(x, axis, idx)
  local n = x:shape()[axis + 1]
  -- a contiguous run is a slice (a view)
  local run = #idx > 0
  for i = 2, #idx do if idx[i] ~= idx[i - 1] + 1 then run = false; break end end
  if run then return x:slice(axis + 1, idx[1] + 1, idx[#idx] + 1) end
  if #idx == 0 then
    local s = x:shape(); s[axis + 1] = 0
    return full_like_shape(s, 0, x.dtype)
  end
  local one = {}
  for i, e in ipairs(idx) do
    if e < 0 or e >= n then error(string.format("index %d out of range for size %d", e, n), 0) end
    one[i] = e + 1
  end
  return x:index_select(axis + 1, const_tensor(one, "i64", { #one }))
end

-- Pad dims of x: begins[d], ends[d] (0-based dims; negative pads crop).
local function pad(x, begins, ends, mode, value)
  mode = mode or "constant"
  for d = 0, x:dim() - 1 do
    local b, e = begins[d + 1] or 0, ends[d + 1] or 0
    if b ~= 0 or e ~= 0 then
      local n = x:shape()[d + 1]
      if b < 0 or e < 0 then
        local lo, hi = math.max(0, -b), n - math.max(0, -e)
        local idx = {}
        for i = lo, hi - 1 do idx[#idx + 1] = i end
        x = take(x, d, idx)
        n = x:shape()[d + 1]
        b, e = math.max(b, 0), math.max(e, 0)
      end
      if b > 0 or e > 0 then
        if mode == "constant" then
          local parts = {}
          local s = x:shape()
          if b > 0 then s[d + 1] = b; parts[#parts + 1] = full_like_shape(s, value or 0, x.dtype) end
          parts[#parts + 1] = x
          if e > 0 then s = x:shape(); s[d + 1] = e; parts[#parts + 1] = full_like_shape(s, value or 0, x.dtype) end
          x = cat(parts, d)
        else
          local idx = {}
          for i = -b, n + e - 1 do
            local j = i
            if mode == "edge" then
              j = math.min(math.max(i, 0), n - 1)
            elseif mode == "reflect" then
              if n == 1 then j = 0 else
                local period = 2 * (n - 1)
                j = i % period
                if j >= n then j = period - j end
              end
            elseif mode == "wrap" then
              j = i % n
            else
              unsupported("Pad mode '%s'", mode)
            end
            idx[#idx + 1] = j
          end
          x = take(x, d, idx)
        end
      end
    end
  end
  return x
end

-- ONNX's auto_pad: the begin/end pads of each spatial dim.
local function window_pads(a, in_sizes, kernel, strides, dilations)
  local nd = #kernel
  local pads = a.pads or {}
  local begins, ends = {}, {}
  local auto = a.auto_pad or "NOTSET"
  for i = 1, nd do
    if auto == "SAME_UPPER" or auto == "SAME_LOWER" then
      local out = (in_sizes[i] + strides[i] - 1) // strides[i]
      local total = math.max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sizes[i])
      local small, big = total // 2, total - total // 2
      if auto == "SAME_UPPER" then begins[i], ends[i] = small, big else begins[i], ends[i] = big, small end
    elseif auto == "VALID" then
      begins[i], ends[i] = 0, 0
    else
      begins[i], ends[i] = pads[i] or 0, pads[i + nd] or 0
    end
  end
  return begins, ends
end

local function defaults(list, n, v)
  local out = {}
  for i = 1, n do out[i] = list and list[i] or v end
  return out
end

-- 1-D windows become 2-D with a height of 1; more than 2 spatial dims is not in kiln.
local function as_2d(x, what)
  local nd = x:dim() - 2
  if nd == 2 then return x, false end
  if nd == 1 then return x:unsqueeze(4), true end
  unsupported("%s with %d spatial dims (kiln has 2-D convolution and pooling)", what, nd)
end

---------------------------------------------------------------------------
-- The ops: onnx/lua/ops_*.lua add theirs to this table.

local ops = {}

-- What the op files (ops_*.lua) share: the op table, the run in
-- progress and the helpers above.
onnx._shared = {
  ops = ops,
  FLOAT = FLOAT,
  ONNX_TYPES = ONNX_TYPES,
  ONNX_TYPE_NAMES = ONNX_TYPE_NAMES,
  Unsupported = Unsupported,
  unsupported = unsupported,
  is_tensor = is_tensor,
  numel = numel,
  known = known,
  is_known = is_known,
  flatten_list = flatten_list,
  KNOWN_MAX = KNOWN_MAX,
  to_known = to_known,
  ctx = ctx,
  const_tensor = const_tensor,
  to_tensor = to_tensor,
  ints = ints,
  scalar = scalar,
  shape_of = shape_of,
  dtype_of = dtype_of,
  norm_axis = norm_axis,
  known_index = known_index,
  broadcast_shapes = broadcast_shapes,
  known_at = known_at,
  INT = INT,
  known_map = known_map,
  trunc_div = trunc_div,
  KNOWN_BINARY = KNOWN_BINARY,
  KNOWN_COMPARE = KNOWN_COMPARE,
  dims_1based = dims_1based,
  full_like_shape = full_like_shape,
  cat = cat,
  take = take,
  pad = pad,
  window_pads = window_pads,
  defaults = defaults,
  as_2d = as_2d,
}

---------------------------------------------------------------------------
-- Running a graph

local function node_label(node)
  return string.format("ONNX node '%s' (%s, opset %d)", node.name ~= "" and node.name or node.outputs[1] or "?",
    node.op, ctx.opset)
end

local function where_of(node)
  return string.format("%s:node '%s' (%s)", ctx.short, node.name ~= "" and node.name or (node.outputs[1] or "?"), node.op)
end

-- env: name -> value, with a parent scope (If branches read outer values).
local function lookup(env, name)
  local e = env
  while e do
    local v = e.values[name]
    if v ~= nil then return v end
    e = e.parent
  end
  return nil
end

local function run_graph(g, feeds, parent)
  local env = { values = {}, parent = parent }
  for name, t in pairs(feeds) do env.values[name] = t end
  -- the module's tensors (moved by :to), the main graph's or this branch's
  local params = g.param_slot and ctx.branch_params[g.param_slot] or ctx.params
  for name, t in pairs(g.initializers) do
    if env.values[name] == nil then
      local mask = g.mask_inits[name]
      env.values[name] = g.known_inits[name] or (mask and mask(ctx.device, params[name])) or params[name] or t
    end
  end
  for _, node in ipairs(g.nodes) do
    -- node.impl: a node fusions.lua made of several
    local impl = node.impl or ((node.domain == "" or node.domain == "ai.onnx") and ops[node.op] or nil)
    if not impl then
      local what = node.domain ~= "" and node.domain ~= "ai.onnx" and ("op domain '" .. node.domain .. "'") or "the op"
      error(string.format("%s: unsupported: %s is not implemented in kiln", node_label(node), what), 0)
    end
    for k, v in pairs(node.attrs) do
      if type(v) == "table" and v.unsupported then
        error(string.format("%s: unsupported: attribute '%s': %s", node_label(node), k, v.unsupported), 0)
      end
    end
    local ins = {}
    for k, name in ipairs(node.inputs) do
      if name ~= "" then
        local v = lookup(env, name)
        if v == nil then error(string.format("%s: input '%s' has no value", node_label(node), name), 0) end
        ins[k] = v
      end
    end
    onnx.where(where_of(node))
    local outs = table.pack(xpcall(impl, function(e)
      if getmetatable(e) == Unsupported then return string.format("%s: %s", node_label(node), e.msg) end
      local msg = tostring(e)
      if msg:find("^ONNX node") then return msg end
      return string.format("%s: %s", node_label(node), msg)
    end, ins, node.attrs, node, env))
    onnx.where(nil)
    if not outs[1] then error(outs[2], 0) end
    for k, name in ipairs(node.outputs) do
      if name ~= "" then env.values[name] = outs[k + 1] end
    end
  end
  local results = {}
  for k, o in ipairs(g.outputs) do
    local v = lookup(env, o.name)
    if v == nil then error(string.format("%s: graph output '%s' has no value", ctx.file, o.name), 0) end
    results[k] = v
  end
  return results
end
onnx._shared.run_graph = run_graph -- If runs its branches

---------------------------------------------------------------------------
-- The module

local function shape_str(s)
  local p = {}
  for k, d in ipairs(s) do p[k] = tostring(d) end
  return "{" .. table.concat(p, ", ") .. "}"
end

-- Before any call (so never while tracing): small integer initializers and
-- Constant values become known values, so shape arithmetic on them folds
-- here instead of reading a traced tensor (a graph break).
local function prepare(g)
  g.known_inits, g.mask_inits = {}, {}
  for name, t in pairs(g.initializers) do
    if INT[t.dtype] and t:numel() <= KNOWN_MAX then g.known_inits[name] = to_known(t) end
    -- one float number (an exporter's folded constant: a scale, -inf) is a
    -- number of the graph, as a Constant node's, not an input tensor
    if (t.dtype == "f32" or t.dtype == "f64") and t:numel() == 1 then g.known_inits[name] = to_known(t) end
    g.mask_inits[name] = onnx.mask_pattern(t) -- a causal mask as data (fusions.lua)
  end
  for _, node in ipairs(g.nodes) do
    local v = node.attrs.value
    if node.op == "Constant" then node.mask_value = onnx.mask_pattern(v) end
    if node.op == "Constant" and not node.mask_value and is_tensor(v) and v:numel() <= KNOWN_MAX and v.dtype ~= "bf16"
      and v.dtype ~= "f16" then
      node.known_value = to_known(v)
    end
    for _, a in pairs(node.attrs) do
      if type(a) == "table" and a.nodes and a.initializers then prepare(a) end
    end
  end
end

local OnnxModel = kiln.nn.Module {
  name = "OnnxModel",
  init = function(self, model, opts)
    -- an ONNX graph is an inference graph (its batch norms use the running
    -- statistics): eval mode, so kiln.compile keeps nothing for a backward
    -- and fuses and replays it as inference (m:train() to differentiate it)
    self.training = false
    self._model = model
    -- exporters' chains (GELU, LayerNorm, Linear on rows) become one node (fusions.lua)
    if not opts or opts.fuse ~= false then onnx.fuse_patterns(model.graph) end
    prepare(model.graph)
    self._opts = opts or {}
    -- by name; a parameter table (kiln.nn.param_table): a compiled call's
    -- replay checks its write count instead of its every entry
    self.params = kiln.nn.param_table(model.graph.initializers)
    -- the initializers of If branches (subgraphs, at any depth): one table
    -- per subgraph, a field of the module so that :to moves them too; not
    -- parameters (their names may repeat the main graph's)
    self.branch_params = {}
    local function hold_branches(g)
      for _, node in ipairs(g.nodes) do
        for _, sub in pairs(node.attrs) do
          if type(sub) == "table" and sub.nodes and sub.initializers then
            local held = {}
            for name, t in pairs(sub.initializers) do held[name] = t end
            self.branch_params[#self.branch_params + 1] = held
            sub.param_slot = #self.branch_params
            hold_branches(sub)
          end
        end
      end
    end
    hold_branches(model.graph)
    local inputs = {}
    for _, vi in ipairs(model.graph.inputs) do
      if model.graph.initializers[vi.name] == nil then inputs[#inputs + 1] = vi end
    end
    self._inputs = inputs
    for _, vi in ipairs(model.graph.outputs) do
      if vi.unsupported_type then
        self._unsupported = string.format("%s: unsupported: output '%s' has type %s", model.path, vi.name, vi.unsupported_type)
      end
    end
  end,
  forward = function(self, ...)
    local model = self._model
    local args = table.pack(...)
    local feeds, dev = {}, nil
    if self._unsupported then error(self._unsupported, 2) end
    for _, vi in ipairs(self._inputs) do
      if vi.unsupported_type then
        error(string.format("%s: unsupported: input '%s' has type %s", model.path, vi.name, vi.unsupported_type), 2)
      end
    end
    for k, vi in ipairs(self._inputs) do
      local x = args[k]
      if x == nil then
        error(string.format("%s: input %d '%s' is missing (the model takes %d)", model.path, k, vi.name, #self._inputs), 2)
      end
      if type(x) == "number" then x = kiln.full({}, x, { dtype = vi.dtype or "f32" }) end
      if vi.unsupported_type then
        error(string.format("%s: unsupported: input '%s' has type %s, which kiln does not support", model.path, vi.name, vi.unsupported_type), 2)
      end
      x = self:_input_dtype(x, vi)
      if vi.shape then
        local s = x:shape()
        if #s ~= #vi.shape then
          error(string.format("%s: input '%s' must have rank %d %s, got shape %s", model.path, vi.name, #vi.shape,
            shape_str(vi.shape), shape_str(s)), 2)
        end
        for d, want in ipairs(vi.shape) do
          if math.type(want) == "integer" and want ~= s[d] then
            error(string.format("%s: input '%s' dim %d must be %d, got %d (shape %s)", model.path, vi.name, d, want, s[d],
              shape_str(s)), 2)
          end
        end
      end
      dev = dev or x.device
      feeds[vi.name] = x
    end
    local saved = {}
    for k, v in pairs(ctx) do saved[k] = v; ctx[k] = nil end
    self._consts = self._consts or {}
    ctx.device, ctx.file, ctx.opset, ctx.params, ctx.consts = dev, model.path, model.opset, self.params, self._consts
    ctx.branch_params = self.branch_params
    ctx.short = model.path:match("([^/]+)$") or model.path
    local ok, res = pcall(function()
      local outs = run_graph(model.graph, feeds, nil)
      -- outputs known in Lua (a Shape) become tensors on the model's device
      for k, v in ipairs(outs) do outs[k] = to_tensor(v) end
      return outs
    end)
    for k in pairs(ctx) do ctx[k] = nil end
    for k, v in pairs(saved) do ctx[k] = v end
    onnx.where(nil)
    if not ok then error(res, 0) end
    if self._keep_io_types then
      for k, vi in ipairs(model.graph.outputs) do
        local y = res[k]
        if FLOAT[vi.dtype or ""] and is_tensor(y) and FLOAT[y.dtype] and y.dtype ~= vi.dtype then res[k] = y:to(vi.dtype) end
      end
    end
    return table.unpack(res, 1, #res)
  end,
  -- Input x for graph input vi: the file's type, or the float dtype the
  -- model was converted to (m:to), which keep_io_types casts the file's to.
  _input_dtype = function(self, x, vi)
    local path, want = self._model.path, vi.dtype
    local converted = self._float_dtype and FLOAT[want] and self._float_dtype ~= want and self._float_dtype
    if x.dtype == want and not converted then return x end
    if converted then
      if x.dtype == converted then return x end
      if x.dtype == want and self._keep_io_types then return x:to(converted) end
      if x.dtype == want then
        error(string.format("%s: input '%s' must be %s, got %s: the model was converted with :to(\"%s\"); to pass %s, "
          .. "convert it with :to(\"%s\", {keep_io_types = true})", path, vi.name, converted, x.dtype, converted, want,
          converted), 3)
      end
      want = converted
    end
    error(string.format("%s: input '%s' must be %s, got %s", path, vi.name, want, x.dtype), 3)
  end,
  -- :to(dtype) converts the graph (convert.lua): the float initializers,
  -- numbers, constants and Cast targets; the float inputs follow (a model
  -- made bf16 takes bf16, as a Lua model does), unless {keep_io_types = true}:
  -- then it takes and returns the types of the file, cast at its edges.
  to = function(self, what, opts)
    if opts ~= nil then kiln._check_options(opts, "OnnxModel:to", { "keep_io_types" }) end
    local report
    if FLOAT[what] then
      report = onnx.convert_floats(self, what)
      self._keep_io_types = opts and opts.keep_io_types or false
      self._graph_version = (self._graph_version or 0) + 1 -- the graph's numbers changed in place
    end
    getmetatable(getmetatable(self)).__index.to(self, what)
    self._float_dtype = nil
    local n = 0
    for _, name in ipairs(self._model.graph.initializer_names) do
      local t = self.params[name]
      if FLOAT[t.dtype] then
        self._float_dtype = self._float_dtype or t.dtype
        n = n + 1
      end
    end
    if FLOAT[what] then self._float_dtype = what end
    if report and kiln.log_enabled("onnx") then
      for _, line in ipairs(onnx.conversion_lines(self._model.path, report, n)) do io.stderr:write(line, "\n") end
    end
    return self
  end,
  named_parameters = function(self)
    local names = {}
    for _, n in ipairs(self._model.graph.initializer_names) do names[#names + 1] = n end
    local k = 0
    return function()
      k = k + 1
      local n = names[k]
      if n then return n, self.params[n] end
    end
  end,
  parameters = function(self)
    local out = {}
    for _, n in ipairs(self._model.graph.initializer_names) do out[#out + 1] = self.params[n] end
    return out
  end,
  state_dict = function(self)
    local sd = {}
    for n, t in pairs(self.params) do sd[n] = t end
    return sd
  end,
  extra_repr = function(self)
    local m = self._model
    return string.format("'%s', opset %d, %d nodes, %d initializers", m.path, m.opset, #m.graph.nodes,
      #m.graph.initializer_names)
  end,
}

-- kiln.onnx.load(path [, {sizes = {N = 1}, device = "cuda", fuse = false}]): an
-- ONNX model as a kiln module (sizes: the dynamic dims' sizes for
-- example_inputs and :load; device: where the initializers go; fuse = false:
-- keep exporters' chains as they are written, see fusions.lua).
function onnx.load(path, opts)
  if not onnx.available then
    error("kiln.onnx.load: this kiln was built without ONNX import (protobuf-c or onnx.proto were missing)", 2)
  end
  if type(path) ~= "string" then error("kiln.onnx.load: expected a file path, got " .. type(path), 2) end
  if opts ~= nil then kiln._check_options(opts, "kiln.onnx.load", { "sizes", "device", "fuse" }) end
  local ok, model = pcall(onnx.read, path)
  if not ok then error(model, 2) end
  -- the parsed file (nodes, attributes, names: thousands of Lua values in
  -- a real model) changes only through m:to, which bumps _graph_version: a
  -- compiled model's replay compares that instead of walking the graph
  setmetatable(model, { __kiln_replay_opaque = true })
  local m = OnnxModel(model, opts)
  if opts and opts.device then m:to(opts.device) end
  return m
end

-- Inputs for a loaded model from its graph's input types: dynamic dims from
-- sizes (name -> size), floats random (seeded), integers zero, bools false.
function onnx.example_inputs(m, sizes, seed)
  sizes = sizes or (m._opts and m._opts.sizes) or {}
  local out = {}
  for k, vi in ipairs(m._inputs) do
    if vi.unsupported_type then
      error(string.format("%s: input '%s' has type %s, which kiln does not support", m._model.path, vi.name, vi.unsupported_type), 2)
    end
    local shape = {}
    for d, want in ipairs(vi.shape or {}) do
      if math.type(want) == "integer" then
        shape[d] = want
      elseif type(want) == "string" and sizes[want] then
        shape[d] = math.tointeger(sizes[want]) or error(string.format("size %s must be an integer", want), 2)
      else
        error(string.format("%s: input '%s' dim %d is dynamic (%s): give its size, e.g. {sizes = {%s = 1}} or :load FILE %s=1",
          m._model.path, vi.name, d, tostring(want), type(want) == "string" and want or "N", type(want) == "string" and want or "N"), 2)
      end
    end
    if FLOAT[vi.dtype] then
      out[k] = kiln.randn(shape, { dtype = vi.dtype, seed = (seed or 1) + k })
    else
      out[k] = kiln.zeros(shape, { dtype = vi.dtype })
    end
  end
  return out
end

onnx.ops = ops
