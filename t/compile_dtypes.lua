-- compile_dtypes.lua: one dtype semantics for eager and compiled (issue 14,
-- class 2; docs/dtypes.md). Inside a fused kernel every op's result is
-- brought back to its dtype, as the eager op stores it: bf16/f16 rounded,
-- i32 wrapped, bool 0/1. Each case is checked eagerly and compiled against
-- a reference computed here in Lua (IEEE rounding written out, Lua's
-- wrapping integers), on fresh random values where the case allows.
local T = dofile("t/lib/tap.lua")

local inf = 1 / 0
local seed = tonumber(os.getenv("KILN_SEED") or "") or os.time()
print("# seed " .. seed .. " (rerun with KILN_SEED=" .. seed .. ")")
math.randomseed(seed)

-- v rounded to nearest even with p significand bits, minimum normal
-- exponent emin and largest finite maxf (overflow is inf).
local function round_bits(v, p, emin, maxf)
  if v ~= v or v == 0 or v == inf or v == -inf then return v end
  local a = math.abs(v)
  local e = math.floor(math.log(a, 2))
  while 2.0 ^ e > a do e = e - 1 end
  while 2.0 ^ (e + 1) <= a do e = e + 1 end
  if e < emin then e = emin end
  local ulp = 2.0 ^ (e - p + 1)
  local q = a / ulp
  local r = math.floor(q)
  local frac = q - r
  if frac > 0.5 or (frac == 0.5 and r % 2 == 1) then r = r + 1 end
  local res = r * ulp
  if res > maxf then res = inf end
  return v < 0 and -res or res
end
local function f32(v) return round_bits(v, 24, -126, 3.4028234663852886e38) end
-- eager rounds a double result to f32, then to the half type
local function f16(v) return round_bits(f32(v), 11, -14, 65504.0) end
local function bf16(v) return round_bits(f32(v), 8, -126, 3.3895313892515355e38) end

local function same(got, want)
  if #got ~= #want then return false end
  for i = 1, #want do
    local g, w = got[i], want[i]
    if g ~= w and not (g ~= g and w ~= w) then return false end
    if math.type(w) == "integer" and math.type(g) ~= "integer" then return false end
  end
  return true
end
local function show(l)
  local s = {}
  for i = 1, #l do s[i] = tostring(l[i]) end
  return "{" .. table.concat(s, ", ") .. "}"
end

-- f(inputs...) eagerly and compiled, both against want.
local function check(name, f, inputs, want)
  local e = f(table.unpack(inputs)):tolist()
  local c = kiln.compile(f)(table.unpack(inputs)):tolist()
  if not T.ok(same(e, want), name .. " (eager)") then T.diag("got " .. show(e) .. "\nwant " .. show(want)) end
  if not T.ok(same(c, want), name .. " (compiled)") then T.diag("got " .. show(c) .. "\nwant " .. show(want)) end
end

local function map(l, fn)
  local r = {}
  for i = 1, #l do r[i] = fn(l[i], i) end
  return r
end

-- ---- half types: every op rounds --------------------------------------

local xs = {1.0, 2.0, -3.0, 0.5, 65504.0}
local x16 = kiln.tensor(xs, {dtype = "f16"})
check("f16 x * 1e5 / 1e5 overflows to inf at the product, as eager", function(x) return x * 1e5 / 1e5 end,
      {x16}, map(xs, function(v) return f16(f16(v * 1e5) / 1e5) end))
check("f16 x - 1e9 is -inf", function(x) return (x - 1e9):to("f32") end, {x16},
      map(xs, function(v) return f16(v - 1e9) end))
check("f16 (x * 300) * 300 / 90000: the intermediate overflows", function(x) return x * 300 * 300 / 90000 end,
      {x16}, map(xs, function(v) return f16(f16(f16(v * 300) * 300) / 90000) end))

-- random bf16 and f16 chains, rounded op by op
for _, dt in ipairs({"bf16", "f16"}) do
  local round = dt == "bf16" and bf16 or f16
  local v = {}
  for i = 1, 16 do v[i] = round((math.random() * 2 - 1) * 50) end
  local w = {}
  for i = 1, 16 do w[i] = round((math.random() * 2 - 1) * 3) end
  local a, b = kiln.tensor(v, {dtype = dt}), kiln.tensor(w, {dtype = dt})
  local want = {}
  for i = 1, 16 do
    local t = round(v[i] * w[i])
    t = round(t + 1.7)
    t = round(t * v[i])
    want[i] = round(t - w[i])
  end
  check(dt .. " chain (a * b + 1.7) * a - b rounds after every op",
        function(p, q) return (p * q + 1.7) * p - q end, {a, b}, want)
