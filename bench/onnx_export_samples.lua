-- bench/onnx_export_samples.lua: the five samples saved with kiln.onnx.save,
-- with inputs and kiln's outputs beside them, for bench/onnx_export_check.py
-- to check in other ONNX tools (onnx.checker, onnxruntime).
--
--   build/kiln bench/onnx_export_samples.lua DIR [small] [opset=N]
--
-- For each sample NAME: DIR/NAME.onnx and DIR/NAME.io.safetensors (tensors
-- "input.NAME" and "output.NAME", named as the graph's inputs and outputs,
-- on the CPU). f32, the samples' own seeded inputs; kiln's outputs are the
-- eager model's on the default device. `small` takes the samples' small
-- sizes; opset=17 writes an older opset (kiln.onnx.save's option).
local dir = arg and arg[1]
if not dir then error("usage: kiln bench/onnx_export_samples.lua DIR [small] [opset=N]", 0) end
local small, opts = false, nil
for k = 2, #arg do
  if arg[k] == "small" then small = true
  elseif arg[k]:match("^opset=%d+$") then opts = { opset = math.tointeger(tonumber(arg[k]:sub(7))) }
  else error("unknown word '" .. arg[k] .. "' (small, opset=N)", 0) end
end
assert(os.execute("mkdir -p '" .. dir .. "'"))
local dev = kiln.default_device()
for _, name in ipairs({ "simple_linear", "large_linear", "transformer_block", "convnet", "gcn" }) do
  kiln.session.small = small
  local spec = loadfile("samples/" .. name .. ".lua")({ small = small })
  kiln.session.small = false
  local model = spec.model:to(dev)
  local xs = spec.inputs({ small = small, device = dev })
  local file = dir .. "/" .. name .. ".onnx"
  kiln.onnx.save(model, file, xs, opts)
  local g = kiln.onnx.read(file).graph
  local io_tensors = {}
  for k, vi in ipairs(g.inputs) do io_tensors["input." .. vi.name] = xs[k]:to("cpu"):contiguous() end
  local ys = table.pack(model(table.unpack(xs)))
  for k, vi in ipairs(g.outputs) do io_tensors["output." .. vi.name] = ys[k]:to("cpu"):contiguous() end
  kiln.save_safetensors(dir .. "/" .. name .. ".io.safetensors", io_tensors)
  print(string.format("%s: %s (%d nodes, %d initializers, opset %d)", name, file, #g.nodes, #g.initializer_names,
    kiln.onnx.read(file).opset))
end
