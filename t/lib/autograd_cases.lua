-- autograd_cases.lua: the gradient cases of every op with a rule (one or
-- more per op of kn_grad.def), shared by t/autograd_ops.lua (against
-- finite differences on the CPU) and t/cuda_autograd.lua (CUDA against the
-- CPU).
--   local cases = dofile("t/lib/autograd_cases.lua")(rnd)
-- rnd(shape [, above]) draws an f64 input; each case is {name, ops it
-- covers, f, inputs [, tolerance [, finite-difference step]]}.
return function(rnd)
  -- index and mask constants are made at each call, on the device the
  -- cases run on (cases.set_device; the CPU unless told): made once on the
  -- default device, a GPU machine's CPU cases met CUDA indices
  local on = { device = "cpu" }
  local function idx(t) return kiln.tensor(t, { dtype = "i64", device = on.device }) end
  local function mask(t) return kiln.tensor(t, { dtype = "bool", device = on.device }) end

  -- {name, ops covered, f, inputs [, tolerance [, step]]}
  local cases = {
    { "neg", { "neg" }, function(x) return -x end, { rnd { 3, 4 } } },
    { "relu", { "relu" }, function(x) return x:relu() end, { rnd { 3, 4 } } },
    { "gelu", { "gelu" }, function(x) return x:gelu() end, { rnd { 3, 4 } } },
    { "gelu_tanh", { "gelu_tanh" }, function(x) return x:gelu_tanh() end, { rnd { 3, 4 } } },
    { "silu", { "silu" }, function(x) return x:silu() end, { rnd { 3, 4 } } },
    { "tanh", { "tanh" }, function(x) return x:tanh() end, { rnd { 3, 4 } } },
    { "sigmoid", { "sigmoid" }, function(x) return x:sigmoid() end, { rnd { 3, 4 } } },
    { "exp", { "exp" }, function(x) return x:exp() end, { rnd { 3, 4 } } },
    { "log", { "log" }, function(x) return x:log() end, { rnd({ 3, 4 }, 0.5) } },
    { "sqrt", { "sqrt" }, function(x) return x:sqrt() end, { rnd({ 3, 4 }, 0.5) } },
    { "rsqrt", { "rsqrt" }, function(x) return x:rsqrt() end, { rnd({ 3, 4 }, 0.5) } },
    { "abs", { "abs" }, function(x) return x:abs() end, { rnd { 3, 4 } } },
    { "erf", { "erf" }, function(x) return x:erf() end, { rnd { 3, 4 } } },
    { "floor, ceil, round (zero gradient)", { "floor", "ceil", "round" },
      function(x) return x:floor() + x:ceil() * 2 + x:round() * 3 end, { rnd { 3, 4 } } },
    { "sin", { "sin" }, function(x) return x:sin() end, { rnd { 3, 4 } } },
    { "cos", { "cos" }, function(x) return x:cos() end, { rnd { 3, 4 } } },
    { "cast there and back", { "cast" }, function(x) return (x:cast("f32") * 1):cast("f64") end,
      { rnd { 3, 4 } }, 1e-3, 1e-2 }, -- f32's rounding: a larger step, a looser bound
    -- binary, broadcasting both ways
    { "add {3,1,4} + {2,4}", { "add" }, function(a, b) return a + b end, { rnd { 3, 1, 4 }, rnd { 2, 4 } } },
    { "sub {3,1,4} - {2,4}", { "sub" }, function(a, b) return a - b end, { rnd { 3, 1, 4 }, rnd { 2, 4 } } },
    { "mul {3,1,4} * {2,4}", { "mul" }, function(a, b) return a * b end, { rnd { 3, 1, 4 }, rnd { 2, 4 } } },
    { "div {3,1,4} / {2,4}", { "div" }, function(a, b) return a / b end, { rnd { 3, 1, 4 }, rnd({ 2, 4 }, 0.5) } },
    { "pow {3,4} ^ {4}", { "pow" }, function(a, b) return a ^ b end, { rnd({ 3, 4 }, 0.5), rnd { 4 } } },
    { "pow by a number", { "pow" }, function(a) return a ^ 3 end, { rnd { 5 } } },
    { "maximum {3,4} {4}", { "maximum" }, function(a, b) return kiln.maximum(a, b) end, { rnd { 3, 4 }, rnd { 4 } } },
    { "minimum {3,4} {3,1}", { "minimum" }, function(a, b) return kiln.minimum(a, b) end, { rnd { 3, 4 }, rnd { 3, 1 } } },
    { "a number on either side", { "add", "sub", "mul", "div" },
      function(a) return (2 - a) * 3 + 1 / (a * a + 1) end, { rnd { 4 } } },
    { "repeated input x * x", { "mul" }, function(x) return x * x end, { rnd { 3 } } },
    { "x in two branches", { "exp", "mul", "add", "sum" }, function(x)
      local y = x:exp()
      return y * x + y:sum()
    end, { rnd { 3 } } },
    { "where, broadcasting", { "where" }, function(c, a, b) return kiln.where(c, a, b) end,
      { rnd { 3, 4 }:gt(0), rnd { 3, 1 }, rnd { 4 } } },
    { "masked_fill, broadcast mask", { "masked_fill" }, function(a, m) return a:masked_fill(m, 2) end,
      { rnd { 3, 4 }, rnd { 4 }:gt(0) } },
    -- reductions
    { "sum over dims 1, 3", { "sum" }, function(a) return a:sum({ 1, 3 }) end, { rnd { 2, 3, 4 } } },
    { "sum over dims -1, 2, keepdim", { "sum" }, function(a) return a:sum({ -1, 2 }, true) end, { rnd { 2, 3, 4 } } },
    { "sum of all", { "sum" }, function(a) return a:sum() end, { rnd { 2, 3, 4 } } },
    { "mean over dims 1, 3", { "mean" }, function(a) return a:mean({ 1, 3 }) end, { rnd { 2, 3, 4 } } },
    { "mean of all, keepdim", { "mean" }, function(a) return a:mean(nil, true) end, { rnd { 2, 3 } } },
    { "amax over dim 2", { "amax" }, function(a) return a:amax(2) end, { rnd { 2, 3, 4 } } },
    { "amin over dims 1, 3, keepdim", { "amin" }, function(a) return a:amin({ 1, 3 }, true) end, { rnd { 2, 3, 4 } } },
    { "var over dims 1, 3", { "var" }, function(a) return a:var({ 1, 3 }) end, { rnd { 2, 3, 4 } } },
    { "var, correction 0, keepdim", { "var" }, function(a) return a:var(2, { correction = 0, keepdim = true }) end,
      { rnd { 2, 3, 4 } } },
    { "max over dim 2 (values)", { "max" }, function(a) return (a:max(2)) end, { rnd { 2, 3, 4 } } },
    { "max over dim -1, keepdim", { "max" }, function(a) return (a:max(-1, true)) end, { rnd { 2, 3, 4 } } },
    { "softmax over dim 2", { "softmax" }, function(a) return a:softmax(2) end, { rnd { 2, 3, 4 } } },
    { "log_softmax over the last dim", { "log_softmax" }, function(a) return a:log_softmax(-1) end, { rnd { 2, 3, 4 } } },
    { "layer_norm over 2 dims, weight and bias", { "layer_norm" },
      function(a, w, b) return kiln.layer_norm(a, { 3, 4 }, w, b) end, { rnd { 2, 3, 4 }, rnd { 3, 4 }, rnd { 3, 4 } } },
    { "layer_norm without affine", { "layer_norm" }, function(a) return kiln.layer_norm(a, 4) end, { rnd { 2, 3, 4 } } },
    { "batch_norm, every input", { "batch_norm" },
      function(a, m, v, w, b) return kiln.batch_norm(a, m, v, w, b) end,
      { rnd { 2, 3, 2, 2 }, rnd { 3 }, rnd({ 3 }, 0.5), rnd { 3 }, rnd { 3 } } },
    { "batch_norm with batch statistics (training)", { "batch_norm", "mean", "var" }, function(a)
      local m, v = a:mean({ 1, 3, 4 }), a:var({ 1, 3, 4 }, { correction = 0 })
      return kiln.batch_norm(a, m, v)
    end, { rnd { 3, 2, 2, 2 } } },
    -- matmul
    { "matmul {2,3,4} @ {4,5}", { "matmul" }, function(a, b) return a:matmul(b) end, { rnd { 2, 3, 4 }, rnd { 4, 5 } } },
    { "matmul {2,2,3,4} @ {4,5} (the weight's gradient as one product over the rows)", { "matmul" },
      function(a, b) return a:matmul(b) end, { rnd { 2, 2, 3, 4 }, rnd { 4, 5 } } },
    { "matmul of a transposed batch {2,4,3}^T @ {4,5}", { "matmul", "transpose" },
      function(a, b) return a:transpose(2, 3):matmul(b) end, { rnd { 2, 4, 3 }, rnd { 4, 5 } } },
    { "matmul {4} @ {2,4,3}", { "matmul" }, function(a, b) return a:matmul(b) end, { rnd { 4 }, rnd { 2, 4, 3 } } },
    { "matmul {3,4} @ {4}", { "matmul" }, function(a, b) return a:matmul(b) end, { rnd { 3, 4 }, rnd { 4 } } },
    { "matmul {4} @ {4}", { "matmul" }, function(a, b) return a:matmul(b) end, { rnd { 4 }, rnd { 4 } } },
    { "matmul, batch broadcast {2,1,3,4} @ {3,4,2}", { "matmul" }, function(a, b) return a:matmul(b) end,
      { rnd { 2, 1, 3, 4 }, rnd { 3, 4, 2 } } },
    { "linear with a transposed weight", { "matmul", "permute", "add" },
      function(x, w, b) return x:matmul(w:t()) + b end, { rnd { 2, 3 }, rnd { 4, 3 }, rnd { 4 } } },
    -- conv2d and pools
    { "conv2d, stride 2, padding 1, bias", { "conv2d" },
      function(x, w, b) return kiln.conv2d(x, w, b, { stride = 2, padding = 1 }) end,
      { rnd { 2, 3, 5, 6 }, rnd { 4, 3, 3, 3 }, rnd { 4 } } },
    { "conv2d, 2 groups, dilation 2, padding {2,1}", { "conv2d" },
      function(x, w) return kiln.conv2d(x, w, nil, { groups = 2, dilation = 2, padding = { 2, 1 } }) end,
      { rnd { 2, 4, 6, 5 }, rnd { 6, 2, 2, 3 } } },
    { "conv2d depthwise, stride {2,1}", { "conv2d" },
      function(x, w) return kiln.conv2d(x, w, nil, { groups = 3, stride = { 2, 1 } }) end,
      { rnd { 1, 3, 5, 5 }, rnd { 3, 1, 3, 3 } } },
    { "conv2d unbatched, padding past the stride", { "conv2d" },
      function(x, w) return kiln.conv2d(x, w, nil, { padding = 3, stride = 3 }) end, { rnd { 2, 4, 4 }, rnd { 3, 2, 2, 2 } } },
    { "max_pool2d 2x2", { "max_pool2d" }, function(x) return kiln.max_pool2d(x, 2) end, { rnd { 2, 3, 4, 6 } } },
    { "max_pool2d 3x3, stride 2, padding 1, ceil_mode", { "max_pool2d" },
      function(x) return kiln.max_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true }) end, { rnd { 1, 2, 6, 7 } } },
    { "max_pool2d unbatched, overlapping", { "max_pool2d" }, function(x) return kiln.max_pool2d(x, 2, { stride = 1 }) end,
      { rnd { 2, 4, 3 } } },
    { "avg_pool2d 2x2", { "avg_pool2d" }, function(x) return kiln.avg_pool2d(x, 2) end, { rnd { 2, 3, 4, 6 } } },
    { "avg_pool2d, padding not counted, ceil_mode", { "avg_pool2d" },
      function(x) return kiln.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false }) end,
      { rnd { 1, 2, 6, 7 } } },
    { "avg_pool2d, padding counted, ceil_mode", { "avg_pool2d" },
      function(x) return kiln.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true }) end, { rnd { 1, 2, 6, 7 } } },
    { "adaptive_avg_pool2d {5,7} -> {3,2}", { "adaptive_avg_pool2d" },
      function(x) return kiln.adaptive_avg_pool2d(x, { 3, 2 }) end, { rnd { 2, 2, 5, 7 } } },
    -- attention
    { "attention", { "scaled_dot_product_attention" },
      function(q, k, v) return kiln.scaled_dot_product_attention(q, k, v) end, { rnd { 2, 3, 4 }, rnd { 2, 5, 4 }, rnd { 2, 5, 3 } } },
    { "attention, causal, scale", { "scaled_dot_product_attention" },
      function(q, k, v) return kiln.scaled_dot_product_attention(q, k, v, { causal = true, scale = 0.3 }) end,
      { rnd { 1, 2, 4, 4 }, rnd { 1, 2, 4, 4 }, rnd { 1, 2, 4, 3 } } },
    { "attention, bool mask", { "scaled_dot_product_attention" },
      function(q, k, v, m) return kiln.scaled_dot_product_attention(q, k, v, { mask = m }) end,
      { rnd { 2, 3, 4 }, rnd { 2, 5, 4 }, rnd { 2, 5, 3 }, mask { { true, false, true, true, false } } } },
    { "attention, additive mask (its gradient too)", { "scaled_dot_product_attention" },
      function(q, k, v, m) return kiln.scaled_dot_product_attention(q, k, v, { mask = m }) end,
      { rnd { 2, 3, 4 }, rnd { 2, 5, 4 }, rnd { 2, 5, 3 }, rnd { 3, 5 } } },
    -- data movement
    { "contiguous of a transpose", { "contiguous", "permute" }, function(x) return x:t():contiguous() end, { rnd { 3, 4 } } },
    { "clone", { "contiguous" }, function(x) return x:clone() * x end, { rnd { 3 } } },
    { "cat of 3 along dim 2", { "cat" }, function(a, b, c) return kiln.cat({ a, b, c }, 2) end,
      { rnd { 2, 1, 3 }, rnd { 2, 2, 3 }, rnd { 2, 3, 3 } } },
    { "cat of 10 (two rounds)", { "cat" }, function(a)
      local l = {}
      for i = 1, 10 do l[i] = a * i end
      return kiln.cat(l, 1)
    end, { rnd { 2, 3 } } },
    { "index_select with a repeated index", { "index_select" }, function(x) return x:index_select(2, idx { 3, 1, 3, 2 }) end,
      { rnd { 2, 3, 2 } } },
    { "embedding rows (index_select on dim 1)", { "index_select", "reshape" }, function(w)
      return w:index_select(1, idx { 2, 2, 1, 3 }):reshape({ 2, 2, 4 })
    end, { rnd { 3, 4 } } },
    { "gather along dim 2, repeated", { "gather" }, function(x) return x:gather(2, idx { { 1, 3 }, { 2, 2 } }) end,
      { rnd { 3, 4 } } },
    { "gather, one index a row (cross-entropy's pick)", { "gather" },
      function(x) return x:gather(2, idx { { 3 }, { 1 }, { 4 } }) end, { rnd { 3, 4 } } },
    { "gather with an index smaller than x", { "gather" }, function(x) return x:gather(1, idx { { { 2 } }, { { 1 } } }) end,
      { rnd { 2, 3, 2 } } },
    { "index_add (x and source)", { "index_add" }, function(x, s) return x:index_add(1, idx { 2, 1, 2 }, s) end,
      { rnd { 3, 4 }, rnd { 3, 4 } } },
    { "tril, diagonal 1", { "tril" }, function(x) return x:tril(1) end, { rnd { 2, 4, 4 } } },
    { "triu, diagonal -1", { "triu" }, function(x) return x:triu(-1) end, { rnd { 4, 3 } } },
    -- views
    { "reshape", { "reshape" }, function(x) return x:reshape({ 4, 6 }) end, { rnd { 2, 3, 4 } } },
    { "reshape of a transpose (a copy)", { "reshape" }, function(x) return x:t():reshape({ 12 }) end, { rnd { 3, 4 } } },
    { "view", { "reshape" }, function(x) return x:view({ 4, 6 }) end, { rnd { 2, 3, 4 } } },
    { "permute", { "permute" }, function(x) return x:permute({ 3, 1, 2 }) end, { rnd { 2, 3, 4 } } },
    { "transpose", { "permute" }, function(x) return x:transpose(1, 3) end, { rnd { 2, 3, 4 } } },
    { "slice with step 2", { "slice" }, function(x) return x:slice(2, 2, -1, 2) end, { rnd { 3, 6 } } },
    { "slice of rows", { "slice" }, function(x) return x:slice(1, 2, 3) end, { rnd { 4, 2 } } },
    { "split, both parts", { "slice" }, function(x)
      local a, b = x:split(2, 2)
      return a * b
    end, { rnd { 3, 4 } } },
    { "expand with a new dim", { "expand" }, function(x) return x:expand({ 2, 3, 4 }) end, { rnd { 3, 1 } } },
    { "unsqueeze, squeeze, flatten", { "reshape" }, function(x) return x:unsqueeze(2):squeeze():flatten() end,
      { rnd { 3, 4 } } },
    -- fused message passing
    { "gather_scatter with weight and base", { "gather_scatter" },
      function(h, w, b) return kiln.gather_scatter(h, idx { 1, 2, 3, 1 }, idx { 2, 2, 1, 3 }, { weight = w, base = b }) end,
      { rnd { 3, 2 }, rnd { 4 }, rnd { 3, 2 } } },
    { "gather_scatter into 4 rows", { "gather_scatter" },
      function(h) return kiln.gather_scatter(h, idx { 1, 2, 3, 1 }, idx { 2, 4, 1, 3 }, { rows = 4 }) end, { rnd { 3, 2 } } },
  }
  cases.set_device = function(d) on.device = d end
  return cases
end
