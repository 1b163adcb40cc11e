-- nn_shape_errors.lua: a shape error inside a kiln.nn module names the
-- module as the user built it, where it sits in a Sequential, what it got
-- and what it expected, at the user's line (eager and compiled) - not the
-- op's "matmul: shapes {4,32} and {16,8}" from inside kiln.
local T = dofile("t/lib/tap.lua")
local LINE, SRC, at = T.tags()
local nn = kiln.nn

local m = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(16, 8))
local x = kiln.randn({ 4, 32 }, { seed = 1 })
T.raises(function() local y = m(x) return y end, -- @eager
  "^" .. at("eager"):gsub("%p", "%%%0") .. ": Linear%(16 %-> 8%) %(3rd in Sequential%): input's last dim is 32, expected 16$",
  "eager: Linear(16 -> 8) (3rd in Sequential) at the user's line, got and expected")
local cm = kiln.compile(m)
T.raises(function() return cm(x) end, -- @compiled
  "Linear%(16 %-> 8%) %(3rd in Sequential%): input's last dim is 32, expected 16",
  "compiled: the same message from the trace")
local first = nn.Sequential(nn.Linear(30, 8))
T.raises(function() return first(x) end, "Linear%(30 %-> 8%) %(1st in Sequential%): input's last dim is 32, expected 30",
  "1st in Sequential")
local lone = nn.Linear(16, 2)
T.raises(function() return lone(x) end, "Linear%(16 %-> 2%): input's last dim is 32, expected 16$",
  "a module in no Sequential: no position")
local c = nn.Conv2d(3, 8, 3)
T.raises(function() return c(kiln.randn({ 1, 4, 8, 8 })) end,
  "Conv2d%(3 %-> 8, 3x3%): input has 4 channels %(dim 2%), expected 3", "Conv2d: the channel count")
T.raises(function() return c(kiln.randn({ 4, 8, 8 })) end,
  "Conv2d%(3 %-> 8, 3x3%): input has 3 dims, expected 4 %(N, C, H, W%)", "Conv2d: the rank")
local s = nn.Sequential()
s:add(nn.Linear(32, 4)):add(nn.Linear(5, 2))
T.raises(function() return s(x) end, "Linear%(5 %-> 2%) %(2nd in Sequential%)", "Sequential:add numbers its children too")
T.done()
