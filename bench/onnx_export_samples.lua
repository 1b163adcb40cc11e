-- bench/onnx_export_samples.lua: the five samples saved with kiln.onnx.save,
-- with inputs and kiln's outputs beside them, for bench/onnx_export_check.py
-- to check in other ONNX tools (onnx.checker, onnxruntime).
--
--   build/kiln bench/onnx_export_samples.lua DIR [small]
--
-- For each sample NAME: DIR/NAME.onnx and DIR/NAME.io.safetensors (tensors
-- "input.NAME" and "output.NAME", named as the graph's inputs and outputs,
-- on the CPU). f32, the samples' own seeded inputs; kiln's outputs are the
-- eager model's on the default device. `small` takes the samples' small
-- sizes.
local dir = arg and arg[1]
if not dir then error("usage: kiln bench/onnx_export_samples.lua DIR [small]", 0) end
local small = arg[2] == "small"
assert(os.execute("mkdir -p '" .. dir .. "'"))
local dev = kiln.default_device()
for _, name in ipairs({ "simple_linear", "large_linear", "transformer_block", "convnet", "gcn" }) do
  kiln.session.small = small
  local spec = loadfile("samples/" .. name .. ".lua")({ small = small })
  kiln.session.small = false
  local model = spec.model:to(dev)
  local xs = spec.inputs({ small = small, device = dev })
  local file = dir .. "/" .. name .. ".onnx"
  kiln.onnx.save(model, file, xs)
  local g = kiln.onnx.read(file).graph
  local io_tensors = {}
  for k, vi in ipairs(g.inputs) do io_tensors["input." .. vi.name] = xs[k]:to("cpu"):contiguous() end
  local ys = table.pack(model(table.unpack(xs)))
  for k, vi in ipairs(g.outputs) do io_tensors["output." .. vi.name] = ys[k]:to("cpu"):contiguous() end
  kiln.save_safetensors(dir .. "/" .. name .. ".io.safetensors", io_tensors)
  print(string.format("%s: %s (%d nodes, %d initializers, opset %d)", name, file, #g.nodes, #g.initializer_names,
    kiln.onnx.read(file).opset))
end
