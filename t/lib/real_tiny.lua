-- real_tiny.lua: one of the tiny real-model exports committed in
-- t/data/real_models (bench/real_models.py: bert_tiny, gpt2_tiny,
-- vit_tiny, resnet_tiny, mobilenet_tiny), loaded with its inputs.
--
--   local load = dofile("t/lib/real_tiny.lua")
--   local m, xs, io = load("bert_tiny")   -- m(table.unpack(xs)) runs it
--
-- io is the whole .io.safetensors table: the inputs by name, and PyTorch's
-- outputs as output.f32 / output.bf16.
return function(name)
  local m = kiln.onnx.load("t/data/real_models/" .. name .. ".onnx")
  local io = kiln.load_safetensors("t/data/real_models/" .. name .. ".io.safetensors")
  local xs = {}
  for k, vi in ipairs(m._inputs) do xs[k] = io[vi.name] end
  return m, xs, io
end
