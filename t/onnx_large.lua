-- onnx_large.lua: kiln.onnx.load reads a model's weights once. A 20 MiB
-- model (5 MatMul layers of 1024x1024 f32) built by bench/onnx_large.lua,
-- loaded in a fresh kiln process: the peak resident memory (VmHWM) grows by
-- about the weights' size with external data (each initializer read straight
-- into its tensor), and by at most about twice that with the weights inline
-- (the file's pages while protobuf-c decodes it, then only the tensors). The
-- loaded model matches the same layers computed with kiln ops.
local T = dofile("t/lib/tap.lua")
-- the weights and inputs on the CPU (the memory measured is the host's)
T.cpu_only("t/onnx_large.lua")
if not kiln.onnx.available then T.skip_all("kiln was built without ONNX import (protobuf-c missing)") end
ONNX_LARGE_LIB = true
local L = dofile("bench/onnx_large.lua")

-- under AddressSanitizer the allocator keeps freed memory in quarantine and
-- adds shadow memory: resident sizes say nothing about copies there
local kiln_bin = os.getenv("KILN") or "build/kiln"
local sanitized = os.execute("grep -q __asan_init '" .. kiln_bin .. "' 2>/dev/null") == true

local layers, size = 5, 1024
for _, inline in ipairs({ false, true }) do
  local what = inline and "inline weights" or "external-data weights"
  local dir = os.tmpname()
  os.remove(dir)
  local path, bytes = L.build(dir, layers, size, inline)
  local r = L.measure(path)
  T.is(r.bytes, bytes, what .. ": the loaded parameters hold the weights' bytes")
  T.ok(r.max_diff == 0, what .. ": the loaded model equals the layers computed with kiln ops")
  local ratio = r.growth / bytes
  T.diag(string.format("%s: %.1f MiB of weights, peak resident growth %.1f MiB (%.2fx), load %.3f s", what,
    bytes / 2 ^ 20, r.growth / 2 ^ 20, ratio, r.load_s))
  if sanitized then
    io.write("ok " .. (T.n + 1) .. " # skip resident sizes under AddressSanitizer\n")
    T.n = T.n + 1
  else
    local limit = inline and 2.1 or 1.6
    T.ok(ratio >= 0.9 and ratio < limit,
      string.format("%s: peak resident growth %.2fx the weights' size (at least 0.9x: they are in memory; below %.1fx)",
        what, ratio, limit))
  end
  os.execute("rm -r '" .. dir .. "'")
end

T.done()
