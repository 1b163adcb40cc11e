-- compile_devices.lua: a compiled function that reads tensors on two
-- devices (an argument on the GPU, a captured weight on the CPU) does not
-- compile: the warning names both tensors and both devices, the function
-- runs op by op, and the eager op raises its error. It used to build a
-- plan on one device and hand the other device's pointers to its kernels
-- (a crash). Once the tensors are on one device the function compiles,
-- runs on that device and equals eager. Needs a GPU.
local T = dofile("t/lib/tap.lua")
if not kiln.cuda_available() then T.skip_all("no CUDA device") end

local out, rc = T.child([[
local w = kiln.randn({ 48 }, { seed = 1, device = "cpu" })
local function f(x) return (x + 1) * w end
local cf = kiln.compile(f)
local x = kiln.randn({ 3, 48 }, { seed = 2, device = "cuda" })
print("call", pcall(cf, x))
w = w:to("cuda")
local got, want = cf(x), f(x)
print("moved", got.device, (got - want):abs():max():item(), #cf:kernels())
print("back", pcall(cf, x:to("cpu")))
]], { timeout = 60 })
T.is(rc, 0, "the process survives both mixes and exits cleanly (rc " .. tostring(rc) .. ")")
T.like(out, "could not compile a graph %(the compiled function reads tensors on two devices: 'w' is on cpu but 'x' is on cuda",
  "the warning names both tensors and both devices")
T.like(out, "call\tfalse\t[^\n]*mul: input 2 is on cpu but input 1 is on cuda",
  "run op by op, the mul raises the eager error")
local dev, diff, nk = out:match("moved\t(%S+)\t(%S+)\t(%d+)")
T.ok(dev == "cuda" and tonumber(diff) == 0 and tonumber(nk) >= 1,
  "with the weight moved to the GPU it compiles, runs there and equals eager (" .. tostring(dev) .. ", diff " ..
  tostring(diff) .. ", " .. tostring(nk) .. " kernels)")
T.like(out, "back\tfalse\t[^\n]*is on cuda but input 1 is on cpu", "an argument on the CPU, the weight on the GPU: an error again")
T.done()
