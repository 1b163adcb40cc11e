-- samples/convnet.lua: 4 x (conv 3x3 stride 2 padding 1 without bias +
-- BatchNorm2d + ReLU), adaptive average pool to 1x1, flatten, Linear
-- 256 -> 1000, on 32 x 3 x 224 x 224 images: the Sequential of
-- bench/torch_models.py, child for child, so the parameter names
-- match PyTorch's after index_base = 0 (PyTorch's "0.weight" is "1.weight").
-- small: 2 images of 32 x 32.
local kiln = rawget(_G, "kiln") or require("kiln")
local nn = kiln.nn

nn.manual_seed(0)
local layers = {}
local function block(i, o)
  layers[#layers + 1] = nn.Conv2d(i, o, 3, { stride = 2, padding = 1, bias = false })
  layers[#layers + 1] = nn.BatchNorm2d(o)
  layers[#layers + 1] = nn.ReLU()
end
block(3, 32)
block(32, 64)
block(64, 128)
block(128, 256)
layers[#layers + 1] = nn.AdaptiveAvgPool2d(1)
layers[#layers + 1] = nn.Flatten()
layers[#layers + 1] = nn.Linear(256, 1000)
local model = nn.Sequential(layers):eval()

return {
  name = "convnet",
  model = model,
  inputs = function(opts)
    opts = opts or {}
    local n, hw = 32, 224
    if opts.small then n, hw = 2, 32 end
    return { kiln.randn({ n, 3, hw, hw }, { seed = 0, dtype = opts.dtype, device = opts.device }) }
  end,
}
