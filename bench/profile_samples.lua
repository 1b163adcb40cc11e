-- bench/profile_samples.lua: kiln.time's per-kernel table for each sample
-- and mode on the default device (the GPU where there is one); what :time
-- prints, for every sample in one run. Usage: kiln bench/profile_samples.lua
-- [dtype] [modes]   e.g. kiln bench/profile_samples.lua bf16 default,reduce-overhead
local dtype = arg and arg[1] or "f32"
local modes = {}
for m in ((arg and arg[2]) or "default,reduce-overhead"):gmatch("[^,]+") do modes[#modes + 1] = m end
local names = { "simple_linear", "large_linear", "convnet", "transformer_block", "gcn" }
if os.getenv("MODELS") then
  names = {}
  for m in os.getenv("MODELS"):gmatch("[^,]+") do names[#names + 1] = m end
end
for _, name in ipairs(names) do
  local spec = dofile("samples/" .. name .. ".lua")
  if dtype ~= "f32" then spec.model:to(dtype) end
  local x = spec.inputs({ dtype = dtype, device = kiln.default_device() })
  for _, mode in ipairs(modes) do
    local cm = kiln.compile(spec.model, { mode = mode })
    local r = kiln.time(cm, table.unpack(x), { iters = 50, warmup = 5 })
    print(string.format("== %s %s %s", name, dtype, mode))
    print(tostring(r))
  end
end
