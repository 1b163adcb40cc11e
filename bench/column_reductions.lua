-- column_reductions.lua: the CUDA backend's column reductions (a sum, mean
-- or var over the leading dims of a contiguous value, as BatchNorm's
-- statistics of a channels-last batch and a bias's gradient are), eagerly,
-- for a profiler to time kernel by kernel:
--
--   ncu --kernel-name regex:kn_reduce_cols --launch-skip 6 \
--       --metrics gpu__time_duration.sum,dram__bytes.sum build/kiln bench/column_reductions.lua
--
-- Each of 3 iterations: a sum of an f32 {32, 112, 112, 32} batch over N, H
-- and W (the convnet sample's first BatchNorm), a mean of its bf16 copy
-- and a var of the f32 (the first iteration warms the modules up).
local kiln = rawget(_G, "kiln") or require("kiln")
local x = kiln.randn({ 32, 112, 112, 32 }):to("cuda")
local xb = x:to("bf16")
for _ = 1, 3 do
  local s = x:sum({ 1, 2, 3 })
  local m = xb:mean({ 1, 2, 3 })
  local v = x:var({ 1, 2, 3 })
  kiln.synchronize()
  for _, t in ipairs({ s, m, v }) do
    local worst = t:to("f32"):abs():amax():item()
    assert(worst == worst and worst < math.huge, "column_reductions.lua: a result is not finite")
  end
end
