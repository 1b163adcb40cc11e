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
  "conv2d: groups: expected an integer in 1..2147483647, got 4294967298",
  "conv2d groups 2^32 + 2 is refused, not run as groups 2")
T.is(bare(function() return x:var(2, {correction = 2^33}) end),
  "var: correction: expected an integer in -2147483648..2147483647, got 8589934592",
  "var correction 2^33 is refused, not run as 0")

T.is(bare(function() return kiln.randint(2^40, 2^40 - 5, {2}) end),
  "randint: high (1099511627771) must be greater than low (1099511627776)", "randint shows its bounds as given")

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

-- one rule for numbers stored into integer dtypes by creation ops: NaN,
-- infinities and values outside the dtype's range are errors naming the
-- value and the dtype (no saturation, no NaN-as-0); fractions truncate
local I32 = "(range -2147483648 to 2147483647)"
local I64 = "(range -9223372036854775808 to 9223372036854775807)"
T.is(bare(function() return kiln.full({2}, 0/0, {dtype = "i32"}) end),
  "full: value nan cannot be stored in an i32 tensor " .. I32, "full(NaN, i32) says nan, not -nan")
T.is(bare(function() return kiln.full({2}, 1e300, {dtype = "i32"}) end),
  "full: value 1e+300 cannot be stored in an i32 tensor " .. I32, "full(1e300, i32) does not saturate")
T.is(bare(function() return kiln.full({2}, 2^31, {dtype = "i32"}) end),
  "full: value 2147483648 cannot be stored in an i32 tensor " .. I32, "2^31 is one past i32")
T.is(kiln.full({1}, 2147483647, {dtype = "i32"}):tolist()[1], 2147483647, "the largest i32 is stored")
T.is(kiln.full({1}, -2.7, {dtype = "i32"}):tolist()[1], -2, "a fraction truncates toward zero")
T.is(bare(function() return kiln.full({1}, 2^63, {dtype = "i64"}) end),
  "full: value 9.223372036854776e+18 cannot be stored in an i64 tensor " .. I64, "2^63 is one past i64")
T.is(bare(function() return kiln.tensor({0/0}, {dtype = "i64"}) end),
  "tensor: value nan cannot be stored in an i64 tensor " .. I64, "tensor({0/0}, i64) is not 0")
T.is(bare(function() return kiln.tensor({1, 2^40}, {dtype = "i32"}) end),
  "tensor: value 1099511627776 cannot be stored in an i32 tensor " .. I32, "tensor({2^40}, i32) does not saturate")
T.is(kiln.tensor({math.maxinteger}, {dtype = "i64"}):tolist()[1], math.maxinteger, "the largest i64 is exact")
local mask = kiln.tensor({true, false}, {dtype = "bool"})
T.is(bare(function() return kiln.zeros({2}, {dtype = "i32"}):masked_fill(mask, 1e10) end),
  "masked_fill: value 1e+10 cannot be stored in an i32 tensor " .. I32, "masked_fill(1e10) into i32")
T.is(bare(function() return kiln.arange(0, 1e300, 1e299, {dtype = "i64"}) end),
  "arange: last value 9e+299 cannot be stored in an i64 tensor " .. I64, "arange's last value must fit")
T.is(bare(function() return kiln.arange(2^40, 2^40 + 2, {dtype = "i32"}) end),
  "arange: start 1099511627776 cannot be stored in an i32 tensor " .. I32, "arange's start must fit")
T.ok(kiln.full({1}, 0/0):tolist()[1] ~= kiln.full({1}, 0/0):tolist()[1], "a float full(NaN) is still NaN")

-- a kernel-size limit hit while a kernel is built: the group splits into
-- kernels that fit (it used to send the whole graph op by op, with a
-- message that once said "kernel : ..." for want of the kernel's name)
do
  local out = T.child([[
local xs = {}
for i = 1, 20 do xs[i] = kiln.randn({4}, {seed = i}) end
local cm = kiln.compile(function(v) local s = v for i = 1, #xs do s = s + xs[i] end return s end)
local y = cm(kiln.zeros({4}))
local want = kiln.zeros({4})
for i = 1, #xs do want = want + xs[i] end
print("diff", (y - want):abs():max():item())
print("kernels", #cm:kernels())
]])
  T.ok(not out:find("could not compile", 1, true), "the argument limit: no graph left to run op by op")
  T.ok(not out:find("kernel :", 1, true), "no empty kernel name")
  T.is(tonumber(out:match("kernels\t(%d+)")), 2, "the 21 inputs' sum: two kernels")
  local d = tonumber(out:match("diff\t(%S+)"))
  T.ok(d and d <= 1e-6, "and the result equals eager: " .. tostring(d))
end

-- no table addresses: a value that is no string or number is named by kind
T.is(bare(function() local m = kiln.nn.Linear({}, 3) return m end),
  "Linear: in_features must be an integer >= 0, got a table", "nn: a table is 'a table'")
T.is(bare(function() local m = kiln.nn.LayerNorm(print) return m end),
  "LayerNorm: normalized shape must be an integer or a table of integers, got a function", "nn: a function")
T.is(bare(function() local m = kiln.nn.Dropout(kiln.zeros({2, 3})) return m end),
  "Dropout: p must be a number in [0, 1], got a tensor of shape {2,3}", "nn: a tensor by its shape")
T.is(bare(function() local r = kiln.time(function(v) return v end, {kiln.zeros({2})}, {warmup = {}}) return r end),
  "kiln.time: opts.warmup must be an integer >= 0, got a table", "kiln.time: a table")
T.is(bare(function() local r = kiln.cmd.mode({}) return r end),
  "unknown mode 'a table' (known: eager, default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs)",
  ":mode: a table")
T.is(bare(function() local r = kiln.cmd.run({}) return r end),
  "usage: :run [n] (n must be a positive integer, got 'a table')", ":run: a table")

-- nn errors at the user's line, also through a tail call (whose caller's
-- frame is gone: no line rather than a wrong one)
local line_of_linear = debug.getinfo(1, "l").currentline + 1
local m1 = message(function() local m = kiln.nn.Linear("a", 3) return m end)
T.is(m1, "t/messages.lua:" .. line_of_linear .. ": Linear: in_features must be an integer >= 0, got a",
  "a bad argument to nn.Linear names the user's file and line")
local function tail() return kiln.nn.Linear("a", 3) end
T.is(message(tail), "Linear: in_features must be an integer >= 0, got a",
  "through a tail call: no wrong line")

T.done()
