-- cuda_onnx_transformer.lua: t/onnx_transformer_kernels.lua's check on the
-- GPU. The transformer block written as PyTorch's exporters write it
-- (t/lib/onnx_transformer.lua, the Lua sample's weights), at the sample's
-- small size and at the benchmark's 16 x 256, in f32 and bf16: compiled on
-- CUDA it gives the Lua model's kernel list (names, kinds, ops, the
-- attention's causal flag) and the Lua model's values, eager and compiled.
-- Skipped where there is no CUDA device.
local T = dofile("t/lib/tap.lua")
local ok_cuda, why = kiln.cuda_available()
if not ok_cuda then T.skip_all("no CUDA device (" .. tostring(why) .. ")") end
if not kiln.onnx.available then T.skip_all("kiln was built without ONNX import (protobuf-c missing)") end
MAKE_ONNX_LIB = true
local W = dofile("samples/onnx/make_onnx.lua")
local build = dofile("t/lib/onnx_transformer.lua")
kiln.config.allow_tf32 = false

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))

-- ||a - b|| / ||b|| in f64 on the CPU; NaN and shape mismatches never pass
local function relerr(a, b)
  if table.concat(a:shape(), ",") ~= table.concat(b:shape(), ",") then return math.huge end
  a, b = a:to("cpu"):to("f64"), b:to("cpu"):to("f64")
  local d = ((a - b) ^ 2):sum():sqrt():item()
  local n = (b ^ 2):sum():sqrt():item()
  local r = n > 0 and d / n or d
  return (r == r) and r or math.huge
end

local kernel_lines = dofile("t/lib/kernel_lines.lua")

local P = kiln.load("samples/transformer_block.lua", { quiet = true }).model:state_dict()
local TOL = { f32 = 1e-5, bf16 = 2e-2 }
local variants = {
  { name = "TorchScript-style", v = { linear = "pretransposed", mask = "where_not" } },
  { name = "dynamo-style", v = { opset = 18, gelu = "erf_torchlib", mask = "where_ones", scalars = "initializer",
    ln = "op_stats" } },
  { name = "addmm Linear, additive mask", v = { linear = "gemm", mask = "add", ln = "decomposed" } },
}

for _, size in ipairs { { 2, 16 }, { 16, 256 } } do
  local B, Tn = size[1], size[2]
  local x32 = kiln.randn({ B, Tn, 512 }, { seed = 99 })
  for _, c in ipairs(variants) do
    local file = dir .. string.format("/block_%s_%d.onnx", c.name, Tn)
    W.write(file, build(P, { B = B, T = Tn }, c.v))
    for _, dtype in ipairs { "f32", "bf16" } do
      local what = string.format("%s %dx%d %s: ", c.name, B, Tn, dtype)
      local lm = kiln.load("samples/transformer_block.lua", { quiet = true }).model:to(dtype):to("cuda")
      local om = kiln.onnx.load(file):to(dtype):to("cuda")
      local x = x32:to(dtype):to("cuda")
      local e = relerr(om(x), lm(x))
      T.ok(e <= TOL[dtype], what .. "eager on CUDA equals the Lua model's (" .. e .. ")")
      local cl, co = kiln.compile(lm), kiln.compile(om)
      local yl, yo = cl(x), co(x)
      e = relerr(yo, yl)
      T.ok(e <= TOL[dtype], what .. "compiled equals the compiled Lua model (" .. e .. ")")
      local kl, ko = kernel_lines(cl), kernel_lines(co)
      T.like(ko, "scaled_dot_product_attention causal", what .. "one causal attention kernel")
      if not T.is(ko, kl, what .. "the Lua model's kernels") then
        io.write("# ONNX:\n# " .. ko:gsub("\n", "\n# ") .. "\n# Lua:\n# " .. kl:gsub("\n", "\n# ") .. "\n")
      end
    end
  end
end

os.execute("rm -rf '" .. dir .. "'")
T.done()