end

-- ---- bool: 0 or 1 -------------------------------------------------------

local bv = {true, true, false, true}
local bt = kiln.tensor(bv, {dtype = "bool"})
check("bool a + a is or: 1, not 2, when cast to i32", function(b) return (b + b):to("i32") * 3 end, {bt},
      map(bv, function(v) return v and 3 or 0 end))
check("bool a + a + a cast to i64", function(b) return (b + b + b):to("i64") end, {bt},
      map(bv, function(v) return v and 1 or 0 end))

-- ---- i32: arithmetic wraps to 32 bits before the next op ----------------

local function wrap32(v)
  v = v & 0xffffffff
  return v >= 0x80000000 and v - 0x100000000 or v
end
local iv = {2147483647, -2147483648, 65536, math.random(-100000, 100000), math.random(-100000, 100000)}
local it = kiln.tensor(iv, {dtype = "i32"})
check("i32 x + 1 wraps before the cast to i64", function(x) return (x + 1):to("i64") end, {it},
      map(iv, function(v) return wrap32(v + 1) end))
check("i32 x * 65536 wraps before the cast to f64",
      function(x) return (x * 65536):to("f64") end, {it}, map(iv, function(v) return wrap32(v * 65536) + 0.0 end))
local wide = {(1 << 40) + 7, -(1 << 35) - 1, 5}
check("i64 to i32 inside a fused chain keeps the low 32 bits", function(x) return (x:to("i32") + 0):to("i64") end,
      {kiln.tensor(wide, {dtype = "i64"})}, map(wide, wrap32))

-- ---- operands convert to the op's dtype first (PyTorch) ------------------

check("i64 16777217 + f32 0.5: the i64 becomes f32 first",
      function(a, b) return a + b end,
      {kiln.tensor({16777217, 3}, {dtype = "i64"}), kiln.tensor({0.5, 0.5}, {dtype = "f32"})},
      {f32(f32(16777217) + 0.5), 3.5})
check("i32 2049 + f16 0.5: the i32 becomes f16 first", function(a, b) return (a + b):to("f32") end,
      {kiln.tensor({2049, 2047}, {dtype = "i32"}), kiln.tensor({0.5, 0.5}, {dtype = "f16"})},
      {f16(f16(2049) + 0.5), f16(2047 + 0.5)})

-- ---- decomposed ops: steps in the math type, one rounding ------------------

-- log_softmax of a row whose other terms are tiny next to the max: the log
-- of the sum is about -1e-9, not 0 (a sum rounded to 1.0f gave 0, and an
-- amax of 0 divided by itself NaN).
-- On the CPU the steps stay in double (docs/dtypes.md); on the GPU they are
-- in f32, the math type, as PyTorch's CUDA kernels keep them: there the sum
-- 1 + 1.1e-9 is 1.0f and the result's first element 0, eager and compiled
-- alike.
local row = {0.0, -21.0, -22.0, -23.0}
local lse = math.log(1 + math.exp(-21) + math.exp(-22) + math.exp(-23))
if kiln.default_device() ~= "cpu" then lse = math.log(f32(1 + f32(math.exp(-21) + f32(math.exp(-22) + math.exp(-23))))) end
check("f32 log_softmax keeps its row sum unrounded", function(x) return x:log_softmax(1) end,
      {kiln.tensor(row, {dtype = "f32"})}, map(row, function(v) return f32(v - lse) end))
local hs = {1.0, 2.0, 3.0, 11.0}
local m, s = 11.0, 0
for i = 1, 4 do s = s + math.exp(hs[i] - m) end
check("f16 softmax rounds only its result", function(x) return x:softmax(1) end,
      {kiln.tensor(hs, {dtype = "f16"})}, map(hs, function(v) return f16(math.exp(v - m) / s) end))
check("f16 full(1e5) is inf, also fused", function(x) return (x + kiln.full({2}, 1e5, {dtype = "f16"})):to("f32") end,
      {kiln.tensor({1, 2}, {dtype = "f16"})}, {inf, inf})

T.done()
