-- cuda_samples.lua: every sample (the benchmark's five workloads) on the GPU
-- (issue 5): eager on CUDA against eager on the CPU (the reference), then
-- each compiled mode against CUDA eager, in f32 and bf16; reduce-overhead
-- replays its recording (cm:stats().replays, cuda_graph "yes") and a replay
-- after the input changed in place (x:copy_) equals an eager run on the new
-- data. Skipped where there is no CUDA device.
local T = dofile("t/lib/tap.lua")

local ok_cuda, why = kiln.cuda_available()
if not ok_cuda then T.skip_all("no CUDA device (" .. tostring(why) .. ")") end

-- ||c - e|| / ||e|| in f64 on the CPU; NaN, Inf and shape or dtype
-- mismatches give math.huge, so they never pass.
local function relerr(c, e)
  if type(c) ~= "userdata" or type(e) ~= "userdata" then return math.huge end
  if table.concat(c:shape(), ",") ~= table.concat(e:shape(), ",") then return math.huge end
  c, e = c:to("cpu"):to("f64"), e:to("cpu"):to("f64")
  local d = ((c - e) ^ 2):sum():sqrt():item()
  local n = (e ^ 2):sum():sqrt():item()
  local r = n > 0 and d / n or d
  return (r == r and r ~= math.huge) and r or math.huge
end

local function first(y) return type(y) == "table" and y[1] or y end

-- full sizes: the benchmark's workloads (bench/gpu_bench.sh); small ones for the
-- CPU reference, which is single-threaded
local SAMPLES = { "simple_linear", "large_linear", "convnet", "transformer_block", "gcn" }
local TOL = { f32 = 1e-5, bf16 = 2e-2 }

local function load(name, small)
  kiln.session.small = small -- large_linear and gcn read it while the file loads
  local spec = dofile("samples/" .. name .. ".lua")
  kiln.session.small = nil
  return spec
end

for _, name in ipairs(SAMPLES) do
  -- 1. CUDA eager against CPU eager, small size, same weights
  do
    local spec = load(name, true)
    local x = spec.inputs({ small = true, dtype = "f32", device = "cuda" })
    local y_gpu = first(spec.model(table.unpack(x)))
    T.is(y_gpu.device, "cuda", name .. ": eager output lives on the GPU")
    local cpu = load(name, true)
    cpu.model:to("cpu")
    local xc = {}
    for i, t in ipairs(x) do xc[i] = t:to("cpu") end
    local y_cpu = first(cpu.model(table.unpack(xc)))
    local e = relerr(y_gpu, y_cpu)
    T.ok(e <= 1e-5, string.format("%s: CUDA eager matches the CPU reference (f32, small): rel %.2e", name, e))
  end
  -- 2. compiled modes against CUDA eager, full size, f32 and bf16
  for _, dt in ipairs({ "f32", "bf16" }) do
    local spec = load(name, false)
    if dt ~= "f32" then spec.model:to(dt) end
    local x = spec.inputs({ dtype = dt, device = "cuda" })
    local ref = first(spec.model(table.unpack(x)))
    for _, mode in ipairs({ "default", "reduce-overhead" }) do
      local cm = kiln.compile(spec.model, { mode = mode })
      local worst = 0
      for _ = 1, 4 do
        local y = first(cm(table.unpack(x)))
        worst = math.max(worst, relerr(y, ref))
      end
      T.ok(worst <= TOL[dt], string.format("%s %s %s: 4 compiled calls match eager: rel %.2e", name, dt, mode, worst))
      local st = cm:stats()
      local kinds = {}
      for _, k in ipairs(cm:kernels()) do kinds[k.kind] = (kinds[k.kind] or 0) + 1 end
      local want = name == "convnet" and "cudnn" or name ~= "gcn" and "cublaslt" or nil
      if want then
        T.ok((kinds[want] or 0) > 0 and not kinds.cpu,
          string.format("%s %s %s: cm:kernels() names %s kernels and no cpu ones", name, dt, mode, want))
      end
      if name ~= "gcn" then
        -- Linear's bias (and ReLU, and the residual add) in cuBLASLt's epilogue; a conv's ReLU in cuDNN's graph
        T.ok(st.library_epilogues > 0,
          string.format("%s %s %s: %d pointwise kernels run in a matmul's epilogue", name, dt, mode, st.library_epilogues))
      end
      if mode == "reduce-overhead" then
        T.is(st.cuda_graph, "yes", string.format("%s %s: the graph is recorded and replayed", name, dt))
        T.ok(st.replays >= 2, string.format("%s %s: %d calls replayed a recording", name, dt, st.replays))
        -- the host's time of those replays, apart (reported, as the suite's
        -- host column reads it; the launch's is the one sure to be above 0)
        T.ok(st.replay_launch_s > 0 and st.replay_copy_in_s >= 0 and st.replay_copy_out_s >= 0,
          string.format("%s %s: replay host time: launch %.1f, copies in %.1f, out %.1f us", name, dt,
            st.replay_launch_s * 1e6, st.replay_copy_in_s * 1e6, st.replay_copy_out_s * 1e6))
        -- new data in the same input tensor: the recording reads it
        local fresh = spec.inputs({ dtype = dt, device = "cuda" })
        local x2 = kiln.randn(x[1]:shape(), { seed = 7, device = "cuda" })
        if x[1].dtype == "f32" or x[1].dtype == "bf16" then
          x[1]:copy_(x2:to(x[1].dtype))
          local want = first(spec.model(table.unpack(x)))
          local got = first(cm(table.unpack(x)))
          local e = relerr(got, want)
          T.ok(e <= TOL[dt] and relerr(want, ref) > 1e-3,
            string.format("%s %s: a replay after x:copy_(new data) equals eager on it: rel %.2e", name, dt, e))
          x[1]:copy_(fresh[1])
          -- two calls on two other tensors: each result is its own call's,
          -- and stays so after the next (the recording's copies in and out
          -- point at each call's tensors)
          local xa, xb = { table.unpack(x) }, { table.unpack(x) }
          xa[1] = kiln.randn(x[1]:shape(), { seed = 21, device = "cuda" }):to(x[1].dtype)
          xb[1] = kiln.randn(x[1]:shape(), { seed = 22, device = "cuda" }):to(x[1].dtype)
          local ya = first(cm(table.unpack(xa)))
          local yb = first(cm(table.unpack(xb)))
          local wa, wb = first(spec.model(table.unpack(xa))), first(spec.model(table.unpack(xb)))
          local ea, eb = relerr(ya, wa), relerr(yb, wb)
          T.ok(ea <= TOL[dt] and eb <= TOL[dt] and relerr(wa, wb) > 1e-3,
            string.format("%s %s: replays on two new tensors, each result its own call's: rel %.2e, %.2e", name, dt,
              ea, eb))
        end
      end
    end
  end
end

-- reduce-overhead with views from outside as inputs: a slice of a longer
-- sequence (a training sample's tokens) and a transposed batch are
-- recorded through static buffers of their own layout; the replay reads
-- each call's data; a view of another layout runs that call unrecorded,
-- and right.
do
  local w = kiln.randn({ 16, 32 }, { seed = 3, device = "cuda" })
  local f = function(a, b) return (a:matmul(w) + b:transpose(1, 2)):relu() end
  local cm = kiln.compile(f, { mode = "reduce-overhead" })
  local seq = kiln.randn({ 8, 40 }, { seed = 4, device = "cuda" })
  local bt = kiln.randn({ 32, 8 }, { seed = 5, device = "cuda" })
  local worst = 0
  for i = 1, 6 do
    local a = seq:slice(2, i, i + 15) -- 8 x 16, rows 40 apart
    local e = relerr(cm(a, bt), f(a, bt))
    worst = math.max(worst, e)
    bt:copy_(kiln.randn({ 32, 8 }, { seed = 10 + i, device = "cuda" }))
  end
  local st = cm:stats()
  T.is(st.cuda_graph, "yes", "reduce-overhead records a graph whose inputs are views")
  T.ok(st.replays >= 3, string.format("... and replays it (%d replays)", st.replays))
  T.ok(worst <= 1e-5, string.format("... each replay reading that call's slice and data: rel %.2e", worst))
  local a2 = seq:contiguous():slice(2, 1, 16):contiguous()
  T.ok(relerr(cm(a2, bt), f(a2, bt)) <= 1e-5, "a contiguous input after the recording of a view: right")
end

-- every call's result stays its own after the calls that follow: the
-- call that records, and each replay (the recording copies its output
-- into each call's result, which must never be memory the recording
-- itself writes; max-autotune replays many times inside the recording
-- call, to time it)
do
  local cache = os.tmpname()
  os.remove(cache)
  kiln.config.cache_dir = cache -- max-autotune's choices stay out of the user's cache
  local w = kiln.randn({ 32, 32 }, { seed = 5, device = "cuda" })
  local f = function(a) return (a:matmul(w):relu():matmul(w) + a):tanh() end
  for _, mode in ipairs({ "reduce-overhead", "max-autotune" }) do
    local cm = kiln.compile(f, { mode = mode })
    local xs, ys = {}, {}
    for i = 1, 6 do
      xs[i] = kiln.randn({ 8, 32 }, { seed = 40 + i, device = "cuda" })
      ys[i] = cm(xs[i])
    end
    local worst = 0
    for i = 1, 6 do worst = math.max(worst, relerr(ys[i], f(xs[i]))) end
    local st = cm:stats()
    T.ok(worst <= 1e-5 and (st.replays >= 1 or mode == "max-autotune"),
      string.format("%s: six calls' results, read after the sixth, are each its own call's: rel %.2e (%d replays)",
        mode, worst, st.replays))
  end
end

T.done()
