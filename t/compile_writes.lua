-- compile_writes.lua: copy_ into a tensor argument of a compiled function
-- writes the argument, as eager code does (it once wrote only the traced
-- value, and the caller's tensor kept its old values): written once, twice
-- in one call (AdamW's decay, then its step: the later value is what the
-- tensor gets, and the earlier one no result of the graph), read after the
-- write in the same call, returned; upvalues as before. kiln.is_compiling()
-- says whether code runs inside a trace. A value that is a result and is
-- read only by pointwise ops in one kernel is computed and stored there
-- (one kernel, not two), equal to eager.
local T = dofile("t/lib/tap.lua")

local function vals(t)
  local out = {}
  for i, v in ipairs(t:to("f64"):tolist()) do out[i] = string.format("%g", v) end
  return table.concat(out, " ")
end

local once = kiln.compile(function(a, b) a:copy_(a - b) end)
local a, b = kiln.tensor({ 1, 2 }), kiln.tensor({ 0.5, 0.25 })
once(a, b)
T.is(vals(a), "0.5 1.75", "an argument written in place holds the new value after the call")
once(a, b)
T.is(vals(a), "0 1.5", "... and again at the next call (the same plan)")

local twice = kiln.compile(function(p, g) p:copy_(p * 0.5); p:copy_(p - g); return p * 10 end)
local p = kiln.tensor({ 4, 8 })
local r = twice(p, kiln.tensor({ 1, 1 }))
T.is(vals(p), "1 3", "written twice in one call: the later value (the earlier one read by it)")
T.is(vals(r), "10 30", "and the call's result reads the newest value")
local p2, g2 = kiln.tensor({ 4, 8 }), kiln.tensor({ 1, 1 })
p2:copy_(p2 * 0.5); p2:copy_(p2 - g2)
T.is(vals(p), vals(p2), "the same as eager code")

local u = kiln.tensor({ 1, 1 })
local up = kiln.compile(function(d) u:copy_(u + d) end)
up(kiln.tensor({ 1, 2 }))
up(kiln.tensor({ 1, 2 }))
T.is(vals(u), "3 5", "an upvalue written in place, as before")

-- later calls replay the plan directly and repeat the writes
T.is(once:stats().replayable, "yes", "a call that writes its arguments in place can be replayed directly")
T.ok(once:stats().direct_replays >= 1 and up:stats().direct_replays >= 1,
  string.format("... and was (%d, %d direct replays), the values above after them", once:stats().direct_replays,
    up:stats().direct_replays))
for _ = 1, 3 do once(a, b) end
T.is(vals(a), "-1.5 0.75", "three more replayed calls: three more writes")
-- a tensor written but never read is no input of the graph: traced every call
local out = kiln.zeros({ 2 })
local sink = kiln.compile(function(x) out:copy_(x * 2) end)
for i = 1, 3 do sink(kiln.tensor({ i, -i })) end
T.is(vals(out), "6 -6", "a tensor written and not read gets each call's value")
T.like(sink:stats().replayable, "writes in place a tensor its graph does not read",
  "... and such a call is not replayed, which cm:stats() says")

local inside
local probe = kiln.compile(function(x) inside = kiln.is_compiling(); return x + 1 end)
probe(kiln.ones({ 2 }))
T.is(inside, true, "kiln.is_compiling() is true while a compiled function traces")
T.is(kiln.is_compiling(), false, "... and false outside")

-- a result read by pointwise ops of one kernel: stored by that kernel
local function f(x, y) local m = x * 0.9 + y; return m, (m * m + x):sqrt() end
local cf = kiln.compile(f)
local x, y = kiln.rand({ 3, 7 }, { seed = 1 }), kiln.rand({ 3, 7 }, { seed = 2 })
local m1, o1 = cf(x, y)
local m2, o2 = f(x, y)
T.ok((m1 - m2):abs():max():item() == 0 and (o1 - o2):abs():max():item() == 0,
  "a result also read by the other result's expression: both equal eager")
T.is(#cf:kernels(), 1, "one kernel computes and stores both")
-- read by a row op too: its own kernel, as before
local function h(x) local m = x * 2; return m, m:sum(-1) end
local ch = kiln.compile(h)
local hm, hs = ch(x)
T.ok((hm - x * 2):abs():max():item() == 0 and (hs - (x * 2):sum(-1)):abs():max():item() < 1e-5,
  "a result read by a row op: equals eager")
T.done()
