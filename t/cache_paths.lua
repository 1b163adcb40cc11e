-- cache_paths.lua: paths built from kiln.config.cache_dir (issue 14). A dir
-- longer than kiln's paths hold, or one with a NUL byte, is refused with an
-- error naming it and the limit; before, it was cut short and the kernels
-- and autotune choices landed in another directory. A long dir within the
-- limit works and gets its entries.
local T = dofile("t/lib/tap.lua")

local base = os.tmpname()
os.remove(base)

local function exists(path)
  local fh = io.open(path, "r")
  if fh then fh:close() end
  return fh ~= nil
end

local function f(x) return (x * 2 + 1):tanh():sum(-1) end
local x = kiln.randn({4, 8}, {seed = 1, device = "cpu"})
local ref = f(x)

-- A dir of 1,100 bytes, as nested 100-byte names (a name may have at most 255)
local function long_dir(bytes)
  local parts, len = {base}, #base
  while len < bytes do
    local n = math.min(100, bytes - len - 1)
    if n < 1 then n = 1 end
    parts[#parts + 1] = string.rep("d", n)
    len = len + 1 + n
  end
  return table.concat(parts, "/")
end

local too_long = long_dir(1100)
T.is(#too_long, 1100, "the test dir is 1100 bytes long")
kiln.config.cache_dir = too_long
local cm = kiln.compile(f, {mode = "max-autotune-no-cudagraphs"})
T.raises(function() cm(x) end, "kiln.config.cache_dir is 1100 bytes long; kiln supports at most 1024",
  "a compiled call with a cache dir over the limit fails, naming the length and the limit")
-- the old code cut the dir at 511 bytes and wrote there
local cut_511 = too_long:sub(1, 511):gsub("/+$", "")
T.ok(not exists(cut_511), "nothing was written to the dir cut short at 511 bytes")
T.ok(not exists(too_long:sub(1, 1024)), "nor to the dir cut at 1024 bytes")
T.raises(function() kiln.autotune.cache_path() end, "cache dir .* is 1100 bytes long; kiln supports at most 1024",
  "kiln.autotune.cache_path() refuses it too")

kiln.config.cache_dir = base .. "/with\0nul"
cm = kiln.compile(f)
T.raises(function() cm(x) end, "kiln.config.cache_dir contains a NUL byte %(at byte " .. (#base + 6) .. "%)",
  "a cache dir with a NUL byte is refused, naming where")
T.ok(not exists(base .. "/with"), "nothing was written to the dir cut at the NUL")

-- within the limit: kernels and choices land in that very dir
local ok_dir = long_dir(1000)
kiln.config.cache_dir = ok_dir
cm = kiln.compile(f, {mode = "max-autotune-no-cudagraphs"})
local y = cm(x)
local d = (y - ref):abs():amax():item()
T.ok(d == d and d < 1e-5, "with a 1000-byte cache dir the compiled result equals eager: " .. d)
T.is(kiln.autotune.cache_path(), ok_dir .. "/autotune.tsv", "kiln.autotune.cache_path() is in the 1000-byte dir")
T.ok(exists(ok_dir .. "/autotune.tsv"), "the autotune choices are saved in that dir")
local p = io.popen("ls '" .. ok_dir .. "' | grep -c 'kjit$'")
local n = tonumber(p:read("a")) or 0
p:close()
T.ok(n >= 1, "the compiled kernels are cached in that dir (" .. n .. " .kjit files)")

os.execute("rm -rf '" .. base .. "'")
T.done()
