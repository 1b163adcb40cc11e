-- onnx_conformance.lua: the ONNX backend conformance suite (Debian's
-- libonnx-testdata: data/node, pytorch-converted, pytorch-operator, simple)
-- through bench/onnx_conformance.lua, eager and compiled on the CPU, and on
-- the GPU where there is one. Each (mode, folder) is one TAP test that
-- fails on any failed test (wrong values, a crash-like error); unsupported
-- ops are allowed and printed with their counts.
local T = dofile("t/lib/tap.lua")
ONNX_CONFORMANCE_LIB = true
local C = dofile("bench/onnx_conformance.lua")

if not kiln.onnx.available then T.skip_all("kiln was built without ONNX import (protobuf-c missing)") end
local f = io.open(C.root .. "/node/test_relu/model.onnx", "rb")
if not f then T.skip_all("no ONNX test data at " .. C.root .. " (Debian package libonnx-testdata)") end
f:close()

local modes = { "eager", "compiled" }
if kiln.cuda_available() then modes[#modes + 1] = "gpu-eager"; modes[#modes + 1] = "gpu-compiled" end
local res = C.run { modes = modes }
C.report(res, function(line) io.write("# " .. line .. "\n") end)
local failed_of = {}
for _, line in ipairs(res.failures) do
  local mode, folder = line:match("^(%S+) ([^/]+)/")
  local k = mode .. " " .. folder
  failed_of[k] = (failed_of[k] or 0) + 1
end
for _, r in ipairs(res.rows) do
  local k = r.mode .. " " .. r.folder
  T.is(failed_of[k] or 0, 0, string.format("%s: %d passed, %d unsupported, no failures", k, r.passed, r.unsupported))
  -- the suite really ran: every folder has tests kiln passes
  T.ok(r.passed > 0, k .. ": some tests pass")
end
if not kiln.cuda_available() then
  io.write("ok " .. (T.n + 1) .. " # SKIP gpu-eager and gpu-compiled: no GPU\n")
  T.n = T.n + 1
end
T.done()
