-- samples/simple_linear.lua: one Linear 1024 -> 1024 on a batch of 32, the
-- first workload of the benchmark (bench/gpu_bench.sh; nn.Linear(1024, 1024) in
-- bench/torch_models.py). small: a batch of 2.
local kiln = rawget(_G, "kiln") or require("kiln")
local nn = kiln.nn

nn.manual_seed(0) -- the same weights on every load
local model = nn.Linear(1024, 1024):eval()

return {
  name = "simple_linear",
  model = model,
  inputs = function(opts)
    opts = opts or {}
    local batch = opts.small and 2 or 32
    return { kiln.randn({ batch, 1024 }, { seed = 0, dtype = opts.dtype, device = opts.device }) }
  end,
}
