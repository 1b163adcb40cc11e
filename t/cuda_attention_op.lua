-- t/cuda_attention_op.lua: kiln.scaled_dot_product_attention on the GPU, the
-- op as users reach it (eager, traced, and the attention pass inside a
-- compiled model), against the CPU op computed in f64 on the same inputs
-- (t/attention.lua checks that CPU op against an independent reference).
-- Also the cases the fused kernel declines (f64, a head dim over 256), which
-- must run unfused on the GPU and still agree.
local T = dofile("t/lib/tap.lua")

if not pcall(kiln.zeros, { 1 }, { device = "cuda" }) then T.skip_all("no CUDA device") end

local nextseed = T.seeds()

-- max |got - want| / max |want| (1e-30 at least); math.huge where NaN
-- appears in one and not the other
local function rel_err(got, want)
  local g = got:to("cpu"):to("f64")
  local w = want:to("cpu"):to("f64")
  local gn, wn = g:ne(g), w:ne(w)
  if gn:ne(wn):sum():item() > 0 then return math.huge end
  local gd = g:masked_fill(gn, 0)
  local wd = w:masked_fill(wn, 0)
  local num = (gd - wd):abs():amax():item()
  local den = wd:abs():amax():item()
  return num / math.max(den, 1e-30)
end

local TOL = { f32 = 1e-4, bf16 = 2e-2, f16 = 5e-3, f64 = 1e-10 }

-- the CPU op in f64 on the same (rounded) inputs
local function reference(q, k, v, opts)
  local o = {}
  for key, val in pairs(opts) do o[key] = val end
  if o.mask and o.mask.dtype ~= "bool" then o.mask = o.mask:to("cpu"):to("f64") end
  if o.mask and o.mask.dtype == "bool" then o.mask = o.mask:to("cpu") end
  return kiln.scaled_dot_product_attention(q:to("cpu"):to("f64"), k:to("cpu"):to("f64"),
    v:to("cpu"):to("f64"), o)
end

local function case(name, dt, B, H, Tq, Tk, d, dv, opts)
  local q = kiln.randn({ B, H, Tq, d }, { seed = nextseed(), dtype = dt, device = "cuda" })
  local k = kiln.randn({ B, H, Tk, d }, { seed = nextseed(), dtype = dt, device = "cuda" })
  local v = kiln.randn({ B, H, Tk, dv }, { seed = nextseed(), dtype = dt, device = "cuda" })
  local got = kiln.scaled_dot_product_attention(q, k, v, opts)
  local want = reference(q, k, v, opts)
  local e = rel_err(got, want)
  T.ok(e <= TOL[dt], string.format("%s %s B%d H%d Tq%d Tk%d d%d dv%d: rel err %.3g <= %g", name, dt, B, H, Tq,
    Tk, d, dv, e, TOL[dt]))
end

for _, dt in ipairs({ "bf16", "f16", "f32" }) do
  for _, t in ipairs({ 1, 7, 255, 256, 1000 }) do
    for _, d in ipairs({ 32, 64, 80, 128 }) do
      if t < 1000 or d == 64 then
        case("causal", dt, 1, 2, t, t, d, d, { causal = true })
        case("full", dt, 1, 2, t, t, d, d, {})
      end
    end
  end
  -- masks: bool (keep where true) and additive, broadcast over batch and heads
  local keep = kiln.rand({ 33, 40 }, { seed = nextseed(), device = "cuda" }):gt(0.2)
  case("bool mask", dt, 2, 3, 33, 40, 64, 64, { mask = keep })
  local add = kiln.randn({ 33, 40 }, { seed = nextseed(), dtype = dt, device = "cuda" })
  case("additive mask", dt, 2, 3, 33, 40, 64, 64, { mask = add })
  case("causal + bool mask", dt, 2, 3, 40, 40, 64, 64, { causal = true, mask = kiln.rand({ 40, 40 },
    { seed = nextseed(), device = "cuda" }):gt(0.3) })
  case("scale", dt, 2, 2, 17, 17, 32, 32, { scale = 0.3 })
  case("d != dv", dt, 1, 2, 30, 30, 64, 32, { causal = true })
end

-- f32 scores up to 64 MiB run unfused by default (two cuBLASLt GEMMs
-- around a softmax beat the SIMT kernel there); past that, the fused SIMT
-- kernel: 8 heads x 1500 x 1500 f32 scores are 72 MB
case("long f32: the fused SIMT kernel", "f32", 1, 8, 1500, 1500, 64, 64, { causal = true })

-- what the fused kernel declines runs unfused, with the same result
case("unfused: f64", "f64", 1, 2, 20, 20, 16, 16, { causal = true })
case("unfused: head dim 300", "f32", 1, 1, 9, 9, 300, 300, {})

-- views: q/k/v split from one packed tensor and heads transposed, as models do
do
  local B, Tn, Hn, hd = 2, 37, 4, 64
  local qkv = kiln.randn({ B, Tn, 3 * Hn * hd }, { seed = nextseed(), dtype = "bf16", device = "cuda" })
  local q, k, v = qkv:split(Hn * hd, -1)
  q = q:reshape({ B, Tn, Hn, hd }):transpose(2, 3)
  k = k:reshape({ B, Tn, Hn, hd }):transpose(2, 3)
  v = v:reshape({ B, Tn, Hn, hd }):transpose(2, 3)
  local got = kiln.scaled_dot_product_attention(q, k, v, { causal = true })
  local e = rel_err(got, reference(q, k, v, { causal = true }))
  T.ok(e <= TOL.bf16, string.format("head-split views of a packed qkv: rel err %.3g", e))
end

