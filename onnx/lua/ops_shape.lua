-- kiln.onnx ops: shapes, constants, casts, layout, indexing, gathers and scatters, Resize.
-- Each op takes (inputs, attrs, node) and returns its outputs; import.lua
-- holds the loader, the graph walk and the helpers the op files share
-- (kiln.onnx._shared).
local kiln = ...
local S = kiln.onnx._shared
local ops = S.ops
local ctx = S.ctx -- the run in progress
local FLOAT, ONNX_TYPES, ONNX_TYPE_NAMES, unsupported, numel, known = S.FLOAT, S.ONNX_TYPES, S.ONNX_TYPE_NAMES, S.unsupported, S.numel, S.known
local is_known, KNOWN_MAX, to_known, const_tensor, to_tensor, ints = S.is_known, S.KNOWN_MAX, S.to_known, S.const_tensor, S.to_tensor, S.ints
local scalar, shape_of, dtype_of, norm_axis, broadcast_shapes, INT = S.scalar, S.shape_of, S.dtype_of, S.norm_axis, S.broadcast_shapes, S.INT
local known_map, dims_1based, full_like_shape, cat, take, pad = S.known_map, S.dims_1based, S.full_like_shape, S.cat, S.take, S.pad

ops.Shape = function(i, a)
  local s = shape_of(i[1])
  local r = #s
  local lo, hi = a.start or 0, a["end"] or r
  if lo < 0 then lo = lo + r end
  if hi < 0 then hi = hi + r end
  lo, hi = math.max(0, math.min(lo, r)), math.max(0, math.min(hi, r))
  local v = {}
  for d = lo + 1, hi do v[#v + 1] = s[d] end
  return known("i64", { #v }, v)
end
ops.Size = function(i) return known("i64", {}, { numel(shape_of(i[1])) }) end

ops.Constant = function(_, a, node)
  if node.known_value then return node.known_value end
  if node.mask_value then return node.mask_value(ctx.device) end
  if a.value then
    if type(a.value) == "table" and a.value.unsupported then unsupported("%s", a.value.unsupported) end
    local t = a.value
    if t:numel() <= KNOWN_MAX and t.dtype ~= "bf16" and t.dtype ~= "f16" then return to_known(t) end
    return ctx.device and t:to(ctx.device) or t
  end
  if a.value_float then return known("f32", {}, { a.value_float }) end
  if a.value_int then return known("i64", {}, { a.value_int }) end
  if a.value_floats then return known("f32", { #a.value_floats }, a.value_floats) end
  if a.value_ints then return known("i64", { #a.value_ints }, a.value_ints) end
  unsupported("Constant without a tensor, float or int value (sparse or string)")
end

ops.ConstantOfShape = function(i, a, node)
  local shape = ints(i[1], "shape")
  -- without a value, f32 zeros: the model's float dtype after m:to (convert.lua)
  local dtype, v = node.float_default or "f32", 0
  if a.value then
    if type(a.value) == "table" and a.value.unsupported then unsupported("%s", a.value.unsupported) end
    local k = to_known(a.value)
    dtype, v = k.dtype, k.v[1]
  end
  if numel(shape) <= KNOWN_MAX then
    local vals = {}
    for j = 1, numel(shape) do vals[j] = v end
    return known(dtype, shape, vals)
  end
  if dtype == "bool" then v = v ~= 0 end
  return kiln.full(shape, v, { dtype = dtype, device = ctx.device })
end

ops.Range = function(i)
  local s, l, d = scalar(i[1]), scalar(i[2]), scalar(i[3])
  local n = math.max(math.ceil((l - s) / d), 0)
  local v = {}
  for k = 0, n - 1 do v[k + 1] = s + k * d end
  local dt = dtype_of(i[1])
  local r = known(dt, { n }, v)
  if n > KNOWN_MAX then return to_tensor(r) end
  return r
end

local TYPE_BY_NAME = {}
for n, name in ipairs(ONNX_TYPE_NAMES) do TYPE_BY_NAME[name] = n end

ops.Cast = function(i, a)
  -- before opset 6 the target type is a name ("FLOAT")
  local to = ONNX_TYPES[type(a.to) == "string" and TYPE_BY_NAME[a.to:upper()] or a.to]
  if not to then unsupported("Cast to %s", ONNX_TYPE_NAMES[a.to] or tostring(a.to)) end
  local x = i[1]
  if is_known(x) and (INT[to] or to == "bool" or to == "f32" or to == "f64") then
    return known_map({ x }, to, function(e)
      if to == "bool" then return e ~= 0 and 1 or 0 end
      if INT[to] then
        if e ~= e then return 0 end
        local t = e >= 0 and math.floor(e) or math.ceil(e)
        return math.tointeger(t) or t
      end
      return e + 0.0
    end)
  end
  x = to_tensor(x)
  if to == "bool" then return x:ne(0) end
  return x:to(to)
end
ops.CastLike = function(i, a) return ops.Cast({ i[1] }, { to = ({ f32 = 1, i32 = 6, i64 = 7, bool = 9, f16 = 10, f64 = 11, bf16 = 16 })[dtype_of(i[2])] }) end

local function reshape_known_or_tensor(x, shape)
  if is_known(x) then return known(x.dtype, shape, x.v) end
  return x:reshape(shape)
end

ops.Reshape = function(i, a)
  local x = i[1]
  local want = ints(i[2] or known("i64", { #a.shape }, a.shape), "shape")
  local s = shape_of(x)
  local out, infer = {}, nil
  for k, d in ipairs(want) do
    if d == 0 and (a.allowzero or 0) == 0 then d = s[k] end
    if d == -1 then infer = k; d = 1 end
    out[k] = d
  end
  if infer then
    local rest = numel(out)
    out[infer] = rest == 0 and 0 or numel(s) // rest
  end
  return reshape_known_or_tensor(x, out)
end

ops.Flatten = function(i, a)
  local x = i[1]
  local s = shape_of(x)
  local axis = a.axis or 1
  if axis < 0 then axis = axis + #s end
  local outer, inner = 1, 1
  for d = 1, #s do if d <= axis then outer = outer * s[d] else inner = inner * s[d] end end
  return reshape_known_or_tensor(x, { outer, inner })
end

ops.Transpose = function(i, a)
  local x = to_tensor(i[1])
  local perm = a.perm
  if not perm then
    perm = {}
    for d = x:dim() - 1, 0, -1 do perm[#perm + 1] = d end
  end
  if x:dim() < 2 then return x end
  return x:permute(dims_1based(perm))
end

local function axes_arg(i, a, idx, opset_input)
  if ctx.opset >= opset_input then return i[idx] and ints(i[idx], "axes") or nil end
  return a.axes
end

ops.Unsqueeze = function(i, a)
  local x = i[1]
  local axes = axes_arg(i, a, 2, 13)
  local s = shape_of(x)
  local r = #s + #axes
  local put = {}
  for _, ax in ipairs(axes) do put[norm_axis(ax, r) + 1] = true end
  local out, j = {}, 1
  for d = 1, r do
    if put[d] then out[d] = 1 else out[d] = s[j]; j = j + 1 end
  end
  return reshape_known_or_tensor(x, out)
end

ops.Squeeze = function(i, a)
  local x = i[1]
  local axes = axes_arg(i, a, 2, 13)
  local s = shape_of(x)
  local drop = {}
  if axes and #axes > 0 then
    for _, ax in ipairs(axes) do drop[norm_axis(ax, #s) + 1] = true end
  else
    for d = 1, #s do if s[d] == 1 then drop[d] = true end end
  end
  local out = {}
  for d = 1, #s do if not drop[d] then out[#out + 1] = s[d] end end
  return reshape_known_or_tensor(x, out)
end

ops.Concat = function(i, a)
  local all_known = true
  for _, v in ipairs(i) do if not is_known(v) then all_known = false end end
  local axis = a.axis or (ctx.opset < 4 and 1) or error("Concat needs an axis", 0)
  if all_known and #i[1].shape == 1 and (axis == 0 or axis == -1) then
    local v = {}
    for _, k in ipairs(i) do for _, e in ipairs(k.v) do v[#v + 1] = e end end
    return known(i[1].dtype, { #v }, v)
  end
  local list = {}
  for _, v in ipairs(i) do list[#list + 1] = to_tensor(v) end
  return cat(list, norm_axis(axis, list[1]:dim()))
end

ops.Split = function(i, a, node)
  local x = to_tensor(i[1])
  local axis = norm_axis(a.axis or 0, x:dim())
  local n = x:shape()[axis + 1]
  local sizes
  if ctx.opset >= 13 then sizes = i[2] and ints(i[2], "split") or nil else sizes = a.split end
  local nout = #node.outputs
  if not sizes or #sizes == 0 then
    local each = (n + nout - 1) // nout
    sizes = {}
    local left = n
    for k = 1, nout do sizes[k] = math.min(each, left); left = left - sizes[k] end
  end
  local outs, at = {}, 0
  for k, sz in ipairs(sizes) do
    local idx = {}
    for j = at, at + sz - 1 do idx[#idx + 1] = j end
    outs[k] = take(x, axis, idx)
    at = at + sz
  end
  return table.unpack(outs)
end

ops.Slice = function(i, a)
  local x = i[1]
  local starts, ends, axes, steps
  if ctx.opset < 10 then
    starts, ends, axes = a.starts, a.ends, a.axes
  else
    starts, ends = ints(i[2], "starts"), ints(i[3], "ends")
    axes = i[4] and ints(i[4], "axes") or nil
    steps = i[5] and ints(i[5], "steps") or nil
  end
  local s = shape_of(x)
  if not axes then axes = {}; for k = 1, #starts do axes[k] = k - 1 end end
  local known_x = is_known(x)
  if known_x and #s ~= 1 then x = to_tensor(x); known_x = false end
  for k, ax in ipairs(axes) do
    ax = norm_axis(ax, #s)
    local n = s[ax + 1]
    local st, en, step = starts[k], ends[k], steps and steps[k] or 1
    if step == 0 then error("Slice: step 0", 0) end
    if st < 0 then st = st + n end
    if en < 0 then en = en + n end
    local idx = {}
    if step > 0 then
      st, en = math.max(0, math.min(st, n)), math.max(0, math.min(en, n))
      for j = st, en - 1, step do idx[#idx + 1] = j end
    else
      st, en = math.max(-1, math.min(st, n - 1)), math.max(-1, math.min(en, n - 1))
      for j = st, en + 1, step do idx[#idx + 1] = j end
    end
    if known_x then
      local v = {}
      for j, p in ipairs(idx) do v[j] = x.v[p + 1] end
      x = known(x.dtype, { #v }, v)
    elseif step > 0 and #idx > 0 then
      x = x:slice(ax + 1, idx[1] + 1, idx[#idx] + 1, step)
    else
      x = take(x, ax, idx)
    end
    s = shape_of(x)
  end
  return x
end

ops.Gather = function(i, a)
  local x, idx = i[1], i[2]
  local s = shape_of(x)
  local axis = norm_axis(a.axis or 0, #s)
  local n = s[axis + 1]
  if is_known(x) and is_known(idx) and #s == 1 then
    local v = {}
    for k, p in ipairs(idx.v) do
      if p < 0 then p = p + n end
      if p < 0 or p >= n then error(string.format("Gather: index %d out of range for size %d", idx.v[k], n), 0) end
      v[k] = x.v[p + 1]
    end
    return known(x.dtype, idx.shape, v)
  end
  x = to_tensor(x)
  local ishape = shape_of(idx)
  local out_shape = {}
  for d = 1, axis do out_shape[#out_shape + 1] = s[d] end
  for _, d in ipairs(ishape) do out_shape[#out_shape + 1] = d end
  for d = axis + 2, #s do out_shape[#out_shape + 1] = s[d] end
  local r
  if is_known(idx) then
    local list = {}
    for k, p in ipairs(idx.v) do list[k] = p < 0 and p + n or p end
    r = take(x, axis, list)
  else
    local flat = idx:reshape({ numel(ishape) })
    flat = kiln.where(flat:lt(0), flat + n, flat) + 1
    r = x:index_select(axis + 1, flat:to("i64"))
  end
  return r:reshape(out_shape)
end

ops.Expand = function(i)
  local want = ints(i[2], "shape")
  local k = i[1]
  if is_known(k) and #k.v == 1 then
    -- one known number expanded is kiln.full, a constant the passes know (a
    -- causal mask's ones), not a view of a scalar
    local v = k.v[1]
    if k.dtype == "bool" then v = v ~= 0 end
    return kiln.full(broadcast_shapes(k.shape, want), v, { dtype = k.dtype, device = ctx.device })
  end
  local x = to_tensor(k)
  local out = broadcast_shapes(x:shape(), want)
  local s = x:shape()
  while #s < #out do table.insert(s, 1, 1) end
  return x:reshape(s):expand(out)
end

ops.Tile = function(i)
  local x = to_tensor(i[1])
  local reps = ints(i[2], "repeats")
  for d, r in ipairs(reps) do
    if r ~= 1 then
      local parts = {}
      for k = 1, r do parts[k] = x end
      x = r == 0 and take(x, d - 1, {}) or cat(parts, d - 1)
    end
  end
  return x
end

ops.Pad = function(i, a)
  local x = to_tensor(i[1])
  local pads, value, mode = a.pads, a.value or 0, a.mode or "constant"
  local axes
  if ctx.opset >= 11 then
    pads = ints(i[2], "pads")
    if i[3] then value = scalar(i[3]) end
    if i[4] then axes = ints(i[4], "axes") end
  end
  local r = x:dim()
  axes = axes or (function() local t = {}; for d = 0, r - 1 do t[#t + 1] = d end; return t end)()
  local begins, ends = {}, {}
  for k, ax in ipairs(axes) do
    ax = norm_axis(ax, r)
    begins[ax + 1], ends[ax + 1] = pads[k], pads[k + #axes]
  end
  return pad(x, begins, ends, mode, value)
end

local function arg_extreme(sign)
  return function(i, a)
    local x = to_tensor(i[1])
    if sign < 0 then x = -x end
    local axis = norm_axis(a.axis or 0, x:dim())
    local n = x:shape()[axis + 1]
    local last = (a.select_last_index or 0) ~= 0
    if last then
      local rev = {}
      for k = n - 1, 0, -1 do rev[#rev + 1] = k end
      x = take(x, axis, rev)
    end
    local _, idx = x:max(axis + 1, (a.keepdims or 1) ~= 0)
    if last then return (idx - n) * -1 end
    return idx - 1
  end
end
ops.ArgMax = arg_extreme(1)
ops.ArgMin = arg_extreme(-1)

ops.GatherElements = function(i, a)
  local x, idx = to_tensor(i[1]), to_tensor(i[2])
  local axis = norm_axis(a.axis or 0, x:dim())
  local n = x:shape()[axis + 1]
  idx = kiln.where(idx:lt(0), idx + n, idx) + 1
  return x:gather(axis + 1, idx:to("i64"))
end

ops.Trilu = function(i, a)
  local x = i[1]
  -- a known value of one repeated number (a small ConstantOfShape's ones) is
  -- kiln.full: the attention pass knows tril(full) as a causal mask
  if is_known(x) and #x.shape == 2 then
    local same = true
    for k = 2, #x.v do if x.v[k] ~= x.v[1] then same = false; break end end
    if same then
      local v = x.v[1]
      if x.dtype == "bool" then v = v ~= 0 end
      x = kiln.full(x.shape, v, { dtype = x.dtype, device = ctx.device })
    end
  end
  x = to_tensor(x)
  local k = i[2] and scalar(i[2]) or 0
  if (a.upper or 1) ~= 0 then return x:triu(k) end
  return x:tril(k)
end

ops.Hardmax = function(i, a)
  local x = to_tensor(i[1])
  local s = x:shape()
  local flat = x
  local axis
  if ctx.opset < 13 then
    axis = norm_axis(a.axis or 1, #s)
    local outer, inner = 1, 1
    for d = 1, #s do if d <= axis then outer = outer * s[d] else inner = inner * s[d] end end
    flat = x:reshape({ outer, inner })
    axis = 1
  else
    axis = norm_axis(a.axis or -1, #s)
  end
  local _, idx = flat:max(axis + 1, true)
  local n = flat:shape()[axis + 1]
  local rs = {}
  for d = 1, flat:dim() do rs[d] = 1 end
  rs[axis + 1] = n
  local positions = kiln.arange(n, { dtype = "i64", device = ctx.device }):reshape(rs) + 1
  return positions:eq(idx):to(x.dtype):reshape(s)
end

ops.OneHot = function(i, a)
  local idx = to_tensor(i[1])
  local depth = scalar(i[2])
  local vals = to_tensor(i[3])
  depth = math.tointeger(depth) or math.floor(depth)
  local r = idx:dim() + 1
  local axis = norm_axis(a.axis or -1, r)
  local u = idx:unsqueeze(axis + 1)
  if not INT[u.dtype] then u = u:to("i64") end
  u = kiln.where(u:lt(0), u + depth, u)
  local rs = {}
  for d = 1, r do rs[d] = 1 end
  rs[axis + 1] = depth
  local positions = kiln.arange(depth, { dtype = u.dtype, device = ctx.device }):reshape(rs)
  local off, on = vals:slice(1, 1, 1):reshape({}), vals:slice(1, 2, 2):reshape({})
  return kiln.where(positions:eq(u), on, off)
end

ops.DepthToSpace = function(i, a)
  local x = to_tensor(i[1])
  local b = a.blocksize
  local n, c, h, w = table.unpack(x:shape())
  local y
  if (a.mode or "DCR") == "DCR" then
    y = x:reshape({ n, b, b, c // (b * b), h, w }):permute({ 1, 4, 5, 2, 6, 3 })
  else
    y = x:reshape({ n, c // (b * b), b, b, h, w }):permute({ 1, 2, 5, 3, 6, 4 })
  end
  return y:reshape({ n, c // (b * b), h * b, w * b })
end
ops.SpaceToDepth = function(i, a)
  local x = to_tensor(i[1])
  local b = a.blocksize
  local n, c, h, w = table.unpack(x:shape())
  return x:reshape({ n, c, h // b, b, w // b, b }):permute({ 1, 4, 6, 2, 3, 5 }):reshape({ n, c * b * b, h // b, w // b })
end

-- CumSum along an axis: a matmul with a triangular matrix of ones (floats;
-- integers through f64, exact below 2^53).
ops.CumSum = function(i, a)
  local x = to_tensor(i[1])
  local axis = norm_axis(scalar(i[2]), x:dim())
  local n = x:shape()[axis + 1]
  local dt = x.dtype
  local work = (dt == "f32" or dt == "f64") and x or x:to("f64")
  local r = x:dim()
  local perm = {}
  for d = 1, r do perm[d] = d end
  perm[axis + 1], perm[r] = r, axis + 1
  local moved = r > 1 and work:permute(perm) or work
  -- m[j][k] = 1 where output k sums input j
  local vals = {}
  local excl, rev = (a.exclusive or 0) ~= 0, (a.reverse or 0) ~= 0
  for j = 0, n - 1 do
    for k = 0, n - 1 do
      local take_it
      if rev then take_it = excl and j > k or (not excl and j >= k)
      else take_it = excl and j < k or (not excl and j <= k) end
      vals[#vals + 1] = take_it and 1 or 0
    end
  end
  local m = const_tensor(vals, work.dtype, { n, n })
  local y = moved:matmul(m)
  if r > 1 then y = y:permute(perm) end
  return y:to(dt)
end

ops.EyeLike = function(i, a)
  local x = i[1]
  local s = shape_of(x)
  local dt = a.dtype and ONNX_TYPES[a.dtype] or dtype_of(x)
  if not dt then unsupported("EyeLike to %s", ONNX_TYPE_NAMES[a.dtype] or "?") end
  local k = a.k or 0
  local vals = {}
  for r = 0, s[1] - 1 do
    for c = 0, s[2] - 1 do vals[#vals + 1] = (c - r == k) and 1 or 0 end
  end
  return const_tensor(vals, dt, s)
end

-- GatherND: the index's last dim addresses the leading dims of data (after
-- batch_dims); as one index_select over those dims flattened.
ops.GatherND = function(i, a)
  local x, idx = to_tensor(i[1]), to_tensor(i[2])
  local b = a.batch_dims or 0
  local xs, is = x:shape(), idx:shape()
  local m = is[#is]
  local bsize = 1
  for d = 1, b do bsize = bsize * xs[d] end
  -- x as {B, prod(indexed dims), rest...}
  local inner = 1
  for d = b + 1, b + m do inner = inner * xs[d] end
  local rest = {}
  for d = b + m + 1, #xs do rest[#rest + 1] = xs[d] end
  local flat_shape = { bsize * inner }
  for _, d in ipairs(rest) do flat_shape[#flat_shape + 1] = d end
  local xf = x:reshape(flat_shape)
  -- linear index into the indexed dims, plus the batch offset
  local lin
  local stride = 1
  for d = m, 1, -1 do
    local size = xs[b + d]
    local comp = idx:slice(#is, d, d):squeeze(#is):to("i64")
    comp = kiln.where(comp:lt(0), comp + size, comp)
    lin = lin and lin + comp * stride or comp * stride
    stride = stride * size
  end
  local ls = lin:shape()
  if b > 0 then
    local per = numel(ls) // bsize
    local boff = {}
    for bb = 0, bsize - 1 do for _ = 1, per do boff[#boff + 1] = bb * inner end end
    lin = lin + const_tensor(boff, "i64", ls)
  end
  local out = xf:index_select(1, (lin + 1):reshape({ numel(ls) }))
  local out_shape = {}
  for d = 1, #is - 1 do out_shape[#out_shape + 1] = is[d] end
  for _, d in ipairs(rest) do out_shape[#out_shape + 1] = d end
  return out:reshape(out_shape)
end

-- Scatters as index_add on the data flattened: positions are linear indices.
-- reduction none overwrites (the written positions are masked out of the
-- data first; repeated indices then add up, where ONNX leaves the order
-- undefined), add adds; mul, max and min are not in kiln.
local function scatter_flat(x, lin, upd, reduction)
  if reduction ~= "none" and reduction ~= "add" then unsupported("scatter reduction '%s'", reduction) end
  local flat_x = x
  local idx = (lin + 1):reshape({ lin:numel() })
  local added = flat_x:index_add(1, idx, upd)
  if reduction == "add" then return added end
  local zeros = full_like_shape(flat_x:shape(), 0, flat_x.dtype)
  local ones_shape = upd:shape()
  local hit = zeros:index_add(1, idx, full_like_shape(ones_shape, 1, flat_x.dtype)):gt(0)
  return kiln.where(hit, zeros:index_add(1, idx, upd), flat_x)
end

ops.ScatterElements = function(i, a)
  local x, idx, upd = to_tensor(i[1]), to_tensor(i[2]), to_tensor(i[3])
  local axis = norm_axis(a.axis or 0, x:dim())
  local xs, is = x:shape(), idx:shape()
  idx = idx:to("i64")
  idx = kiln.where(idx:lt(0), idx + xs[axis + 1], idx)
  -- the linear index of each update: its own position with the axis
  -- coordinate replaced by idx
  local lin = idx * 0
  local stride = 1
  for d = #xs, 1, -1 do
    local coord
    if d == axis + 1 then coord = idx
    else
      local rs = {}
      for k = 1, #is do rs[k] = 1 end
      rs[d] = is[d]
      coord = kiln.arange(is[d], { dtype = "i64", device = ctx.device }):reshape(rs)
    end
    lin = lin + coord * stride
    stride = stride * xs[d]
  end
  local y = scatter_flat(x:reshape({ x:numel() }), lin, upd:reshape({ upd:numel() }), a.reduction or "none")
  return y:reshape(xs)
end
ops.Scatter = ops.ScatterElements

ops.ScatterND = function(i, a)
  local x, idx, upd = to_tensor(i[1]), to_tensor(i[2]), to_tensor(i[3])
  local xs, is = x:shape(), idx:shape()
  local m = is[#is]
  local inner = 1
  for d = 1, m do inner = inner * xs[d] end
  local rest = {}
  for d = m + 1, #xs do rest[#rest + 1] = xs[d] end
  local lin
  local stride = 1
  for d = m, 1, -1 do
    local comp = idx:slice(#is, d, d):squeeze(#is):to("i64")
    comp = kiln.where(comp:lt(0), comp + xs[d], comp)
    lin = lin and lin + comp * stride or comp * stride
    stride = stride * xs[d]
  end
  local n = lin:numel()
  local flat_shape, upd_shape = { inner }, { n }
  for _, d in ipairs(rest) do flat_shape[#flat_shape + 1] = d; upd_shape[#upd_shape + 1] = d end
  local y = scatter_flat(x:reshape(flat_shape), lin:reshape({ n }), upd:reshape(upd_shape), a.reduction or "none")
  return y:reshape(xs)
end

-- TopK by k rounds of max along the axis, each taking the winner out
-- (ties: the lower index first, as ONNX).
ops.TopK = function(i, a)
  local x = to_tensor(i[1])
  local k = ints(i[2], "k")[1]
  local axis = norm_axis(a.axis or -1, x:dim())
  local largest = (a.largest or 1) ~= 0
  if (a.sorted or 1) == 0 then unsupported("TopK with sorted=0") end
  local work = largest and x or -x
  if not FLOAT[x.dtype] then work = work:to("f64") end
  local n = x:shape()[axis + 1]
  local rs = {}
  for d = 1, x:dim() do rs[d] = 1 end
  rs[axis + 1] = n
  local positions = kiln.arange(n, { dtype = "i64", device = ctx.device }):reshape(rs) + 1
  local vals, idxs = {}, {}
  for r = 1, k do
    local _, ix = work:max(axis + 1, true)
    idxs[r] = ix
    vals[r] = x:gather(axis + 1, ix)
    if r < k then work = kiln.where(positions:eq(ix), -math.huge, work) end
  end
  if k == 0 then
    local s = x:shape(); s[axis + 1] = 0
    return full_like_shape(s, 0, x.dtype), full_like_shape(s, 0, "i64")
  end
  return cat(vals, axis), cat(idxs, axis) - 1
end


-- Window functions: computed here from the size (a known value).
local function window(f)
  return function(i, a)
    local n = ints(i[1], "size")[1]
    local dt = ONNX_TYPES[a.output_datatype or 1]
    if not dt then unsupported("window of type %s", ONNX_TYPE_NAMES[a.output_datatype] or "?") end
    local denom = ((a.periodic or 1) ~= 0) and n or n - 1
    local v = {}
    for k = 0, n - 1 do v[k + 1] = f(2 * math.pi * k / denom) end
    if INT[dt] then for k = 1, n do v[k] = math.tointeger(math.floor(v[k])) or 0 end end
    return const_tensor(v, dt, { n })
  end
end
ops.HannWindow = window(function(t) return 0.5 - 0.5 * math.cos(t) end)
ops.HammingWindow = window(function(t) return 25 / 46 - (21 / 46) * math.cos(t) end)
ops.BlackmanWindow = window(function(t) return 0.42 - 0.5 * math.cos(t) + 0.08 * math.cos(2 * t) end)

-- Resize's attributes and operands, checked: the mode, the scales or the
-- sizes (whichever the node gives, else nil), the coordinate transformation
-- mode and the nearest mode, with the defaults of the node's opset.
local function resize_options(i, a)
  local mode = a.mode or "nearest"
  if mode ~= "nearest" and mode ~= "linear" and mode ~= "cubic" then unsupported("Resize mode '%s'", mode) end
  if (a.antialias or 0) ~= 0 then unsupported("Resize with antialias") end
  if a.axes then unsupported("Resize with axes") end
  if (a.keep_aspect_ratio_policy or "stretch") ~= "stretch" then unsupported("Resize keep_aspect_ratio_policy") end
  local scales, sizes
  if ctx.opset < 11 then
    -- Upsample before opset 9 has the scales as an attribute
    scales = a.scales or to_known(i[2]).v
  else
    if i[4] then sizes = ints(i[4], "sizes") end
    if not sizes and i[3] then scales = to_known(i[3]).v end
  end
  if scales and #scales == 0 then scales = nil end
  if sizes and #sizes == 0 then sizes = nil end
  local ctm = a.coordinate_transformation_mode or (ctx.opset < 11 and "asymmetric" or "half_pixel")
  if ctm == "tf_crop_and_resize" then unsupported("Resize coordinate_transformation_mode tf_crop_and_resize") end
  local nearest_mode = a.nearest_mode or (ctx.opset < 11 and "floor" or "round_prefer_floor")
  return mode, scales, sizes, ctm, nearest_mode
end

-- The map from an output position o to its source coordinate along a dim
-- of n positions resized to out (scale, and len: the output length ONNX
-- maps coordinates with) under the coordinate transformation mode ctm.
local function resize_source(ctm, n, out, scale, len)
  return function(o)
    if ctm == "half_pixel" then return (o + 0.5) / scale - 0.5
    elseif ctm == "pytorch_half_pixel" then return len > 1 and (o + 0.5) / scale - 0.5 or 0
    elseif ctm == "align_corners" then return len > 1 and o * (n - 1) / (len - 1) or 0
    elseif ctm == "asymmetric" then return o / scale
    elseif ctm == "tf_half_pixel_for_nn" then return (o + 0.5) / scale
    elseif ctm == "half_pixel_symmetric" then
      local adj = out / (n * scale)
      local c = n / 2 - n * adj / 2
      return c + (o + 0.5) / scale - 0.5
    end
    unsupported("Resize coordinate_transformation_mode '%s'", ctm)
  end
end

-- x resized along dim d (1-based; n positions to out, src: resize_source's
-- map) by the nearest position, rounded as nearest_mode says.
local function resize_nearest(x, d, n, out, src, nearest_mode)
  local idx = {}
  for o = 0, out - 1 do
    local c = src(o)
    local j
    if nearest_mode == "round_prefer_floor" then j = (c - math.floor(c) == 0.5) and math.floor(c) or math.floor(c + 0.5)
    elseif nearest_mode == "round_prefer_ceil" then j = math.floor(c + 0.5)
    elseif nearest_mode == "floor" then j = math.floor(c)
    elseif nearest_mode == "ceil" then j = math.ceil(c)
    else unsupported("Resize nearest_mode '%s'", nearest_mode) end
    idx[#idx + 1] = math.min(math.max(j, 0), n - 1)
  end
  return take(x, d - 1, idx)
end

-- x resized along dim d as resize_nearest, cubically: four taps around each
-- source coordinate, ONNX's cubic weights (coefficient A); taps outside the
-- input repeat the edge, or with exclude_outside weigh 0 and the rest are
-- renormalized.
local function resize_cubic(x, d, n, out, src, a)
  local A = a.cubic_coeff_a or -0.75
  local exclude = (a.exclude_outside or 0) ~= 0
  local idxs, wts = { {}, {}, {}, {} }, { {}, {}, {}, {} }
  for o = 0, out - 1 do
    local c = src(o)
    local f = math.floor(c)
    local r = c - f
    local w = {
      ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A,
      ((A + 2) * r - (A + 3)) * r * r + 1,
      ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1,
      ((A * (2 - r) - 5 * A) * (2 - r) + 8 * A) * (2 - r) - 4 * A,
    }
    local total = 0
    for t = 1, 4 do
      local j = f - 2 + t
      if exclude and (j < 0 or j >= n) then w[t] = 0 end
      total = total + w[t]
    end
    for t = 1, 4 do
      local j = f - 2 + t
      idxs[t][#idxs[t] + 1] = math.min(math.max(j, 0), n - 1)
      wts[t][#wts[t] + 1] = exclude and w[t] / total or w[t]
    end
  end
  local ws = {}
  for k = 1, x:dim() do ws[k] = 1 end
  ws[d] = out
  local acc
  for t = 1, 4 do
    local term = take(x, d - 1, idxs[t]) * const_tensor(wts[t], x.dtype, ws)
    acc = acc and acc + term or term
  end
  return acc
end

-- x resized along dim d as resize_nearest, linearly between the two
-- positions around each source coordinate (clamped to the input).
local function resize_linear(x, d, n, out, src)
  local lo, hi, wl, wh = {}, {}, {}, {}
  for o = 0, out - 1 do
    local c = math.min(math.max(src(o), 0), n - 1)
    local f = math.floor(c)
    lo[#lo + 1] = f
    hi[#hi + 1] = math.min(f + 1, n - 1)
    wh[#wh + 1] = c - f
    wl[#wl + 1] = 1 - (c - f)
  end
  local ws = {}
  for k = 1, x:dim() do ws[k] = 1 end
  ws[d] = out
  local tl = const_tensor(wl, x.dtype, ws)
  local th = const_tensor(wh, x.dtype, ws)
  return take(x, d - 1, lo) * tl + take(x, d - 1, hi) * th
end

-- Resize: nearest, linear and cubic, separably, one dim at a time, with
-- index lists (and weights) computed here from the sizes.
ops.Resize = function(i, a)
  local x = to_tensor(i[1])
  local mode, scales, sizes, ctm, nearest_mode = resize_options(i, a)
  local s = x:shape()
  for d = 1, #s do
    local n = s[d]
    local out, scale, len
    if sizes then
      out = sizes[d]
      scale = out / n
      len = out
    else
      scale = scales[d]
      out = math.floor(n * scale)
      len = n * scale -- ONNX maps coordinates with the unrounded length
    end
    if out ~= n or scale ~= 1 then
      local src = resize_source(ctm, n, out, scale, len)
      if mode == "nearest" then x = resize_nearest(x, d, n, out, src, nearest_mode)
      elseif mode == "cubic" then x = resize_cubic(x, d, n, out, src, a)
      else x = resize_linear(x, d, n, out, src) end
    end
    s = x:shape()
  end
  return x
end
ops.Upsample = ops.Resize
