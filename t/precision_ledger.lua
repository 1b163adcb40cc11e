-- precision_ledger.lua: cm:precision, the precision ledger (core
-- kn_plan_ledger.c): a row for every f32 library kernel (matmul, conv,
-- attention) of the graphs that ran compiled, with its error against a
-- float64 computation on the same inputs, a true-f32 computation's, and
-- whether the kernel keeps the "ieee" contract (at most twice the true-f32
-- error). On the CPU the kernels are true f32 themselves; on a GPU (when
-- there is one) strict cuBLASLt f32 keeps the contract and TF32 breaks it
-- on a long dot product.
local T = dofile("t/lib/tap.lua")
local nn = kiln.nn

local function ledger_ok(led, what)
  T.ok(led.measured, what .. ": the call ran compiled and was measured")
  for _, r in ipairs(led) do
    local tag = what .. " " .. tostring(r.name)
    T.ok(type(r.engine) == "string" and #r.engine > 0, tag .. ": names its engine (" .. tostring(r.engine) .. ")")
    T.ok(r.max_err == r.max_err and r.max_err >= 0 and r.max_err < 1e-5, tag .. ": max error " .. r.max_err)
    T.ok(r.rms_err == r.rms_err and r.rms_err <= r.max_err, tag .. ": RMS error " .. r.rms_err .. " <= max")
    T.ok(r.f32_max_err == r.f32_max_err and r.f32_max_err >= 0 and r.f32_max_err < 1e-5,
      tag .. ": true-f32 error " .. r.f32_max_err)
    T.is(r.meets, r.max_err <= 2 * r.f32_max_err + 4e-7, tag .. ": meets says max <= 2 x true f32")
    T.is(r.by_floor, r.meets and r.max_err > 2 * r.f32_max_err, tag .. ": by_floor says met only by the floor")
  end
end

-- an MLP: two matmuls, each a row, numbered as cm:kernels() numbers them
do
  local m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
  local x = kiln.randn({ 32, 64 }, { seed = 1, device = "cpu" })
  local cm = kiln.compile(m:to("cpu"))
  local led, y = cm:precision(x)
  T.is(#led, 2, "MLP: two f32 library kernels, two rows")
  T.is(table.concat(y:shape(), "x"), "32x10", "MLP: cm:precision returns the call's result after the ledger")
  local ks = cm:kernels()
  for _, r in ipairs(led) do
    T.is(ks[r.kernel] and ks[r.kernel].name, r.name, "row " .. r.name .. ": its 1-based number is cm:kernels()'s")
    T.is(r.op, "matmul", "row " .. r.name .. ": its op")
  end
  ledger_ok(led, "MLP")
  T.ok(led[1] and led[1].meets and led[2] and led[2].meets, "MLP on the CPU: true f32 keeps the contract")
end

-- attention and a convolution
do
  local f = function(q, k, v) return kiln.scaled_dot_product_attention(q, k, v) end
  local q = kiln.randn({ 2, 4, 33, 16 }, { seed = 2, device = "cpu" })
  local led = kiln.compile(f):precision(q, q, q)
  T.is(#led, 1, "attention: one row")
  T.is(led[1] and led[1].op, "scaled_dot_product_attention", "attention: its op")
  ledger_ok(led, "attention")
  local conv = nn.Conv2d(3, 8, 3):to("cpu")
  local img = kiln.randn({ 2, 3, 9, 9 }, { seed = 3, device = "cpu" })
  local lc = kiln.compile(conv):precision(img)
  T.is(#lc, 1, "conv: one row")
  ledger_ok(lc, "conv")
end

-- no f32 library kernel: no rows; eager mode: nothing measured
do
  local g = function(a) return (a * 2):relu() end
  local a = kiln.randn({ 8 }, { seed = 4, device = "cpu" })
  local led = kiln.compile(g):precision(a)
  T.is(#led, 0, "pointwise only: no rows")
  T.ok(led.measured, "pointwise only: still measured")
  local lb = kiln.compile(function(p, r) return p:matmul(r) end):precision(kiln.randn({ 4, 4 }, { seed = 5, device = "cpu" }):to("bf16"),
    kiln.randn({ 4, 4 }, { seed = 6, device = "cpu" }):to("bf16"))
  T.is(#lb, 0, "a bf16 matmul: no row (the ledger is about f32)")
  local e = kiln.compile(g, { mode = "eager" }):precision(a)
  T.is(e.measured, false, "eager mode: nothing compiled ran, nothing measured")
  T.is(#e, 0, "eager mode: no rows")
end

-- on a GPU: strict f32 keeps the contract; TF32 on a 2048-long dot product does not
if kiln.cuda_available and kiln.cuda_available() and pcall(kiln.zeros, { 1 }, { device = "cuda" }) then
  local p = kiln.randn({ 64, 2048 }, { seed = 7, device = "cuda" })
  local r = kiln.randn({ 2048, 64 }, { seed = 8, device = "cuda" })
  local mm = function(u, v) return u:matmul(v) end
  local strict = kiln.compile(mm):precision(p, r)
  T.is(#strict, 1, "GPU matmul: one row")
  ledger_ok(strict, "GPU strict f32")
  T.ok(strict[1] and strict[1].meets, "GPU strict f32 keeps the contract (" .. tostring(strict[1] and strict[1].engine) .. ")")
  kiln.config.f32_precision = "tf32"
  local tf = kiln.compile(mm):precision(p, r)
  kiln.config.f32_precision = "ieee"
  T.ok(tf[1] and not tf[1].meets and tf[1].max_err > 4 * tf[1].f32_max_err,
    "GPU TF32 breaks it: " .. (tf[1] and string.format("%.2e against true f32's %.2e", tf[1].max_err, tf[1].f32_max_err) or "no row"))
else
  print("# no CUDA device: the GPU rows are not run")
end

T.done()
