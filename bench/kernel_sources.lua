-- bench/kernel_sources.lua: every generated kernel's source for the five
-- samples, in f32 and bf16, written one file per sample, dtype and mode
-- under a folder. Run it with two builds and `diff -r` the folders: a
-- refactor that must not change the code it generates leaves no diff.
--
--   build/kiln bench/kernel_sources.lua OUTDIR [modes]
--   (modes: default,max-autotune-no-cudagraphs by default; the device is
--   the default one: the GPU where there is one, else the CPU's C kernels)
local out = assert(arg and arg[1], "usage: kiln bench/kernel_sources.lua OUTDIR [modes]")
local modes = {}
for m in ((arg and arg[2]) or "default"):gmatch("[^,]+") do modes[#modes + 1] = m end
local names = { "simple_linear", "large_linear", "convnet", "transformer_block", "gcn" }
assert(os.execute("mkdir -p '" .. out .. "'"))
local written = 0
for _, name in ipairs(names) do
  for _, dtype in ipairs({ "f32", "bf16" }) do
    local spec = dofile("samples/" .. name .. ".lua")
    if dtype ~= "f32" then spec.model:to(dtype) end
    local x = spec.inputs({ dtype = dtype, device = kiln.default_device() })
    for _, mode in ipairs(modes) do
      local cm = kiln.compile(spec.model, { mode = mode })
      cm(table.unpack(x))
      local path = string.format("%s/%s-%s-%s.txt", out, name, dtype, mode)
      local f = assert(io.open(path, "w"))
      for i, k in ipairs(cm:kernels()) do
        f:write(string.format("== kernel %d %s (%s)\n", i - 1, k.name, k.kind))
        if k.source then f:write(k.source, "\n") end
      end
      f:close()
      written = written + 1
    end
  end
end
io.stderr:write(string.format("kernel_sources: %d files in %s on %s\n", written, out, kiln.default_device()))
