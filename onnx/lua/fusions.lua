-- kiln.onnx fusions: exporters write some ops as chains of smaller ONNX ops:
-- GELU as Div, Erf, Add, Mul, Mul (its tanh form as Mul, Pow, Mul, Add,
-- Mul, Tanh, Add, Mul); LayerNorm before opset 17 as ReduceMean,
-- Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add; Linear on a batch of rows
-- as Reshape, Gemm, Reshape. Interpreted node by node, such a chain becomes
-- the same chain of kiln ops, which compiles to other kernels than the one
-- op a Lua model calls: the erf GELU's input has two readers, so fusion
-- stores it and runs the chain as a second kernel; the layer norm's
-- statistics become reductions of their own; the reshapes are views fusion
-- does not cross. Before the first call, onnx.fuse_patterns(graph) replaces
-- each chain by one node that computes what it computes (as ONNX Runtime's
-- graph fusions do), so eager and compiled both run the ops the Lua model
-- runs. The new node keeps the name of the chain's last node (the Gemm's for
-- a Linear) and lists the chain's in fused_from. A chain whose intermediates
-- are read elsewhere, or whose constants are not the expected ones, is left
-- as it is.
local kiln = ...
local onnx = kiln.onnx

local FLOAT_DTYPES = { f32 = true, f64 = true, bf16 = true, f16 = true }

-- One number from a Constant node or a one-element initializer, else nil.
local function constant_value(g, producers, name)
  local t = g.initializers[name]
  local p = producers[name]
  if not t and p and p.op == "Constant" then t = p.attrs.value end
  if type(t) ~= "userdata" or t:numel() ~= 1 or t.dtype == "bool" then return nil end
  return t:reshape({}):to("f64"):item()
end

local function near(a, b, tol) return a ~= nil and math.abs(a - b) <= (tol or 1e-4) * math.max(1, math.abs(b)) end

-- A list of ints from a Constant node, an initializer or an ints attribute.
local function int_list(g, producers, name)
  local t = g.initializers[name]
  local p = producers[name]
  if not t and p and p.op == "Constant" then t = p.attrs.value end
  if type(t) ~= "userdata" or (t.dtype ~= "i64" and t.dtype ~= "i32") then return nil end
  local v = t:dim() == 0 and { t:item() } or t:tolist()
  return v
end

-- For a commutative node: the other input than `name`, or nil.
local function other(n, name)
  if n.inputs[1] == name then return n.inputs[2] end
  if n.inputs[2] == name then return n.inputs[1] end
  return nil
end

-- What the matchers look up in graph g: the node producing each name, how
-- often each name is read (a graph output or a name an If branch reads
-- counts as read outside any chain), and lookups over those.
local function index_graph(g)
  local producers, readers = {}, {}
  for _, n in ipairs(g.nodes) do
    for _, o in ipairs(n.outputs) do if o ~= "" then producers[o] = n end end
    for _, i in ipairs(n.inputs) do
      if i ~= "" then readers[i] = (readers[i] or 0) + 1 end
    end
  end
  for _, o in ipairs(g.outputs) do readers[o.name] = (readers[o.name] or 0) + 100 end
  -- a name an If branch reads (at any depth) is read outside any chain here
  local function branch_reads(sub)
    for _, n in ipairs(sub.nodes) do
      for _, i in ipairs(n.inputs) do if i ~= "" then readers[i] = (readers[i] or 0) + 100 end end
      for _, a in pairs(n.attrs) do
        if type(a) == "table" and a.nodes and a.initializers then branch_reads(a) end
      end
    end
    for _, o in ipairs(sub.outputs) do readers[o.name] = (readers[o.name] or 0) + 100 end
  end
  for _, n in ipairs(g.nodes) do
    for _, a in pairs(n.attrs) do
      if type(a) == "table" and a.nodes and a.initializers then branch_reads(a) end
    end
  end
  local function op_of(name, op)
    local p = producers[name]
    if p and p.op == op and (p.domain == "" or p.domain == "ai.onnx") then return p end
    return nil
  end
  -- whether `name` feeds only the chain (read `uses` times, not a graph output)
  local function private(name, uses) return readers[name] == (uses or 1) end
  -- the one reader of `name` with op `op`
  local function reader(name, op)
    for _, n in ipairs(g.nodes) do
      if n.op == op then
        for _, i in ipairs(n.inputs) do if i == name then return n end end
      end
    end
    return nil
  end
  return { g = g, producers = producers, readers = readers, op_of = op_of, private = private, reader = reader }
