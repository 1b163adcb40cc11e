-- devices.lua: device names from Lua go through kn_device_parse: cpu:N and
-- cuda:N are accepted, cpu:0 is cpu, and a device that is not present (or
-- a name that is no device) gives an error naming it.
local T = dofile("t/lib/tap.lua")

local x = kiln.zeros({2}, {device = "cpu:0"})
T.is(x.device, "cpu", "cpu:0 is the cpu")
T.is(x:to("cpu:0").device, "cpu", "to('cpu:0') stays on the cpu")
T.is(kiln.ones({2}, {device = "cpu"}):to({device = "cpu:0"}).device, "cpu", "to({device = 'cpu:0'}) too")

T.raises(function() return kiln.zeros({2}, {device = "cpu:3"}) end, "device cpu:3 is not available",
  "a device number with no device behind it is named in the error")
T.raises(function() return x:to("cpu:3") end, "device cpu:3 is not available",
  "... also when moving a tensor there")
T.raises(function() return kiln.zeros({2}, {device = "cuda:99"}) end, "kiln addresses cuda:0 to cuda:7",
  "a device number out of range is an error")
T.raises(function() return kiln.zeros({2}, {device = "gpu"}) end, "unknown device 'gpu' %(expected cpu or cuda%)",
  "an unknown device name is an error")
T.raises(function() return x:to("cuda:x") end, "unknown device 'cuda:x' %(expected cuda or cuda:N",
  "to() with a malformed device number says what a device name looks like")
T.raises(function() return x:to("cuda:99") end, "to: device 'cuda:99': kiln addresses cuda:0 to cuda:7",
  "to() with a device number out of range says the range")

T.done()
