-- bench/profile_train.lua: kiln.time's per-kernel table (what :time
-- prints) of each training sample's compiled step: forward, backward and
-- update kernels with their times, GB/s, GFLOP/s and roofline share, so a
-- slow backward kernel shows by name and source line.
--
--   build/kiln bench/profile_train.lua [samples] [dtype] [mode]
--   (samples: gcn,convnet,transformer; dtype f32 or bf16 (autocast);
--   mode: reduce-overhead by default)
local kiln = rawget(_G, "kiln") or require("kiln")
local samples = (arg and arg[1]) or "gcn,convnet,transformer"
local dtype = (arg and arg[2]) or "f32"
local mode = (arg and arg[3]) or "reduce-overhead"
for name in samples:gmatch("[^,]+") do
  local spec = kiln.load("samples/train_" .. name .. ".lua", { quiet = true })
  local xs = spec.inputs({ device = kiln.default_device() })
  local cm = kiln.compile(spec.train_step, { mode = mode, autocast = dtype ~= "f32" and dtype or nil })
  local args = { table.unpack(xs) }
  args[#args + 1] = { iters = 20, warmup = 5, quiet = true }
  local r = kiln.time(cm, table.unpack(args))
  print(string.format("== %s %s %s (replays: %s)", name, dtype, mode, cm:stats().replayable))
  print(tostring(r))
end