end

-- The end of 0.5 * x * plus (plus: the Add node computing 1 + f), the
-- factors in any of the orders the exporters write: (x * plus) * 0.5,
-- x * (0.5 * plus) or (x * 0.5) * plus. Returns the last Mul, the Mul that
-- reads plus and the (x * 0.5) Mul of the third order, or nil.
local function times_half_x(ix, x, plus)
  local g, producers, op_of, private, reader = ix.g, ix.producers, ix.op_of, ix.private, ix.reader
  local m1 = reader(plus.outputs[1], "Mul")
  if not m1 then return nil end
  local o = other(m1, plus.outputs[1])
  if o == x and private(m1.outputs[1]) then -- (x * (1 + f)) * 0.5
    local m2 = reader(m1.outputs[1], "Mul")
    if m2 and near(constant_value(g, producers, other(m2, m1.outputs[1])), 0.5) then return m2, m1 end
  elseif near(constant_value(g, producers, o), 0.5) and private(m1.outputs[1]) then -- x * (0.5 * (1 + f))
    local m2 = reader(m1.outputs[1], "Mul")
    if m2 and other(m2, m1.outputs[1]) == x then return m2, m1 end
  else -- (x * 0.5) * (1 + f)
    local half = op_of(o, "Mul")
    if half and other(half, x) and near(constant_value(g, producers, other(half, x)), 0.5) and private(o) then
      return m1, m1, half
    end
  end
  return nil
end

