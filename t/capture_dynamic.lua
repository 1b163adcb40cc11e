-- capture_dynamic.lua: dynamic shapes (automatic, dynamic=true/false,
-- kiln.mark_dynamic, duck sizing, symbolic sizes in guards and graphs) and
-- the direct replay of pure traces (when it happens, what stops it, and
-- that a changed upvalue, parameter or module flag is never missed).
local T = dofile("t/lib/tap.lua")

local function maxdiff(a, b)
  local d = (a - b):abs():amax():item()
  return d == d and d or math.huge -- NaN never passes
end

local function f(x)                                   -- line 12
  local B, S, D = x:shape()[1], x:shape()[2], x:shape()[3]
  local y = x:reshape({B, S * 2, D // 2}):relu()
  return y:sum(3) + 1
end

local DEV = kiln.default_device() -- where kiln.randn puts the arguments, so what the guards name

local function guard_of(cm, k, v, prefix)
  for _, g in ipairs(cm:guards()) do
    if g.graph == k and g.version == v then
      for _, s in ipairs(g.guards) do if s:sub(1, #prefix) == prefix then return s end end
    end
  end
end

-- automatic: the size that changed once becomes s0, later sizes reuse it
local cm = kiln.compile(f)
for _, S in ipairs{16, 12, 20, 7} do
  local x = kiln.randn({2, S, 8}, {seed = S})
  T.ok(maxdiff(cm(x), f(x)) <= 1e-6, "automatic dynamic: size " .. S .. " equals eager")
end
local rc = cm:recompiles()
T.is(#rc, 1, "one recompilation for four sizes")
T.is(rc[1] and rc[1].reasons[1], "0/0: tensor 'x' size mismatch at dim 2: expected 16, actual 12",
  "the recompilation names the argument and the dim")
T.is(rc[1] and rc[1].where, "t/capture_dynamic.lua:12", "where is the function's definition line")
T.is(guard_of(cm, 0, 1, "tensor 'x'"), "tensor 'x' shape {2, s0, 8} dtype f32 device " .. DEV .. " contiguous",
  "the new version guards a symbolic size")
T.is(cm:stats().version_hits, 2, "later sizes hit the symbolic version")
local shapes = {}
for _, n in ipairs(cm:graphs()[1].nodes) do shapes[n.op] = n.shape_text end
T.is(shapes.reshape, "{2, s0*2, 4}", "symbolic sizes flow through shape inference (s0*2)")
T.is(shapes.sum, "{2, s0*2}", "and through reductions")

-- dynamic = false: every size is its own version
local cs = kiln.compile(f, {dynamic = false})
for _, S in ipairs{16, 12, 20} do cs(kiln.randn({2, S, 8})) end
T.is(#cs:recompiles(), 2, "dynamic=false recompiles for each new size")
T.is(guard_of(cs, 0, 2, "tensor 'x'"), "tensor 'x' shape {2, 20, 8} dtype f32 device " .. DEV .. " contiguous",
  "dynamic=false guards exact sizes")

-- dynamic = true: symbolic from the first call; size 1 stays static
local cd = kiln.compile(f, {dynamic = true})
cd(kiln.randn({1, 16, 8}))
T.is(guard_of(cd, 0, 0, "tensor 'x'"), "tensor 'x' shape {1, s0, s1} dtype f32 device " .. DEV .. " contiguous",
  "dynamic=true makes every dim >= 2 symbolic")
local x5 = kiln.randn({1, 5, 8})
T.ok(maxdiff(cd(x5), f(x5)) <= 1e-6, "dynamic=true: another size is right")
T.is(#cd:recompiles(), 0, "dynamic=true: no recompilation for a new size")
local x1 = kiln.randn({1, 1, 8})
T.ok(maxdiff(cd(x1), f(x1)) <= 1e-6, "size 1 where a symbol was: still right")
T.is(#cd:recompiles(), 1, "size 1 recompiles: symbols stand for sizes >= 2")

-- duck sizing: equal sizes share a symbol
local function g(a, b) return a:matmul(b) end
local cg = kiln.compile(g, {dynamic = true})
cg(kiln.randn({4, 8}), kiln.randn({8, 4}))
T.is(guard_of(cg, 0, 0, "tensor 'a'"), "tensor 'a' shape {s0, s1} dtype f32 device " .. DEV .. " contiguous",
  "a: s0, s1")
T.is(guard_of(cg, 0, 0, "tensor 'b'"), "tensor 'b' shape {s1, s0} dtype f32 device " .. DEV .. " contiguous",
  "b shares the symbols of the equal sizes")

-- kiln.mark_dynamic
local cmk = kiln.compile(f, {dynamic = false})
local xm = kiln.randn({2, 6, 8})
kiln.mark_dynamic(xm, 2)
cmk(xm)
T.is(guard_of(cmk, 0, 0, "tensor 'x'"), "tensor 'x' shape {2, s0, 8} dtype f32 device " .. DEV .. " contiguous",
  "mark_dynamic makes that dim symbolic even with dynamic=false")
T.raises(function() kiln.mark_dynamic(xm, 4) end, "mark_dynamic: dim 4 out of range", "mark_dynamic checks the dim")

-- direct replay of a pure trace
local function p(x, w) return (x:matmul(w) + 1):relu() end
local cp = kiln.compile(p)
local x, w = kiln.randn({3, 4}, {seed = 1}), kiln.randn({4, 2}, {seed = 2})
for _ = 1, 3 do cp(x, w) end
local st = cp:stats()
T.is(st.replayable, "yes", "a pure single-graph function is replayable")
T.is(st.direct_replays, 2, "calls after the first replay the graph")
T.ok(maxdiff(cp(x, w), p(x, w)) == 0, "a replay gives the eager result")
local x2 = kiln.randn({3, 4}, {seed = 9})
T.ok(maxdiff(cp(x2, w), p(x2, w)) == 0, "new values, same shapes: replayed and right")

local function noisy(x) print("# side effect"); return x + 1 end
local cn = kiln.compile(noisy)
cn(x); cn(x)
T.is(cn:stats().replayable, "called print", "print makes a function impure")
T.is(cn:stats().direct_replays, 0, "an impure function is traced on every call")

local function breaking(x) local y = x + 1; kiln.graph_break(); return y * 2 end
local cb = kiln.compile(breaking)
cb(x); cb(x)
T.is(cb:stats().replayable, "graph breaks", "a function with breaks is not replayed")

local k = 2
local function up(x) return x * k end
local cu = kiln.compile(up)
cu(x); cu(x)
k = 5
T.ok(maxdiff(cu(x), x * 5) == 0, "a changed upvalue is seen on the next call")
T.like(cu:recompiles()[1] and cu:recompiles()[1].reasons[1] or "", "^0/0: number 'k' at t/capture_dynamic.lua:%d+ changed: 2 %-> 5$",
  "and explained as a changed number")

local lin = kiln.nn.Linear(4, 2)
local cl = kiln.compile(lin)
cl(x); cl(x)
lin.weight = kiln.zeros({2, 4})
T.ok(maxdiff(cl(x), lin(x)) == 0, "a replaced parameter is seen by the replay guards")
T.is(cl:recompiles()[1] and cl:recompiles()[1].reasons[1], "0/0: parameter 'weight' was replaced",
  "parameter replaced")

local drop = kiln.nn.Dropout(0.5)
local cdrop = kiln.compile(drop)
drop:eval(); cdrop(kiln.ones({100})); cdrop(kiln.ones({100}))
drop:train()
local zeros = cdrop(kiln.ones({1000})):eq(0):sum():item()
T.is(cdrop:stats().replayable, "yes", "dropout in training is replayed: each replay draws from the stream where it is now")
local m1, m2 = cdrop(kiln.ones({1000})):eq(0), cdrop(kiln.ones({1000})):eq(0)
T.ok(m1:ne(m2):sum():item() > 100, "and two replays drop different elements")
T.ok(zeros > 300 and zeros < 700, "a module switched to train() is traced again (dropout drops " .. zeros .. ")")
T.done()
