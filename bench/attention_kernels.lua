-- bench/attention_kernels.lua: kiln's fused attention kernel, eagerly, at
-- the real-model suite's shapes (BERT with a padding mask, GPT-2 causal,
-- ViT unmasked, the transformer_block sample), microseconds per call as
-- CUDA events see it (kiln.time's kernel table), with what the FLOPs and
-- the bytes would allow. Run it beside bench/torch_attention.py, which
-- times PyTorch's scaled_dot_product_attention at the same shapes, and
-- under ncu to see why a kernel is slow:
--
--   build/kiln bench/attention_kernels.lua [f32|bf16|f16]
--   ATTENTION_ONCE=1 ncu -k regex:kn_attn --section WarpStateStats build/kiln bench/attention_kernels.lua bf16
local kiln = rawget(_G, "kiln") or require("kiln")
local dt = (arg and arg[1]) or "bf16"
local DEV = kiln.default_device()
local CASES = {
  { "bert 8x12x128x64 mask B11T", 8, 12, 128, 128, 64, "pad" },
  { "gpt2 8x12x128x64 causal", 8, 12, 128, 128, 64, "causal" },
  { "vit 8x12x197x64", 8, 12, 197, 197, 64, nil },
  { "block 16x8x256x64", 16, 8, 256, 256, 64, nil },
}
-- without a GPU: small shapes, to check that the script runs
if DEV == "cpu" then
  CASES = { { "tiny 2x2x16x8 mask", 2, 2, 16, 16, 8, "pad" }, { "tiny 2x2x16x8 causal", 2, 2, 16, 16, 8, "causal" } }
end
for i, c in ipairs(CASES) do
  local name, B, H, Tq, Tk, d, kind = table.unpack(c)
  local q = kiln.randn({ B, H, Tq, d }, { seed = i, dtype = dt, device = DEV })
  local k = kiln.randn({ B, H, Tk, d }, { seed = 100 + i, dtype = dt, device = DEV })
  local v = kiln.randn({ B, H, Tk, d }, { seed = 200 + i, dtype = dt, device = DEV })
  local opts = {}
  if kind == "causal" then opts.causal = true end
  if kind == "pad" then -- BERT's additive mask: the last quarter of the last sequence padded
    local vals = {}
    for j = 1, B * Tk do vals[j] = (j > (B - 1) * Tk + Tk * 3 // 4) and -1e4 or 0 end
    local m = kiln.tensor(vals):reshape({ B, 1, 1, Tk }):to(dt)
    opts.mask = m:to(DEV)
  end
  local f = function() return kiln.scaled_dot_product_attention(q, k, v, opts) end
  if os.getenv("ATTENTION_ONCE") then -- under ncu: two launches a case, untimed
    f()
    f()
    kiln.synchronize()
    goto next
  end
  local r = kiln.time(f, { iters = 50, warmup = 5 })
  local us
  for _, row in ipairs(r.kernels or {}) do
    if tostring(row.label or row.name):find("attention") then us = row.median_us end
  end
  local flops = 4.0 * B * H * Tq * Tk * d * (kind == "causal" and 0.5 or 1)
  local bytes = 4.0 * B * H * Tq * d * (dt == "f32" and 4 or 2)
  print(string.format("%-28s %-5s %8.1f us  %7.1f TFLOP/s  %7.0f GB/s", name, dt, us or -1,
    us and flops / us / 1e6 or -1, us and bytes / us / 1e3 or -1))
  ::next::
end
