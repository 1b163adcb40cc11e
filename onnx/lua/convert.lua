-- kiln.onnx: m:to(dtype) on an imported model converts the graph, not only
-- its weights. An exporter bakes the f32 model's numbers into the graph: the
-- scale of the attention scores and the fill value of its mask as f32
-- scalars, Cast nodes to FLOAT, ConstantOfShape values. Left as they are, a
-- bf16 model meets an f32 number at its first mask, and type promotion runs
-- every later matmul, norm and softmax in f32. As onnxconverter-common's
-- float16 conversion does, every floating-point number of the graph follows
-- the module's dtype:
--   - initializers (the module's parameters; nn.Module's :to);
--   - the one-element float initializers and Constant values the loader keeps
--     as numbers of the graph (prepare() in import.lua);
--   - Constant tensors, ConstantOfShape values (and its default, f32 zeros);
--   - the targets of Cast (and of CastLike through its operand).
-- A finite value beyond the new type's range (an f32 model's mask fill of
-- -3.4e38) becomes the type's largest finite value, as
-- torch.finfo(dtype).min is in PyTorch's bf16 model, not an infinity that
-- would make 0 * -inf a NaN. Integer and boolean values never change.
-- Originals are kept, so m:to("f32") afterwards gives back the exported model.
local kiln = ...
local onnx = kiln.onnx
local S = onnx._shared
local FLOAT, ONNX_TYPES, ONNX_TYPE_NAMES, is_tensor = S.FLOAT, S.ONNX_TYPES, S.ONNX_TYPE_NAMES, S.is_tensor

local CODE_OF = {}
for code, name in pairs(ONNX_TYPES) do CODE_OF[name] = code end

-- The largest finite value of each float type.
local FINITE_MAX = { bf16 = 3.3895313892515355e38, f16 = 65504.0, f32 = 3.4028234663852886e38, f64 = math.huge }

local function clamp_number(v, dtype)
  local hi = FINITE_MAX[dtype]
  if v ~= v or v == math.huge or v == -math.huge then return v, false end
  if v > hi then return hi, true end
  if v < -hi then return -hi, true end
  return v, false
end

-- A float tensor in dtype, finite values beyond its range clamped.
local function convert_tensor(t, dtype)
  local hi = FINITE_MAX[dtype]
  if hi ~= math.huge and t.dtype ~= dtype then
    local a = t:to("f64")
    local pos = (a:gt(hi):to("i32") * a:lt(math.huge):to("i32")):ne(0)
    local neg = (a:lt(-hi):to("i32") * a:gt(-math.huge):to("i32")):ne(0)
    if pos:sum():item() + neg:sum():item() > 0 then
      local function limit(v) return kiln.full({}, v, { dtype = "f64", device = a.device }) end
      return kiln.where(neg, limit(-hi), kiln.where(pos, limit(hi), a)):to(dtype), true
    end
  end
  return t:to(dtype), false
end

