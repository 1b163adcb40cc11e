-- kiln.onnx ops: control flow (If).
-- Each op takes (inputs, attrs, node) and returns its outputs; import.lua
-- holds the loader, the graph walk and the helpers the op files share
-- (kiln.onnx._shared).
local kiln = ...
local S = kiln.onnx._shared
local ops = S.ops
local run_graph = S.run_graph
local is_known = S.is_known

ops.If = function(i, a, node, env)
  local c = i[1]
  local cond
  if is_known(c) then
    cond = c.v[1] ~= 0
  else
    -- a condition computed from tensor values: reading it is a graph break
    -- while tracing, named by the node (kiln.onnx.where is set)
    cond = c:item()
    cond = cond ~= 0 and cond ~= false
  end
  local g = cond and a.then_branch or a.else_branch
  local outs = run_graph(g, {}, env)
  return table.unpack(outs)
end
