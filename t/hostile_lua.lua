-- hostile_lua.lua: issue 14, class 1. Input from Lua that once crashed or
-- hung kiln: each case must give the right result or a clear error naming
-- what was wrong, and the process must go on to the next case.
local T = dofile("t/lib/tap.lua")

-- 1. Many tensor arguments: each one is copied onto the Lua stack (and a
-- placeholder pushed for it); without room checks 40 of them wrote past it.
do
  local args = {}
  for i = 1, 300 do args[i] = kiln.full({2}, i) end
  local add_all = kiln.compile(function(...)
    local s = select(1, ...)
    for i = 2, select("#", ...) do s = s + select(i, ...) end
    return s
  end)
  for _, n in ipairs({40, 300}) do
    local r = add_all(table.unpack(args, 1, n))
    T.near(r:tolist()[1], n * (n + 1) / 2, 0, n .. " tensor arguments: their sum")
  end
  local echo = kiln.compile(function(...) return ... end)
  local outs = {echo(table.unpack(args))}
  T.is(#outs, 300, "300 arguments echoed back")
  T.near(outs[300]:tolist()[2], 300, 0, "the last of them is the last argument")
  local big = {}
  for i = 1, 5000 do big[i] = args[1 + i % 300] end
  T.is(select("#", echo(table.unpack(big))), 5000, "5000 arguments through a compiled function")
end

-- 2. A chain of 50,000 fused ops: fusion built each kernel's expression
-- recursively, once per link, and overflowed the C stack.
do
  local chain = kiln.compile(function(x)
    for _ = 1, 50000 do x = (x + 1):relu() end
    return x
  end)
  local ok, r = pcall(chain, kiln.full({2}, -3))
  T.ok(ok, "50,000 chained ops compile or fall back: " .. tostring(not ok and r or ""))
  -- the first relu clamps -2 to 0, each later link adds 1
  T.near(ok and r:tolist()[2] or 0/0, 49999, 0, "and compute the eager result")
  T.ok(pcall(function() return #chain:source("c") end), "its source can be shown")
  T.ok(#kiln.outline(chain) > 0, "and outlined")
end

-- 3. APIs that need a tensor's bytes, given a traced tensor inside a
-- compiled function: save_safetensors read its NULL storage. Each must
-- break the graph (and so see the value) or say what is wrong.
do
  local path = os.tmpname()
  local save_inside = kiln.compile(function(x)
    local y = x + 1
    kiln.save_safetensors(path, {y = y})
    return y * 2
  end)
  local ok, r = pcall(save_inside, kiln.full({2}, 3))
  T.ok(ok, "save_safetensors of a traced tensor: " .. tostring(not ok and r or "no error"))
  T.near(ok and r:tolist()[1] or 0/0, 8, 0, "the call goes on after the save")
  local okl, saved = pcall(kiln.load_safetensors, path)
  T.near(okl and saved.y:tolist()[2] or 0/0, 4, 0, "the file holds the traced tensor's value")
  T.like(save_inside:breaks()[1].reason, "kiln.save_safetensors needs the value", "as a graph break")
  os.remove(path)

  -- every kiln function and tensor method, fed a traced tensor: works or errors
  local skip = {cmd = true, load = true, manual_seed = true, save_safetensors = true, compile = true,
                time = true, render = true, exit = true, quit = true}
  local fns = {}
  for name, fn in pairs(kiln) do
    if type(fn) == "function" and not skip[name] and not name:match("^_") then fns[#fns + 1] = {name, fn} end
  end
  for name, fn in pairs(kiln.Tensor) do
    if type(fn) == "function" then fns[#fns + 1] = {"Tensor:" .. name, fn} end
  end
  table.sort(fns, function(a, b) return a[1] < b[1] end)
  local crashed_none = kiln.compile(function(x)
    local n = 0
    for _, entry in ipairs(fns) do
      pcall(entry[2], x + 1)
      pcall(entry[2], x + 1, x * 2)
      n = n + 1
    end
    return x + n
  end)
  local okc, rc = pcall(crashed_none, kiln.zeros({2, 3}))
  T.ok(okc, "every kiln function given traced tensors, inside a compiled function: " .. tostring(not okc and rc or ""))
  T.near(okc and rc:tolist()[1][1] or 0/0, #fns, 0, "and the function runs to its end")
end

-- 4. Lists whose __len lies: -1 crashed reshape, and kiln.cat looped on.
do
  local x = kiln.randn({2, 3}, {seed = 1})
  for _, len in ipairs({-1, 2^40, math.mininteger}) do
    local liar = setmetatable({}, {__len = function() return len end})
    T.raises(function() return x:reshape(liar) end, "reshape: shape: list length must be in 0%.%.8, got " .. tostring(math.tointeger(len)):gsub("%-", "%%-"),
      "reshape with __len " .. len)
    T.raises(function() return kiln.cat(liar) end, "cat: tensors: list length must be in 0%.%.%d+, got",
      "cat with __len " .. len)
    T.raises(function() return x:sum(liar) end, "sum: dims: list length must be in 0..8", "sum dims with __len " .. len)
    T.raises(function() return x:split(liar) end, "split: sizes: list length", "split sizes with __len " .. len)
    T.raises(function() return kiln.tensor(liar) end, "tensor: nested table: list length", "kiln.tensor with __len " .. len)
  end
  T.raises(function() return kiln.tensor({1, {2}}) end, "ragged", "a ragged nested table")
  -- a table that grows while kiln.tensor reads it must not be written past
  local reads = 0
  local grows = setmetatable({}, {__len = function() reads = reads + 1; return reads == 1 and 2 or 2000 end,
                                  __index = function() return 1 end})
  T.raises(function() return kiln.tensor(grows) end, "changed while it was read", "a list that grows between reads")
  local flips = 0
  local sizes = setmetatable({}, {__len = function() return 2 end, __index = function(_, i)
    flips = flips + 1
    return flips <= 2 and 3 or 2^62
  end})
  T.raises(function() return kiln.zeros({6}):split(sizes) end, "split: sizes add up to more than", "split sizes that change between reads")
  local ok, r = pcall(function() return kiln.cat({x, x}, 1):shape() end)
  T.ok(ok and r[1] == 4 and r[2] == 3, "kiln.cat still works after the bad lists")
end

-- 5. Sizes and steps near 2^62: signed arithmetic wrapped (four 2^62 sizes
-- added up to 0, so split took them).
do
  local x = kiln.arange(6)
  T.raises(function() return x:split({2^62, 2^62, 2^62, 2^62, 6}) end,
    "split: sizes add up to more than dim 1's size 6", "split sizes that wrap int64")
  T.raises(function() return x:split({math.maxinteger, 1}) end, "split: sizes add up to more than", "split size 2^63-1")
  local a, b = x:split({4, 2})
  T.ok(a:numel() == 4 and b:tolist()[1] == 4 and b:tolist()[2] == 5, "split sizes that add up still work")
  for _, step in ipairs({2^62, math.maxinteger}) do
    local ok, s = pcall(function() return x:slice(1, 2, -1, math.tointeger(step)) end)
    T.ok(ok and s:numel() == 1 and s:tolist()[1] == 1, "slice step " .. step .. " takes one element")
    local m = kiln.arange(12):reshape({3, 4})
    local ok2, s2 = pcall(function() return m:slice(2, 1, -1, math.tointeger(step)) end)
    T.ok(ok2 and s2:shape()[2] == 1 and s2:tolist()[3][1] == 8, "2-d slice step " .. step .. " (no stride overflow)")
  end
  local ok, s = pcall(function() return x:slice(1, math.mininteger, math.maxinteger) end)
  T.ok(ok and s:numel() == 6, "slice bounds at the int64 extremes clamp to the whole dim")
  local sliced = kiln.compile(function(t) return t:slice(1, 2, -1, math.maxinteger) * 2 end)
  local okc, r = pcall(sliced, x)
  T.ok(okc and r:numel() == 1 and r:tolist()[1] == 2, "a compiled slice with step 2^63-1")
end

-- 6. Integer arguments range-checked to their C type: groups = 2^32 + 2
-- was read as 2 and ran a grouped convolution.
do
  local x = kiln.randn({1, 4, 5, 5}, {seed = 1})
  local w = kiln.randn({4, 2, 3, 3}, {seed = 2})
  T.raises(function() return kiln.conv2d(x, w, nil, 1, 0, 1, 2^32 + 2) end,
    "conv2d: groups: expected an integer in 1%.%.2147483647, got 4294967298", "conv2d groups 2^32 + 2")
  T.raises(function() return kiln.conv2d(x, w, nil, {groups = -2^32 + 2}) end,
    "conv2d: groups: expected an integer in 1", "conv2d groups -2^32 + 2 in an options table")
  T.raises(function() return kiln.conv2d(x, w, nil, {groups = 2.5}) end,
    "conv2d: groups: expected an integer, got 2.5", "conv2d groups 2.5")
  local ok = pcall(kiln.conv2d, x, w, nil, 1, 0, 1, 2)
  T.ok(ok, "conv2d groups 2 still works")
  T.raises(function() return x:var(nil, {correction = 2^32 + 1}) end,
    "var: correction: expected an integer in", "var correction 2^32 + 1")
end

T.done()
