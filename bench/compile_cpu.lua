-- compile_cpu.lua: compiled against eager on the CPU, per sample: time per
-- call (median of several), speedup, kernel count, and compile time by
-- phase for the first call (cold or from the persistent cache, whichever
-- this process meets). Run through bench/compile_cpu.sh, which runs it with
-- a fresh cache and again with the filled one.
-- Args: [small|full] [calls]
local size = arg and arg[1] or "small"
local calls = tonumber(arg and arg[2]) or 5
kiln.session.small = size == "small"

local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

local function time_calls(f, inputs, n)
  local ts = {}
  for i = 1, n do
    local t0 = kiln.clock()
    f(table.unpack(inputs))
    ts[i] = kiln.clock() - t0
  end
  return median(ts)
end

print(string.format("%-18s %10s %10s %8s %8s %9s %9s %9s %9s  %s", "sample", "eager ms", "compiled", "speedup",
  "kernels", "first s", "passes", "codegen", "backend", "cache hits/misses"))
for _, name in ipairs{"simple_linear", "large_linear", "convnet", "transformer_block", "gcn"} do
  local s = dofile("samples/" .. name .. ".lua")
  local inputs = s.inputs({small = kiln.session.small})
  local eager = s.model(table.unpack(inputs))
  local cm = kiln.compile(s.model)
  local h0 = kiln.jit_stats()
  local t0 = kiln.clock()
  local out = cm(table.unpack(inputs))
  local first = kiln.clock() - t0
  local h1 = kiln.jit_stats()
  local rel = ((out - eager):abs():amax():item()) / math.max(1e-30, eager:abs():amax():item())
  assert(rel <= 1e-4, name .. ": compiled differs from eager (" .. rel .. ")")
  local e_ms = time_calls(s.model, inputs, calls) * 1e3
  local c_ms = time_calls(cm, inputs, calls) * 1e3
  local st = cm:stats()
  print(string.format("%-18s %10.2f %10.2f %7.2fx %8d %9.3f %9.3f %9.3f %9.3f  %d/%d", name, e_ms, c_ms, e_ms / c_ms,
    st.kernels, first, st.compile_s.passes, st.compile_s.codegen, st.compile_s.backend, h1.hits - h0.hits,
    h1.misses - h0.misses))
end
