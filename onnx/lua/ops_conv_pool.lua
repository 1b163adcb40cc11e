-- kiln.onnx ops: convolution, pooling and normalization.
-- Each op takes (inputs, attrs, node) and returns its outputs; import.lua
-- holds the loader, the graph walk and the helpers the op files share
-- (kiln.onnx._shared).
local kiln = ...
local S = kiln.onnx._shared
local ops = S.ops
local FLOAT, unsupported, numel, const_tensor, to_tensor, norm_axis = S.FLOAT, S.unsupported, S.numel, S.const_tensor, S.to_tensor, S.norm_axis
local full_like_shape, take, pad, window_pads, defaults, as_2d = S.full_like_shape, S.take, S.pad, S.window_pads, S.defaults, S.as_2d

-- 3-D windows as 2-D ones: for each kernel depth offset, the input's depth
-- positions that offset reads (a strided slice) fold into the batch, a 2-D
-- op runs on them, and the results combine (sum for conv, max or sum for
-- pools). kD two-dimensional ops, no new kernel.
local function fold_depth(xp, k, dil, stride, od)
  local start = k * dil
  local xs = xp:slice(3, start + 1, start + (od - 1) * stride + 1, stride) -- {N, C, OD, H, W}
  local sh = xs:shape()
  return xs:permute({ 1, 3, 2, 4, 5 }):reshape({ sh[1] * od, sh[2], sh[4], sh[5] })
end
local function unfold_depth(y, n, od)
  local sh = y:shape()
  return y:reshape({ n, od, sh[2], sh[3], sh[4] }):permute({ 1, 3, 2, 4, 5 })
end

local function conv3d(x, w, b, a)
  local ks = w:shape()
  local kernel = { ks[3], ks[4], ks[5] }
  local strides, dil = defaults(a.strides, 3, 1), defaults(a.dilations, 3, 1)
  local s = x:shape()
  local begins, ends = window_pads(a, { s[3], s[4], s[5] }, kernel, strides, dil)
  local xp = pad(x, { 0, 0, begins[1], begins[2], begins[3] }, { 0, 0, ends[1], ends[2], ends[3] })
  local od = (xp:shape()[3] - dil[1] * (kernel[1] - 1) - 1) // strides[1] + 1
  local acc
  for k = 0, kernel[1] - 1 do
    local wk = w:slice(3, k + 1, k + 1):squeeze(3)
    local y = kiln.conv2d(fold_depth(xp, k, dil[1], strides[1], od), wk:contiguous(), nil,
      { stride = { strides[2], strides[3] }, padding = { 0, 0 }, dilation = { dil[2], dil[3] }, groups = a.group or 1 })
    acc = acc and acc + y or y
  end
  local y = unfold_depth(acc, s[1], od)
  if b then y = y + b:reshape({ b:shape()[1], 1, 1, 1 }) end
  return y
end

