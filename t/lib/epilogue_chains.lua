-- t/lib/epilogue_chains.lua: the op chains after a message-passing sum that
-- the gather_scatter pass absorbs (elementwise activations, then a softmax
-- or log_softmax over the last dim), and run(x, chain), which applies one
-- chain to x op by op. The CPU and GPU gather_scatter tests share them.
local M = {}

M.CHAINS = {
  { "relu" }, { "gelu" }, { "silu" }, { "sigmoid" }, { "tanh" }, { "softmax" }, { "log_softmax" },
  { "relu", "log_softmax" }, { "tanh", "softmax" },
}

function M.run(x, chain)
  for _, op in ipairs(chain) do
    if op == "softmax" or op == "log_softmax" then x = x[op](x, -1) else x = x[op](x) end
  end
  return x
end

return M
