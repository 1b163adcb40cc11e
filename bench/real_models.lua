-- real_models.lua: the kiln side of the real-model suite (bench/real_models.sh).
-- Loads an ONNX file bench/real_models.py exported, converts it to the row's
-- dtype with m:to(dtype), runs it in a kiln mode with the method of
-- bench/torch_models.py (a cold first call, warm-up calls, REPS repetitions
-- of CALLS calls with a sync after each; ms per call is the median), checks
-- the output against PyTorch's in the same dtype, times the host's work of a
-- call on its own (host_us_per_call) and prints one JSON line.
--
--   build/kiln bench/real_models.lua NAME MODE DTYPE
--
-- Env: REF_DIR (the export folder: NAME.onnx, NAME.io.safetensors),
-- KILN_BENCH_DEVICE (cuda; cpu for a test without a GPU), KILN_BENCH_FIRST_ONLY
-- (1: the first call only, for a warm persistent-cache probe), REPS (5),
-- CALLS (100), WARMUP (10).
local kiln = rawget(_G, "kiln") or require("kiln")
local ROOT = ((arg and arg[0] or ""):match("^(.*)bench/real_models%.lua$") or "")
local U = dofile(ROOT .. "bench/bench_util.lua")

local DEVICE = U.env("KILN_BENCH_DEVICE", "cuda")
local REF = U.env("REF_DIR", ".")
local FIRST_ONLY = U.env("KILN_BENCH_FIRST_ONLY", "0") == "1"
local REPS = math.tointeger(tonumber(U.env("REPS", "5")))
local CALLS = math.tointeger(tonumber(U.env("CALLS", "100")))
local WARMUP = math.tointeger(tonumber(U.env("WARMUP", "10")))
local HOST_CALLS = 20 -- calls timed one at a time on an idle device for the host's time per call

