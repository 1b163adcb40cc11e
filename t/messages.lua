-- messages.lua: error messages say what was wrong, with the user's values as
-- given (no int cast first, no table address) and at the user's line; each
-- is checked word for word (issue 14, class 6).
local T = dofile("t/lib/tap.lua")

-- The message of fn's error, or "no error" when it ran.
local function message(fn)
  local okc, err = pcall(fn)
  if okc then return "no error" end
  return tostring(err)
end
-- The message without its "file:line: " prefix.
local function bare(fn) return (message(fn):gsub("^[^:]*:%d+: ", "")) end

local x = kiln.zeros({2, 3})

-- dims and counts: the value as the user wrote it, not as an int cast saw it
T.is(bare(function() return x:transpose(2^40, 1) end),
  "transpose: dim 1099511627776 out of range (a tensor has at most 8 dims)",
  "transpose(2^40, 1) names 2^40, not dim 0")
T.is(bare(function() return x:transpose(-2^40 - 5, 1) end),
  "transpose: dim -1099511627781 out of range (a tensor has at most 8 dims)", "a huge negative dim too")
T.is(bare(function() return x:transpose(3, 1) end),
  "transpose: dim 3 out of range for a tensor with 2 dims", "a small bad dim names the tensor's ndim")
T.is(bare(function() return x:sum(2^32 + 1) end),
  "sum: dim 4294967297 out of range (a tensor has at most 8 dims)", "sum(2^32 + 1) is not dim 1")
local img, w = kiln.zeros({1, 2, 3, 3}), kiln.zeros({2, 1, 1, 1})
T.is(bare(function() return kiln.conv2d(img, w, nil, {groups = 2^32 + 2}) end),
  "conv2d: groups must be an integer in [-2147483648, 2147483647], got 4294967298",
  "conv2d groups 2^32 + 2 is refused, not run as groups 2")
T.is(bare(function() return x:var(2, {correction = 2^33}) end),
  "correction must be an integer in [-2147483648, 2147483647], got 8589934592",
  "var correction 2^33 is refused, not run as 0")

-- compiling a compiled callable compiles what it wraps (as torch.compile)
local f = function(a) return a * 2 + 1 end
local cm = kiln.compile(f)
local cm2 = kiln.compile(cm, {mode = "max-autotune"})
T.ok(cm2 ~= cm, "kiln.compile(cm) gives a new compiled callable")
local y = cm2(kiln.tensor({1, 2}))
T.is(y:tolist()[2], 5.0, "it computes what the wrapped function computes")
T.like(tostring(cm2), "^kiln.Compiled f %(t/messages.lua:%d+%), mode max%-autotune$",
  "it is named after the user's function, with the new options")
local lin = kiln.nn.Linear(2, 2)
local twice = kiln.compile(kiln.compile(lin))
local want = lin(kiln.ones({1, 2}))
local got = twice(kiln.ones({1, 2}))
T.near(got:tolist()[1][2], want:tolist()[1][2], 1e-6, "a compiled compiled module runs the module")
T.is(bare(function() return kiln.compile({}) end),
  "kiln.compile: argument 1 is a table without a forward method: expected a function or a kiln.nn module",
  "a table that is no module says so")
T.is(bare(function() return kiln.compile(3) end),
  "kiln.compile: argument 1 must be a function or a kiln.nn module, got number", "a number says so")

T.done()