-- One Constant-like known value {dtype, v}: retyped from its original.
local function convert_known(k, dtype, report, label)
  k.original = k.original or { dtype = k.dtype, v = { table.unpack(k.v) } }
  if not FLOAT[k.original.dtype] then return end
  local clamped = false
  for i, v in ipairs(k.original.v) do
    local c, was = clamp_number(v, dtype)
    k.v[i] = c
    clamped = clamped or was
  end
  if k.dtype ~= dtype or clamped then report.numbers = report.numbers + 1 end
  if clamped then report.clamped[#report.clamped + 1] = label end
  k.dtype = dtype
end

local function node_name(node) return node.name ~= "" and node.name or (node.outputs[1] or "?") end

-- The value attribute of a Constant or ConstantOfShape node, converted.
local function convert_value_attr(node, dtype, report, what)
  local a = node.attrs
  if type(a.value) == "table" and a.value.unsupported then
    error(string.format("%s: node '%s' (%s): its value has type %s, which cannot convert to %s",
      onnx._convert_file or "?", node_name(node), node.op, a.value.unsupported, dtype), 0)
  end
  node.original_value = node.original_value or a.value
  local v = node.original_value
  if not (is_tensor(v) and FLOAT[v.dtype]) then return end
  local clamped
  a.value, clamped = convert_tensor(v, dtype)
  if v.dtype ~= dtype or clamped then report[what] = report[what] + 1 end
  if clamped then report.clamped[#report.clamped + 1] = string.format("node '%s' (%s)", node_name(node), node.op) end
end

-- The Constant forms with float lists (value_float, value_floats) are
-- numbers of the graph: known values of the new dtype.
local function convert_constant(node, dtype, report)
  local a = node.attrs
  if node.known_value then
    convert_known(node.known_value, dtype, report, string.format("node '%s' (Constant)", node_name(node)))
  elseif a.value_float or a.value_floats then
    local v = a.value_floats or { a.value_float }
    node.known_value = S.known("f32", a.value_floats and { #v } or {}, { table.unpack(v) })
    convert_known(node.known_value, dtype, report, string.format("node '%s' (Constant)", node_name(node)))
  else
    convert_value_attr(node, dtype, report, "constants")
  end
end

local function convert_cast(node, dtype, report)
  local to = node.attrs.to
  if type(to) == "string" then to = CODE_OF[({ FLOAT = "f32", DOUBLE = "f64", FLOAT16 = "f16", BFLOAT16 = "bf16" })[to:upper()] or ""] or to end
  if node.original_to == nil then node.original_to = to end
  local name = ONNX_TYPES[node.original_to]
  if node.original_to == 8 then
    error(string.format("%s: node '%s' (Cast): a cast to %s cannot convert to %s", onnx._convert_file or "?",
      node_name(node), ONNX_TYPE_NAMES[8], dtype), 0)
  end
  if name and FLOAT[name] then
    if name ~= dtype then report.casts = report.casts + 1 end
    node.attrs.to = CODE_OF[dtype]
  end
end

-- Ops that take integers only: a float reaching one after conversion (from a
-- Cast that was to an integer type before, say) is a model kiln cannot convert.
local INTEGER_ONLY = { BitShift = true, BitwiseAnd = true, BitwiseOr = true, BitwiseXor = true, BitwiseNot = true }

local function convert_graph(g, dtype, report)
  for name, k in pairs(g.known_inits or {}) do convert_known(k, dtype, report, "initializer '" .. name .. "'") end
  local made_float = {}
  for _, node in ipairs(g.nodes) do
    if INTEGER_ONLY[node.op] then
      for _, name in ipairs(node.inputs) do
        if made_float[name] then
          error(string.format("%s: node '%s' (%s) takes integers, and its input '%s' is %s after conversion",
            onnx._convert_file or "?", node_name(node), node.op, name, dtype), 0)
        end
      end
    end
    if node.op == "Constant" then
      convert_constant(node, dtype, report)
    elseif node.op == "ConstantOfShape" then
      if node.attrs.value == nil then node.float_default = dtype end
      convert_value_attr(node, dtype, report, "constant_of_shape")
    elseif node.op == "Cast" then
      convert_cast(node, dtype, report)
      if FLOAT[ONNX_TYPES[node.attrs.to] or ""] then made_float[node.outputs[1]] = true end
    end
    for _, sub in pairs(node.attrs) do
      if type(sub) == "table" and sub.nodes and sub.initializers then convert_graph(sub, dtype, report) end
    end
  end
end

-- Clamps the float parameters whose finite values lie beyond dtype's range
-- (a baked mask of -3.4e38), before nn.Module's :to rounds them to infinity.
local function clamp_params(params, dtype, report)
  if FINITE_MAX[dtype] == math.huge then return end
  for name, t in pairs(params) do
    if FLOAT[t.dtype] and t.dtype ~= dtype then
      local c, clamped = convert_tensor(t, dtype)
      if clamped then
        params[name] = c:to(t.dtype) -- the base :to converts it, exactly now
        report.clamped[#report.clamped + 1] = "initializer '" .. name .. "'"
      end
    end
  end
end

-- Converts model (an OnnxModel) to float dtype: its graph's numbers here,
-- its parameters clamped for the base :to. Returns what changed.
function onnx.convert_floats(m, dtype)
  local report = { numbers = 0, constants = 0, constant_of_shape = 0, casts = 0, clamped = {}, dtype = dtype }
  onnx._convert_file = m._model.path
  local ok, err = pcall(function()
    clamp_params(m.params, dtype, report)
    for _, held in ipairs(m.branch_params) do clamp_params(held, dtype, report) end
    convert_graph(m._model.graph, dtype, report)
  end)
  onnx._convert_file = nil
  if not ok then error(err, 0) end
  return report
end

-- The KILN_LOGS=onnx lines of a conversion.
function onnx.conversion_lines(path, report, initializers)
  local lines = { string.format("onnx: %s converted to %s: %d float initializers, %d numbers of the graph "
    .. "(scalar initializers and Constants), %d Constant tensors, %d ConstantOfShape values, %d Cast targets",
    path, report.dtype, initializers, report.numbers, report.constants, report.constant_of_shape, report.casts) }
  local seen = {}
  for _, what in ipairs(report.clamped) do
    if seen[what] then goto next end
    seen[what] = true
    lines[#lines + 1] = string.format("onnx:   %s: values beyond %s's range clamped to its largest finite value",
      what, report.dtype)
    ::next::
  end
  return lines
end
