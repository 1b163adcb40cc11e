-- kiln_train.lua: the kiln side of bench/train_bench.sh. Trains a training
-- sample (samples/train_SAMPLE.lua) in a mode and dtype the way
-- bench/torch_train.py trains its PyTorch twin: STEPS (100) steps one at a
-- time for the loss curve (the first, compile included, timed alone), then
-- REPS (5) repetitions of CALLS (50) back-to-back steps with a device sync
-- after each: ms a step is their median. Prints one JSON line.
--
--   build/kiln bench/kiln_train.lua SAMPLE MODE DTYPE
--
-- SAMPLE: gcn, convnet or transformer. MODE: eager, or a kiln.compile mode
-- (default, reduce-overhead, max-autotune) of the whole step (forward,
-- loss, backward and AdamW update in one graph). DTYPE: f32, or bf16 =
-- kiln.autocast (f32 master weights, as torch.autocast).
--
-- With KILN_TRAIN_REF, a folder where torch_train.py's eager rows wrote
-- train_SAMPLE.weights.safetensors and train_SAMPLE-DTYPE.io.safetensors,
-- the sample starts from PyTorch's initial weights on PyTorch's batch, and
-- the row carries the loss curve's largest relative difference from
-- PyTorch's eager curve and whether it is within the tolerance (f32 1e-4,
-- bf16 2e-2; NaN never is). Without it the sample's own weights and batch
-- are used and there is no curve check.
--
-- Env: KILN_BENCH_DEVICE (cuda), KILN_BENCH_SMALL (1: the small sizes),
-- STEPS, REPS, CALLS.
local kiln = rawget(_G, "kiln") or require("kiln")

local ROOT = ((arg and arg[0] or ""):match("^(.*)bench/kiln_train%.lua$") or "")
local U = dofile(ROOT .. "bench/bench_util.lua")
local env, json, median, exists = U.env, U.json, U.median, U.exists

local DEVICE = env("KILN_BENCH_DEVICE", "cuda")
local SMALL = env("KILN_BENCH_SMALL", "0") == "1"
local REF = env("KILN_TRAIN_REF", nil)
local STEPS = math.tointeger(tonumber(env("STEPS", "100")))
local REPS = math.tointeger(tonumber(env("REPS", "5")))
local CALLS = math.tointeger(tonumber(env("CALLS", "50")))
local TOLERANCE = { f32 = 1e-4, bf16 = 2e-2 }

-- PyTorch's name of a kiln parameter or buffer: Sequential counts its
-- children from 0 there.
local function torch_name(name)
  return (name:gsub("%f[%w](%d+)%f[^%w]", function(d) return tostring(tonumber(d) - 1) end))
end

-- Copy PyTorch's initial state into the sample's own tensors, in place:
-- the sample's optimizer holds those tensors, so replacing them
-- (m:load_safetensors) would leave it updating the old ones. Index buffers
-- (the GCN's edges) count from 1 in kiln. Every float tensor of the model
-- must be in the file.
local function load_initial_state(model, path)
  local file = kiln.load_safetensors(path)
  kiln.no_grad(function()
    for name, t in pairs(model:state_dict()) do
      local src = file[torch_name(name)]
      if src == nil then
        if t.dtype == "f32" then error(string.format("%s: no '%s' (kiln's %s)", path, torch_name(name), name)) end
      else
        if t.dtype == "i64" or t.dtype == "i32" then src = src + 1 end
        t:copy_(src:to(t.dtype):to(t.device))
      end
    end
  end)
end

local function row(sample, mode, dtype)
  local r = { side = "kiln", sample = sample, mode = mode, dtype = dtype, kiln = kiln.version,
    steps = STEPS, reps = REPS, calls = CALLS, device = DEVICE }
  kiln.session.small = SMALL
  local spec = kiln.load(ROOT .. "samples/train_" .. sample .. ".lua", { quiet = true })
  local x, y, ref_losses
  local wpath = REF and string.format("%s/train_%s.weights.safetensors", REF, sample)
  local iopath = REF and string.format("%s/train_%s-%s.io.safetensors", REF, sample, dtype)
  if wpath and exists(wpath) and exists(iopath) then
    load_initial_state(spec.model, wpath)
    local io_t = kiln.load_safetensors(iopath)
    x, y = io_t.x:to(DEVICE), io_t.y:to(DEVICE) + 1 -- classes and tokens from 1
    if x.dtype == "i64" then x = x + 1 end
    if x.dtype == "bool" then x = x:cast("f32") end
    ref_losses = io_t.losses:to("cpu")
    r.ref = "torch-eager"
  else
    local xs = spec.inputs({ small = SMALL, device = DEVICE })
    x, y = xs[1], xs[2]
    r.ref = REF and "no PyTorch export for this row: the sample's own weights and batch" or "none"
  end
  local autocast = dtype ~= "f32" and dtype or nil
  local step
  if mode == "eager" then
    if autocast then
      step = function() return kiln.autocast(autocast, spec.train_step, x, y) end
    else
      step = function() return spec.train_step(x, y) end
    end
  else
    local cm = kiln.compile(spec.train_step, { mode = mode, autocast = autocast })
    r.compiled = cm
    step = function() return cm(x, y) end
  end

  U.sync(DEVICE)
  local t0 = kiln.clock()
  local losses = { step():item() }
  r.first_step_s = kiln.clock() - t0
  for _ = 2, STEPS do losses[#losses + 1] = step():item() end
  r.loss_first, r.loss_last, r.losses = losses[1], losses[#losses], losses
  r.nan = false
  for _, v in ipairs(losses) do
    if v ~= v then r.nan = true end
  end
  if ref_losses then
    local want_all = ref_losses:tolist()
    local worst = 0
    for i = 1, math.min(#losses, #want_all) do
      local want = want_all[i]
      local d = math.abs(losses[i] - want) / math.max(math.abs(want), 1e-12)
      if d ~= d then d = math.huge end
      if d > worst then worst = d end
    end
    r.curve_max_rel_err = worst
    r.curve_tolerance = TOLERANCE[dtype]
    r.curve_ok = not r.nan and worst <= TOLERANCE[dtype] and #losses == #want_all
  end

  local per = {}
  for _ = 1, REPS do
    U.sync(DEVICE)
    local t = kiln.clock()
    for _ = 1, CALLS do step() end
    U.sync(DEVICE)
    per[#per + 1] = (kiln.clock() - t) / CALLS * 1e3
  end
  r.ms_per_step, r.ms_reps = median(per), per
  if r.compiled then
    U.compiled_stats(r, r.compiled, mode)
    r.compiled = nil
  end
  local ok, st = pcall(kiln.memory_stats, DEVICE)
  if ok and type(st) == "table" then
    r.peak_allocated_mib = (st.peak_allocated_bytes or 0) / 2 ^ 20
    r.peak_reserved_mib = (st.peak_reserved_bytes or 0) / 2 ^ 20
  end
  return r
end

local sample, mode, dtype = arg and arg[1], arg and arg[2], arg and arg[3]
if not (sample and mode and dtype) then
  io.stderr:write("usage: kiln bench/kiln_train.lua SAMPLE MODE DTYPE (SAMPLE gcn|convnet|transformer)\n")
  os.exit(2)
end
local ok, r = xpcall(row, debug.traceback, sample, mode, dtype)
if not ok then
  r = { side = "kiln", sample = sample, mode = mode, dtype = dtype, error = tostring(r):match("^[^\n]*") }
end
print(json(r))
