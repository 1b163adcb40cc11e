local function run(name, xs, ws, stride, pad, dt)
  local x = kiln.randn(xs, {seed = 1, device = "cuda"}):to(dt)
  local w = kiln.randn(ws, {seed = 2, device = "cuda"}):to(dt)
  local ok, y = pcall(kiln.conv2d, x, w, nil, {stride = stride, padding = pad})
  kiln.synchronize()
  local t0 = kiln.clock()
  for _ = 1, 10 do y = kiln.conv2d(x, w, nil, {stride = stride, padding = pad}) end
  kiln.synchronize()
  io.stderr:write(string.format("DIAG %s %s ok=%s %.3f ms\n", name, dt, tostring(ok), (kiln.clock() - t0) * 100))
end
run("convnet2", {32, 32, 112, 112}, {64, 32, 3, 3}, 2, 1, "f32")
run("convnet2", {32, 32, 112, 112}, {64, 32, 3, 3}, 2, 1, "bf16")
run("convnet1", {32, 3, 224, 224}, {32, 3, 3, 3}, 2, 1, "f32")
run("tiny", {1, 1, 4, 4}, {1, 1, 3, 3}, 1, 0, "f32")
