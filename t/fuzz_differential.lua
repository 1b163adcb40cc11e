-- fuzz_differential.lua: eager against compiled over every dtype (issue 14).
-- Each seeded program is a random chain of kiln ops written as Lua text
-- (elementwise, comparisons, where / masked_fill, casts, reductions,
-- softmax, matmul, views, Lua numbers next to tensors) over bool, i32, i64,
-- bf16, f16 and f32 inputs holding values near their limits (huge, tiny,
-- subnormal, +-inf, NaN, integer extremes). The program runs eagerly and
-- through kiln.compile (default mode); every output must have the eager
-- dtype and shape, integers and bools must be equal, floats equal within
-- the dtype's rounding, +-inf equal, and NaN exactly where eager has NaN.
--
-- The program is built one op at a time and each op is tried eagerly first,
-- so every program is valid (an op eager refuses is dropped and another
-- drawn); the eager tensors are not reused: the whole text runs again.
--
-- KILN_FUZZ_PROGRAMS sets how many programs (default 60); KILN_SEED the
-- first seed (to rerun a failure: KILN_SEED=S KILN_FUZZ_PROGRAMS=1);
-- KILN_FUZZ_SEED fixes the corpus, as .ci/run does so that CI is
-- reproducible. Without either, each run draws fresh programs.
-- KILN_FUZZ_SHOW=1 prints every program's text.
local T = dofile("t/lib/tap.lua")

local count = tonumber(os.getenv("KILN_FUZZ_PROGRAMS") or "") or 60
local seed0 = tonumber(os.getenv("KILN_SEED") or os.getenv("KILN_FUZZ_SEED") or "")
if not seed0 then
  -- fresh: the clock and this process's start (no two runs share a corpus)
  seed0 = os.time() * 1000 + math.floor(os.clock() * 1e6) % 1000
  local f = io.open("/proc/self/stat")
  if f then
    seed0 = seed0 * 100000 + (tonumber(f:read("l"):match("^(%d+)")) or 0) % 100000
    f:close()
  end
end
seed0 = math.tointeger(seed0) or math.floor(seed0)
print(string.format("# first seed %d, %d programs (rerun one: KILN_SEED=S KILN_FUZZ_PROGRAMS=1)", seed0, count))

local cache = os.tmpname()
os.remove(cache)
kiln.config.cache_dir = cache

-- ---- values near each dtype's limits ----------------------------------

local inf, nan = 1 / 0, 0 / 0
local specials = {
  bool = {true, false},
  i32 = {0, 1, -1, 2, -2, 3, 7, 255, 46341, 65535, 65536, 2147483647, -2147483648, 2147483646, 1 << 24 | 1},
  i64 = {0, 1, -1, 2, -3, 7, 2147483647, -2147483648, 4294967296, (1 << 53) + 1, 1 << 62,
         math.maxinteger, math.mininteger, math.maxinteger - 1, (1 << 60) + 1, 16777217},
  f16 = {0.0, -0.0, 1.0, -1.0, 0.5, 65504.0, -65504.0, 65519.0, 6.103515625e-05, 5.9604644775390625e-08,
         1e-8, 2049.0, 0.1, inf, -inf, nan, 3.0, -2.5},
  bf16 = {0.0, -0.0, 1.0, -1.0, 3.3895313892515355e38, -3.3895313892515355e38, 1.1754943508222875e-38,
          9.183549615799121e-41, 1e-45, 257.0, 0.1, inf, -inf, nan, 3.0, -2.5},
  f32 = {0.0, -0.0, 1.0, -1.0, 3.4028234663852886e38, -3.4028234663852886e38, 1.1754943508222875e-38,
         1.401298464324817e-45, 16777217.0, 1e-30, 1e30, 0.1, inf, -inf, nan, 3.0, -2.5},
}
local dtypes = {"bool", "i32", "i64", "bf16", "f16", "f32"}
local floats = {bf16 = true, f16 = true, f32 = true, f64 = true}

