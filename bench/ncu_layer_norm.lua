-- bench/ncu_layer_norm.lua: a compiled layer_norm (16x256x512 bf16, the
-- transformer block's) called 20 times, for Nsight Compute on the GPU:
--   ncu --kernel-name regex:layer_norm --launch-skip 5 --launch-count 1 \
--       --section SpeedOfLight --section Occupancy build/kiln bench/ncu_layer_norm.lua
local D = 512
local x = kiln.randn({ 16, 256, D }):to("bf16")
local w, b = kiln.randn({ D }):to("bf16"), kiln.randn({ D }):to("bf16")
local cm = kiln.compile(function(x, w, b) return kiln.layer_norm(x, { D }, w, b) end)
for _ = 1, 20 do cm(x, w, b) end
kiln.synchronize()
