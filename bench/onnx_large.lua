-- onnx_large.lua: how much memory and time kiln.onnx.load takes on a large
-- model whose initializers are external data.
--
--   build/kiln bench/onnx_large.lua [LAYERS [SIZE [DIR [external|inline]]]]
--
-- Builds (once, in DIR, default a fresh folder under /tmp) an ONNX model of
-- LAYERS MatMul + Relu layers of SIZE x SIZE f32 weights (default 6 x 4096,
-- 384 MiB) whose weights live in one external-data file beside it (a
-- safetensors file written by kiln; the ONNX initializers point into it at
-- its data offsets). Then, in a fresh kiln process, measures the load: time,
-- resident memory before (VmRSS) and the peak after (VmHWM), and prints the
-- peak's growth relative to the weights' bytes: 1.0x means the weights were
-- read once into their tensors, 2.0x that they were held twice. The loaded
-- model is then run once and compared with the same layers computed with
-- kiln ops on the safetensors file's tensors. With `inline`, the weights
-- are in model.onnx itself (raw_data), for comparison.
--
-- As a library (ONNX_LARGE_LIB = true before dofile): M.build(dir, layers,
-- size [, inline]) -> model path, weight bytes; M.measure(path) -> {load_s =,
-- rss_before =, peak =, growth =} (bytes, in a child process).
local M = {}

local function status_kib(field)
  local f = assert(io.open("/proc/self/status", "r"))
  local text = f:read("a")
  f:close()
  return tonumber(text:match(field .. ":%s*(%d+) kB")) or error("no " .. field .. " in /proc/self/status")
end

-- The byte offsets of each tensor's data in a safetensors file (8-byte
-- little-endian header length, the JSON header, then the data).
local function safetensors_offsets(path)
  local f = assert(io.open(path, "rb"))
  local n = string.unpack("<I8", f:read(8))
  local header = f:read(n)
  f:close()
  local offsets = {}
  for name, a, b in header:gmatch('"([^"]+)":%s*{[^}]-"data_offsets":%s*%[%s*(%d+)%s*,%s*(%d+)%s*%]') do
    offsets[name] = { offset = 8 + n + tonumber(a), length = tonumber(b) - tonumber(a) }
  end
  return offsets
end

local function layer_name(k) return string.format("layer%d.weight", k) end