local R = math.random
local function pick(list) return list[R(#list)] end

local function value_for(dt)
  local r = R()
  if dt == "bool" then return R(2) == 1 end
  if r < 0.4 then return pick(specials[dt]) end
  if dt == "i32" or dt == "i64" then return R(-20, 20) end
  local scale = pick({1, 1, 10, 1000, 1e-3})
  return (R() * 2 - 1) * scale
end

-- A Lua literal for v (integers stay integers, floats stay floats).
local function lit(v)
  if type(v) == "boolean" then return tostring(v) end
  if math.type(v) == "integer" then
    if v == math.mininteger then return "math.mininteger" end
    return v < 0 and "(" .. v .. ")" or tostring(v)
  end
  if v ~= v then return "(0/0)" end
  if v == inf then return "(1/0)" end
  if v == -inf then return "(-1/0)" end
  if v == 0 and 1 / v < 0 then return "(-0.0)" end
  local s = string.format("%.17g", v)
  if not s:find("[%.eEn]") then s = s .. ".0" end
  return v < 0 and "(" .. s .. ")" or s
end

-- Numbers a program puts next to tensors (as PyTorch scalars).
local numbers = {0, 1, 2, -1, 3, 7, 0.5, -2.5, 0.1, 1e5, -1e9, 1e-8, 65504.0, 1e30, 1e-30, 2147483647, 1 / 0, 0 / 0}

-- ---- the program generator ---------------------------------------------

local function shape_text(s)
  local p = {}
  for i = 1, #s do p[i] = tostring(s[i]) end
  return "{" .. table.concat(p, ", ") .. "}"
end

-- An op expression over the variables vars[i] = {name, tensor}.
local function draw_expr(vars)
  local function var() -- recent ones more often
    local n = #vars
    local i = R() < 0.6 and math.max(1, n - R(0, 2)) or R(n)
    return vars[i]
  end
  local x = R(2) == 1 and vars[#vars] or var() -- chains: ops on the last result
  local xn, xt = x[1], x[2]
  local nd = xt:dim()
  local function dim() return nd > 0 and R(-nd, nd) or 1 end
  local function nonzero_dim()
    local d = dim()
    return d == 0 and 1 or d
  end
  local kind = R(14)
  if kind == 1 then
    local u = pick({"neg", "relu", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "gelu", "silu",
                    "logical_not"})
    if u == "neg" then return "(-" .. xn .. ")" end
    return xn .. ":" .. u .. "()"
  elseif kind <= 3 then
    local y = var()[1]
    local op = pick({"+", "-", "*", "/", "^", "max", "min"})
    if op == "max" then return "kiln.maximum(" .. xn .. ", " .. y .. ")" end
    if op == "min" then return "kiln.minimum(" .. xn .. ", " .. y .. ")" end
    return "(" .. xn .. " " .. op .. " " .. y .. ")"
  elseif kind <= 5 then
    local n = lit(pick(numbers))
    local op = pick({"+", "-", "*", "/", "^"})
    if R(4) == 1 then return "(" .. n .. " " .. op .. " " .. xn .. ")" end
    return "(" .. xn .. " " .. op .. " " .. n .. ")"
  elseif kind == 6 then
    local c = pick({"gt", "lt", "ge", "le", "eq", "ne"})
    local other = R(2) == 1 and var()[1] or lit(pick(numbers))
    return xn .. ":" .. c .. "(" .. other .. ")"
  elseif kind == 7 then
    local c = var()
    local cond = c[2].dtype == "bool" and c[1] or c[1] .. ":gt(" .. lit(pick(numbers)) .. ")"
    local y = R(3) == 1 and lit(pick(numbers)) or var()[1]
    if R(2) == 1 then return "kiln.where(" .. cond .. ", " .. xn .. ", " .. y .. ")" end
    return "kiln.where(" .. cond .. ", " .. y .. ", " .. xn .. ")"
  elseif kind == 8 then
    local c = var()
    local mask = c[2].dtype == "bool" and c[1] or c[1] .. ":lt(" .. lit(pick(numbers)) .. ")"
    return xn .. ":masked_fill(" .. mask .. ", " .. lit(pick(numbers)) .. ")"
  elseif kind <= 10 then
    return xn .. ":to(\"" .. pick(dtypes) .. "\")"
  elseif kind == 11 then
    local r = pick({"sum", "sum", "mean", "amax", "amin"})
    local w = R(3)
    if w == 1 or nd == 0 then return xn .. ":" .. r .. "()" end
    return xn .. ":" .. r .. "(" .. nonzero_dim() .. (w == 3 and ", true" or "") .. ")"
  elseif kind == 12 then
    local s = R(2) == 1 and "softmax" or "log_softmax"
    return xn .. ":" .. s .. "(" .. nonzero_dim() .. ")"
  elseif kind == 13 then
    if nd == 2 and R(2) == 1 then return xn .. ":matmul(" .. xn .. ":t())" end
    return xn .. ":matmul(" .. var()[1] .. ")"
  else
    local v = R(8)
    if v == 1 then return xn .. ":t()" end
    if v == 2 then return xn .. ":reshape({-1})" end
    if v == 3 then return xn .. ":unsqueeze(" .. R(1, nd + 1) .. ")" end
    if v == 4 then return xn .. ":squeeze()" end
    if v == 5 and nd > 0 then
      local d = nonzero_dim()
      return xn .. ":slice(" .. d .. ", " .. R(1, 2) .. ", " .. pick({-1, 2, 3}) .. ", " .. R(1, 2) .. ")"
    end
    if v == 6 and nd >= 2 then
      local p = {}
      for i = 1, nd do p[i] = i end
      for i = nd, 2, -1 do
        local j = R(i)
        p[i], p[j] = p[j], p[i]
      end
      return xn .. ":permute(" .. shape_text(p) .. ")"
    end
    if v == 7 then return xn .. ":contiguous()" end
    return xn .. ":transpose(1, -1)"
  end
end

-- The program for one seed: its text (a chunk returning the inputs and the
-- function) and how many ops it has.
local function generate(seed)
  math.randomseed(seed)
  local rank = R(0, 3)
  local base = {}
  for d = 1, rank do base[d] = R(1, 4) end
  local lines = {"local inputs = {"}
  local env = setmetatable({}, {__index = _ENV})
  local vars, params = {}, {}
  for i = 1, R(1, 3) do
    local dt = pick(dtypes)
    local shape = {}
    for d = 1, rank do shape[d] = R(5) == 1 and 1 or base[d] end
    if R(4) == 1 and rank > 0 then table.remove(shape, 1) end -- broadcast from fewer dims
    local numel = 1
    for d = 1, #shape do numel = numel * shape[d] end
    local vals = {}
    for j = 1, numel do vals[j] = lit(value_for(dt)) end
    local text = string.format("kiln.tensor({%s}, {dtype = %q}):reshape(%s)", table.concat(vals, ", "), dt,
                               shape_text(shape))
    lines[#lines + 1] = "  " .. text .. ","
    local name = "v" .. (i - 1)
    local t = load("return " .. text, "input", "t", env)()
    env[name] = t
    vars[#vars + 1] = {name, t}
    params[#params + 1] = name
  end
  lines[#lines + 1] = "}"
  lines[#lines + 1] = "local function f(" .. table.concat(params, ", ") .. ")"
  local n_ops = 0
  for _ = 1, R(3, 10) do
    for _ = 1, 20 do -- draw until eager accepts one
      local e = draw_expr(vars)
      local chunk = load("return " .. e, "op", "t", env)
      local good, t = pcall(chunk)
      if good and type(t) == "userdata" and t.dtype and t:numel() <= 4096 then
        local name = "v" .. #vars
        env[name] = t
        vars[#vars + 1] = {name, t}
        lines[#lines + 1] = "  local " .. name .. " = " .. e
        n_ops = n_ops + 1
        break
      end
    end
  end
  -- the last value and up to two other op results
  local outs, seen = {vars[#vars][1]}, {[#vars] = true}
  for _ = 1, R(0, 2) do
    local i = R(math.min(#params + 1, #vars), #vars)
    if not seen[i] then
      seen[i] = true
      outs[#outs + 1] = vars[i][1]
    end
  end
  lines[#lines + 1] = "  return " .. table.concat(outs, ", ")
  lines[#lines + 1] = "end"
  lines[#lines + 1] = "return inputs, f"
  return table.concat(lines, "\n"), n_ops
end

-- ---- comparing ---------------------------------------------------------

local rtol = {f32 = 1e-5, f64 = 1e-12, bf16 = 1e-2, f16 = 2e-3}

local function flat(v, out)
  if type(v) ~= "table" then
    out[#out + 1] = v
    return out
  end
  for i = 1, #v do flat(v[i], out) end
  return out
end

-- nil when got matches want (eager), else what differs.
local function differs(got, want)
  if type(got) ~= "userdata" or not got.dtype then return "not a tensor: " .. type(got) end
  if got.dtype ~= want.dtype then return "dtype " .. got.dtype .. ", eager " .. want.dtype end
  local gs, ws = shape_text(got:shape()), shape_text(want:shape())
  if gs ~= ws then return "shape " .. gs .. ", eager " .. ws end
  local g, w = flat(got:tolist(), {}), flat(want:tolist(), {})
  local tol = rtol[want.dtype]
  for i = 1, #w do
    local a, b = g[i], w[i]
    local bad
    if tol then
      if b ~= b or a ~= a then bad = (a == a) ~= (b == b) -- NaN exactly where eager has NaN
      elseif b == inf or b == -inf or a == inf or a == -inf then bad = a ~= b
      else
        -- the dtype's rounding, relative; near 0, relative to its smallest normal
        local tiny = want.dtype == "f16" and 6.1e-5 or want.dtype == "f64" and 2.3e-308 or 1.2e-38
        bad = math.abs(a - b) > tol * math.max(math.abs(b), tiny)
      end
    else
      bad = a ~= b or math.type(a) ~= math.type(b)
    end
    if bad then return string.format("element %d: %s, eager %s", i, tostring(a), tostring(b)) end
  end
  return nil
end

-- ---- the run -----------------------------------------------------------

local failed, ops_total, outputs_total = 0, 0, 0
local t0 = os.clock()
for i = 0, count - 1 do
  local seed = seed0 + i
  local good_gen, text, n_ops = pcall(generate, seed)
  local why
  if not good_gen then
    why = "the generator failed: " .. tostring(text)
    text = "(none)"
  else
    ops_total = ops_total + n_ops
    if os.getenv("KILN_FUZZ_SHOW") then T.diag(string.format("seed %d:\n%s", seed, text)) end
    local inputs, f = load(text, "program", "t")()
    local want = table.pack(pcall(f, table.unpack(inputs)))
    if not want[1] then
      why = "eager failed on the full program: " .. tostring(want[2])
    else
      local cf = kiln.compile(f)
      local got = table.pack(pcall(cf, table.unpack(inputs)))
      if not got[1] then
        why = "compiled failed where eager ran: " .. tostring(got[2])
      elseif got.n ~= want.n then
        why = string.format("compiled returned %d values, eager %d", got.n - 1, want.n - 1)
      else
        for k = 2, want.n do
          outputs_total = outputs_total + 1
          local d = differs(got[k], want[k])
          if d then
            why = string.format("output %d: %s", k - 1, d)
            break
          end
        end
      end
    end
  end
  if why then
    failed = failed + 1
    T.ok(false, string.format("seed %d: compiled equals eager", seed))
    T.diag("  " .. why .. "\n" .. text)
    io.stderr:write(string.format("fuzz_differential: KILN_SEED=%d KILN_FUZZ_PROGRAMS=1 fails: %s\n", seed, why))
  end
end
T.ok(failed == 0, string.format("%d random programs: compiled equals eager (%d failed)", count, failed))
T.ok(count == 0 or ops_total >= count * 2, string.format("the programs ran %d ops, %d outputs compared", ops_total,
                                                          outputs_total))
print(string.format("# %d programs, %d ops, %d outputs in %.1f s of CPU", count, ops_total, outputs_total,
                    os.clock() - t0))
os.execute("rm -rf '" .. cache .. "'")
T.done()
