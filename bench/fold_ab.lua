-- bench/fold_ab.lua: each sample's compiled time per call with library
-- epilogues folded (kiln.config.fold_epilogues = true, the default) and
-- without, in one process on one device: the A/B behind that default.
-- Usage: kiln bench/fold_ab.lua [dtype]
local dtype = arg and arg[1] or "f32"
local names = { "large_linear", "convnet", "transformer_block" }
if os.getenv("MODELS") then
  names = {}
  for m in os.getenv("MODELS"):gmatch("[^,]+") do names[#names + 1] = m end
end
for _, name in ipairs(names) do
  local spec = dofile("samples/" .. name .. ".lua")
  if dtype ~= "f32" then spec.model:to(dtype) end
  local x = spec.inputs({ dtype = dtype, device = kiln.default_device() })
  local row = {}
  for _, fold in ipairs({ true, false, true, false }) do
    kiln.config.fold_epilogues = fold
    local cm = kiln.compile(spec.model, { mode = "reduce-overhead" })
    local r = kiln.time(cm, table.unpack(x), { iters = 200, warmup = 20 })
    row[#row + 1] = string.format("%s %.1f us", fold and "folded" or "separate", r.median_ms * 1e3)
  end
  kiln.config.fold_epilogues = true
  print(string.format("%-18s %-5s %s", name, dtype, table.concat(row, " | ")))
end
