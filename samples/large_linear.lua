-- samples/large_linear.lua: 4 x (Linear 4096 -> 4096 + ReLU) on a batch of
-- 64, as nn.Sequential in bench/torch_models.py.
--
-- small: a batch of 2 and, when the file is loaded in small mode
-- (kiln.session.small = true before :load, or {small = true} passed to the
-- chunk), a width of 256 so that building it takes no time on a CPU; the
-- structure is the same. inputs() follows the model's width.
local kiln = rawget(_G, "kiln") or require("kiln")
local nn = kiln.nn

local args = ...
local small = kiln.session ~= nil and kiln.session.small or false
if type(args) == "table" and args.small ~= nil then small = args.small end
local width = small and 256 or 4096

nn.manual_seed(0)
local layers = {}
for _ = 1, 4 do
  layers[#layers + 1] = nn.Linear(width, width)
  layers[#layers + 1] = nn.ReLU()
end
local model = nn.Sequential(layers):eval()

return {
  name = "large_linear",
  model = model,
  inputs = function(opts)
    opts = opts or {}
    local batch = opts.small and 2 or 64
    return { kiln.randn({ batch, width }, { seed = 0, dtype = opts.dtype, device = opts.device }) }
  end,
}