function M.build(dir, layers, size, inline)
  MAKE_ONNX_LIB = true
  local W = dofile("samples/onnx/make_onnx.lua")
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  local weights_file = "weights.safetensors"
  local sd = {}
  for k = 1, layers do
    -- scaled so the activations stay near 1 through the layers
    sd[layer_name(k)] = kiln.randn({ size, size }, { seed = k }) * (1 / math.sqrt(size))
  end
  kiln.save_safetensors(dir .. "/" .. weights_file, sd)
  local where = safetensors_offsets(dir .. "/" .. weights_file)
  local blob
  if inline then
    local f = assert(io.open(dir .. "/" .. weights_file, "rb"))
    blob = f:read("a")
    f:close()
  end
  local inits, nodes = {}, {}
  local prev = "x"
  for k = 1, layers do
    local name = layer_name(k)
    local at = where[name] or error("onnx_large: " .. name .. " is not in the safetensors header")
    -- the tensor is only used for its shape and type: no data is written inline
    if inline then
      inits[k] = { name, kiln.zeros({ size, size }), { raw = blob:sub(at.offset + 1, at.offset + at.length) } }
    else
      inits[k] = { name, kiln.zeros({ size, size }), { external = { location = weights_file, offset = at.offset,
        length = at.length } } }
    end
    local mm, out = "mm" .. k, (k == layers) and "y" or ("h" .. k)
    nodes[#nodes + 1] = { op = "MatMul", name = mm, inputs = { prev, name }, outputs = { mm } }
    nodes[#nodes + 1] = { op = "Relu", name = "relu" .. k, inputs = { mm }, outputs = { out } }
    prev = out
  end
  local path = dir .. "/model.onnx"
  W.write(path, W.model {
    opset = 17,
    inputs = { { "x", "f32", { "N", size } } },
    outputs = { { "y", "f32", { "N", size } } },
    initializers = inits,
    nodes = nodes,
  })
  return path, layers * size * size * 4
end

-- In this process: load path, and report time and memory (bytes).
function M.measure_here(path)
  collectgarbage()
  -- the peak so far (start-up) must not count: "5" resets VmHWM to VmRSS
  local reset = io.open("/proc/self/clear_refs", "w")
  if reset then
    reset:write("5")
    reset:close()
  end
  local rss_before = status_kib("VmRSS") * 1024
  local t0 = kiln.clock()
  local m = kiln.onnx.load(path)
  local load_s = kiln.clock() - t0
  local peak = status_kib("VmHWM") * 1024
  local bytes = 0
  for _, t in m:named_parameters() do bytes = bytes + t:numel() * 4 end
  -- the model runs and matches the same layers with kiln ops on the
  -- safetensors file's tensors
  local dir = path:match("^(.*)/[^/]*$") or "."
  local sd = kiln.load_safetensors(dir .. "/weights.safetensors")
  local size = m._inputs[1].shape[2]
  local x = kiln.randn({ 2, size }, { seed = 99 })
  local want = x
  local k = 1
  while sd[layer_name(k)] do
    want = want:matmul(sd[layer_name(k)]):relu()
    k = k + 1
  end
  local diff = (m(x) - want):abs():amax():item()
  return { load_s = load_s, rss_before = rss_before, peak = peak, growth = peak - rss_before, bytes = bytes,
    max_diff = diff }
end

-- In a fresh kiln process (so building the model does not count).
function M.measure(path)
  local kiln_bin = os.getenv("KILN") or "build/kiln"
  local cmd = string.format("%s -e 'ONNX_LARGE_LIB = true; local M = dofile(\"bench/onnx_large.lua\"); "
    .. "local r = M.measure_here(%q); print(string.format(\"RESULT %%.6f %%d %%d %%d %%d %%.9g\", r.load_s, "
    .. "r.rss_before, r.peak, r.growth, r.bytes, r.max_diff))'", kiln_bin, path)
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("a")
  p:close()
  local s, before, peak, growth, bytes, diff = out:match("RESULT (%S+) (%d+) (%d+) (%-?%d+) (%d+) (%S+)")
  if not s then error("onnx_large: the measuring process printed no result:\n" .. out) end
  return { load_s = tonumber(s), rss_before = tonumber(before), peak = tonumber(peak), growth = tonumber(growth),
    bytes = tonumber(bytes), max_diff = tonumber(diff) }
end

if ONNX_LARGE_LIB then return M end

local args = arg or {}
local layers = tonumber(args[1]) or 6
local size = tonumber(args[2]) or 4096
local dir = args[3]
local inline = args[4] == "inline"
if args[4] and args[4] ~= "inline" and args[4] ~= "external" then error("onnx_large: the 4th argument is external or inline", 0) end
if not dir or dir == "-" then
  dir = os.tmpname()
  os.remove(dir)
end
local path, bytes = M.build(dir, layers, size, inline)
local f = io.open(path, "rb")
local model_bytes = f:seek("end")
f:close()
local r = M.measure(path)
local MiB = 1024 * 1024
print(string.format("model      %s: %d layers of %dx%d f32, %.1f MiB of weights (%s), model file %.1f MiB",
  path, layers, size, size, bytes / MiB, inline and "inline raw_data" or "external data", model_bytes / MiB))
print(string.format("load       %.3f s (%.0f MiB/s)", r.load_s, bytes / MiB / math.max(r.load_s, 1e-9)))
print(string.format("memory     VmRSS before %.1f MiB, VmHWM after %.1f MiB: growth %.1f MiB = %.2fx the weights",
  r.rss_before / MiB, r.peak / MiB, r.growth / MiB, r.growth / bytes))
print(string.format("check      max |onnx - kiln ops| = %.3g", r.max_diff))
print(string.format("(the files stay in %s; remove them with rm -r)", dir))
