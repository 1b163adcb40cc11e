-- bad_input.lua: no input from Lua may crash kiln. Every op and tensor
-- function is fed wrong types, wrong shapes, negative and huge sizes, NaN
-- and nil; each call must either work or raise a Lua error with a message,
-- and a few messages are checked word for word.
local T = dofile("t/lib/tap.lua")

local good = kiln.randn({2, 3}, {seed = 1})
local bad_values = {
  nil, true, "x", {}, {1, "a"}, 0, -1, 1e300, 0/0, -0/0, 2^62, -2^62, math.huge,
  kiln.randn({4, 5}, {seed = 2}), kiln.zeros({0, 3}), kiln.tensor(1.5),
  kiln.zeros({2, 3}, {dtype = "i64"}), kiln.zeros({2, 3}, {dtype = "bool"}),
  kiln.randn({2, 1, 3, 4}, {seed = 3}), kiln.randn({1, 3, 5, 5}, {seed = 4}),
  {-1, 2}, {1e12, 1e12}, {2^40, 2^40, 2^40}, {0/0}, function() end,
}

-- Every callable field of kiln and of the tensor methods.
local fns = {}
for name, f in pairs(kiln) do
  if type(f) == "function" and name ~= "manual_seed" and name ~= "save_safetensors" then fns[#fns + 1] = {name, f} end
end
for name, f in pairs(kiln.Tensor) do
  if type(f) == "function" then fns[#fns + 1] = {"Tensor:" .. name, f} end
end
table.sort(fns, function(a, b) return a[1] < b[1] end)

-- A message of ours, not a Lua internal error leaking out of kiln's own code
-- ("attempt to index a nil value") or a broken format.
local function is_error_message(e)
  return type(e) == "string" and #e > 0 and not e:find("attempt to", 1, true)
    and not e:find("invalid option", 1, true)
end

local calls, errors, bad_errors = 0, 0, {}
for _, entry in ipairs(fns) do
  local name, f = entry[1], entry[2]
  local skip = name:match("^Tensor:") == nil and
    (name == "cmd" or name == "load" or name:match("^_")) -- commands are tested elsewhere
  if not skip then
    local argsets = {{}, {good}}
    for _, v in pairs(bad_values) do
      argsets[#argsets + 1] = {v}
      argsets[#argsets + 1] = {good, v}
      argsets[#argsets + 1] = {v, good}
      argsets[#argsets + 1] = {good, v, v}
      argsets[#argsets + 1] = {good, 1, v}
      argsets[#argsets + 1] = {good, good, v, v}
    end
    argsets[#argsets + 1] = {nil, nil, nil}
    for _, args in ipairs(argsets) do
      calls = calls + 1
      local okc, e = pcall(f, table.unpack(args, 1, 4))
      if not okc then
        errors = errors + 1
        if not is_error_message(e) then bad_errors[#bad_errors + 1] = name .. ": " .. tostring(e) end
      end
    end
  end
end
T.ok(calls > 1000, "fed " .. calls .. " bad argument lists to " .. #fns .. " functions")
T.ok(errors > calls / 3, "most of them raised errors (" .. errors .. ")")
T.is(#bad_errors, 0, "every error carries a message")
if #bad_errors > 0 then T.diag(table.concat(bad_errors, "\n", 1, math.min(5, #bad_errors))) end

-- kiln.nn constructors and forward calls get the same treatment.
local nn_calls, nn_bad = 0, {}
local classes = {}
for name, cls in pairs(kiln.nn) do
  if type(cls) == "table" and name:match("^%u") and name ~= "Module" then classes[#classes + 1] = name end
end
table.sort(classes)
local nn_args = {nil, -1, 0, 0/0, 2^40, 1.5, "x", {}, {0, 0}, {-1, 2}, good}
for _, name in ipairs(classes) do
  for _, a1 in pairs(nn_args) do
    for _, a2 in ipairs{3, -2, 0/0, {}} do
      nn_calls = nn_calls + 1
      local okc, mod = pcall(kiln.nn[name], a1, a2, a2)
      if not okc and not is_error_message(mod) then nn_bad[#nn_bad + 1] = name .. ": " .. tostring(mod) end
      if okc then
        for _, x in ipairs{good, kiln.randn({2, 3, 4, 4}, {seed = 5}), "x", nil} do
          nn_calls = nn_calls + 1
          local okf, e = pcall(mod, x)
          if not okf and not is_error_message(e) then nn_bad[#nn_bad + 1] = name .. "(): " .. tostring(e) end
        end
      end
    end
  end
end
T.ok(nn_calls > 200, "fed " .. nn_calls .. " bad argument lists to " .. #classes .. " nn classes")
T.is(#nn_bad, 0, "every nn error is a message of kiln's")
if #nn_bad > 0 then T.diag(table.concat(nn_bad, "\n", 1, #nn_bad)) end

-- Messages name the op, the argument, what was expected and what came.
local a, b = kiln.randn({2, 3}), kiln.randn({4, 5})
T.raises(function() return a:matmul(b) end, "matmul: shapes {2,3} and {4,5} cannot be multiplied",
  "matmul shape message")
T.raises(function() return a:matmul(b) end, "^t/bad_input.lua:%d+:", "the error points at the user's line")
T.raises(function() return a + b end, "add: .*{2,3}.*{4,5}", "broadcast message")
T.raises(function() return kiln.randn({-1, 3}) end, "negative", "negative size")
T.raises(function() return kiln.zeros({2^40, 2^40}) end, "exceed", "huge size")
T.raises(function() return kiln.randn({2, 3}, {dtype = "f8"}) end, "unknown dtype 'f8'", "unknown dtype")
T.raises(function() return a:softmax(3) end, "softmax: dim 3 out of range", "dim out of range")
T.raises(function() return a:sum(0) end, "1%-based", "dim 0 explains 1-based dims")
T.raises(function() return a:matmul(nil) end, "tensor expected, got nil", "nil argument")
T.raises(function() return a:reshape({4, 2}) end, "shape {4,2} is invalid for a tensor of 6 elements",
  "reshape element count")
T.raises(function() return a:item() end, "6 elements", "item on many elements")
T.raises(function() return kiln.tensor({{1, 2}, {3}}) end, "ragged", "ragged nested table")
T.raises(function() return a < a end, "ambiguous", "comparison metamethod needs one element")
T.raises(function() return kiln.where(a, a, a) end, "where: condition must be bool", "where dtype")

-- NaN flows through as a value, not a crash.
local n = kiln.full({3}, 0/0)
local r = (n + 1):tolist()
T.ok(r[1] ~= r[1], "NaN + 1 is NaN")
T.ok(kiln.tensor(1):item() == 1, "kiln still works after all that")
T.done()
