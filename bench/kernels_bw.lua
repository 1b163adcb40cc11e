-- bench/kernels_bw.lua: the generated pointwise and row kernels of
-- samples/transformer_block.lua at its benchmark shapes (B=16 T=256 D=512,
-- 8 heads), each compiled alone and timed with kiln.time on the default
-- device (the GPU where there is one): median microseconds, GB/s and % of
-- the roofline per generated kernel, in bf16 and f32. These kernels are
-- memory-bound, so roof% is the share of the device's measured copy
-- bandwidth they reach (issue 15's target: 70% or better).
-- Usage: kiln bench/kernels_bw.lua [dtypes] [mode] [iters]
--   e.g. kiln bench/kernels_bw.lua bf16,f32 reduce-overhead
-- A small iters (3) keeps the launches few for Nsight Compute:
--   ncu --kernel-name regex:'^k[0-9]' --metrics gpu__time_duration.sum kiln bench/kernels_bw.lua bf16 default 3
local dtypes = {}
for d in ((arg and arg[1]) or "bf16,f32"):gmatch("[^,]+") do dtypes[#dtypes + 1] = d end
local mode = (arg and arg[2]) or "reduce-overhead"
local iters = tonumber(arg and arg[3] or "") or 100
local dev = kiln.default_device()
local B, T, D, H, F = 16, 256, 512, 8, 2048

local function randn(shape, dt, seed) return kiln.randn(shape, { seed = seed, device = dev }):to(dt) end

-- name, function, its inputs for dtype dt
local CASES = {
  { "layer_norm", function(x, w, b) return kiln.layer_norm(x, { D }, w, b) end,
    function(dt) return { randn({ B, T, D }, dt, 1), randn({ D }, dt, 2), randn({ D }, dt, 3) } end },
  { "residual add + layer_norm", function(x, r, w, b) return kiln.layer_norm(x + r, { D }, w, b) end,
    function(dt) return { randn({ B, T, D }, dt, 4), randn({ B, T, D }, dt, 5), randn({ D }, dt, 6), randn({ D }, dt, 7) } end },
  { "scale + causal mask + softmax", function(s, keep)
      return (s * (1.0 / math.sqrt(D // H))):masked_fill(keep:logical_not(), -math.huge):softmax(-1)
    end,
    function(dt)
      return { randn({ B, H, T, T }, dt, 8), kiln.ones({ T, T }, { dtype = "bool", device = dev }):tril() }
    end },
  { "bias + gelu", function(x, b) return (x + b):gelu() end,
    function(dt) return { randn({ B, T, F }, dt, 9), randn({ F }, dt, 10) } end },
}

print(string.format("device %s, mode %s", dev, mode))
print(string.format("%-30s %-5s %-50s %10s %8s %6s", "case", "dtype", "kernel", "median us", "GB/s", "roof%"))
for _, dt in ipairs(dtypes) do
  for _, c in ipairs(CASES) do
    local args = c[3](dt)
    local cm = kiln.compile(c[2], { mode = mode })
    local call = { table.unpack(args) }
    call[#call + 1] = { iters = iters, warmup = math.min(10, iters) } -- the options follow every input
    local r = kiln.time(cm, table.unpack(call))
    for _, k in ipairs(r.kernels) do
      if k.kind == "generated" then
        print(string.format("%-30s %-5s %-50s %10.1f %8.0f %6s", c[1], dt, k.name, k.median_us, k.gbps or 0,
          k.roof_pct and string.format("%.0f", k.roof_pct) or "-"))
      end
    end
  end
end