-- A pool's windows on x, per spatial dim, as the table w the pool helpers
-- below share: nd, kernel, strides, dil, the input's sizes (and its whole
-- shape), the pads begins and ends (the end grown to hold the last window)
-- and the output sizes out.
local function pool_windows(x, a)
  local nd = x:dim() - 2
  local kernel = a.kernel_shape
  local strides, dil = defaults(a.strides, nd, 1), defaults(a.dilations, nd, 1)
  local s = x:shape()
  local sizes = {}
  for d = 1, nd do sizes[d] = s[d + 2] end
  local begins, ends = window_pads(a, sizes, kernel, strides, dil)
  local ceil = (a.ceil_mode or 0) ~= 0
  local out = {}
  for d = 1, nd do
    local span = sizes[d] + begins[d] + ends[d] - dil[d] * (kernel[d] - 1) - 1
    out[d] = (ceil and -((-span) // strides[d]) or span // strides[d]) + 1
    -- a last window starting in the end padding is dropped (as ONNX and PyTorch)
    if ceil and (out[d] - 1) * strides[d] >= sizes[d] + begins[d] then out[d] = out[d] - 1 end
    -- room for the last window
    local need = (out[d] - 1) * strides[d] + dil[d] * (kernel[d] - 1) + 1
    ends[d] = ends[d] + math.max(0, need - (sizes[d] + begins[d] + ends[d]))
  end
  return { nd = nd, kernel = kernel, strides = strides, dil = dil, shape = s, sizes = sizes,
    begins = begins, ends = ends, out = out }
end

-- x padded for windows w (with -inf for max, 0 for avg) and, for avg, the
-- mask of the positions that count, padded alike.
local function pad_for_windows(x, kind, a, w)
  local nd, kernel, strides, dil, sizes, begins, ends = w.nd, w.kernel, w.strides, w.dil, w.sizes, w.begins, w.ends
  local fill = kind == "max" and -math.huge or 0
  local pb, pe = { 0, 0 }, { 0, 0 }
  for d = 1, nd do pb[d + 2], pe[d + 2] = begins[d], ends[d] end
  local xp = pad(x, pb, pe, "constant", fill)
  local include = (a.count_include_pad or 0) ~= 0
  local mask
  if kind == "avg" then
    local ms = { 1, 1 }
    for d = 1, nd do ms[d + 2] = sizes[d] end
    -- which positions count: the input, and with count_include_pad its pads
    -- (not the room added for ceil_mode)
    local ones = full_like_shape(ms, 1, x.dtype)
    if include then
      local pb0, pe0 = { 0, 0 }, { 0, 0 }
      local b2, e2 = window_pads(a, sizes, kernel, strides, dil)
      for d = 1, nd do pb0[d + 2], pe0[d + 2] = b2[d], e2[d] end
      ones = pad(ones, pb0, pe0, "constant", 1)
      local extra_b, extra_e = { 0, 0 }, { 0, 0 }
      for d = 1, nd do extra_b[d + 2], extra_e[d + 2] = 0, ends[d] - e2[d] end
      mask = pad(ones, extra_b, extra_e, "constant", 0)
    else
      mask = pad(ones, pb, pe, "constant", 0)
    end
  end
  return xp, mask
end

-- For a stride that is a multiple of the dilation (1-D or 2-D): every
-- position a window reads is a multiple of the dilation, so the input taken
-- every dil positions, pooled with kiln's 2-D pool (stride / dil, no
-- dilation), is the dilated pool: one pool kernel, whatever the window's size.
local function pool_dilated_as_2d(xp, mask, kind, w)
  local nd, kernel, strides, dil, out = w.nd, w.kernel, w.strides, w.dil, w.out
  local x2, m2 = xp, mask
  if nd == 1 then
    x2 = x2:unsqueeze(4)
    if m2 then m2 = m2:unsqueeze(4) end
  end
  local k2, q2 = { kernel[1], kernel[2] or 1 }, {}
  for d = 1, 2 do
    local step = dil[d] or 1
    q2[d] = (strides[d] or 1) // step
    if step > 1 then
      x2 = x2:slice(d + 2, 1, x2:shape()[d + 2], step)
      if m2 then m2 = m2:slice(d + 2, 1, m2:shape()[d + 2], step) end
    end
  end
  local popts = { stride = q2, padding = { 0, 0 }, count_include_pad = true }
  local y
  if kind == "max" then y = kiln.max_pool2d(x2, k2, popts)
  else y = kiln.avg_pool2d(x2, k2, popts) / kiln.avg_pool2d(m2, k2, popts) end
  -- the room added for the last window can give one more output
  y = y:slice(3, 1, out[1]):slice(4, 1, out[2] or 1)
  if nd == 1 then y = y:squeeze(4) end
  return y
end

-- One spatial dim at a time (max and sum are separable): kernel[d] slices
-- per step, where all offsets at once (kH * kW slices, twice for an
-- average's counts) passed the fuser's 16-argument limit and ran op by op.
local function pool_separable(xp, mask, kind, w)
  local nd, kernel, strides, dil, out = w.nd, w.kernel, w.strides, w.dil, w.out
  local acc, cnt = xp, mask
  for d = 1, nd do
    local part, part_cnt
    for k = 0, kernel[d] - 1 do
      local start = k * dil[d]
      local stop = start + (out[d] - 1) * strides[d] + 1
      local v = acc:slice(d + 2, start + 1, stop, strides[d])
      if not part then part = v
      elseif kind == "max" then part = part:maximum(v)
      else part = part + v end
      if cnt then
        local m = cnt:slice(d + 2, start + 1, stop, strides[d])
        part_cnt = part_cnt and part_cnt + m or m
      end
    end
    acc, cnt = part, part_cnt
  end
  if kind == "avg" then acc = acc / cnt end
  return acc
end

-- MaxPool with its Indices: each output's flat index into x (row-major, or
-- with storage_order 1 the spatial dims column-major), from the offset that
-- won. One spatial dim at a time, the last first, each step keeping the
-- first offset of a tie (a strict comparison): the row-major first of the
-- whole window, as ONNX, with kernel[d] slices per step.
local function max_pool_indices(xp, a, w)
  local nd, kernel, strides, dil, sizes, begins, out = w.nd, w.kernel, w.strides, w.dil, w.sizes, w.begins, w.out
  local s = w.shape
  local column_major = (a.storage_order or 0) == 1
  local function flat_stride(d)
    local f = 1
    if column_major then for e = 1, d - 1 do f = f * sizes[e] end
    else for e = d + 1, nd do f = f * sizes[e] end end
    return f
  end
  local acc, where_idx = xp, nil
  for d = nd, 1, -1 do
    local part, part_idx
    local cs = { 1, 1 }
    for e = 1, nd do cs[e + 2] = 1 end
    cs[d + 2] = out[d]
    for k = 0, kernel[d] - 1 do
      local start = k * dil[d]
      local stop = start + (out[d] - 1) * strides[d] + 1
      local v = acc:slice(d + 2, start + 1, stop, strides[d])
      -- this offset's share of the flat index: its coordinate along dim d
      local coords = {}
      for o = 0, out[d] - 1 do coords[o + 1] = (o * strides[d] - begins[d] + start) * flat_stride(d) end
      local oi = const_tensor(coords, "i64", cs)
      if where_idx then oi = where_idx:slice(d + 2, start + 1, stop, strides[d]) + oi end
      if part then
        local better = v:gt(part)
        part_idx = kiln.where(better, oi, part_idx)
        part = kiln.where(better, v, part)
      else
        part, part_idx = v, oi
      end
    end
    -- a window of one offset leaves the index at its constant's shape
    if numel(part_idx:shape()) ~= numel(part:shape()) then part_idx = part_idx:expand(part:shape()) end
    acc, where_idx = part, part_idx
  end
  local per = numel(sizes)
  local nc = {}
  for k = 0, s[1] * s[2] - 1 do nc[#nc + 1] = k * per end
  local bs = { s[1], s[2] }
  for _ = 1, nd do bs[#bs + 1] = 1 end
  return acc, where_idx + const_tensor(nc, "i64", bs)
end

-- Pools by their windows' offsets: the padded input sliced once per kernel
-- offset (strided), combined with maximum or sum. For what kiln's 2-D pools
-- do not take (dilations, 3-D). kind: "max" or "avg"; with want_indices,
-- MaxPool's values and Indices.
local function pool_by_offsets(x, kind, a, want_indices)
  local w = pool_windows(x, a)
  local xp, mask = pad_for_windows(x, kind, a, w)
  local divisible = w.nd <= 2
  for d = 1, w.nd do divisible = divisible and w.strides[d] % w.dil[d] == 0 end
  if not want_indices and divisible then return pool_dilated_as_2d(xp, mask, kind, w) end
  if not want_indices then return pool_separable(xp, mask, kind, w) end
  return max_pool_indices(xp, a, w)
end

-- Conv on 2-D windows (x2, w as 2-D; one_d: the second dim is the added one).
local function conv2d_windows(x2, w, b, a, one_d)
  local nd = 2
  local kernel = {}
  for d = 1, nd do kernel[d] = w:shape()[d + 2] end
  local strides = defaults(a.strides, #kernel, 1)
  local dil = defaults(a.dilations, #kernel, 1)
  local begins, ends
  if one_d then
    local sp = x2:shape()[3]
    local bb, ee = window_pads(a, { sp }, { kernel[1] }, { strides[1] }, { dil[1] })
    begins, ends = { bb[1], 0 }, { ee[1], 0 }
    strides, dil = { strides[1], 1 }, { dil[1], 1 }
  else
    local s = x2:shape()
    begins, ends = window_pads(a, { s[3], s[4] }, kernel, strides, dil)
  end
  local padding = { 0, 0 }
  if begins[1] == ends[1] and begins[2] == ends[2] then
    padding = { begins[1], begins[2] }
  else
    x2 = pad(x2, { 0, 0, begins[1], begins[2] }, { 0, 0, ends[1], ends[2] })
  end
  return kiln.conv2d(x2, w, b, { stride = strides, padding = padding, dilation = dil, groups = a.group or 1 })
end

-- ConvTranspose as a convolution: the input spread out by the stride
-- (zeros between elements), padded by dilation * (kernel - 1) less the
-- pads, and convolved with the kernel flipped and its channel dims swapped.
local function spread(x, dim, s)
  if s == 1 then return x end
  local sh = x:shape()
  local n = sh[dim + 1]
  local a, b = {}, {}
  for d = 1, #sh do a[#a + 1] = sh[d]; if d == dim + 1 then a[#a + 1] = 1 end end
  local xs = x:reshape(a)
  local zs = {}
  for d = 1, #a do zs[d] = a[d] end
  zs[dim + 2] = s - 1
  local z = full_like_shape(zs, 0, x.dtype)
  local both = kiln.cat({ xs, z }, dim + 2)
  for d = 1, #sh do b[d] = sh[d] end
  b[dim + 1] = n * s
  local flat = both:reshape(b)
  return flat:slice(dim + 1, 1, (n - 1) * s + 1)
end

-- The begin and end pads of a transposed convolution's nd spatial dims
-- (pads, auto_pad, or output_shape as ONNX's reference derives them).
local function transpose_pads(a, sizes, kernel, strides, dil, outpad, nd)
  local begins, ends = {}, {}
  local pads = a.pads or {}
  for d = 1, nd do
    local total_k = dil[d] * (kernel[d] - 1) + 1
    if a.output_shape or a.auto_pad == "SAME_UPPER" or a.auto_pad == "SAME_LOWER" then
      local out = a.output_shape and a.output_shape[#a.output_shape - nd + d] or sizes[d] * strides[d]
      local total = strides[d] * (sizes[d] - 1) + outpad[d] + total_k - out
      if a.auto_pad == "SAME_UPPER" then begins[d], ends[d] = total // 2, total - total // 2
      else begins[d], ends[d] = total - total // 2, total // 2 end
    elseif a.auto_pad == "VALID" then
      begins[d], ends[d] = 0, 0
    else
      begins[d], ends[d] = pads[d] or 0, pads[d + nd] or 0
    end
  end
  return begins, ends
end

-- 3-D: the same construction, convolved by conv3d (depth folded into the batch).
local function conv_transpose3d(x, w, b, a)
  local g = a.group or 1
  local ws = w:shape()
  local cin, cout_g = ws[1], ws[2]
  local kernel = { ws[3], ws[4], ws[5] }
  local strides, dil = defaults(a.strides, 3, 1), defaults(a.dilations, 3, 1)
  local outpad = defaults(a.output_padding, 3, 0)
  local s = x:shape()
  local begins, ends = transpose_pads(a, { s[3], s[4], s[5] }, kernel, strides, dil, outpad, 3)
  local xsp = x
  for d = 1, 3 do xsp = spread(xsp, d + 1, strides[d]) end
  local pb, pe = { 0, 0 }, { 0, 0 }
  for d = 1, 3 do
    local k = dil[d] * (kernel[d] - 1)
    pb[d + 2], pe[d + 2] = k - begins[d], k - ends[d] + outpad[d]
  end
  xsp = pad(xsp, pb, pe)
  local wt = w:reshape({ g, cin // g, cout_g, kernel[1], kernel[2], kernel[3] }):permute({ 1, 3, 2, 4, 5, 6 })
    :reshape({ g * cout_g, cin // g, kernel[1], kernel[2], kernel[3] })
  for d = 1, 3 do
    if kernel[d] > 1 then
      local rev = {}
      for k = kernel[d] - 1, 0, -1 do rev[#rev + 1] = k end
      wt = take(wt, d + 1, rev)
    end
  end
  return conv3d(xsp, wt:contiguous(), b, { strides = { 1, 1, 1 }, dilations = dil, group = g, pads = { 0, 0, 0, 0, 0, 0 } })
end

-- ConvTranspose on 2-D windows (as conv2d_windows).
local function conv_transpose2d_windows(x2, w, b, a, one_d)
  local g = a.group or 1
  local ws = w:shape()
  local cin, cout_g, kh, kw = ws[1], ws[2], ws[3], ws[4]
  local function pair2(list, v)
    local t = defaults(list, one_d and 1 or 2, v)
    if one_d then t[2] = v end
    return t
  end
  local strides, dil = pair2(a.strides, 1), pair2(a.dilations, 1)
  local outpad = pair2(a.output_padding, 0)
  local kernel = { kh, kw }
  local xs = x2:shape()
  local nd = one_d and 1 or 2
  local begins, ends = transpose_pads(a, { xs[3], xs[4] }, kernel, strides, dil, outpad, nd)
  if one_d then begins[2], ends[2] = 0, 0 end
  local xsp = spread(spread(x2, 2, strides[1]), 3, strides[2])
  local pb, pe = {}, {}
  for d = 1, 2 do
    local k = dil[d] * (kernel[d] - 1)
    pb[d], pe[d] = k - begins[d], k - ends[d] + outpad[d]
  end
  xsp = pad(xsp, { 0, 0, pb[1], pb[2] }, { 0, 0, pe[1], pe[2] })
  -- weight {Cin, Cout/g, kh, kw} -> {Cout, Cin/g, kh, kw}, spatially flipped
  local wt = w:reshape({ g, cin // g, cout_g, kh, kw }):permute({ 1, 3, 2, 4, 5 }):reshape({ g * cout_g, cin // g, kh, kw })
  local rev_h, rev_w = {}, {}
  for k = kh - 1, 0, -1 do rev_h[#rev_h + 1] = k end
  for k = kw - 1, 0, -1 do rev_w[#rev_w + 1] = k end
  if kh > 1 then wt = take(wt, 2, rev_h) end
  if kw > 1 then wt = take(wt, 3, rev_w) end
  return kiln.conv2d(xsp, wt:contiguous(), b, { stride = { 1, 1 }, padding = { 0, 0 }, dilation = dil, groups = g })
end

-- Conv and ConvTranspose: 3-D windows by depth folding, 1-D as 2-D with a
-- width of 1 (input and weight), 2-D as they are.
local CONV_OPS = {
  Conv = { three_d = conv3d, two_d = conv2d_windows },
  ConvTranspose = { three_d = conv_transpose3d, two_d = conv_transpose2d_windows },
}
for name, impl in pairs(CONV_OPS) do
  ops[name] = function(i, a)
    local x, w = to_tensor(i[1]), to_tensor(i[2])
    local b = i[3] and to_tensor(i[3]) or nil
    if x:dim() == 5 then return impl.three_d(x, w, b, a) end
    local x2, one_d = as_2d(x, name)
    if one_d then w = w:unsqueeze(4) end
    local y = impl.two_d(x2, w, b, a, one_d)
    if one_d then y = y:squeeze(4) end
    return y
  end
end

local function pool(kind, name)
  return function(i, a, node)
    local x = to_tensor(i[1])
    if kind == "max" and #node.outputs > 1 and node.outputs[2] ~= "" then
      if x:dim() < 4 then unsupported("MaxPool's Indices output for 1-D pools") end
      return pool_by_offsets(x, "max", a, true)
    end
    local dilated = false
    for _, d in ipairs(a.dilations or {}) do if d ~= 1 then dilated = true end end
    if dilated or x:dim() == 5 then return pool_by_offsets(x, kind, a) end
    local x2, one_d = as_2d(x, name)
    local kernel = a.kernel_shape
    local strides = defaults(a.strides, #kernel, 1)
    local s = x:shape()
    local sizes = {}
    for d = 1, #kernel do sizes[d] = s[d + 2] end
    local begins, ends = window_pads(a, sizes, kernel, strides, defaults(nil, #kernel, 1))
    if one_d then
      kernel, strides = { kernel[1], 1 }, { strides[1], 1 }
      begins, ends = { begins[1], 0 }, { ends[1], 0 }
    end
    local ceil = (a.ceil_mode or 0) ~= 0
    local include = (a.count_include_pad or 0) ~= 0
    local same = (a.auto_pad == "SAME_UPPER" or a.auto_pad == "SAME_LOWER")
    local sym = begins[1] == ends[1] and begins[2] == ends[2]
    local fn = kind == "max" and kiln.max_pool2d or kiln.avg_pool2d
    local pads2 = { begins[1], begins[2] }
    local y
    if sym and not (kind == "avg" and same and not include) and pads2[1] * 2 <= kernel[1] and pads2[2] * 2 <= kernel[2] then
      y = fn(x2, kernel, { stride = strides, padding = pads2, ceil_mode = ceil, count_include_pad = include })
    else
      local fill = kind == "max" and -math.huge or 0
      local xp = pad(x2, { 0, 0, begins[1], begins[2] }, { 0, 0, ends[1], ends[2] }, "constant", fill)
      y = fn(xp, kernel, { stride = strides, padding = { 0, 0 }, ceil_mode = ceil, count_include_pad = true })
      if kind == "avg" and not include then
        local ones = full_like_shape({ 1, 1, x2:shape()[3], x2:shape()[4] }, 1, x.dtype)
        local mp = pad(ones, { 0, 0, begins[1], begins[2] }, { 0, 0, ends[1], ends[2] }, "constant", 0)
        local cnt = kiln.avg_pool2d(mp, kernel, { stride = strides, padding = { 0, 0 }, ceil_mode = ceil, count_include_pad = true })
        y = y / cnt
      end
    end
    if one_d then y = y:squeeze(4) end
    return y
  end
end
local POOL_KINDS = { MaxPool = "max", AveragePool = "avg" }
for name, kind in pairs(POOL_KINDS) do ops[name] = pool(kind, name) end

-- The global pools: one reduction over all spatial dims.
local GLOBAL_POOL_METHODS = { GlobalAveragePool = "mean", GlobalMaxPool = "amax" }
for name, method in pairs(GLOBAL_POOL_METHODS) do
  ops[name] = function(i)
    local x = to_tensor(i[1])
    local dims = {}
    for d = 3, x:dim() do dims[#dims + 1] = d end
    return x[method](x, dims, true)
  end
end

ops.BatchNormalization = function(i, a, node)
  local x = to_tensor(i[1])
  local scale, bias, mean, var = to_tensor(i[2]), to_tensor(i[3]), to_tensor(i[4]), to_tensor(i[5])
  local eps = a.epsilon or 1e-5
  if (a.training_mode or 0) ~= 0 then
    -- the batch's statistics normalize; the running ones are updated with
    -- momentum (ONNX's reference: biased variance for both)
    local dims = { 1 }
    for d = 3, x:dim() do dims[#dims + 1] = d end
    local bm = x:mean(dims)
    local s = { x:shape()[2] }
    for _ = 3, x:dim() do s[#s + 1] = 1 end
    local c = x - bm:reshape(s)
    local bv = (c * c):mean(dims)
    local y = c / (bv:reshape(s) + eps):sqrt() * scale:reshape(s) + bias:reshape(s)
    local mom = a.momentum or 0.9
    return y, mean * mom + bm * (1 - mom), var * mom + bv * (1 - mom)
  end
  for k = 2, #node.outputs do if node.outputs[k] ~= "" then unsupported("BatchNormalization's running statistics outputs outside training mode") end end
  if x:dim() == 4 then
    return kiln.batch_norm(x, mean, var, scale, bias, eps)
  end
  local s = { x:shape()[2] }
  for _ = 3, x:dim() do s[#s + 1] = 1 end
  local function b(t) return t:reshape(s) end
  return (x - b(mean)) / (b(var) + eps):sqrt() * b(scale) + b(bias)
end

ops.InstanceNormalization = function(i, a)
  local x = to_tensor(i[1])
  local scale, bias = to_tensor(i[2]), to_tensor(i[3])
  local dims = {}
  for d = 3, x:dim() do dims[#dims + 1] = d end
  local m = x:mean(dims, true)
  local v = ((x - m) * (x - m)):mean(dims, true)
  local s = { x:shape()[2] }
  for _ = 3, x:dim() do s[#s + 1] = 1 end
  return (x - m) / (v + (a.epsilon or 1e-5)):sqrt() * scale:reshape(s) + bias:reshape(s)
end

ops.LayerNormalization = function(i, a, node)
  local x = to_tensor(i[1])
  local stats = false
  for k = 2, #node.outputs do if node.outputs[k] ~= "" then stats = true end end
  if stats then
    -- the saved statistics are asked for: the normalization composed, in f32
    -- (stash_type 1) at least
    local axis = norm_axis(a.axis or -1, x:dim())
    local dims = {}
    for d = axis + 1, x:dim() do dims[#dims + 1] = d end
    local xf = FLOAT[x.dtype] and (x.dtype == "f64" and x or x:to("f32")) or x:to("f32")
    local mean = xf:mean(dims, true)
    local c = xf - mean
    local inv = 1 / ((c * c):mean(dims, true) + (a.epsilon or 1e-5)):sqrt()
    local y = c * inv
    if i[2] then y = y * to_tensor(i[2]) end
    if i[3] then y = y + to_tensor(i[3]) end
    return y:to(x.dtype), mean, inv
  end
  local axis = norm_axis(a.axis or -1, x:dim())
  local ns = {}
  for d = axis + 1, x:dim() do ns[#ns + 1] = x:shape()[d] end
  local w = i[2] and to_tensor(i[2]) or nil
  local b = i[3] and to_tensor(i[3]) or nil
  local function fit(t)
    if t == nil then return nil end
    local ts = t:shape()
    local same = #ts == #ns
    for d = 1, #ns do if ts[d] ~= ns[d] then same = false end end
    if same then return t end
    return t:expand(ns)
  end
  return kiln.layer_norm(x, ns, fit(w), fit(b), a.epsilon or 1e-5)
end

ops.MeanVarianceNormalization = function(i, a)
  local x = to_tensor(i[1])
  local axes = a.axes or { 0, 2, 3 }
  local dims = {}
  for k, ax in ipairs(axes) do dims[k] = norm_axis(ax, x:dim()) + 1 end
  local m = x:mean(dims, true)
  local c = x - m
  return c / (((c * c):mean(dims, true)):sqrt() + 1e-9)
end

-- LRN: x / (bias + alpha/size * sum of squares over a window of channels)^beta
ops.LRN = function(i, a)
  local x = to_tensor(i[1])
  local size = a.size
  local alpha, beta, bias = a.alpha or 1e-4, a.beta or 0.75, a.bias or 1.0
  local sq = x * x
  local lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
  local c = x:shape()[2]
  local p = pad(sq, { 0, lo }, { 0, hi })
  local acc
  for k = 0, size - 1 do
    local s = p:slice(2, k + 1, k + c)
    acc = acc and acc + s or s
  end
  return x / (acc * (alpha / size) + bias):pow(beta)
end