-- The heavy ops of a graph that run in f32 (a bf16 model should have none).
local HEAVY = { matmul = true, conv2d = true, scaled_dot_product_attention = true }
local function f32_heavy(cm)
  local out = {}
  for _, g in ipairs(cm:graphs()) do
    for _, n in ipairs(g.nodes or g) do
      if HEAVY[n.op] and n.dtype == "f32" then out[#out + 1] = n.op .. " " .. table.concat(n.shape or {}, "x") end
    end
  end
  return out
end

local function row(name, mode, dtype)
  local r = { side = "kiln", model = name, mode = mode, dtype = dtype, device = DEVICE, kiln = kiln.version,
    reps = REPS, calls = CALLS, warmup = WARMUP, phase = FIRST_ONLY and "warm" or "cold" }
  kiln.config.allow_tf32 = false -- as PyTorch's rows
  local base_free = U.device_free(DEVICE)
  local t_load = kiln.clock()
  local m = kiln.onnx.load(REF .. "/" .. name .. ".onnx")
  local io_t = kiln.load_safetensors(REF .. "/" .. name .. ".io.safetensors")
  m:to(dtype):to(DEVICE)
  local xs = {}
  for k, vi in ipairs(m._inputs) do
    local x = io_t[vi.name] or error("no input '" .. vi.name .. "' in " .. name .. ".io.safetensors")
    if x.dtype == "f32" then x = x:to(dtype) end
    xs[k] = x:to(DEVICE)
  end
  r.load_s = kiln.clock() - t_load
  local expected = io_t["output." .. dtype]
  r.input_shape = xs[1]:shape()

  -- eager runs without recording a tape, as PyTorch's rows run under
  -- torch.inference_mode (a model's parameters require grad)
  local f, cm = function(...) return kiln.no_grad(m, ...) end, nil
  if mode ~= "eager" then
    f = kiln.compile(m, { mode = mode })
    cm = f
  end
  U.sync(DEVICE)
  local t0 = kiln.clock()
  local ys = table.pack(f(table.unpack(xs)))
  local y = ys[1]
  U.sync(DEVICE)
  r.first_call_s = kiln.clock() - t0
  r.n_inputs, r.n_outputs, r.n_params = #xs, ys.n, 0
  for _ in pairs(m.params or {}) do r.n_params = r.n_params + 1 end
  r.first_max_abs_err, r.first_max_rel_err = U.errors(y, expected)
  if cm then
    r.stats_first = U.stat_copy(cm:stats())
    r.graph_breaks = #cm:breaks()
    if dtype ~= "f32" then r.f32_heavy = f32_heavy(cm) end
  end
  if FIRST_ONLY then return r end

  for _ = 1, WARMUP do f(table.unpack(xs)) end
  U.sync(DEVICE)
  local per = {}
  for i = 1, REPS do
    t0 = kiln.clock()
    for _ = 1, CALLS do f(table.unpack(xs)) end
    U.sync(DEVICE)
    per[i] = (kiln.clock() - t0) / CALLS * 1e3
  end
  y = f(table.unpack(xs))
  U.sync(DEVICE)
  r.max_abs_err, r.max_rel_err = U.errors(y, expected)
  if dtype == "f32" and io_t["output.f64"] then
    r.f64_max_abs_err, r.f64_max_rel_err = U.errors(y, io_t["output.f64"], "f64")
  end
  r.ms_per_call, r.ms_reps, r.ms_min = U.median(per), per, math.min(table.unpack(per))
  -- the host's time for one call, each started on an idle device (as
  -- :time's host overhead): what a call costs the CPU before it returns,
  -- the launch of a CUDA graph included; report.py holds a graph's rows to
  -- HOST_US_MAX. (On the CPU a call returns when its work is done.)
  local host = {}
  local s0 = cm and cm:stats()
  for i = 1, HOST_CALLS do
    U.sync(DEVICE)
    t0 = kiln.clock()
    f(table.unpack(xs))
    host[i] = (kiln.clock() - t0) * 1e6
  end
  U.sync(DEVICE)
  r.host_us_per_call = U.median(host)
  local sum = 0
  for _, us in ipairs(host) do sum = sum + us end
  r.host_mean_us_per_call = sum / HOST_CALLS
  if cm then
    -- where it goes (means over the calls): running the graph (replay_run_s:
    -- the input and output copies, and the CUDA graph's launch, also apart);
    -- the rest is the direct replay's guards and the Lua call
    local s1 = cm:stats()
    r.host_run_us_per_call = (s1.replay_run_s - s0.replay_run_s) / HOST_CALLS * 1e6
    r.host_launch_us_per_call = ((s1.replay_launch_s or 0) - (s0.replay_launch_s or 0)) / HOST_CALLS * 1e6
    r.host_copy_in_us_per_call = ((s1.replay_copy_in_s or 0) - (s0.replay_copy_in_s or 0)) / HOST_CALLS * 1e6
    r.host_copy_out_us_per_call = ((s1.replay_copy_out_s or 0) - (s0.replay_copy_out_s or 0)) / HOST_CALLS * 1e6
    r.host_out_alloc_us_per_call = ((s1.replay_out_alloc_s or 0) - (s0.replay_out_alloc_s or 0)) / HOST_CALLS * 1e6
    -- the direct replay's guards: what the Lua side checks before it runs the graph
    r.host_guard_us_per_call = ((s1.replay_guard_s or 0) - (s0.replay_guard_s or 0)) / HOST_CALLS * 1e6
    r.guard_entries = s1.replay_guard_entries
  end
  r.ref = "torch-eager"
  if cm then U.compiled_stats(r, cm, mode) end
  -- device memory measured as PyTorch's row measures it: what the process
  -- holds after the calls over what it held before loading the model
  local free = U.device_free(DEVICE)
  if base_free and free then r.held_mib = (base_free - free) / 2 ^ 20 end
  local ms = kiln.memory_stats and kiln.memory_stats(DEVICE)
  if ms then r.pool_peak_reserved_mib = ms.peak_reserved_bytes / 2 ^ 20 end
  r.synced = true
  return r
end

local a = arg or {}
if not (a[1] and a[2] and a[3]) then error("usage: real_models.lua NAME MODE DTYPE") end
local ok, r = xpcall(row, debug.traceback, a[1], a[2], a[3])
if not ok then r = { side = "kiln", model = a[1], mode = a[2], dtype = a[3], device = DEVICE, error = tostring(r) } end
io.stdout:write(U.json(r), "\n")