-- the pass on the GPU: the transformer sample compiles to one attention
-- kernel in every mode and agrees with eager
do
  local spec = dofile("samples/transformer_block.lua")
  for _, dt in ipairs({ "f32", "bf16" }) do
    local model = dofile("samples/transformer_block.lua").model
    if dt ~= "f32" then model:to(dt) end
    model:to("cuda")
    local x = spec.inputs({ small = true, dtype = dt, device = "cuda" })[1]
    local want = model(x)
    for _, mode in ipairs({ "default", "reduce-overhead", "max-autotune" }) do
      local cm = kiln.compile(model, { mode = mode })
      local got = cm(x)
      got = cm(x)
      local n = 0
      for _, kn in ipairs(cm:kernels()) do
        for _, op in ipairs(kn.ops) do
          if op == "scaled_dot_product_attention" then n = n + 1 end
        end
      end
      T.is(n, 1, string.format("transformer_block %s %s: one attention kernel", dt, mode))
      local e = rel_err(got, want)
      T.ok(e <= (dt == "f32" and 1e-4 or 3e-2),
        string.format("transformer_block %s %s: compiled vs eager rel err %.3g", dt, mode, e))
    end
  end
end

-- the dynamo exporter's NaN fill after the softmax (masked_fill(p, p ~= p,
-- 0)), folded into the kernel's store by the attention pass: a row whose
-- every key the additive mask hides is zeros, never NaN, in bf16 and f16
-- (the tensor-core kernel) and f32 (unfused), against the written-out
-- chain in f64 on the CPU; and no kernel of its own
for _, dt in ipairs({ "bf16", "f16", "f32" }) do
  local B, H, Tn, D = 2, 3, 45, 64
  local hide = kiln.arange(Tn):reshape({ 1, 1, Tn, 1 }):eq(7):expand({ B, 1, Tn, Tn }) -- query 8 sees no key
  local add = kiln.where(hide, kiln.full({ B, 1, Tn, Tn }, -math.huge), kiln.zeros({ B, 1, Tn, Tn }))
  local c = D ^ -0.25
  local function exported(q1, k1, v1, m1)
    local kt = k1:reshape({ B * H, Tn, D }):transpose(2, 3):reshape({ B, H, D, Tn })
    local p = ((q1 * c):matmul(kt * c) + m1):softmax(-1)
    return p:masked_fill(p:ne(p), 0):matmul(v1)
  end
  local ins = {}
  for i = 1, 3 do ins[i] = kiln.randn({ B, H, Tn, D }, { seed = nextseed() }):to(dt) end
  ins[4] = add:to(dt)
  local ref = {}
  for i = 1, 4 do ref[i] = ins[i]:to("cpu"):to("f64") end
  local want = exported(table.unpack(ref))
  for i = 1, 4 do ins[i] = ins[i]:to("cuda") end
  local cm = kiln.compile(exported)
  local got = cm(table.unpack(ins))
  local masked_row = got:slice(3, 8, 8):to("cpu"):to("f64")
  T.ok(rel_err(got, want) <= TOL[dt] and masked_row:ne(masked_row):sum():item() == 0 and
    masked_row:abs():amax():item() == 0,
    string.format("exported NaN fill %s: compiled on cuda equals f64 (%.3g), the hidden row zeros", dt,
      rel_err(got, want)))
  T.is(#cm:kernels(), 1, "exported NaN fill " .. dt .. ": one kernel, the fill inside it")
end

-- bf16 and f16 run on cuDNN's fused attention by default (:time's kind
-- says cudnn), except up to 128 keys, where kiln's tensor-core kernel
-- does (kind cuda), with the other as one of max-autotune's candidates;
-- the padding mask of BERT ([B,1,1,T], the dtype's lowest value where a
-- key is padding) and causal attention agree with the f64 op either way
for _, dt in ipairs({ "bf16", "f16" }) do
  for _, Tn in ipairs({ 40, 128, 160 }) do
    local B, H, D = 2, 4, 64
    local lowest = dt == "bf16" and -3.3895313892515355e38 or -65504
    local pad = kiln.zeros({ B, 1, 1, Tn }):to(dt)
    pad = kiln.where(kiln.arange(Tn):reshape({ 1, 1, 1, Tn }):ge(30):expand({ B, 1, 1, Tn }),
      kiln.full({ B, 1, 1, Tn }, lowest, { dtype = dt }), pad)
    local ins = {}
    for i = 1, 3 do ins[i] = kiln.randn({ B, H, Tn, D }, { seed = nextseed(), dtype = dt, device = "cuda" }) end
    local m = pad:to("cuda")
    local want_kind = Tn <= 128 and "cuda" or "cudnn"
    local lib = Tn <= 128 and "kiln's kernel" or "cuDNN"
    for _, opts in ipairs({ { mask = m }, { causal = true }, { causal = true, mask = m } }) do
      local f = function(q, k, v) return kiln.scaled_dot_product_attention(q, k, v, opts) end
      local cm = kiln.compile(f)
      local got = cm(table.unpack(ins))
      local what = string.format("T=%d %s%s", Tn, opts.causal and "causal" or "", opts.mask and " padding mask" or "")
      local e = rel_err(got, reference(ins[1], ins[2], ins[3], opts))
      T.ok(e <= TOL[dt], string.format("%s %s %s: rel err %.3g against f64", lib, dt, what, e))
      local r = kiln.time(cm, ins[1], ins[2], ins[3], { iters = 5, warmup = 2, profile_iters = 2 })
      local kind = r.kernels[1] and r.kernels[1].kind
      T.is(kind, want_kind, string.format("%s %s %s: :time says %s ran it", lib, dt, what, want_kind))
    end
  end
end

T.done()
