-- compile_halves.lua: every sample in bf16 and f16, compiled against eager:
-- relative error (2-norm of the difference over the reference's) within
-- 1e-2, as the compiler issue asks; fused kernels round less often than
-- eager's op-by-op stores, so they may differ, but not by more.
local T = dofile("t/lib/tap.lua")
kiln.session.small = true

local function relerr(c, e)
  c, e = c:to("f64"), e:to("f64")
  local num = ((c - e) ^ 2):sum():sqrt():item()
  local den = (e ^ 2):sum():sqrt():item()
  local r = num / math.max(den, 1e-30)
  return r == r and r or math.huge -- NaN never passes
end

for _, dt in ipairs{"bf16", "f16"} do
  for _, name in ipairs{"simple_linear", "large_linear", "convnet", "transformer_block", "gcn"} do
    local s = dofile("samples/" .. name .. ".lua")
    s.model:to(dt)
    local inp = s.inputs({small = true})
    for i, t in ipairs(inp) do
      if t.dtype == "f32" then inp[i] = t:to(dt) end
    end
    local e = s.model(table.unpack(inp))
    local cm = kiln.compile(s.model)
    local c = cm(table.unpack(inp))
    T.is(c.dtype, dt, dt .. " " .. name .. ": the compiled result keeps the dtype")
    local r = relerr(c, e)
    T.ok(r <= 1e-2, string.format("%s %s: compiled equals eager within 1e-2 (relative error %.3g)", dt, name, r))
    T.ok(#cm:kernels() > 0 and cm:stats().plans > 0, dt .. " " .. name .. ": ran through a compiled plan")
  end
end
T.done()
