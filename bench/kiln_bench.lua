-- kiln_bench.lua: the kiln side of bench/gpu_bench.sh. Times a sample in a
-- kiln mode with the method of bench/torch_models.py (time_calls: a cold
-- first call, warm-up calls, then REPS repetitions of CALLS back-to-back
-- calls with a device sync after each; ms per call is the median over the
-- repetitions), checks the output against PyTorch's on PyTorch's weights
-- and input, and prints one JSON line per row on stdout (progress goes to
-- stderr).
--
--   build/kiln bench/kiln_bench.lua MODEL MODE DTYPE   one row
--   build/kiln bench/kiln_bench.lua                    MODELS x KILN_MODES x DTYPES in this process
--   build/kiln bench/kiln_bench.lua info               one line: kiln version and devices
--   (or lua5.4 with build/ on package.cpath: the module is required when there is no global kiln)
--
-- MODEL is a sample's name (samples/MODEL.lua) or an ONNX row,
-- transformer_block_onnx: transformer_block.onnx from KILN_BENCH_ONNX_DIR
-- (default KILN_BENCH_REF), written by bench/export_onnx.py with
-- transformer_block_onnx-DTYPE.io.safetensors (input, PyTorch's output) beside
-- it; without the file the row is "skipped" with the export's reason.
--
-- Env: KILN_BENCH_DEVICE (cuda; cpu for a test without a GPU), KILN_BENCH_SMALL
-- (1: the samples' small sizes), KILN_BENCH_REF (a folder with PyTorch's
-- MODEL-DTYPE.weights.safetensors and MODEL-DTYPE.io.safetensors; without it,
-- or without the files, the sample's own weights and input are used and the
-- output is checked against kiln eager), KILN_BENCH_FIRST_ONLY (1: only the
-- first call, for the second process of a warm persistent-cache probe),
-- REPS (5), CALLS (100), WARMUP (10), and for the no-argument form MODELS,
-- KILN_MODES, DTYPES (comma lists).
local kiln = rawget(_G, "kiln") or require("kiln")

-- the samples live beside this file's folder, wherever the command runs from
local ROOT = ((arg and arg[0] or ""):match("^(.*)bench/kiln_bench%.lua$") or "")
local U = dofile(ROOT .. "bench/bench_util.lua")
local env, list, json, median, errors, stat_copy, exists = U.env, U.list, U.json, U.median, U.errors, U.stat_copy,
  U.exists

local DEVICE = env("KILN_BENCH_DEVICE", "cuda")
local SMALL = env("KILN_BENCH_SMALL", "0") == "1"
local REF = env("KILN_BENCH_REF", nil)
local FIRST_ONLY = env("KILN_BENCH_FIRST_ONLY", "0") == "1"
local REPS = math.tointeger(tonumber(env("REPS", "5")))
local CALLS = math.tointeger(tonumber(env("CALLS", "100")))
local WARMUP = math.tointeger(tonumber(env("WARMUP", "10")))

---------------------------------------------------------------------------

local SIZE = { f32 = 4, f64 = 8, bf16 = 2, f16 = 2, i32 = 4, i64 = 8, bool = 1 }

local function bytes_of(t)
  return t:numel() * (SIZE[t.dtype] or 4)
end

-- PyTorch's GCN holds its edges as 0-based node numbers; kiln's index ops
-- count from 1, so the loaded src and dst are shifted to mean the same edges.
local FIXUPS = {
  gcn = function(m)
    m.src = m.src + 1
    m.dst = m.dst + 1
  end,
}

-- A device memory counter, where this kiln exposes one (the names are
-- guesses at what the CUDA backend will call it; none exists yet).
local function device_memory()
  for _, name in ipairs { "cuda_memory_stats", "memory_stats" } do
    local f = kiln[name]
    if type(f) == "function" then
      local ok, st = pcall(f, DEVICE)
      if ok and type(st) == "table" then return name, stat_copy(st) end
    end
  end
  return nil
end

-- The rows of ONNX files: the model PyTorch's exporter wrote from a
-- bench/torch_models.py model (bench/export_onnx.py, run by gpu_bench.sh),
-- timed beside the Lua sample of the same model.
local ONNX_ROWS = {
  transformer_block_onnx = { file = "transformer_block.onnx", source = "transformer_block" },
}

-- A one-line reason from export_onnx.py's status file (FILE.json), if any.
local function export_status(path)
  local f = io.open(path .. ".json", "rb")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  local err = text:match('"error"%s*:%s*"(.-)"%s*[,}]')
  local exporter = text:match('"exporter"%s*:%s*"(.-)"')
  return err, exporter, text
end

-- The model, its f32 CPU input and the expected output (nil: kiln eager is
-- the reference) of a Lua sample: PyTorch's weights and input where
-- torch_models.py exported them, else the sample's own.
local function lua_source(model_name, dtype, r)
  local spec = kiln.load(ROOT .. "samples/" .. model_name .. ".lua", { quiet = true })
  local model = spec.model
  local wpath = REF and string.format("%s/%s-%s.weights.safetensors", REF, model_name, dtype)
  local iopath = REF and string.format("%s/%s-%s.io.safetensors", REF, model_name, dtype)
  if wpath and exists(wpath) and exists(iopath) then
    -- loaded while the model is still f32 on the CPU: bf16 weights widen
    -- exactly and narrow back to the same bits in :to(dtype) below
    model:load_safetensors(wpath, { index_base = 0 })
    if FIXUPS[model_name] then FIXUPS[model_name](model) end
    local io_t = kiln.load_safetensors(iopath)
    r.ref = "torch-eager"
    return model, io_t.input, io_t.output, io_t.output_f64
  end
  r.ref = "kiln-eager"
  r.ref_note = REF and "no PyTorch export for this row; compared with kiln eager on the sample's weights" or nil
  return model, spec.inputs({ small = SMALL, dtype = "f32", device = "cpu" })[1], nil
end

-- The same for an ONNX row: the f32 file from ONNX_DIR (default: REF), its
-- weights inside it; the input and PyTorch's output for this dtype from
-- MODEL-DTYPE.io.safetensors beside it (the exported module run eagerly in
-- that dtype). nil and r.skipped when there is no file: the row says why.
local function onnx_source(model_name, dtype, r)
  local o = ONNX_ROWS[model_name]
  local dir = env("KILN_BENCH_ONNX_DIR", REF)
  r.source_model = o.source
  if not kiln.onnx.available then
    r.skipped = "this kiln was built without ONNX import"
    return nil
  end
  local path = dir and (dir .. "/" .. o.file)
  if not path or not exists(path) then
    local why = path and export_status(path)
    r.skipped = string.format("no ONNX export%s: %s", path and (" at " .. path) or "",
      why or (dir and "bench/export_onnx.py did not write one (no PyTorch, or it was not run)"
        or "set KILN_BENCH_REF or KILN_BENCH_ONNX_DIR to the folder of bench/export_onnx.py's files"))
    return nil
  end
  local _, exporter = export_status(path)
  r.onnx_file, r.onnx_exporter = o.file, exporter
  local model = kiln.onnx.load(path)
  r.onnx_opset, r.onnx_nodes = model._model.opset, #model._model.graph.nodes
  local iopath = string.format("%s/%s-%s.io.safetensors", dir, model_name, dtype)
  if exists(iopath) then
    local io_t = kiln.load_safetensors(iopath)
    r.ref = "torch-eager"
    return model, io_t.input, io_t.output, io_t.output_f64
  end
  r.ref = "kiln-eager"
  r.ref_note = "no PyTorch output beside the ONNX file; compared with kiln eager"
  return model, kiln.onnx.example_inputs(model, {}, 0)[1]:to("f32"), nil
end

local function row(model_name, mode, dtype)
  local r = { side = "kiln", model = model_name, mode = mode, dtype = dtype, device = DEVICE,
    kiln = kiln.version, reps = REPS, calls = CALLS, warmup = WARMUP, small = SMALL or nil,
    phase = FIRST_ONLY and "warm" or "cold" }
  kiln.session.small = SMALL
  kiln.config.allow_tf32 = false -- as PyTorch's rows
  local base_free = U.device_free(DEVICE) -- before the model: held_mib below is what the row adds
  -- expected64: PyTorch's float64 run of the same model and input (f32 rows)
  local model, x, expected, expected64 = (ONNX_ROWS[model_name] and onnx_source or lua_source)(model_name, dtype, r)
  if not model then return r end
  model:to(dtype):to(DEVICE)
  x = x:to(dtype):to(DEVICE)
  r.input_shape = x:shape()
  local pbytes = 0
  for _, t in pairs(model:state_dict()) do pbytes = pbytes + bytes_of(t) end
  r.param_bytes, r.input_bytes = pbytes, bytes_of(x)

  if expected == nil then -- kiln eager on the same device and dtype is the reference
    expected = model(x):to("cpu")
  end

  -- eager rows record no gradients, as PyTorch's rows run under
  -- torch.inference_mode (a model's parameters require grad)
  local f, cm = function(v) return kiln.no_grad(model, v) end, nil
  if mode ~= "eager" then
    local ok, c = pcall(kiln.compile, model, { mode = mode })
    if not ok then
      r.error, r.unsupported = tostring(c), true
      return r
    end
    f, cm = c, c
  end

  U.sync(DEVICE)
  local t0 = kiln.clock()
  local y = f(x)
  U.sync(DEVICE)
  r.first_call_s = kiln.clock() - t0
  local y_first = y:to("cpu") -- copied now: a replayed graph may reuse its output buffer
  if cm then r.stats_first = stat_copy(cm:stats()) end
  r.first_max_abs_err, r.first_max_rel_err = errors(y_first, expected)
  if FIRST_ONLY then return r end

  for _ = 1, WARMUP do f(x) end
  U.sync(DEVICE)
  local per = {}
  for i = 1, REPS do
    t0 = kiln.clock()
    for _ = 1, CALLS do f(x) end
    U.sync(DEVICE)
    per[i] = (kiln.clock() - t0) / CALLS * 1e3
  end
  y = f(x)
  U.sync(DEVICE)
  r.max_abs_err, r.max_rel_err = errors(y, expected)
  if expected64 then r.f64_max_abs_err, r.f64_max_rel_err = errors(y, expected64, "f64") end
  r.ms_per_call, r.ms_reps = median(per), per
  r.ms_min = math.min(table.unpack(per))
  if cm then U.compiled_stats(r, cm, mode) end
  -- without a sync the clock would read launch time only on an asynchronous device
  r.synced = type(kiln.synchronize) == "function"
  local free = U.device_free(DEVICE)
  if base_free and free then r.held_mib = (base_free - free) / 2 ^ 20 end
  local mem_fn, mem = device_memory()
  if mem_fn then r.device_memory, r.device_memory_fn = mem, mem_fn end
  return r
end

local function info()
  local di = kiln.device_info()
  local r = { side = "env-kiln", kiln = kiln.version, device = DEVICE, cpu = di.cpu and di.cpu.name }
  local cuda = di.cuda or {}
  r.cuda_built, r.cuda_error = cuda.built, cuda.error
  local d = cuda.devices and cuda.devices[1]
  if d then
    for k, v in pairs(d) do r["gpu_" .. k] = v end
  end
  for _, k in ipairs { "runtime", "cudnn", "nvrtc", "cublaslt" } do -- if a later kiln reports them
    if cuda[k] ~= nil then r["cuda_" .. k] = cuda[k] end
  end
  return r
end

local function emit(r)
  io.stdout:write(json(r), "\n")
  io.stdout:flush()
end

local function safe_row(m, mode, dt)
  local ok, r = xpcall(row, debug.traceback, m, mode, dt)
  if not ok then r = { side = "kiln", model = m, mode = mode, dtype = dt, device = DEVICE, error = tostring(r) } end
  return r
end

local a = arg or {}
if a[1] == "info" then
  emit(info())
elseif a[1] then
  if not (a[2] and a[3]) then error("usage: kiln_bench.lua [info | MODEL MODE DTYPE]") end
  emit(safe_row(a[1], a[2], a[3]))
else
  for _, m in ipairs(list(env("MODELS", "simple_linear,large_linear,convnet,transformer_block,transformer_block_onnx,gcn"))) do
    for _, dt in ipairs(list(env("DTYPES", "f32,bf16"))) do
      for _, mode in ipairs(list(env("KILN_MODES", "eager,default,reduce-overhead,max-autotune"))) do
        local t0 = kiln.clock()
        local r = safe_row(m, mode, dt)
        io.stderr:write(string.format("kiln %s %s %s: %.1f s%s\n", m, mode, dt, kiln.clock() - t0,
          r.error and " (error)" or ""))
        emit(r)
      end
    end
  end
end