-- GELU: 0.5 * x * (1 + erf(x / sqrt(2))), the factors in any order (the
-- TorchScript exporter: (x * (1 + erf)) * 0.5; onnxscript's torch_lib:
-- x * (0.5 * (1 + erf))). Appends a Gelu rewrite per chain to rewrites.
local function match_gelu(ix, rewrites)
  local g, producers, op_of, private, reader = ix.g, ix.producers, ix.op_of, ix.private, ix.reader
  for _, erf in ipairs(g.nodes) do
    if erf.op == "Erf" then
      local scale = op_of(erf.inputs[1], "Div") or op_of(erf.inputs[1], "Mul")
      local x = scale and scale.inputs[1]
      local c = scale and constant_value(g, producers, scale.inputs[2])
      if scale and scale.op == "Mul" and not c then
        x, c = scale.inputs[2], constant_value(g, producers, scale.inputs[1])
      end
      local ok = scale and private(scale.outputs[1]) and private(erf.outputs[1]) and
        (scale.op == "Div" and near(c, math.sqrt(2)) or scale.op == "Mul" and near(c, 1 / math.sqrt(2)))
      local plus = ok and reader(erf.outputs[1], "Add")
      ok = plus and near(constant_value(g, producers, other(plus, erf.outputs[1])), 1) and private(plus.outputs[1])
      local last, m1, half
      if ok then last, m1, half = times_half_x(ix, x, plus) end
      if last then
        local chain = { scale, erf, plus, m1 }
        if half then chain[#chain + 1] = half end
        if last ~= m1 then chain[#chain + 1] = last end
        rewrites[#rewrites + 1] = { chain = chain, node = { op = "Gelu", domain = "", inputs = { x },
          outputs = { last.outputs[1] }, attrs = {} } }
      end
    end
  end
end

-- GELU with the tanh approximation (GPT-2's gelu_new, PyTorch's
-- gelu(approximate = "tanh")): 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x +
-- 0.044715 * x^3))), x^3 as Pow(x, 3) or x * x * x, the outer factors in
-- any of the orders match_gelu takes. Becomes Gelu(approximate = "tanh"),
-- one kiln op that cuBLASLt's GELU epilogue can run after a matmul.
local function match_gelu_tanh(ix, rewrites)
  local g, producers, op_of, private, reader = ix.g, ix.producers, ix.op_of, ix.private, ix.reader
  local function const(name) return constant_value(g, producers, name) end
  -- the Mul node n's operand other than a constant near c, or nil
  local function times_const(n, c)
    if not n or n.op ~= "Mul" then return nil end
    if near(const(n.inputs[2]), c) then return n.inputs[1] end
    if near(const(n.inputs[1]), c) then return n.inputs[2] end
    return nil
  end
  -- the nodes computing x^3 from the value cube (Pow(x, 3) or (x * x) * x), and x
  local function cube_of(name)
    local pw = op_of(name, "Pow")
    if pw and near(const(pw.inputs[2]), 3) then return { pw }, pw.inputs[1] end
    local m = op_of(name, "Mul")
    if not m then return nil end
    for k = 1, 2 do
      local sq = op_of(m.inputs[k], "Mul")
      local x = m.inputs[3 - k]
      if sq and sq.inputs[1] == x and sq.inputs[2] == x and private(sq.outputs[1]) then return { m, sq }, x end
    end
    return nil
  end
  for _, th in ipairs(g.nodes) do
    if th.op == "Tanh" and private(th.outputs[1]) then
      local sc = op_of(th.inputs[1], "Mul")
      local sum_name = times_const(sc, math.sqrt(2 / math.pi))
      local sum = sum_name and private(sc.outputs[1]) and op_of(sum_name, "Add")
      local x, cube_nodes, kmul
      if sum and private(sum.outputs[1]) then
        for k = 1, 2 do
          local m = op_of(sum.inputs[k], "Mul")
          local cube = times_const(m, 0.044715)
          if cube and private(m.outputs[1]) and private(cube) then
            local nodes, cx = cube_of(cube)
            if nodes and cx == sum.inputs[3 - k] then x, cube_nodes, kmul = cx, nodes, m end
          end
        end
      end
      local plus = x and reader(th.outputs[1], "Add")
      local ok = plus and near(const(other(plus, th.outputs[1])), 1) and private(plus.outputs[1])
      local last, m1, half
      if ok then last, m1, half = times_half_x(ix, x, plus) end
      if last then
        local chain = { sc, sum, kmul, th, plus, m1 }
        for _, n in ipairs(cube_nodes) do chain[#chain + 1] = n end
        if half then chain[#chain + 1] = half end
        if last ~= m1 then chain[#chain + 1] = last end
        rewrites[#rewrites + 1] = { chain = chain, node = { op = "Gelu", domain = "", inputs = { x },
          outputs = { last.outputs[1] }, attrs = { approximate = "tanh" } } }
      end
    end
  end
end

-- LayerNorm: (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* w] [+ b]
-- over trailing axes given as negative numbers (the exporter's -k..-1).
-- Appends a LayerNormalization rewrite per chain to rewrites.
local function match_layer_norm(ix, rewrites)
  local g, producers, private, reader = ix.g, ix.producers, ix.private, ix.reader
  local function axes_of(n)
    if n.attrs.axes then return n.attrs.axes end
    if n.inputs[2] and n.inputs[2] ~= "" then return int_list(g, producers, n.inputs[2]) end
    return nil
  end
  local function trailing(axes)
    if not axes or #axes == 0 then return false end
    local s = {}
    for k, a in ipairs(axes) do s[k] = a end
    table.sort(s)
    for k, a in ipairs(s) do if a ~= k - 1 - #s then return false end end
    return true
  end
  for _, m in ipairs(g.nodes) do
    if m.op == "ReduceMean" and (m.attrs.keepdims or 1) ~= 0 and trailing(axes_of(m)) then
      local x = m.inputs[1]
      local sub = reader(m.outputs[1], "Sub")
      local ok = sub and sub.inputs[1] == x and sub.inputs[2] == m.outputs[1] and private(m.outputs[1])
      local sq = ok and (reader(sub.outputs[1], "Pow") or reader(sub.outputs[1], "Mul"))
      ok = sq and (sq.op == "Pow" and sq.inputs[1] == sub.outputs[1] and near(constant_value(g, producers, sq.inputs[2]), 2)
        or sq.op == "Mul" and sq.inputs[1] == sub.outputs[1] and sq.inputs[2] == sub.outputs[1])
      -- the centred values are read by the square (once or twice) and the division only
      ok = ok and private(sub.outputs[1], sq.op == "Mul" and 3 or 2)
      local var = ok and private(sq.outputs[1]) and reader(sq.outputs[1], "ReduceMean")
      ok = var and (var.attrs.keepdims or 1) ~= 0
      if ok then -- the same axes
        local a1, a2 = axes_of(m), axes_of(var)
        ok = a2 and #a1 == #a2
        for k = 1, ok and #a1 or 0 do if a1[k] ~= a2[k] then ok = false end end
      end
      local add = ok and private(var.outputs[1]) and reader(var.outputs[1], "Add")
      local eps = add and constant_value(g, producers, other(add, var.outputs[1]))
      local sqrt = eps and eps > 0 and private(add.outputs[1]) and reader(add.outputs[1], "Sqrt")
      local div = sqrt and private(sqrt.outputs[1]) and reader(sqrt.outputs[1], "Div")
      if div and div.inputs[1] == sub.outputs[1] and div.inputs[2] == sqrt.outputs[1] then
        local chain = { m, sub, sq, var, add, sqrt, div }
        local last, inputs = div, { x }
        -- a scale and a bias that are initializers over the normalized dims only
        local function param(n, name)
          local t = g.initializers[other(n, name) or ""]
          if t and t:dim() <= #axes_of(m) and FLOAT_DTYPES[t.dtype] then return other(n, name) end
          return nil
        end
        local mul = private(div.outputs[1]) and reader(div.outputs[1], "Mul")
        local w = mul and param(mul, div.outputs[1])
        local b
        if w then
          chain[#chain + 1] = mul
          last, inputs[2] = mul, w
          local badd = private(mul.outputs[1]) and reader(mul.outputs[1], "Add")
          b = badd and param(badd, mul.outputs[1])
          if b then chain[#chain + 1] = badd; last, inputs[3] = badd, b end
        end
        rewrites[#rewrites + 1] = { chain = chain, node = { op = "LayerNormalization", domain = "", inputs = inputs,
          outputs = { last.outputs[1] }, attrs = { axis = -#axes_of(m), epsilon = eps }, unscaled = not w } }
      end
    end
  end
end

-- Linear on a batch of rows as addmm: Reshape(x, {-1, K}) -> Gemm ->
-- Reshape(y, {..., N}). Its views between the matmul, the bias add and
-- the next op keep fusion from joining them; the node that replaces it
-- does x:matmul(w^T) + b on x as it is, as a Lua Linear does, where the
-- shapes say that is the same, and the three ops otherwise. Appends a
-- rewrite per chain to rewrites.
local function match_linear_rows(ix, rewrites)
  local g, op_of, private, reader = ix.g, ix.op_of, ix.private, ix.reader
  for _, gemm in ipairs(g.nodes) do
    if gemm.op == "Gemm" and (gemm.attrs.transA or 0) == 0 and (gemm.attrs.alpha or 1) == 1
      and (gemm.attrs.beta or 1) == 1 then
      local r1 = op_of(gemm.inputs[1], "Reshape")
      local r2 = r1 and private(gemm.inputs[1]) and private(gemm.outputs[1]) and reader(gemm.outputs[1], "Reshape")
      if r2 and r2.inputs[1] == gemm.outputs[1] and r1.inputs[2] and r2.inputs[2] then
        -- the reshapes' allowzero rides along for the general path (the
        -- dynamo exporter sets it to 1; it matters only for a 0 in a shape)
        local attrs = { reshape_allowzero = { r1.attrs.allowzero or 0, r2.attrs.allowzero or 0 } }
        for k, v in pairs(gemm.attrs) do attrs[k] = v end
        rewrites[#rewrites + 1] = { chain = { r1, gemm, r2 }, node = { op = "Gemm", domain = "",
          inputs = { r1.inputs[1], r1.inputs[2], gemm.inputs[2], gemm.inputs[3] or "", r2.inputs[2] },
          outputs = { r2.outputs[1] }, attrs = attrs, impl = onnx.linear_rows, name = gemm.name } }
      end
    end
  end
end

-- Linear on rows that were transposed first: MatMul(Transpose(x), W)
-- (+ bias), the Transpose keeping the last dim, W and the bias
-- initializers. nn.MultiheadAttention's in_proj reads its batch-first
-- input as {T, B, E}; the rows of a matmul can be permuted after it as
-- well as before, so the matmul runs on x's contiguous rows, one GEMM
-- with its bias as the epilogue, and its result is the transposed view.
-- (Before, 8 GEMMs of 197 strided rows: ViT-B's f32 in_proj took 179 us
-- at 61% of the GPU's roof, against 73% for its MLP's GEMMs.) Appends a
-- rewrite per chain to rewrites.
local function match_transposed_linear(ix, rewrites)
  local g, op_of, private, reader = ix.g, ix.op_of, ix.private, ix.reader
  for _, mm in ipairs(g.nodes) do
    local tr = mm.op == "MatMul" and op_of(mm.inputs[1], "Transpose")
    local perm = tr and tr.attrs.perm
    local w = tr and g.initializers[mm.inputs[2]]
    if perm and #perm >= 2 and perm[#perm] == #perm - 1 and private(mm.inputs[1]) and w and w:dim() == 2 then
      local chain, last, bias = { tr, mm }, mm, ""
      local add = private(mm.outputs[1]) and reader(mm.outputs[1], "Add")
      local b = add and other(add, mm.outputs[1])
      local bt = b and g.initializers[b]
      if bt and bt:dim() == 1 then chain[3], last, bias = add, add, b end
      rewrites[#rewrites + 1] = { chain = chain, node = { op = "MatMul", domain = "",
        inputs = { tr.inputs[1], mm.inputs[2], bias }, outputs = { last.outputs[1] },
        attrs = { perm = perm }, impl = onnx.transposed_linear, name = mm.name } }
    end
  end
end

-- The chains graph g holds (not those in its If branches), as rewrites
-- { chain = the nodes, node = the one node replacing them }, in the order
-- fuse_patterns claims them: GELUs, layer norms, then Linears on rows.
local function match(g)
  local ix = index_graph(g)
  local readers = ix.readers
  local rewrites = {}

  -- LayerNormalization's Mean and InvStdDev outputs that nothing reads
  -- (an exporter's native_layer_norm names them anyway) are dropped, so the
  -- node is kiln's layer_norm, not the composed normalization that keeps them
  for _, n in ipairs(g.nodes) do
    if n.op == "LayerNormalization" then
      for k = 2, #n.outputs do
        if n.outputs[k] ~= "" and not readers[n.outputs[k]] then n.outputs[k] = "" end
      end
    end
  end

  match_gelu(ix, rewrites)
  match_gelu_tanh(ix, rewrites)
  match_layer_norm(ix, rewrites)
  match_linear_rows(ix, rewrites)
  match_transposed_linear(ix, rewrites)
  return rewrites
end

-- The values of a shape operand (a known value or a tensor).
local function shape_values(v)
  if type(v) == "table" and v.known then return v.v end
  if type(v) == "userdata" then return v:dim() == 0 and { v:item() } or v:tolist() end
  return nil
end

-- The node of Reshape -> Gemm -> Reshape: inputs x, shape1, W, C, shape2.
function onnx.linear_rows(i, a)
  local x, s1, w, bias, s2 = i[1], i[2], i[3], i[4], i[5]
  local direct = type(x) == "userdata" and x:dim() >= 3 and type(w) == "userdata" and w:dim() == 2
    and (bias == nil or type(bias) == "userdata" and bias:dim() <= 1)
  if direct then
    local xs, t1, t2 = x:shape(), shape_values(s1), shape_values(s2)
    local wt = (a.transB or 0) ~= 0 and w:transpose(1, 2) or w
    -- Reshape(x, {-1 or rows, K}) then Reshape(y, {lead..., N}) is x
    -- viewed as {lead..., K} times W: x itself where lead is its own
    -- leading dims, else x's rows split as the output splits them (GPT-2's
    -- attention c_proj reads the heads {B, T, H, D} as {B*T, H*D} and
    -- writes {B, T, N}), so the matmul runs on the rows as they are and its
    -- epilogue can take what follows. A 0 in a target shape means "this
    -- dim of the input" or a real 0 (allowzero): neither is taken here.
    local k = t1 and #t1 == 2 and t1[2]
    local ok = k and t2 and #t2 >= 3 and k > 0 and wt:shape()[1] == k and (t2[#t2] == wt:shape()[2] or t2[#t2] == -1)
    local lead, rows, own = {}, 1, ok and #t2 == #xs and xs[#xs] == k
    for d = 1, ok and #t2 - 1 or 0 do
      ok = ok and t2[d] > 0
      lead[d], rows = t2[d], rows * t2[d]
      own = own and t2[d] == xs[d]
    end
    ok = ok and (t1[1] == -1 or t1[1] == rows) and x:numel() == rows * k
    if ok then
      lead[#lead + 1] = k
      local y = (own and x or x:reshape(lead)):matmul(wt)
      if bias then y = y + bias end
      return y
    end
  end
  local ops = onnx.ops
  local az = a.reshape_allowzero or { 0, 0 }
  local gemm_attrs = {}
  for k, v in pairs(a) do if k ~= "reshape_allowzero" then gemm_attrs[k] = v end end
  local y = ops.Gemm({ ops.Reshape({ x, s1 }, { allowzero = az[1] }), w, bias }, gemm_attrs)
  return ops.Reshape({ y, s2 }, { allowzero = az[2] })
end

-- The node of MatMul(Transpose(x), W) (+ b): inputs x, W, b; attrs.perm
-- the Transpose's. x:matmul(W) (+ b), then the permutation as a view.
function onnx.transposed_linear(i, a)
  local x, w, b = i[1], i[2], i[3]
  local p1 = {}
  for d, v in ipairs(a.perm) do p1[d] = v + 1 end
  if type(x) ~= "userdata" or x:dim() ~= #p1 then
    local y = onnx.ops.MatMul({ onnx.ops.Transpose({ x }, { perm = a.perm }), w }, {})
    if b then y = onnx.ops.Add({ y, b }, {}) end
    return y
  end
  local y = x:matmul(w)
  if b then y = y + b end
  return y:permute(p1)
end

-- Replaces the chains match finds in graph g (and in its If branches) by
-- their one op, in place. Returns how many were replaced.
function onnx.fuse_patterns(g)
  local count = 0
  for _, n in ipairs(g.nodes) do
    for _, a in pairs(n.attrs) do
      if type(a) == "table" and a.nodes and a.initializers then count = count + onnx.fuse_patterns(a) end
    end
  end
  local claimed, at_last = {}, {}
  for _, r in ipairs(match(g)) do
    local free = true
    for _, n in ipairs(r.chain) do if claimed[n] then free = false end end
    if free then
      local names = {}
      for k, n in ipairs(r.chain) do
        claimed[n] = true
        names[k] = n.name ~= "" and n.name or n.outputs[1]
      end
      local last = r.chain[#r.chain]
      r.node.name = r.node.name or (last.name ~= "" and last.name or last.outputs[1])
      r.node.fused_from = names
      at_last[last] = r.node
      count = count + 1
    end
  end
  if count == 0 then return 0 end
  local nodes = {}
  for _, n in ipairs(g.nodes) do
    if at_last[n] then nodes[#nodes + 1] = at_last[n]
    elseif not claimed[n] then nodes[#nodes + 1] = n end
  end
  g.nodes = nodes
  return count
end

-- Causal masks stored as data. An exporter that folds torch.ones(T, T).tril()
-- writes the mask as a bool {T, T} initializer or Constant (all ones before
-- Trilu, tril(ones) itself, or its negation ~tril = triu(ones, 1)); a float
-- mask to add holds 0 and -inf above the diagonal. As data,
-- the attention pass cannot know it is causal, and the fused kernel would
-- read it from memory; rebuilt from kiln.full it is the mask a Lua model
-- makes, which the pass folds into the kernel's causal flag. Returns a
-- function(device [, now]) -> that tensor for such a tensor, else nil (now:
-- the initializer as the module holds it, whose dtype a float mask takes).
function onnx.mask_pattern(t)
  if type(t) ~= "userdata" or t:dim() ~= 2 then return nil end
  local s = t:shape()
  if s[1] ~= s[2] or s[1] < 2 then return nil end
  local n = s[1]
  if FLOAT_DTYPES[t.dtype] then
    -- a float mask to add: 0 on and below the diagonal, -inf above (PyTorch's
    -- generate_square_subsequent_mask), rebuilt as zeros filled with -inf.
    -- Square weights are common: two corners rule them out before any
    -- whole-tensor work (a model's load reads each weight once)
    local function at(r, c) return t:slice(1, r, r):slice(2, c, c):reshape({}):to("f64"):item() end
    if at(1, n) ~= -math.huge or at(n, 1) ~= 0 then return nil end
    local cpu = t:to("cpu")
    local neg = cpu:eq(-math.huge)
    local above = kiln.ones({ n, n }, { dtype = "i32", device = "cpu" }):triu(1)
    if (neg:to("i32") - above):abs():sum():item() ~= 0 or cpu:masked_fill(neg, 0):abs():sum():item() ~= 0 then
      return nil
    end
    -- now: the initializer as the module holds it (:to may have converted it)
    return function(device, now)
      local upper = kiln.full({ n, n }, true, { dtype = "bool", device = device }):triu(1)
      return kiln.zeros({ n, n }, { dtype = (now or t).dtype, device = device }):masked_fill(upper, -math.huge)
    end
  end
  if t.dtype ~= "bool" then return nil end
  local cpu = t:to("cpu"):to("i32")
  local ones = kiln.ones({ n, n }, { dtype = "i32", device = "cpu" })
  local function same(ref) return (cpu - ref):abs():sum():item() == 0 end
  local kinds = {
    { same(ones), function(full) return full end },
    { same(ones:tril()), function(full) return full:tril() end },
    { same(ones:triu(1)), function(full) return full:triu(1) end },
  }
  for _, k in ipairs(kinds) do
    if k[1] then
      local build = k[2]
      return function(device) return build(kiln.full({ n, n }, true, { dtype = "bool", device = device })) end
    end
  end
  return nil
end
