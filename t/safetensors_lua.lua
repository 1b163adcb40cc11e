-- t/safetensors_lua.lua: kiln.load_safetensors / kiln.save_safetensors
-- (scripting/kn_lua_io.c): round trips from Lua and errors on bad input.
local T = dofile("t/lib/tap.lua")

math.randomseed(os.time())
local function tmpfile(name)
  return string.format("%s/kn_stl_%d_%s", os.getenv("TMPDIR") or "/tmp", math.random(1 << 30), name)
end

-- compared on the cpu: loaded tensors are there, made ones on the default device
local function same(a, b)
  a, b = a:to("cpu"), b:to("cpu")
  if a.dtype ~= b.dtype or table.concat(a:shape(), ",") ~= table.concat(b:shape(), ",") then return false end
  if a:numel() == 0 then return true end
  if a.dtype == "bool" then return a:ne(b):cast("i64"):sum():item() == 0 end
  return (a:cast("f64") - b:cast("f64")):abs():amax():item() == 0
end

local path = tmpfile("rt.safetensors")
local x = kiln.randn({ 3, 4 }, { seed = 1 })
local tensors = {
  f32 = x,
  f64 = kiln.randn({ 2, 3 }, { seed = 2, dtype = "f64" }),
  bf16 = x:to("bf16"),
  f16 = x:to("f16"),
  i32 = kiln.tensor({ { -7, 0 }, { 2147483647, -2147483648 } }, { dtype = "i32" }),
  i64 = kiln.tensor({ 1, -1, 1 << 40 }, { dtype = "i64" }),
  bool = x:gt(0),
  scalar = kiln.tensor(2.5),
  empty = kiln.zeros({ 0, 3 }),
  transposed = x:transpose(1, 2),
  sliced = x:slice(2, 2, 4, 2),
  ["dotted.name/é \"q\""] = kiln.ones({ 1 }),
}
kiln.save_safetensors(path, tensors, { format = "pt", version = 2 })
local back, meta = kiln.load_safetensors(path)
local n = 0
for name, t in pairs(tensors) do
  n = n + 1
  T.ok(back[name] ~= nil and same(back[name], t), "round trip of '" .. name .. "' (" .. t.dtype .. ")")
end
local m = 0
for _ in pairs(back) do m = m + 1 end
T.is(m, n, "no extra tensors")
T.ok(back.transposed:is_contiguous() and back.sliced:is_contiguous(), "views are written contiguous")
T.is(back.scalar:dim(), 0, "a 0-dim tensor stays 0-dim")
T.is(back.f32.device, "cpu", "loaded tensors are on the cpu")
T.is(meta.format, "pt", "metadata comes back")
T.is(meta.version, "2", "numbers in metadata are written as strings")

local empty_path = tmpfile("empty.safetensors")
kiln.save_safetensors(empty_path, {})
local e, em = kiln.load_safetensors(empty_path)
T.ok(next(e) == nil and next(em) == nil, "an empty file: no tensors, empty metadata")

-- errors
T.raises(function() kiln.load_safetensors(tmpfile("absent.safetensors")) end,
  "^t/safetensors_lua.lua:%d+: .*absent.safetensors: cannot open: No such file or directory",
  "a missing file: an error at the caller's line naming the file")
local bad = tmpfile("bad.safetensors")
local f = assert(io.open(bad, "wb"))
f:write(string.pack("<I8", 1000), "{}")
f:close()
T.raises(function() kiln.load_safetensors(bad) end, "bad.safetensors: header length 1000 is larger than the rest of the file",
  "a corrupt file: the message names the file and the problem")
f = assert(io.open(bad, "wb"))
f:write(string.pack("<I8", 16), '{"a":{"dtype":1}')
f:close()
T.raises(function() kiln.load_safetensors(bad) end, "bad JSON header at byte 22: expected a string, got '1'",
  "bad JSON: the byte offset")
T.raises(function() kiln.save_safetensors(path, { [1] = x }) end, "tensor names must be strings, got a number key",
  "names must be strings")
T.raises(function() kiln.save_safetensors(path, { a = 1 }) end, "'a' is a number, not a tensor", "values must be tensors")
T.raises(function() kiln.save_safetensors(path, { a = x }, { k = {} }) end, "metadata value of 'k' must be a string",
  "metadata values must be strings")
T.raises(function() kiln.save_safetensors(path, { __metadata__ = x }) end, "'__metadata__' is reserved", "reserved name")
T.raises(function() kiln.save_safetensors("/nonexistent-dir/x.safetensors", { a = x }) end,
  "cannot create a file there", "an unwritable path")
local still = kiln.load_safetensors(path)
T.ok(same(still.f32, x), "failed saves left the earlier file intact")

for _, p in ipairs({ path, empty_path, bad }) do os.remove(p) end
T.done()
