-- cuda_arena.lua: on the GPU a plan gives its arena (the generated
-- kernels' intermediate values) back to the caching pool when its run ends,
-- so a compiled function between calls holds only what it returns, and a
-- version that no longer runs (a recompile for another shape) holds
-- nothing. Results stay right run after run, and across versions.
local T = dofile("t/lib/tap.lua")
local ok_cuda, why = kiln.cuda_available()
if not ok_cuda then T.skip_all("no CUDA device (" .. tostring(why) .. ")") end

local MIB = 2 ^ 20
local function in_use()
  kiln.synchronize("cuda")
  return kiln.memory_stats("cuda").allocated_bytes
end

-- relu(2x) is a generated kernel's value that the matmul reads: it lives in
-- the arena; the matmul's output is the library's, freed after its reader.
-- The weight is scaled so the products stay near 1: the compiled matmul
-- (split-f32) and eager's (cuBLASLt) then agree to about 1e-6, where an
-- arena handed to another value would be off by about 1.
local w = (kiln.randn({ 1024, 1024 }, { seed = 2 }) * (1 / 32)):to("cuda")
local TOL = 1e-4
local function f(x) return ((x * 2):relu():matmul(w) + 1):tanh() end
local cm = kiln.compile(f, { mode = "default" })

-- a version's first call also makes what its plan keeps for good (library
-- plans and workspaces, weights laid out once): held is checked after it
local function check(x, label, first)
  local base = in_use()
  local y = cm(x)
  local held = in_use() - base
  local out_bytes = y:numel() * 4
  local arena = cm:stats().peak_bytes
  T.ok(arena > 0, string.format("%s: the plan has an arena (%.1f MiB at its peak)", label, arena / MIB))
  if not first then
    T.ok(held <= out_bytes + 2 * MIB,
      string.format("%s: after the call the pool holds the result (%.1f MiB) and no arena: %.1f MiB more in use",
        label, out_bytes / MIB, held / MIB))
  end
  local err = (y - f(x)):abs():amax():item()
  T.ok(err <= TOL, string.format("%s: the result is eager's (off by %.3g)", label, err))
  return y
end

local xa = kiln.randn({ 1024, 1024 }, { seed = 1 }):to("cuda")
local xb = kiln.randn({ 512, 1024 }, { seed = 3 }):to("cuda")
check(xa, "first call", true)
check(xa, "second call (the arena taken again)")
check(xb, "another shape (a second version)", true)
check(xb, "that shape again")
local ya = check(xa, "the first shape again: the first version's arena given back by the second")
local yb = cm(xb)
T.ok((yb - f(xb)):abs():amax():item() <= TOL and (ya - f(xa)):abs():amax():item() <= TOL,
  "results of both versions, alternating, stay right")

-- reduce-overhead: the recording keeps what its run used; replays stay right
local ro = kiln.compile(f, { mode = "reduce-overhead" })
local ys = {}
for i = 1, 5 do ys[i] = ro(xa) end
local want = f(xa)
local worst = 0
for i = 1, 5 do worst = math.max(worst, (ys[i] - want):abs():amax():item()) end
T.ok(worst <= TOL and ro:stats().replays >= 1,
  string.format("reduce-overhead: five calls (%d replays), each result eager's (off by %.3g)", ro:stats().replays, worst))
T.done()
