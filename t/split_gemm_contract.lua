-- split_gemm_contract.lua: the "ieee" contract (kiln.config.f32_precision)
-- around kiln's split-precision f32 GEMM on the GPU: the default mode runs
-- the split kernel's wgmma form on Hopper at this shape, cuBLASLt's strict
-- GEMM elsewhere, either keeping the contract on uniform inputs (the
-- precision ledger measures it against float64 beside a true-f32
-- computation);
-- max-autotune offers every tile shape of the split kernel beside
-- cuBLASLt's algorithms, holds each to the contract against float64 on
-- the real inputs, rejects those that break it (denormal inputs: the
-- split's TF32 parts lose bits there) and picks one that keeps it. In
-- "tf32" mode the kernel is never a candidate. Without a GPU it skips.
local T = dofile("t/lib/tap.lua")

if not (kiln.cuda_available and kiln.cuda_available() and pcall(kiln.zeros, { 1 }, { device = "cuda" })) then
  T.skip_all("no CUDA device")
end

local cache = os.tmpname()
os.remove(cache)
kiln.config.cache_dir = cache
kiln.config.autotune_budget_s = 120
kiln.config.f32_precision = "ieee"

-- large_linear's kind of layer (few rows, a wide weight, a long sum)
local W = kiln.randn({ 2048, 4096 }, { seed = 11, device = "cuda" })
local function linear(x) return x:matmul(W:transpose(1, 2)) end
local x = kiln.randn({ 64, 4096 }, { seed = 12, device = "cuda" })

local led = kiln.compile(linear):precision(x)
T.is(#led, 1, "one f32 matmul row in the ledger")
local row = led[1] or {}
-- on Hopper (compute capability 9.0) the default at this shape is the
-- split kernel's wgmma form; elsewhere cuBLASLt's strict GEMM
local gpu = kiln.device_info().cuda.devices[1] or {}
if gpu.cc == "9.0" or gpu.cc == 9.0 then
  T.ok(row.engine and row.engine:find("split%-f32 GEMM wg"), "the default runs the wgmma split kernel: " .. tostring(row.engine))
else
  T.ok(row.engine and not row.engine:find("split%-f32"), "the default runs cuBLASLt: " .. tostring(row.engine))
end
T.ok(row.meets, string.format("and keeps the contract: error %.2e, true f32 %.2e", row.max_err or -1, row.f32_max_err or -1))
T.ok(row.max_err and row.max_err == row.max_err and row.max_err < 1e-5, "its error is f32-sized, never NaN")

-- max-autotune: the candidates and the contract
local function search(xin, tag, w)
  W = w or W
  -- a fresh cache: the search measures these inputs, not a choice made on others
  kiln.config.cache_dir = os.tmpname()
  os.remove(kiln.config.cache_dir)
  local cm = kiln.compile(linear, { mode = "max-autotune" })
  local y = cm(xin)
  local ref = xin:to("f64"):matmul(W:to("f64"):transpose(1, 2))
  local d = (y:to("f64") - ref):abs():amax():item() / ref:abs():amax():item()
  T.ok(d == d and d < 1e-5, tag .. ": the tuned result is within f32 error of float64: " .. d)
  local res = cm:autotune()
  local k = res[1]
  T.ok(k ~= nil, tag .. ": the matmul was tuned")
  if not k then return end
  local split, strict, rejected, other = 0, 0, 0, 0
  for _, c in ipairs(k.candidates) do
    local label = c.label or ""
    if label:find("split%-f32") then
      split = split + 1
      if c.status and c.status:find("ieee contract") then
        rejected = rejected + 1
        T.diag(tag .. ": rejected " .. label .. ": " .. c.status)
      elseif c.status then
        other = other + 1
        T.diag(tag .. ": " .. label .. ": " .. c.status)
      end
    end
    if label:lower():find("cublaslt") then strict = strict + 1 end
  end
  T.is(other, 0, tag .. ": a split candidate either keeps the contract or is rejected for breaking it")
  T.ok(split >= 4, tag .. ": every split tile shape is a candidate (" .. split .. ")")
  T.ok(strict >= 1, tag .. ": cuBLASLt's strict GEMM is a candidate (" .. strict .. ")")
  local chosen
  for _, c in ipairs(k.candidates) do
    if c.choice == k.choice then chosen = c end
  end
  T.ok(chosen and not chosen.status,
    tag .. ": the choice (" .. tostring(k.choice) .. ") keeps the contract")
  local l = cm:precision(xin)
  T.ok(l[1] and l[1].meets, tag .. ": the ledger agrees for the tuned engine (" .. tostring(l[1] and l[1].engine) .. ")")
  os.execute("rm -rf '" .. kiln.config.cache_dir .. "'")
  return rejected
end

T.is(search(x, "uniform inputs"), 0, "uniform inputs: no split candidate breaks the contract")
-- x all denormal, against weights of about 1e25 (normal products): whatever
-- the tensor cores do with denormals, the choice must keep the contract
local tiny = (kiln.rand({ 64, 4096 }, { seed = 13, device = "cuda" }) + 0.5) * 1e-39
local rejected = search(tiny, "denormal inputs", W * 1e25)
T.diag("denormal inputs: " .. tostring(rejected) .. " split candidates rejected for the contract")

-- "tf32": never the split kernel (TF32 itself is the engine)
kiln.config.f32_precision = "tf32"
local lt = kiln.compile(linear):precision(x)
T.ok(lt[1] and not (lt[1].engine or ""):find("split%-f32"), "tf32 mode: not the split kernel (" .. tostring(lt[1] and lt[1].engine) .. ")")
kiln.config.f32_precision = "ieee"

os.execute("rm -rf '" .. cache .. "'")
T.done()
