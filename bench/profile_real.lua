-- bench/profile_real.lua: kiln.time's per-kernel table (what :time prints)
-- for models of the real-model suite, exported by bench/real_models.py into
-- REF_DIR, in one dtype and the given modes; also checks each compiled
-- output against the exported PyTorch output in the same dtype, so a fast
-- wrong kernel cannot pass unnoticed.
--
--   REF_DIR=/tmp/real build/kiln bench/profile_real.lua resnet18,mobilenet_v3_large bf16 reduce-overhead
local kiln = rawget(_G, "kiln") or require("kiln")
local ROOT = ((arg and arg[0] or ""):match("^(.*)bench/profile_real%.lua$") or "")
local U = dofile(ROOT .. "bench/bench_util.lua")
local REF = U.env("REF_DIR", ".")
local a = arg or {}
local names, dtype, modes = {}, a[2] or "bf16", {}
for m in (a[1] or "resnet18"):gmatch("[^,]+") do names[#names + 1] = m end
for m in (a[3] or "reduce-overhead"):gmatch("[^,]+") do modes[#modes + 1] = m end
kiln.config.allow_tf32 = false
for _, name in ipairs(names) do
  local m = kiln.onnx.load(REF .. "/" .. name .. ".onnx")
  local io_t = kiln.load_safetensors(REF .. "/" .. name .. ".io.safetensors")
  m:to(dtype):to("cuda")
  local xs = {}
  for k, vi in ipairs(m._inputs) do
    local x = io_t[vi.name]
    if x.dtype == "f32" then x = x:to(dtype) end
    xs[k] = x:to("cuda")
  end
  for _, mode in ipairs(modes) do
    local f = mode == "eager" and m or kiln.compile(m, { mode = mode })
    -- the options after every input: table.unpack(xs) in the middle of an
    -- argument list would pass only the first (BERT takes two)
    local args = { table.unpack(xs) }
    args[#args + 1] = { iters = 50, warmup = 5 }
    local r = kiln.time(f, table.unpack(args))
    local _, rel = U.errors(f(table.unpack(xs)), io_t["output." .. dtype])
    print(string.format("== %s %s %s (max rel err vs PyTorch %s: %.3g)", name, dtype, mode, dtype, rel))
    print(tostring(r))
  end
end
