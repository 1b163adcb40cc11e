-- eager_semantics.lua: eager results that used to be wrong, each checked
-- against an exact reference (Lua's own 64-bit integers, which wrap in two's
-- complement as PyTorch's int64 does, or a float64 computation) and against
-- the compiled form of the same op (kiln.compile), which must agree.
--   * integer ops compute in integers, not through double;
--   * a Lua number next to an f16/bf16 tensor is not rounded to that dtype;
--   * creation values that do not fit an integer dtype are refused;
--   * nn.Dropout refuses NaN and p = 1 gives zeros.
local T = dofile("t/lib/tap.lua")

-- Element i of tensor t as a Lua value (integers stay integers).
local function list(t) return t:tolist() end

local function same_list(got, want)
  if #got ~= #want then return false end
  for i = 1, #want do
    local g, w = got[i], want[i]
    if math.type(w) == "integer" and math.type(g) ~= "integer" then return false end
    if g ~= w and not (w ~= w and g ~= g) then return false end
  end
  return true
end

local function show(l)
  local s = {}
  for i = 1, #l do s[i] = tostring(l[i]) end
  return "{" .. table.concat(s, ", ") .. "}"
end

local function is_list(got, want, name)
  local ok = same_list(got, want)
  T.ok(ok, name)
  if not ok then T.diag("     got: " .. show(got) .. "\nexpected: " .. show(want)) end
end

-- ---- i64: exact, wrapping ----------------------------------------------

local big = 1 << 60
local imin, imax = math.mininteger, math.maxinteger
local av = {big + 1, imax, imin, -7, 1 << 62, 3}
local bv = {big, 1, -1, 2, 4, -(1 << 61)}
local a = kiln.tensor(av, {dtype = "i64"})
local b = kiln.tensor(bv, {dtype = "i64"})

-- Lua's integer arithmetic wraps, so it is the reference.
local function ref2(f)
  local r = {}
  for i = 1, #av do r[i] = f(av[i], bv[i]) end
  return r
end
local function ref1(f)
  local r = {}
  for i = 1, #av do r[i] = f(av[i]) end
  return r
end

local cases = {
  {"add", function(x, y) return x + y end, function(x, y) return x + y end},
  {"sub", function(x, y) return x - y end, function(x, y) return x - y end},
  {"mul", function(x, y) return x * y end, function(x, y) return x * y end},
  {"maximum", function(x, y) return kiln.maximum(x, y) end, function(x, y) return math.max(x, y) end},
  {"minimum", function(x, y) return kiln.minimum(x, y) end, function(x, y) return math.min(x, y) end},
  {"gt", function(x, y) return x:gt(y) end, function(x, y) return x > y end},
  {"lt", function(x, y) return x:lt(y) end, function(x, y) return x < y end},
  {"ge", function(x, y) return x:ge(y) end, function(x, y) return x >= y end},
  {"eq", function(x, y) return x:eq(y) end, function(x, y) return x == y end},
  {"ne", function(x, y) return x:ne(y) end, function(x, y) return x ~= y end},
}
for _, cs in ipairs(cases) do
  local name, op, ref = cs[1], cs[2], cs[3]
  local want = ref2(ref)
  is_list(list(op(a, b)), want, "i64 " .. name .. ": exact, wrapping (eager)")
  is_list(list(kiln.compile(op)(a, b)), want, "i64 " .. name .. ": exact, wrapping (compiled)")
end

local unary = {
  {"neg", function(x) return -x end, function(x) return -x end},
  {"abs", function(x) return x:abs() end, function(x) return x < 0 and -x or x end}, -- abs(min) wraps to min
  {"relu", function(x) return x:relu() end, function(x) return x > 0 and x or 0 end},
}
for _, cs in ipairs(unary) do
  local name, op, ref = cs[1], cs[2], cs[3]
  local want = ref1(ref)
  is_list(list(op(a)), want, "i64 " .. name .. " (eager)")
  is_list(list(kiln.compile(op)(a)), want, "i64 " .. name .. " (compiled)")
end

-- pow in integers: exact past 2^53, wrapping; a negative exponent gives
-- 1 or -1 for a base of 1 or -1 and 0 otherwise (PyTorch's integer pow)
local function ipow(x, y)
  if y < 0 then return x == 1 and 1 or x == -1 and (y % 2 == 1 and -1 or 1) or 0 end
  local r = 1
  for _ = 1, y do r = r * x end -- Lua's integer * wraps
  return r
end
local pb = kiln.tensor({3, 3, -2, 2, 7, 5, -1, 1, 0, -3}, {dtype = "i64"})
local pe = kiln.tensor({39, 41, 63, 64, 23, -1, -3, -5, -1, 0}, {dtype = "i64"})
local pref = {}
for i, x in ipairs(pb:tolist()) do pref[i] = ipow(x, pe:tolist()[i]) end
local function powf(x, y) return x ^ y end
is_list(list(powf(pb, pe)), pref, "i64 pow: exact past 2^53, wrapping (eager)")
is_list(list(kiln.compile(powf)(pb, pe)), pref, "i64 pow: exact past 2^53, wrapping (compiled)")

-- A Lua integer next to an i64 tensor stays exact.
is_list(list(a - big), ref1(function(x) return x - big end), "i64 tensor - Lua integer 2^60: exact")
is_list(list(kiln.compile(function(x) return x - big end)(a)), ref1(function(x) return x - big end),
  "i64 tensor - Lua integer 2^60: exact (compiled)")

-- where picks exact values
local pick = kiln.tensor({true, false, true, false, true, false}, {dtype = "bool"})
is_list(list(kiln.where(pick, a, b)), {av[1], bv[2], av[3], bv[4], av[5], bv[6]}, "where over i64: exact")

-- sums: in int64, wrapping
local s = kiln.tensor({big + 1, big, 1 << 62, 1 << 62, 5}, {dtype = "i64"})
local want_sum = (big + 1) + big + (1 << 62) + (1 << 62) + 5
T.is(s:sum():item(), want_sum, "i64 sum: exact and wrapping")
T.is(kiln.compile(function(x) return x:sum() end)(s):item(), want_sum, "i64 sum (compiled)")
T.is(s:amax():item(), 1 << 62, "i64 amax")

-- ---- i32: arithmetic wraps to 32 bits; casts from i64 keep the low bits ----

local i32 = kiln.tensor({2147483647, -2147483648, 100000}, {dtype = "i32"})
local one = kiln.tensor({1, -1, 100000}, {dtype = "i32"})
local function wrap32(v) v = v & 0xffffffff; return v >= 0x80000000 and v - 0x100000000 or v end
local want32 = {wrap32(2147483647 + 1), wrap32(-2147483648 - 1), wrap32(100000 * 100000)}
local f32ops = function(x, y) return kiln.where(kiln.tensor({true, true, false}, {dtype = "bool"}), x + y, x * y) end
is_list(list(f32ops(i32, one)), want32, "i32 add and mul wrap (eager)")
is_list(list(kiln.compile(f32ops)(i32, one)), want32, "i32 add and mul wrap (compiled)")
local wide = kiln.tensor({(1 << 32) + 5, -(1 << 33) - 7}, {dtype = "i64"})
is_list(list(wide:to("i32")), {5, -7}, "i64 to i32 keeps the low 32 bits (eager)")
is_list(list(kiln.compile(function(x) return x:to("i32") end)(wide)), {5, -7},
  "i64 to i32 keeps the low 32 bits (compiled)")

-- ---- a Lua number next to a half tensor computes in f32 ----------------

-- The reference: the op in f32 math on the tensor's values, rounded once to
-- the half dtype (kiln's f32 path computes in double and rounds to f32,
-- which for + - * / is the f32 result).
for _, dt in ipairs({"f16", "bf16"}) do
  local x = kiln.tensor({1, 2, 3, -1000, 0.5}, {dtype = dt})
  -- 1 + half an ulp of the dtype at 1: a tie that rounds to 1 in the dtype
  local nudge = 1 + (dt == "f16" and 2 ^ -11 or 2 ^ -8)
  local ops = {
    {"x * (1 + ulp/2)", function(t) return t * nudge end},
    {"x / 1e5", function(t) return t / 1e5 end},
    {"x * 0.1", function(t) return t * 0.1 end},
    {"1e5 / x", function(t) return 1e5 / t end},
    {"x - 1e-4", function(t) return t - 1e-4 end},
    {"x + 3.3", function(t) return kiln.add(t, 3.3) end},
  }
  for _, o in ipairs(ops) do
    local want = list(o[2](x:to("f32")):to(dt))
    local got = o[2](x)
    T.is(got.dtype, dt, dt .. " " .. o[1] .. ": stays " .. dt)
    is_list(list(got), want, dt .. " " .. o[1] .. ": computed in f32, rounded once (eager)")
    is_list(list(kiln.compile(o[2])(x)), want, dt .. " " .. o[1] .. ": compiled equals eager")
  end
end
local h = kiln.tensor({1, 2}, {dtype = "f16"})
local q = list(h / 1e5)
T.ok(q[1] > 0 and math.abs(q[1] - 1e-5) < 1e-7, "f16 1 / 1e5 is about 1e-5, not 0 (got " .. tostring(q[1]) .. ")")
-- as PyTorch's eager: x * 1e5 overflows f16 to inf, never NaN
is_list(list(h * 1e5 / 1e5), {math.huge, math.huge}, "f16 x * 1e5 / 1e5 is inf (f16 overflow), not NaN")

T.raises(function() return i32 + (1 << 40) end,
  "add: the number 1099511627776 does not fit the tensor's dtype i32",
  "a Lua integer that does not fit an i32 tensor is refused")

-- ---- creation values must fit the dtype ---------------------------------

T.raises(function() return kiln.arange(0, 2 ^ 40, 2 ^ 39, {dtype = "i32"}) end,
  "arange: last value 549755813888 cannot be stored in an i32 tensor", "arange past i32 is refused")
T.raises(function() return kiln.arange(2 ^ 31, 2 ^ 31 + 2, {dtype = "i32"}) end,
  "arange: start 2147483648 cannot be stored in an i32 tensor", "arange starting past i32 is refused")
T.raises(function() return kiln.randint(0, 1 << 40, {3}, {dtype = "i32"}) end,
  "randint: high %- 1 1099511627775 cannot be stored in an i32 tensor", "randint past i32 is refused")
T.raises(function() return kiln.full({2}, 2 ^ 31, {dtype = "i32"}) end,
  "full: value 2147483648 cannot be stored in an i32 tensor", "full past i32 is refused")
T.raises(function() return kiln.randint(5, 1, {3}) end,
  "randint: high %(1%) must be greater than low %(5%)", "randint's message names its bounds")
is_list(list(kiln.arange(-2147483648, -2147483645, {dtype = "i32"})), {-2147483648, -2147483647, -2147483646},
  "arange at the bottom of i32 works")
is_list(list(kiln.arange(big, big + 3)), {big, big + 1, big + 2}, "i64 arange past 2^53 is exact")
T.raises(function() return kiln.arange(big + 1, big + 3) end,
  "arange: start 1152921504606846977 and step 1 must be exact as doubles", "an inexact integer start is refused")
local r = list(kiln.randint(2147483640, 2147483648, {64}, {dtype = "i32", seed = 3}))
local in_range = true
for i = 1, #r do in_range = in_range and r[i] >= 2147483640 and r[i] <= 2147483647 end
T.ok(in_range, "randint up to the top of i32 stays in [low, high)")

-- ---- nn.Dropout's p ------------------------------------------------------

T.raises(function() kiln.nn.Dropout(0 / 0) end, "Dropout: p must be a number in %[0, 1%], got .*nan",
  "Dropout(NaN) is refused")
T.raises(function() kiln.nn.Dropout(-0.25) end, "Dropout: p must be a number in %[0, 1%]", "Dropout(-0.25) is refused")
local all = kiln.nn.Dropout(1)
all:train()
is_list(list(all(kiln.tensor({1, math.huge, 0 / 0}))), {0.0, 0.0, 0.0}, "Dropout(1) in training gives zeros, even for inf and NaN")

T.done()
