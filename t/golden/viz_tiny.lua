-- t/golden/viz_tiny.lua: the tiny function that t/viz_render.lua draws and
-- compares with t/golden/viz_tiny_captured.dot. Its lines are in that file
-- (tooltips and the break's user stack): regenerate it with
-- KILN_UPDATE_GOLDEN=1 after changing this file. `call` runs the compiled
-- function; the test runs it in a coroutine, so the break's user stack
-- holds lines of this file only.
local kiln = rawget(_G, "kiln") or require("kiln")

local function tiny(x, w)
  local h = (x:matmul(w) + 1):relu()
  kiln.graph_break()
  return h * 2
end

return {
  fn = tiny,
  call = function(cm, x, w) return cm(x, w) end,
}
