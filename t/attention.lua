-- t/attention.lua: kiln.scaled_dot_product_attention on the CPU against a
-- float64 reference composed from kiln's eager f64 ops (matmul, softmax,
-- masked_fill) on fresh random inputs; its errors; and the attention pass:
-- which chains become one attention kernel, what KILN_LOGS=fusion says about
-- those that do not, and compiled against eager for the transformer sample.
-- This is the CPU side (the reference kernel, the pass on CPU plans): on a
-- machine with a GPU, run it again with the CUDA backend off.
local T = dofile("t/lib/tap.lua")
T.cpu_only("t/attention.lua")
local sdpa = kiln.scaled_dot_product_attention

local seed0 = os.time() % 100000
local seed = seed0
local function nextseed()
  seed = seed + 1
  return seed
end
T.diag("seeds from " .. seed0)

local function randn(shape, dt) return kiln.randn(shape, { seed = nextseed(), dtype = dt or "f32" }) end

-- The reference: the unfused softmax(q k^T * scale [+ m | masked]) v in f64,
-- from inputs already rounded to the tested dtype (so only the op's own
-- rounding of the result separates the two).
local function reference(q, k, v, opts)
  opts = opts or {}
  local q64, k64, v64 = q:cast("f64"), k:cast("f64"), v:cast("f64")
  local d = q:shape()[#q:shape()]
  local s = q64:matmul(k64:transpose(-2, -1)) * (opts.scale or 1 / math.sqrt(d))
  local ss = s:shape()
  local tq, tk = ss[#ss - 1], ss[#ss]
  if opts.causal then
    local keep = kiln.ones({ tq, tk }, { dtype = "bool" }):tril()
    s = s:masked_fill(keep:logical_not(), -math.huge)
  end
  if opts.mask then
    if opts.mask.dtype == "bool" then s = s:masked_fill(opts.mask:logical_not(), -math.huge)
    else s = s + opts.mask:cast("f64") end
  end
  return s:softmax(-1):matmul(v64)
end

-- Largest |a - b| relative to max(1, |b|); NaN anywhere in a but not in b
-- (or the reverse) counts as infinite.
local function relerr(a, b)
  a, b = a:cast("f64"), b:cast("f64")
  local d = ((a - b):abs() / (b:abs() + 1)):amax():item()
  if d ~= d then return math.huge end
  return d
end

local function isnan(t) return t:cast("f64"):ne(t:cast("f64")) end
local function count(b) return b:cast("f64"):sum():item() end

-- one rounding of the result: at most half an ulp, relative to max(1, |x|)
local tol = { f64 = 1e-12, f32 = 1e-6, bf16 = 4e-3, f16 = 5e-4 }

-- ---------------------------------------------------------------------------
-- the op against the f64 reference

local cases = {
  { tq = 1, tk = 1, d = 32 }, { tq = 7, tk = 7, d = 64 }, { tq = 7, tk = 255, d = 80 },
  { tq = 255, tk = 7, d = 32 }, { tq = 255, tk = 255, d = 64 }, { tq = 7, tk = 13, d = 80 },
}
for _, dt in ipairs({ "f32", "bf16", "f16", "f64" }) do
  for ci, c in ipairs(cases) do
    local big = c.tq * c.tk > 10000
    local B, H = 2, big and 1 or 3
    local q, k, v = randn({ B, H, c.tq, c.d }, dt), randn({ B, H, c.tk, c.d }, dt), randn({ B, H, c.tk, c.d }, dt)
    local variants = {
      { name = "plain" },
      { name = "causal", causal = true },
      { name = "scale 0.3", scale = 0.3 },
      { name = "bool mask", mask = kiln.rand({ c.tq, c.tk }, { seed = nextseed() }):gt(0.3) },
      { name = "additive mask", mask = randn({ B, 1, c.tq, c.tk }, dt) },
      { name = "causal + bool mask {B,H,Tq,Tk}", causal = true,
        mask = kiln.rand({ B, H, c.tq, c.tk }, { seed = nextseed() }):gt(0.2) },
    }
    if big and ci ~= 5 then variants = { variants[1], variants[2] } end
    for _, var in ipairs(variants) do
      local opts = { causal = var.causal, scale = var.scale, mask = var.mask }
      local got = sdpa(q, k, v, opts)
      local want = reference(q, k, v, opts)
      T.ok(got.dtype == dt and table.concat(got:shape(), ",") == table.concat({ B, H, c.tq, c.d }, ","),
        "result keeps q's dtype and has shape [..., Tq, dv]")
      local any_masked = var.mask and var.mask.dtype == "bool"
      if any_masked then
        -- a row with every key masked is NaN in both: compare elsewhere, and check the NaN rows match
        local gn, wn = isnan(got), isnan(want)
        T.ok((gn:cast("f64") - wn:cast("f64")):abs():sum():item() == 0,
          string.format("%s Tq=%d Tk=%d d=%d %s: NaN exactly in the fully masked rows", dt, c.tq, c.tk, c.d, var.name))
        got, want = got:cast("f64"):masked_fill(wn, 0), want:masked_fill(wn, 0)
      end
      local e = relerr(got, want)
      T.ok(e <= tol[dt], string.format("%s B=%d H=%d Tq=%d Tk=%d d=%d %s: error %.3g <= %g", dt, B, H, c.tq, c.tk,
        c.d, var.name, e, tol[dt]))
    end
  end
end

-- dv differs from d; views as inputs (heads transposed out of [B, T, H, d]); strided mask
do
  local B, Tn, H, d = 2, 9, 4, 16
  local x = randn({ B, Tn, 3 * H * d })
  local q = x:slice(3, 1, H * d):reshape({ B, Tn, H, d }):transpose(2, 3)
  local k = x:slice(3, H * d + 1, 2 * H * d):reshape({ B, Tn, H, d }):transpose(2, 3)
  local v = randn({ B, Tn, H, 2 * d }):transpose(2, 3)
  local m = (kiln.rand({ Tn, Tn }, { seed = nextseed() }):gt(0.2)):transpose(1, 2)
  for _, opts in ipairs({ {}, { causal = true }, { mask = m } }) do
    local got = sdpa(q, k, v, opts)
    local want = reference(q:contiguous(), k:contiguous(), v:contiguous(), { causal = opts.causal, mask = opts.mask and opts.mask:contiguous() })
    local nan = isnan(want)
    local e = relerr(got:cast("f64"):masked_fill(nan, 0), want:masked_fill(nan, 0))
    T.ok(e <= 2e-6 and table.concat(got:shape(), ",") == table.concat({ B, H, Tn, 2 * d }, ","),
      string.format("views (transposed heads, a slice, a transposed mask) as inputs, dv = 2d: error %.3g", e))
  end
end

-- a row whose every key is masked gives NaN, as the unfused softmax of -inf does
do
  local q, k, v = randn({ 1, 3, 8 }), randn({ 1, 4, 8 }), randn({ 1, 4, 8 })
  local m = kiln.tensor({ { true, true, false, false }, { false, false, false, false }, { true, false, true, true } }, { dtype = "bool" })
  local got = sdpa(q, k, v, { mask = m })
  local eager = q:matmul(k:transpose(-2, -1)):mul(1 / math.sqrt(8)):masked_fill(m:logical_not(), -math.huge):softmax(-1):matmul(v)
  local row2 = got:slice(2, 2, 2)
  T.ok(count(isnan(row2)) == 8, "the fully masked row is NaN")
  T.ok(count(isnan(eager:slice(2, 2, 2))) == 8, "... as the eager softmax chain gives")
  local rest = got:slice(2, 1, 1)
  T.ok(count(isnan(rest)) == 0 and relerr(rest, eager:slice(2, 1, 1)) < 1e-6, "the other rows are finite and match")
end

-- ---------------------------------------------------------------------------
-- errors

do
  local q, k, v = randn({ 2, 3, 5, 8 }), randn({ 2, 3, 6, 8 }), randn({ 2, 3, 6, 4 })
  local function err(...)
    local ok, e = pcall(sdpa, ...)
    return not ok and tostring(e) or "no error"
  end
  local e = err(q, randn({ 2, 3, 6, 7 }), v)
  T.like(e, "scaled_dot_product_attention: k's last dim %(head size%) must equal q's: q {2,3,5,8} %(f32%), k {2,3,6,7} %(f32%), v {2,3,6,4} %(f32%)",
    "mismatched head size: the message names all three shapes and dtypes")
  e = err(q, k, randn({ 2, 3, 5, 4 }))
  T.like(e, "v's second%-to%-last dim %(keys%) must equal k's: q {2,3,5,8} %(f32%), k {2,3,6,8} %(f32%), v {2,3,5,4}",
    "mismatched key count: all three shapes")
  e = err(q, randn({ 2, 4, 6, 8 }), v)
  T.like(e, "leading dim 2 differs: q {2,3,5,8} %(f32%), k {2,4,6,8} %(f32%), v {2,3,6,4} %(f32%)",
    "mismatched heads: all three shapes")
  e = err(q, k:cast("f64"), v)
  T.like(e, "q, k and v must have one dtype: q {2,3,5,8} %(f32%), k {2,3,6,8} %(f64%), v {2,3,6,4} %(f32%)",
    "mismatched dtypes: all three shapes and dtypes")
  e = err(q:cast("i32"), k:cast("i32"), v:cast("i32"))
  T.like(e, "must be float tensors", "integer inputs are refused")
  e = err(q, k, v, { causl = true })
  T.like(e, "^t/attention%.lua:%d+: scaled_dot_product_attention: unknown option 'causl' %(known: causal, scale, mask%); did you mean 'causal'%?$",
    "an unknown option key is an error, at the caller's line")
  e = err(q, k, v, { causal = 1 })
  T.like(e, "causal must be a boolean, got number", "causal must be a boolean")
  e = err(q, k, v, { mask = kiln.ones({ 4, 6 }, { dtype = "bool" }) })
  T.like(e, "mask of shape {4,6} cannot be broadcast to the scores' shape {2,3,5,6}", "a mask that does not broadcast")
  e = err(q, k, v, { mask = randn({ 5, 6 }, "f64") })
  T.like(e, "mask must be bool %(keep where true%) or q's dtype f32", "a float mask of another dtype")
  e = err(q, k, v, { scale = "big" })
  T.like(e, "scale must be a number", "a scale that is not a number")
end

-- ---------------------------------------------------------------------------
-- the attention pass

local function attention_kernels(cm)
  local n, covers = 0, nil
  for _, k in ipairs(cm:kernels()) do
    for _, op in ipairs(k.ops) do
      if op == "scaled_dot_product_attention" then
        n = n + 1
        covers = k.covers
      end
    end
  end
  return n, covers
end

local B, H, Tn, d = 2, 2, 6, 8
local q, k, v = randn({ B, H, Tn, d }), randn({ B, H, Tn, d }), randn({ B, H, Tn, d })
-- a random bool mask that keeps every query's own key, so no row is masked
-- whole (eager's softmax of a row of -inf is NaN, which no comparison passes;
-- a seed that drew such a row failed this test now and then)
local eye = kiln.ones({ Tn, Tn }):tril() * kiln.ones({ Tn, Tn }):triu()
local keep = (kiln.rand({ Tn, Tn }, { seed = nextseed() }) + eye):gt(0.3)
local addm = randn({ Tn, Tn })

-- constant masks (tensors the compiled functions capture), B x 1 x T x T
local above = kiln.ones({ Tn, Tn }, { dtype = "bool" }):triu(1)
local F32_LOWEST = -3.4028234663852886e38
local lowest_above = kiln.zeros({ B, 1, Tn, Tn }):masked_fill(above, F32_LOWEST)
local minus_1e20_above = kiln.zeros({ B, 1, Tn, Tn }):masked_fill(above, -1e20)
-- the real-size GPT-2 export's mask: computed from three bool parameters,
-- where(new_ones and le and eq, 0, lowest), ONNX's And as the importer
-- writes it; fold_once computes it, then causal_masks reads its values
local new_ones = kiln.ones({}, { dtype = "bool" })
local le = kiln.ones({ 1, 1, Tn, Tn }, { dtype = "bool" }):tril()
local eq_all = kiln.ones({ B, 1, Tn, Tn }, { dtype = "bool" })
local eq_one_off = kiln.ones({ B, 1, Tn, Tn }):masked_fill((kiln.arange(0, B * Tn * Tn):reshape({ B, 1, Tn, Tn })):eq(Tn * Tn + 3 * Tn), 0):ne(0)
local function onnx_and(a, b) return (a:to("i32") * b:to("i32")):ne(0) end
local function gpt2_mask(eq) return kiln.where(onnx_and(onnx_and(new_ones, le), eq), 0, F32_LOWEST) end

-- each f is compiled, run and compared with its eager run; want: attention kernels expected
local pass_cases = {
  { "q k^T * c, causal tril mask, softmax, v", 1, function(q, k, v)
    local s = q:matmul(k:transpose(-2, -1)) * 0.35
    local m = kiln.ones({ Tn, Tn }, { dtype = "bool" }):tril()
    return s:masked_fill(m:logical_not(), -math.huge):softmax(-1):matmul(v)
  end, "causal mask folded" },
  { "causal as triu(ones, 1), scale after the mask, / c", 1, function(q, k, v)
    local m = kiln.ones({ Tn, Tn }, { dtype = "bool" }):triu(1)
    return (q:matmul(k:transpose(-2, -1)):masked_fill(m, -math.huge) / 3):softmax(-1):matmul(v)
  end, "causal mask folded" },
  { "causal as an added float mask (zeros filled with -inf above the diagonal)", 1, function(q, k, v)
    local upper = kiln.ones({ Tn, Tn }, { dtype = "bool" }):triu(1)
    local m = kiln.zeros({ Tn, Tn }):masked_fill(upper, -math.huge)
    return (q:matmul(k:transpose(-2, -1)) * 0.35 + m):softmax(-1):matmul(v)
  end, "causal mask folded" },
  { "causal as a constant added mask (GPT-2's exported initializer: 0, and f32's lowest above the diagonal)", 1,
    function(q, k, v)
      return (q:matmul(k:transpose(-2, -1)) * 0.35 + lowest_above):softmax(-1):matmul(v)
    end, "causal mask folded" },
  { "causal computed from bool parameters (the real-size GPT-2 export's where(ones and le and eq, 0, lowest))", 1,
    function(q, k, v)
      return (q:matmul(k:transpose(-2, -1)) * 0.35 + gpt2_mask(eq_all)):softmax(-1):matmul(v)
    end, "causal mask folded" },
  { "the same with one key of batch 2 masked (eq false once): a mask, not the causal attribute", 1, function(q, k, v)
    return (q:matmul(k:transpose(-2, -1)) * 0.35 + gpt2_mask(eq_one_off)):softmax(-1):matmul(v)
  end },
  { "no scale, no mask", 1, function(q, k, v) return q:matmul(k:transpose(-2, -1)):softmax(-1):matmul(v) end },
  { "a bool mask from outside", 1, function(q, k, v)
    return (q:matmul(k:transpose(-2, -1)) * 0.5):masked_fill(keep:logical_not(), -math.huge):softmax(-1):matmul(v)
  end },
  -- (computed once by fold_once, its values are the causal pattern)
  { "a causal mask built with comparisons (arange)", 1, function(q, k, v)
    local i = kiln.arange(0, Tn):reshape({ Tn, 1 })
    local j = kiln.arange(0, Tn):reshape({ 1, Tn })
    return (q:matmul(k:transpose(-2, -1)) * 0.5):masked_fill(j:gt(i), -math.huge):softmax(-1):matmul(v)
  end, "causal mask folded" },
  { "an additive float mask before the scale", 1, function(q, k, v)
    return ((q:matmul(k:transpose(-2, -1)) + addm) * 0.5):softmax(-1):matmul(v)
  end },
  { "an additive float mask after the scale", 1, function(q, k, v)
    return (addm + q:matmul(k:transpose(-2, -1)) * 0.5):softmax(-1):matmul(v)
  end },
  { "q . kt with kt passed in as k viewed transposed (strides)", 1, function(q, k, v, c, kt, ktv)
    return (q:matmul(ktv) * 0.5):softmax(-1):matmul(v)
  end },
  { "k split into heads and transposed twice (merged permutes)", 1, function(q, k, v)
    local kk = k:transpose(2, 3):reshape({ B, Tn, H * d }):reshape({ B, Tn, H, d }):transpose(2, 3)
    return (q:matmul(kk:transpose(-2, -1)) * 0.5):softmax(-1):matmul(v)
  end },
  { "a constant added mask of -1e20 above the diagonal: a mask, not the causal attribute", 1, function(q, k, v)
    return (q:matmul(k:transpose(-2, -1)) * 0.35 + minus_1e20_above):softmax(-1):matmul(v)
  end },
  -- not matched
  { "softmax over another dim", 0, function(q, k, v)
    return (q:matmul(k:transpose(-2, -1)) * 0.5):softmax(-2):matmul(v)
  end },
  { "masked_fill with 0, not -inf", 0, function(q, k, v)
    return (q:matmul(k:transpose(-2, -1)) * 0.5):masked_fill(keep, 0):softmax(-1):matmul(v)
  end },
  { "a negative scale", 0, function(q, k, v)
    return (q:matmul(k:transpose(-2, -1)) * -0.5):softmax(-1):matmul(v)
  end },
  { "a scale that is a tensor", 0, function(q, k, v, c)
    return (q:matmul(k:transpose(-2, -1)) * c):softmax(-1):matmul(v)
  end },
  { "scores used elsewhere", 0, function(q, k, v)
    local s = q:matmul(k:transpose(-2, -1)) * 0.5
    return s:softmax(-1):matmul(v) + s:sum(-1, true)
  end },
  { "probabilities used elsewhere", 0, function(q, k, v)
    local p = (q:matmul(k:transpose(-2, -1)) * 0.5):softmax(-1)
    return p:matmul(v), p
  end },
  { "q . kt with kt a plain [.., d, Tk] tensor (not a view of k)", 0, function(q, k, v, c, kt)
    return (q:matmul(kt) * 0.5):softmax(-1):matmul(v)
  end },
  { "shapes that do not fit (k broadcast over the batch)", 0, function(q, k, v)
    local k1 = k:slice(1, 1, 1)
    return (q:matmul(k1:transpose(-2, -1)) * 0.5):softmax(-1):matmul(v)
  end },
}

local c = kiln.tensor(0.5)
local kt, ktv = randn({ B, H, d, Tn }), k:transpose(-2, -1)
for _, pc in ipairs(pass_cases) do
  local name, want, f, covers_want = pc[1], pc[2], pc[3], pc[4]
  local cm = kiln.compile(f)
  local got = { cm(q, k, v, c, kt, ktv) }
  local ref = { f(q, k, v, c, kt, ktv) }
  local n, covers = attention_kernels(cm)
  T.is(n, want, name .. ": " .. want .. " attention kernel(s)")
  local e = 0
  for i = 1, #ref do e = math.max(e, relerr(got[i], ref[i])) end
  T.ok(e <= 1e-5, string.format("%s: compiled matches eager (error %.3g)", name, e))
  if covers_want then
    T.like(covers or "", covers_want, name .. ": cm:kernels() says " .. covers_want)
    local left = {}
    for _, kn in ipairs(cm:kernels()) do
      for _, op in ipairs(kn.ops) do
        if op == "tril" or op == "triu" or op == "full" or op == "masked_fill" then left[#left + 1] = op end
      end
    end
    T.is(table.concat(left, ","), "", name .. ": the causal mask's subgraph is gone")
  end
  if want == 1 and not covers_want then
    T.like(covers or "", "^matmul .-t/attention%.lua:%d+.*softmax :%d+, matmul :%d+$", name .. ": covers names the ops and lines")
  end
end

-- f compiled takes the causal attribute and equals eager; write() then
-- makes its mask no longer causal, and the plan is built again with the
-- mask, still equal to eager (before, after: the two checks' names)
local function causal_until_written(f, write, before, after)
  local cm = kiln.compile(f)
  local e1 = relerr(cm(q, k, v), f(q, k, v))
  local _, covers1 = attention_kernels(cm)
  write()
  local e2 = relerr(cm(q, k, v), f(q, k, v))
  local _, covers2 = attention_kernels(cm)
  T.ok(e1 <= 1e-5 and (covers1 or ""):find("causal mask folded", 1, true),
    string.format("%s: the causal attribute, compiled equals eager (%.3g)", before, e1))
  T.ok(e2 <= 1e-5 and not (covers2 or ""):find("causal mask folded", 1, true),
    string.format("%s: built again with the mask, equal to eager (%.3g)", after, e2))
end

-- a constant mask taken for the causal attribute is read again when it is
-- written: the plan is built again, and a mask no longer causal is a mask
do
  local cmask = kiln.zeros({ B, 1, Tn, Tn }):masked_fill(above, F32_LOWEST)
  local row, col = kiln.arange(0, Tn):reshape({ Tn, 1 }), kiln.arange(0, Tn):reshape({ 1, Tn })
  local query4_key1 = (row * Tn + col):eq(3 * Tn) -- query 4 no longer sees key 1
  causal_until_written(
    function(q, k, v) return (q:matmul(k:transpose(-2, -1)) * 0.35 + cmask):softmax(-1):matmul(v) end,
    function() cmask:copy_(kiln.zeros({ B, 1, Tn, Tn }):masked_fill(above, F32_LOWEST):masked_fill(query4_key1, F32_LOWEST)) end,
    "a causal constant mask", "written in place so that query 4 masks key 1 too")
end

-- an f16 model's constant mask holds f16's lowest (-65504) above the
-- diagonal, as Hugging Face writes it: the causal attribute too; -60000 is
-- left a mask
do
  local q16, k16, v16 = q:to("f16"), k:to("f16"), v:to("f16")
  for _, case in ipairs({ { -65504, true }, { -60000, false } }) do
    local m16 = kiln.zeros({ B, 1, Tn, Tn }):masked_fill(above, case[1]):to("f16")
    local f = function(qq, kk, vv) return (qq:matmul(kk:transpose(-2, -1)) * 0.35 + m16):softmax(-1):matmul(vv) end
    local cm = kiln.compile(f)
    local e = relerr(cm(q16, k16, v16), f(q16, k16, v16))
    local n, covers = attention_kernels(cm)
    local causal = (covers or ""):find("causal mask folded", 1, true) ~= nil
    T.ok(n == 1 and causal == case[2] and e <= 5e-3,
      string.format("an f16 constant mask of %d above the diagonal: %s, compiled equals eager in f16 (%.3g)", case[1],
        case[2] and "the causal attribute" or "a mask", e))
  end
end

-- the same for a causal mask computed from parameters (causal_masks reads
-- what fold_once computed): writing one of the parameters builds the plan
-- again, and the mask that is no longer causal is a mask
do
  local eq = kiln.ones({ B, 1, Tn, Tn }, { dtype = "bool" })
  causal_until_written(
    function(q, k, v) return (q:matmul(k:transpose(-2, -1)) * 0.35 + gpt2_mask(eq)):softmax(-1):matmul(v) end,
    function() eq:copy_(eq_one_off) end,
    "a causal mask computed from parameters", "one of its parameters written in place")
end

-- the suite's GPT-2, exported without an attention mask, carries its causal
-- mask as a B x 1 x T x T initializer: each layer's attention takes the
-- causal attribute, and the model still gives PyTorch's output
do
  local m, xs, io_t = dofile("t/lib/real_tiny.lua")("gpt2_tiny")
  local cm = kiln.compile(m)
  local got = cm(table.unpack(xs))
  local n, causal = 0, 0
  for _, kn in ipairs(cm:kernels()) do
    for _, op in ipairs(kn.ops) do
      if op == "scaled_dot_product_attention" then
        n = n + 1
        if (kn.covers or ""):find("causal mask folded", 1, true) then causal = causal + 1 end
      end
    end
  end
  local e = relerr(got, io_t["output.f32"])
  T.ok(n == 2 and causal == 2 and e <= 1e-4,
    string.format("GPT-2's exported constant mask: %d of %d attention kernels causal, output against PyTorch's %.3g", causal, n, e))
end

-- the op itself while tracing: one node, one kernel; the cost model's flops and bytes
do
  local Bq, Hq, Tq, D = 2, 3, 8, 16
  local q1, k1, v1 = randn({ Bq, Hq, Tq, D }), randn({ Bq, Hq, Tq, D }), randn({ Bq, Hq, Tq, D })
  local m = kiln.rand({ Tq, Tq }, { seed = nextseed() }):gt(0.5)
  for _, causal in ipairs({ false, true }) do
    local f = function(a, b, c2) return kiln.scaled_dot_product_attention(a, b, c2, { causal = causal, mask = m, scale = 0.2 }) end
    local cm = kiln.compile(f)
    local got, want = cm(q1, k1, v1), f(q1, k1, v1)
    local nan = isnan(want)
    T.ok(#cm:kernels() == 1 and attention_kernels(cm) == 1, "traced op: one node, one kernel (causal " .. tostring(causal) .. ")")
    T.ok(count(isnan(got):ne(nan)) == 0 and relerr(got:masked_fill(nan, 0), want:masked_fill(nan, 0)) == 0,
      "traced op: the compiled result is the eager one")
    local r = kiln.time(cm, q1, k1, v1)
    local pairs_kept = causal and Tq * (Tq + 1) / 2 or Tq * Tq
    T.is(r.kernels[1].flops, 2 * Bq * Hq * pairs_kept * (D + D), "cost: flops are 4 * batch * kept pairs * d (causal " .. tostring(causal) .. ")")
    T.is(r.kernels[1].bytes, 4 * (4 * Bq * Hq * Tq * D) + Tq * Tq, "cost: bytes of q, k, v, the bool mask and out")
  end
end

-- KILN_LOGS=fusion: why each non-match was left alone (a child kiln, stderr)
do
  local out, _, _, script = T.child(string.format([[
local Tn = 6
local q, k, v = kiln.randn({2, 2, Tn, 8}, {seed = 1}), kiln.randn({2, 2, Tn, 8}, {seed = 2}), kiln.randn({2, 2, Tn, 8}, {seed = 3})
local keep = kiln.rand({Tn, Tn}, {seed = 4}):gt(0.3)
local c = kiln.tensor(0.5)
local function run(name, f) io.stderr:write("CASE " .. name .. "\n"); kiln.compile(f)(q, k, v, c) end
run("dim", function(q, k, v) return (q:matmul(k:transpose(-2, -1)) * 0.5):softmax(-2):matmul(v) end)
run("fill", function(q, k, v) return (q:matmul(k:transpose(-2, -1)) * 0.5):masked_fill(keep, 0):softmax(-1):matmul(v) end)
run("negative", function(q, k, v) return (q:matmul(k:transpose(-2, -1)) * -0.5):softmax(-1):matmul(v) end)
run("tensor scale", function(q, k, v, c) return (q:matmul(k:transpose(-2, -1)) * c):softmax(-1):matmul(v) end)
run("used elsewhere", function(q, k, v)
  local s = q:matmul(k:transpose(-2, -1)) * 0.5
  return s:softmax(-1):matmul(v) + s:sum(-1, true)
end)
run("no transpose", function(q, k, v) return (q:matmul(k:reshape({2, 2, 8, Tn})) * 0.5):softmax(-1):matmul(v) end)
run("shapes", function(q, k, v) return (q:matmul(k:slice(1, 1, 1):transpose(-2, -1)) * 0.5):softmax(-1):matmul(v) end)
]]), { env = "KILN_LOGS=fusion" })
  local base = script:match("[^/]+$")
  local by_case = T.sections(out, "^CASE (.*)$")
  local function L(n) return script:gsub("%p", "%%%0") .. ":" .. n end
  local expect = {
    { "dim", "attention not matched at softmax %(" .. L(6) .. "%): the softmax is over dim 3, not the last %(4%)" },
    { "fill", "attention not matched at softmax %(" .. L(7) .. "%): masked_fill %(" .. L(7) .. "%) fills 0, not %-inf" },
    { "negative", "the scale mul %(" .. L(8) .. "%) is %-0%.5, not a positive finite number" },
    { "tensor scale", "the scale mul %(" .. L(9) .. "%) is not one multiplication or division by a constant number" },
    { "used elsewhere", "mul %(" .. L(11) .. "%) is used elsewhere too" },
    { "no transpose", "the second operand of matmul %(" .. L(14) .. "%) is reshape %(" .. L(14) .. "%), not k viewed with its last two dims swapped" },
    { "shapes", "the shapes do not fit: scaled_dot_product_attention: leading dim 1 differs" },
  }
  for _, e in ipairs(expect) do
    T.like(by_case[e[1]] or "(no output)", e[2], "KILN_LOGS=fusion, " .. e[1] .. ": the reason names the ops and lines")
  end
  T.ok(base ~= nil, "child script ran")
end

-- ---------------------------------------------------------------------------
-- attention as PyTorch's dynamo exporter writes scaled_dot_product_attention
-- (issue 31, item 1): q and k^T each times d^-1/4 before the matmul, k^T as
-- reshape -> permute -> reshape, an added float mask, and masked_fill(p,
-- p ~= p, 0) after the softmax; ViT's nn.MultiheadAttention from a
-- sequence-first view. The suite's models at a tiny size (t/data/real_models,
-- exported by bench/real_models.py): every layer's attention becomes one
-- kernel, and the compiled model equals eager and PyTorch's own output.

if kiln.onnx and kiln.onnx.available ~= false then
  for _, name in ipairs({ "bert_tiny", "gpt2_tiny", "vit_tiny" }) do
    local m, xs, io_t = dofile("t/lib/real_tiny.lua")(name)
    local cm = kiln.compile(m)
    local y = cm(table.unpack(xs))
    local n, covers = attention_kernels(cm)
    T.is(n, 2, name .. ": both layers' attention is one kernel each")
    T.like(covers or "", "^mul .-, mul .-, matmul .-softmax", name .. ": covers names the two scales, the matmul and softmax")
    local eager = kiln.no_grad(m, table.unpack(xs))
    local e1, e2 = relerr(y, eager), relerr(y, io_t["output.f32"])
    T.ok(e1 <= 1e-5 and e2 <= 1e-5, string.format("%s: compiled equals eager (%.3g) and PyTorch's output (%.3g)", name, e1, e2))
    if name == "vit_tiny" then
      -- nn.MultiheadAttention's {T, B*H, D} merge of the heads is a copy
      -- as written; the pass reads q, k and v as views {B, H, T, D} instead
      T.is(cm:stats().view_copies, 0, "vit_tiny: q, k and v are views of the in-projection, no copies")
    end
  end
end

-- the exporter's chain, written out: a row whose every key the additive
-- mask hides gives NaN probabilities, which its fill zeroes: the fused op
-- gives the same zeros, never NaN; a fill of another value is no NaN fill
do
  local B, H, Tn, D = 2, 2, 5, 8
  local q, k, v = randn({ B, H, Tn, D }), randn({ B, H, Tn, D }), randn({ B, H, Tn, D })
  local add = kiln.zeros({ B, 1, Tn, Tn })
  add = kiln.where(kiln.arange(Tn):reshape({ 1, 1, Tn, 1 }):eq(3):expand({ B, 1, Tn, Tn }),
    kiln.full({ B, 1, Tn, Tn }, -math.huge), add) -- query 4 (arange counts from 0) sees no key
  local c = D ^ -0.25
  local function exported(fill_value)
    return function(q1, k1, v1, m1)
      local kt = k1:reshape({ B * H, Tn, D }):transpose(2, 3):reshape({ B, H, D, Tn })
      local p = ((q1 * c):matmul(kt * c) + m1):softmax(-1)
      return p:masked_fill(p:ne(p), fill_value):matmul(v1)
    end
  end
  local f = exported(0)
  local want = f(q, k, v, add)
  local cm = kiln.compile(f)
  local got = cm(q, k, v, add)
  T.is(attention_kernels(cm), 1, "exported chain: one attention kernel")
  T.is(#cm:kernels(), 1, "exported chain: the NaN fill runs in the attention kernel's store, no kernel of its own")
  T.ok(count(isnan(got)) == 0 and count(isnan(want)) == 0 and relerr(got, want) <= 1e-6,
    string.format("exported chain: compiled equals eager, a fully masked row zeros, no NaN (%.3g)", relerr(got, want)))
  T.ok(want:slice(3, 4, 4):abs():amax():item() == 0, "exported chain: eager's fully masked row (query 4) is zeros")
  local other = kiln.compile(exported(1))
  local y1 = other(q, k, v, add)
  T.is(attention_kernels(other), 0, "a fill of 1 after the softmax is no NaN fill: left as written")
  T.ok(relerr(y1, exported(1)(q, k, v, add)) <= 1e-6, "and it still equals eager")
end

-- ---------------------------------------------------------------------------
-- the transformer sample: its attention becomes one kernel, compiled matches eager in every mode

do
  local S = dofile("samples/transformer_block.lua")
  for _, dt in ipairs({ "f32", "bf16" }) do
    local model = S.model
    if dt == "bf16" then model = model:to({ dtype = "bf16" }) end
    local x = S.inputs({ small = true, dtype = dt })[1]
    local want = model(x)
    for _, mode in ipairs({ "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs" }) do
      local cm = kiln.compile(model, { mode = mode })
      local y = cm(x)
      y = cm(x)
      local n, covers = attention_kernels(cm)
      T.is(n, 1, string.format("transformer_block %s %s: one attention kernel", dt, mode))
      if mode == "default" then
        T.like(covers or "", "^matmul samples/transformer_block%.lua:%d+, mul :%d+, masked_fill :%d+, softmax :%d+, matmul :%d+ %(causal mask folded%)$",
          "transformer_block: cm:kernels() lists the replaced ops with their lines")
      end
      -- the unfused eager chain rounds the scores to bf16 between ops; the fused one keeps them in f64 here
      local e = relerr(y, want)
      local t = dt == "f32" and 1e-5 or 2e-2
      T.ok(e <= t, string.format("transformer_block %s %s: compiled matches eager (error %.3g <= %g)", dt, mode, e, t))
    end
  end
end

T.done()
