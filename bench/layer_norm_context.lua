-- bench/layer_norm_context.lua: where samples/transformer_block.lua's
-- first layer norm (k0) loses its time. The block's layer norms are timed
-- (kiln.time, on the default device) with x reused on every call, as the
-- benchmarks do, and with x written just before each call (x * 1, an eager
-- op, so x's bytes are fresh in the L2 as a previous block's output would
-- be), in reduce-overhead (x copied into the CUDA graph's buffer) and
-- default. Usage: kiln bench/layer_norm_context.lua [bf16|f32]
local dt = arg and arg[1] or "bf16"
local spec = dofile("samples/transformer_block.lua")
if dt ~= "f32" then spec.model:to(dt) end
local x = spec.inputs({ dtype = dt, device = kiln.default_device() })[1]
local function show(title, r)
  print(string.format("== %s %s: %.1f us per call", dt, title, r.median_ms * 1000))
  for _, k in ipairs(r.kernels) do
    if k.name:find("layer_norm") or k.name:find("^mul") or k.name:find("copy") then
      print(string.format("  %-40s %6.2f us  roof %s", k.name, k.median_us, k.roof_pct and string.format("%.0f%%", k.roof_pct) or "-"))
    end
  end
end
for _, mode in ipairs({ "reduce-overhead", "default" }) do
  local cm = kiln.compile(spec.model, { mode = mode })
  show(mode .. ", x reused", kiln.time(cm, x, { iters = 50, warmup = 5 }))
  show(mode .. ", x written before each call", kiln.time(function(v) return cm(v * 1) end, x, { iters = 50, warmup = 5 }))
end
