-- t/autograd_ops.lua: every gradient rule of core/autograd (kn_grad.def)
-- against float64 central finite differences on fresh random inputs:
-- broadcasting, reductions over several dims with and without keepdim,
-- views and non-contiguous inputs, repeated inputs (x * x), every op of
-- the table that has a rule (the cases are t/lib/autograd_cases.lua); and
-- the table itself: an op of kn_ops.def with a rule but no case, or
-- without a rule and not listed here as not differentiable, fails this
-- test.
local T = dofile("t/lib/tap.lua")
local GC = dofile("t/lib/gradcheck.lua")

local seed = tonumber(os.getenv("KILN_TEST_SEED")) or os.time()
io.write("# inputs from seed ", seed, " (KILN_TEST_SEED=", seed, " repeats them)\n")
GC.seed(seed)
local rnd = GC.rnd

local TOL = 1e-6
local cases = dofile("t/lib/autograd_cases.lua")(rnd)

local covered = {}
for _, c in ipairs(cases) do
  local name, ops, f, inputs, tol = c[1], c[2], c[3], c[4], c[5] or TOL
  local ok, err, why = pcall(GC.check, f, inputs, { h = c[6] })
  if not ok then
    T.ok(false, name .. ": " .. tostring(err))
  else
    T.ok(err <= tol, string.format("%s: gradient within %g of finite differences", name, tol))
    if err > tol then io.write("#   ", why, "\n") end
  end
  for _, op in ipairs(ops) do covered[op] = true end
end

-- The ops without a derivative, and why (kn_grad.def says the same).
local NOT_DIFFERENTIABLE = {
  logical_not = "its result is bool",
  gt = "its result is bool", lt = "its result is bool", ge = "its result is bool",
  le = "its result is bool", eq = "its result is bool", ne = "its result is bool",
  full = "it takes no inputs", arange = "it takes no inputs", randn = "it takes no inputs",
  rand = "it takes no inputs", randint = "it takes no inputs",
  conv2d_input_grad = "it is conv2d's gradient: a second derivative of conv2d is not supported",
  conv2d_weight_grad = "it is conv2d's gradient: a second derivative of conv2d is not supported",
}

local rules = kiln._autograd_rules()
local n_ops = 0
for op, rule in pairs(rules) do
  n_ops = n_ops + 1
  if rule == true then
    T.ok(covered[op], "op " .. op .. " has a gradient rule and a case here")
  else
    T.is(NOT_DIFFERENTIABLE[op], rule, "op " .. op .. " has no gradient rule, and this test lists why")
  end
end
for op in pairs(NOT_DIFFERENTIABLE) do
  T.ok(rules[op] ~= nil and rules[op] ~= true, "listed as not differentiable: " .. op .. " (still without a rule)")
end
T.ok(n_ops >= 60, "the op table has its " .. n_ops .. " ops")

T.done()
