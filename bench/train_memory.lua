-- train_memory.lua: where a compiled training step's device memory goes,
-- step by step. Loads a training sample (samples/train_SAMPLE.lua) on the
-- GPU, compiles its train_step in MODE (autocast for bf16, as
-- bench/kiln_train.lua does) and prints, before the first step and after
-- each of the first STEPS, what the caching allocator holds in use, the
-- most it held in use during that step (the peak is reset before each) and
-- what it has reserved from CUDA, with the step's plan figures
-- (cm:stats(): the arena's peak of intermediate values, replays).
--
--   build/kiln bench/train_memory.lua SAMPLE [MODE] [DTYPE]
--
-- SAMPLE: gcn, convnet or transformer; MODE: default, reduce-overhead (the
-- default) or max-autotune; DTYPE: f32 (default) or bf16. Env: STEPS (6).
local kiln = rawget(_G, "kiln") or require("kiln")

local ROOT = ((arg and arg[0] or ""):match("^(.*)bench/train_memory%.lua$") or "")
local sample, mode, dtype = arg[1], arg[2] or "reduce-overhead", arg[3] or "f32"
if not sample then
  io.stderr:write("usage: kiln bench/train_memory.lua SAMPLE [MODE] [DTYPE]\n")
  os.exit(2)
end
local STEPS = math.tointeger(tonumber(os.getenv("STEPS") or "6"))
local has_gpu, why = kiln.cuda_available()
if not has_gpu then
  io.stderr:write("train_memory.lua: needs a GPU (the CPU keeps no allocator figures): ", tostring(why), "\n")
  os.exit(2)
end
local MIB = 2 ^ 20

local function mem()
  local st = kiln.memory_stats("cuda")
  return st.allocated_bytes / MIB, st.peak_allocated_bytes / MIB, st.reserved_bytes / MIB
end

local function sync() kiln.synchronize("cuda") end

local spec = kiln.load(ROOT .. "samples/train_" .. sample .. ".lua", { quiet = true })
local before = mem()
spec.model:to("cuda")
local xs = spec.inputs({ device = "cuda" })
sync()
local n_params, param_mib = 0, 0
for _, p in ipairs(spec.model:parameters()) do
  n_params = n_params + 1
  param_mib = param_mib + p:numel() * (p.dtype == "f32" and 4 or 2) / MIB
end
local a0 = mem()
print(string.format("%s %s %s: %d parameters, %.1f MiB; in use before the first step %.1f MiB (model and batch %.1f)",
  sample, mode, dtype, n_params, param_mib, a0, a0 - before))
local cm = kiln.compile(spec.train_step, { mode = mode, autocast = dtype ~= "f32" and dtype or nil })
print("step  in use  peak in step  reserved  arena peak  replays")
for i = 1, STEPS do
  kiln.reset_peak_memory_stats("cuda")
  local loss = cm(table.unpack(xs))
  sync()
  local used, peak, reserved = mem()
  local s = cm:stats()
  print(string.format("%4d  %6.1f  %12.1f  %8.1f  %10.1f  %7d   loss %.5f", i, used, peak, reserved,
    (s.peak_bytes or 0) / MIB, s.replays or 0, loss:item()))
end
