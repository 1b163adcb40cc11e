-- safetensors_strings.lua: names, metadata and paths kiln.save_safetensors
-- cannot write faithfully (issue 14). A tensor name that is not UTF-8 used
-- to be saved, then refused by kiln's own loader; a NUL byte silently cut a
-- name, a metadata string or the path. Now each is refused at save time
-- with an error naming it, and nothing is written.
local T = dofile("t/lib/tap.lua")

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p '" .. dir .. "'")
local path = dir .. "/w.safetensors"
local x = kiln.arange(6):reshape({2, 3}):to("f32")

local function exists(p)
  local fh = io.open(p, "rb")
  if fh then fh:close() end
  return fh ~= nil
end

T.raises(function() kiln.save_safetensors(path, {["w\xff"] = x}) end,
  "tensor name 'w.' is not valid UTF%-8 %(byte 2 is 0xff%)", "a tensor name that is not UTF-8 is refused, naming the byte")
T.ok(not exists(path), "and nothing is written")
T.raises(function() kiln.save_safetensors(path, {w = x}, {["k\xc3"] = "v"}) end,
  "metadata key 'k.' is not valid UTF%-8 %(byte 2 is 0xc3%)", "a metadata key that is not UTF-8 is refused")
T.raises(function() kiln.save_safetensors(path, {w = x}, {k = "\xed\xa0\x80"}) end,
  "metadata value '...' is not valid UTF%-8 %(byte 1 is 0xed%)", "a metadata value that is not UTF-8 (a surrogate) is refused")
T.raises(function() kiln.save_safetensors(path, {["a\0b"] = x}) end,
  "tensor name 'a' contains a NUL byte %(at byte 2%)", "a tensor name with a NUL byte is refused")
T.raises(function() kiln.save_safetensors(path, {w = x}, {["k\0z"] = "v"}) end,
  "metadata key 'k' contains a NUL byte %(at byte 2%)", "a metadata key with a NUL byte is refused")
T.raises(function() kiln.save_safetensors(path, {w = x}, {k = "v\0w"}) end,
  "metadata value 'v' contains a NUL byte %(at byte 2%)", "a metadata value with a NUL byte is refused")
T.ok(not exists(path), "none of them wrote the file")
T.raises(function() kiln.save_safetensors(path .. "\0.bak", {w = x}) end,
  "path '.*' contains a NUL byte", "a path with a NUL byte is refused")
T.ok(not exists(path), "and nothing is written at the path cut at the NUL")
T.raises(function() kiln.load_safetensors(path .. "\0.bak") end, "path '.*' contains a NUL byte",
  "load_safetensors refuses such a path too")

-- UTF-8 names and metadata round-trip, values equal
kiln.save_safetensors(path, {["gewicht_é_层"] = x}, {["schlüssel"] = "wert ✓"})
local t, meta = kiln.load_safetensors(path)
local y = t["gewicht_é_层"]
T.ok(y ~= nil, "a UTF-8 tensor name is saved and loads back")
local d = y and (y:to(x.device) - x):abs():amax():item() or math.huge
T.ok(d == 0, "with the same values: max diff " .. d)
T.is(meta and meta["schlüssel"], "wert ✓", "UTF-8 metadata round-trips")

os.execute("rm -rf '" .. dir .. "'")
T.done()
