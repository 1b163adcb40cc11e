-- fuzz_files.lua: issue 14's file fuzzer. Mutates valid safetensors files,
-- kernel-cache entries (*.kjit) and autotune.tsv files (truncation at the
-- interesting offsets, bit flips, huge header lengths, wrong dtypes and
-- offsets, duplicated names, FIFOs, directories, symlink loops, very long
-- paths), then loads, compiles and autotunes through the Lua API in child
-- kiln processes. Every case must either work with the right values or
-- fail with an error that names the file; never crash, hang, or hand back a
-- tensor other than what the file says:
--   safetensors: a loaded tensor is checked against this file's own reader
--     of the format (the bytes at its offsets, decoded here);
--   cache entries and autotune.tsv: the compiled result equals eager, and
--     a corrupt kernel entry is compiled again and replaced.
-- KILN_FUZZ_SEED fixes the seed (CI); without it each run draws a new one.
-- KILN_FUZZ_CASES (default 400) and KILN_FUZZ_SECONDS (default 45) bound
-- the run. A failure prints the seed and the case.

local T = dofile("t/lib/tap.lua")
local seed = tonumber(os.getenv("KILN_FUZZ_SEED") or "") or (os.time() * 1000 + math.floor(os.clock() * 1e6)) % 2^31
seed = math.tointeger(seed)
local max_cases = tonumber(os.getenv("KILN_FUZZ_CASES") or "") or 400
local seconds = tonumber(os.getenv("KILN_FUZZ_SECONDS") or "") or 45
math.randomseed(seed)
local rnd = math.random
io.write(string.format("# fuzz_files: seed %d, at most %d cases or %gs\n", seed, max_cases, seconds))

local function sh(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local pipe = io.popen("pwd")
local root = pipe:read("l")
pipe:close()
local KILN = os.getenv("KILN") or "build/kiln"
if KILN:sub(1, 1) ~= "/" then KILN = root .. "/" .. KILN end
local scratch = os.tmpname()
os.remove(scratch)
assert(os.execute("mkdir -p " .. sh(scratch)))
local function write(path, bytes)
  local fh = assert(io.open(path, "wb"))
  fh:write(bytes)
  fh:close()
end
local function read(path)
  local fh = io.open(path, "rb")
  if not fh then return nil end
  local s = fh:read("a")
  fh:close()
  return s
end

-- One child kiln process: its output and exit status; a hang is killed.
local function child(code, env, limit)
  local script = scratch .. "/child.lua"
  write(script, code)
  local p = io.popen(string.format("cd %s && %s KILN_DEVICE=cpu timeout -s KILL %d %s %s 2>&1",
    sh(scratch), env or "", limit or 60, sh(KILN), sh(script)))
  local out = p:read("a")
  local _, how, rc = p:close()
  return out, how == "exit" and rc or 128 + (rc or 0)
end

local failures, counts = {}, {safetensors = 0, cache = 0, autotune = 0, loaded = 0, refused = 0}
local function failure(what, detail)
  failures[#failures + 1] = string.format("seed %d: %s: %s", seed, what, tostring(detail):sub(1, 600):gsub("\n", " | "))
end

---------------------------------------------------------------------------
-- A reader of safetensors written here from the format's description:
-- 8-byte little-endian header length, a JSON header, the data.
local function json_decode(s)
  local pos = 1
  local value
  local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
  local function str()
    local out = {}
    pos = pos + 1
    while true do
      local c = s:sub(pos, pos)
      if c == "" then error("unterminated string") end
      if c == '"' then pos = pos + 1; return table.concat(out) end
      if c == "\\" then
        local e = s:sub(pos + 1, pos + 1)
        local map = {['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t"}
        if map[e] then out[#out + 1] = map[e]; pos = pos + 2
        elseif e == "u" then
          local hex = s:sub(pos + 2, pos + 5)
          if not hex:match("^%x%x%x%x$") then error("bad \\u escape") end
          out[#out + 1] = utf8.char(tonumber(hex, 16)); pos = pos + 6
        else error("bad escape") end
      else
        if c:byte() < 32 then error("control character in a string") end
        out[#out + 1] = c; pos = pos + 1
      end
    end
  end
  value = function(depth)
    if depth > 200 then error("nested too deep") end
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      local obj, keys, dups = {}, {}, {}
      pos = pos + 1; ws()
      if s:sub(pos, pos) == "}" then pos = pos + 1; return {obj = obj, keys = keys, dups = dups} end
      while true do
        ws()
        if s:sub(pos, pos) ~= '"' then error("expected a key") end
        local k = str(); ws()
        if s:sub(pos, pos) ~= ":" then error("expected ':'") end
        pos = pos + 1
        local v = value(depth + 1)
        if obj[k] ~= nil then dups[k] = dups[k] or {obj[k]}; table.insert(dups[k], v) else keys[#keys + 1] = k end
        obj[k] = v
        ws()
        local d = s:sub(pos, pos); pos = pos + 1
        if d == "}" then return {obj = obj, keys = keys, dups = dups} end
        if d ~= "," then error("expected ',' or '}'") end
      end
    elseif c == "[" then
      local arr = {}
      pos = pos + 1; ws()
      if s:sub(pos, pos) == "]" then pos = pos + 1; return {arr = arr} end
      while true do
        arr[#arr + 1] = value(depth + 1); ws()
        local d = s:sub(pos, pos); pos = pos + 1
        if d == "]" then return {arr = arr} end
        if d ~= "," then error("expected ',' or ']'") end
      end
    elseif c == '"' then return str()
    elseif s:find("^true", pos) then pos = pos + 4; return true
    elseif s:find("^false", pos) then pos = pos + 5; return false
    elseif s:find("^null", pos) then pos = pos + 4; return {null = true}
    else
      local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
      if not num or num == "" then error("unexpected '" .. c .. "'") end
      pos = pos + #num
      return math.tointeger(tonumber(num)) or tonumber(num) or error("bad number")
    end
  end
  local v = value(0)
  ws()
  if pos <= #s then error("text after the JSON value") end
  return v
end

local SIZES = {F32 = 4, F64 = 8, BF16 = 2, F16 = 2, I32 = 4, I64 = 8, BOOL = 1}
local KILN_DTYPE = {F32 = "f32", F64 = "f64", BF16 = "bf16", F16 = "f16", I32 = "i32", I64 = "i64", BOOL = "bool"}

local function half(bits)
  local sign = (bits >> 15) == 1 and -1 or 1
  local e, m = (bits >> 10) & 31, bits & 1023
  if e == 0 then return sign * m * 2.0^-24 end
  if e == 31 then return m == 0 and sign * math.huge or 0/0 end
  return sign * (1 + m / 1024) * 2.0^(e - 15)
end

local function decode(dtype, bytes)
  local out, size = {}, SIZES[dtype]
  for i = 1, #bytes, size do
    local b = bytes:sub(i, i + size - 1)
    local v
    if dtype == "F32" then v = string.unpack("<f", b)
    elseif dtype == "F64" then v = string.unpack("<d", b)
    elseif dtype == "I32" then v = string.unpack("<i4", b)
    elseif dtype == "I64" then v = string.unpack("<i8", b)
    elseif dtype == "BOOL" then v = b:byte() ~= 0 and 1 or 0
    elseif dtype == "F16" then v = half(string.unpack("<I2", b))
    else v = string.unpack("<f", string.pack("<I4", string.unpack("<I2", b) << 16)) end
    out[#out + 1] = v
  end
  return out
end

-- name -> list of candidate {dtype, shape, values}; or nil and why the
-- file is not valid (then kiln must refuse it or load only valid entries)
local function reference(bytes)
  if #bytes < 8 then return nil, "shorter than 8 bytes" end
  local n = string.unpack("<i8", bytes)
  if n < 0 or n > #bytes - 8 then return nil, "header length past the end" end
  local okj, hdr = pcall(json_decode, bytes:sub(9, 8 + n))
  if not okj then return nil, "header: " .. tostring(hdr) end
  if type(hdr) ~= "table" or not hdr.obj then return nil, "header not an object" end
  local data = bytes:sub(9 + n)
  local ref, why = {}, nil
  local function entry(name, e)
    if type(e) ~= "table" or not e.obj then why = name .. ": not an object"; return end
    local dt, shape, offs = e.obj.dtype, e.obj.shape, e.obj.data_offsets
    if not SIZES[dt] then why = name .. ": dtype"; return end
    if type(shape) ~= "table" or not shape.arr or type(offs) ~= "table" or not offs.arr or #offs.arr ~= 2 then
      why = name .. ": shape or offsets"; return
    end
    local numel, dims = 1, {}
    for i, d in ipairs(shape.arr) do
      if math.type(d) ~= "integer" or d < 0 or d > 2^40 then why = name .. ": dim"; return end
      numel = numel * d; dims[i] = d
    end
    local b, e2 = offs.arr[1], offs.arr[2]
    if math.type(b) ~= "integer" or math.type(e2) ~= "integer" or b < 0 or e2 < b or e2 > #data
       or numel > 2^40 or e2 - b ~= numel * SIZES[dt] then
      why = name .. ": offsets"; return
    end
    ref[name] = ref[name] or {}
    table.insert(ref[name], {dtype = KILN_DTYPE[dt], shape = dims, values = decode(dt, data:sub(b + 1, e2))})
  end
  for _, name in ipairs(hdr.keys) do
    if name ~= "__metadata__" then
      for _, e in ipairs(hdr.dups[name] or {hdr.obj[name]}) do entry(name, e) end
    end
  end
  return ref, why
end

local function same(a, b)
  if a ~= a and b ~= b then return true end
  return a == b
end

---------------------------------------------------------------------------
-- 1. safetensors: one child loads a batch of mutated files and prints what
-- it got; this process checks each against its own reading.
local base_path = scratch .. "/base.safetensors"
kiln.save_safetensors(base_path, {
  a = kiln.randn({2, 3}, {seed = seed % 1000}),
  b = kiln.tensor({1, -2, 2^40, -7}, {dtype = "i64"}),
  c = kiln.tensor(0.1, {dtype = "bf16"}),
  d = kiln.tensor({1, 0, 1}, {dtype = "bool"}),
  e = kiln.zeros({0, 2}, {dtype = "f16"}),
  f = kiln.tensor({{1, 2}, {3, 2^31 - 1}}, {dtype = "i32"}),
  g = kiln.tensor({-1e300}, {dtype = "f64"}),
  h = kiln.tensor({65504, -0.5, 1e-7}, {dtype = "f16"}),
}, {note = "fuzz"})
local base = read(base_path)
local hlen = string.unpack("<i8", base)
local header = base:sub(9, 8 + hlen)
local body = base:sub(9 + hlen)

local function with_header(h, len)
  return string.pack("<i8", len or #h) .. h .. body
end

local function flip(bytes, lo, hi)
  local i = rnd(lo, hi)
  local bit = 1 << rnd(0, 7)
  return bytes:sub(1, i - 1) .. string.char(bytes:byte(i) ~ bit) .. bytes:sub(i + 1), string.format("bit %d of byte %d flipped", bit, i - 1)
end

-- positions of every match of pattern in h
local function matches(h, pattern)
  local out, init = {}, 1
  while true do
    local a, b = h:find(pattern, init)
    if not a then return out end
    out[#out + 1] = {a, b}
    init = b + 1
  end
end

local function replace_one(h, pattern, new)
  local m = matches(h, pattern)
  if #m == 0 then return h end
  local p = m[rnd(#m)]
  return h:sub(1, p[1] - 1) .. (type(new) == "function" and new(h:sub(p[1], p[2])) or new) .. h:sub(p[2] + 1)
end

local hostile_numbers = {"-1", "0", "1", "7", "9223372036854775807", "18446744073709551615", "1e30", "2.5",
                         "4294967296", "99999999999", "-9223372036854775808"}

local function mutate_safetensors()
  local k = rnd(9)
  if k == 1 then
    local offsets = {0, 1, 7, 8, 9, 8 + hlen - 1, 8 + hlen, 8 + hlen + 1, #base - 1, rnd(0, #base)}
    local at = offsets[rnd(#offsets)]
    return base:sub(1, at), "truncated at byte " .. at
  elseif k == 2 then
    local b, d = flip(base, 1, #base)
    if rnd(2) == 1 then b, d = flip(b, 1, 8 + hlen) end
    return b, d
  elseif k == 3 then
    local lens = {math.maxinteger, -1, 2^32, #base, #base - 7, 0, hlen - 1, hlen + 1, 1 << 40}
    local l = math.tointeger(lens[rnd(#lens)])
    return string.pack("<i8", l) .. base:sub(9), "header length " .. l
  elseif k == 4 then
    local dts = {'"F32"', '"F64"', '"I64"', '"I32"', '"BF16"', '"F16"', '"BOOL"', '"F8_E4M3"', '"U8"', '""', '"f32"', "7", "null"}
    local new = dts[rnd(#dts)]
    return with_header(replace_one(header, '"[A-Z0-9_]+"', function(old)
      return (old == '"F32"' or old == '"I64"' or old == '"BOOL"' or old == '"F16"' or old == '"I32"'
              or old == '"BF16"' or old == '"F64"') and new or old
    end)), "a dtype became " .. new
  elseif k == 5 then
    local n = hostile_numbers[rnd(#hostile_numbers)]
    return with_header(replace_one(header, "%-?%d+", n)), "a number in the header became " .. n
  elseif k == 6 then
    -- a duplicated name: the first entry again, under the name of another
    local names = matches(header, '"[a-h]":{')
    local p = names[rnd(#names)]
    local q = names[rnd(#names)]
    local entry_end = header:find("}", p[2]) + 1
    local dup = header:sub(q[1], q[1] + 3) .. header:sub(p[1] + 4, entry_end - 1)
    return with_header(header:sub(1, #header - 1) .. "," .. dup .. "}"), "a duplicated name " .. header:sub(q[1], q[1] + 2)
  elseif k == 7 then
    local junk = {string.rep("[", 5000), "\0", "\255", '"\\ud800"', ',"z":{}', ',"z":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'}
    local j = junk[rnd(#junk)]
    local h = rnd(2) == 1 and (header:sub(1, #header - 1) .. j .. "}") or (header .. j)
    return with_header(h), "header text added: " .. j:sub(1, 30)
  elseif k == 8 then
    return with_header(header, hlen + rnd(-3, 3)), "a header length off by a little"
  end
  return with_header(replace_one(header, "%[[%d,]*%]", function() return "[" .. hostile_numbers[rnd(#hostile_numbers)] .. "," ..
    hostile_numbers[rnd(#hostile_numbers)] .. "]" end)), "a shape or offsets list replaced"
end

local LOADER = [[
local paths = {}
for line in io.lines("list.txt") do paths[#paths + 1] = line end
local function flat(v, out)
  if type(v) ~= "table" then out[#out + 1] = v == true and 1 or v == false and 0 or v; return out end
  for _, x in ipairs(v) do flat(x, out) end
  return out
end
for i, p in ipairs(paths) do
  io.write("##case ", i, "\n"); io.flush()
  local ok, t = pcall(kiln.load_safetensors, p)
  if not ok then io.write("##err ", (tostring(t):gsub("\n", " ")), "\n")
  else
    local names = {}
    for name in pairs(t) do names[#names + 1] = name end
    table.sort(names)
    io.write("##loaded ", #names, "\n")
    for _, name in ipairs(names) do
      local x = t[name]
      local wide = (x.dtype == "bool" or x.dtype == "i64" or x.dtype == "i32") and x.dtype or "f64"
      local vals = flat(x:numel() == 0 and {} or x:to(wide):tolist(), {})
      for j, v in ipairs(vals) do
        vals[j] = v ~= v and "nan" or math.type(v) == "integer" and string.format("%d", v) or string.format("%.17g", v)
      end
      io.write("##tensor ", name, "\t", x.dtype, "\t", table.concat(x:shape(), ","), "\t", table.concat(vals, ","), "\n")
    end
  end
end
io.write("##end\n")
]]

local function check_loaded(i, desc, bytes, got, err, path)
  local ref, why = reference(bytes)
  if err then
    counts.refused = counts.refused + 1
    if not err:find(path, 1, true) and not err:find((path:match("[^/]*$")), 1, true) then
      failure("case " .. i .. " (" .. desc .. ")", "the error does not name the file: " .. err)
    end
    return
  end
  counts.loaded = counts.loaded + 1
  for name, g in pairs(got) do
    local cands = ref and ref[name]
    if not cands then
      failure("case " .. i .. " (" .. desc .. ")", "kiln loaded '" .. name .. "', which the file does not validly hold (" .. tostring(why) .. ")")
    else
      local matched = false
      for _, c in ipairs(cands) do
        local good = c.dtype == g.dtype and table.concat(c.shape, ",") == g.shape and #c.values == #g.values
        for j = 1, good and #c.values or 0 do
          local v = c.dtype == "bool" and c.values[j] or c.values[j]
          local gv = g.values[j] == "nan" and 0/0 or math.tointeger(g.values[j]) or tonumber(g.values[j])
          if not same(v, gv) then good = false; break end
        end
        matched = matched or good
      end
      if not matched then
        failure("case " .. i .. " (" .. desc .. ")", "tensor '" .. name .. "' differs from the file's bytes: " .. g.dtype .. " {" .. g.shape .. "} " .. g.raw:sub(1, 120))
      end
    end
  end
end

local start = os.time()
local function time_left() return os.time() - start < seconds end

do
  local cases, paths = {}, {}
  local n_st = math.max(1, math.floor(max_cases * 0.6))
  for i = 1, n_st do
    local bytes, desc = mutate_safetensors()
    local path = string.format("%s/st%d.safetensors", scratch, i)
    write(path, bytes)
    cases[i] = {bytes = bytes, desc = desc, path = path}
    paths[i] = path
  end
  -- paths that are not regular files
  local special = {
    {"fifo", "mkfifo %s"}, {"directory", "mkdir %s"}, {"symlink loop", "ln -s %s %s"},
    {"dangling symlink", "ln -s /nonexistent-kiln-fuzz %s"}, {"empty file", ": > %s"},
  }
  for j, s in ipairs(special) do
    local path = string.format("%s/special%d.safetensors", scratch, j)
    os.execute(string.format(s[2], sh(path), sh(path)))
    cases[#cases + 1] = {bytes = "", desc = s[1], path = path, special = true}
    paths[#paths + 1] = path
  end
  local long = scratch .. "/" .. string.rep("d", 200)
  local lp = long .. "/" .. string.rep("x", 4200) .. ".safetensors"
  cases[#cases + 1] = {bytes = "", desc = "a 4400-byte path", path = lp, special = true}
  paths[#paths + 1] = lp
  write(scratch .. "/list.txt", table.concat(paths, "\n") .. "\n")
  local out, rc = child(LOADER, nil, math.floor(seconds) + 60)
  local results, cur = {}, nil
  for line in out:gmatch("[^\n]+") do
    local i = line:match("^##case (%d+)")
    if i then cur = {got = {}}; results[tonumber(i)] = cur
    elseif line:match("^##err ") then cur.err = line:sub(7)
    elseif line:match("^##tensor ") then
      local name, dt, shape, vals = line:match("^##tensor ([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$")
      local list = {}
      for v in vals:gmatch("[^,]+") do list[#list + 1] = v end
      cur.got[name] = {dtype = dt, shape = shape, values = list, raw = vals}
    end
  end
  T.ok(rc == 0 and out:find("##end"), string.format("safetensors: the loader ran through %d files (exit %s)", #cases, tostring(rc)))
  if rc ~= 0 or not out:find("##end") then
    local last = #results
    failure("safetensors case " .. last .. " (" .. (cases[last] and cases[last].desc or "?") .. ")",
      "the process ended with status " .. tostring(rc) .. ": " .. out:sub(-800))
  end
  for i, r in pairs(results) do
    local c = cases[i]
    if not c.special or not r.err then check_loaded(i, c.desc, c.bytes, r.got, r.err, c.path)
    elseif not r.err:find("special", 1, true) and not r.err:find("xxxx", 1, true) then
      failure("case " .. i .. " (" .. c.desc .. ")", "the error does not name the file: " .. r.err)
    end
  end
  counts.safetensors = #results
end

---------------------------------------------------------------------------
-- 2. Kernel-cache entries and 3. autotune.tsv: a child compiles (and
-- tunes) f into a cache dir; each case mutates one file of a copy of that
-- dir and runs the child again: it must give eager's result, and a corrupt
-- kernel entry must be replaced by a good one.
local COMPILER = [[
kiln.config.autotune_budget_s = tonumber(os.getenv("FUZZ_BUDGET")) or 2
local function f(x) return kiln.softmax((x * 2 + 1):tanh(), -1) + x:sum(-1, true) end
local x = kiln.randn({4, 9}, {seed = 3})
local ref = f(x)
local mode = os.getenv("FUZZ_MODE")
local ok, r = pcall(function() return kiln.compile(f, {mode = mode})(x) end)
if not ok then print("##err " .. tostring(r):gsub("\n", " ")) return end
local d = (r - ref):abs():amax():item()
local j = kiln.jit_stats()
print(string.format("##diff %.17g hits %d", d, j.hits))
]]

local function copy_dir(from, to)
  os.execute("rm -rf " .. sh(to) .. " && cp -a " .. sh(from) .. " " .. sh(to))
end

local function list(dir, pattern)
  local p = io.popen("ls " .. sh(dir) .. " 2>/dev/null")
  local out = {}
  for l in p:lines() do if l:match(pattern) then out[#out + 1] = l end end
  p:close()
  return out
end

local function mutate_file(path, bytes)
  local k = rnd(10)
  if k <= 3 then
    local offsets = {0, 1, 7, 8, 16, 63, 64, 65, #bytes // 2, #bytes - 1, rnd(0, #bytes)}
    local at = offsets[rnd(#offsets)]
    write(path, bytes:sub(1, at))
    return "truncated at byte " .. at
  elseif k <= 6 then
    local b, d = flip(bytes, 1, #bytes)
    write(path, b)
    return d
  elseif k == 7 then
    os.remove(path); os.execute("mkfifo " .. sh(path)); return "a FIFO"
  elseif k == 8 then
    os.remove(path); os.execute("mkdir " .. sh(path)); return "a directory"
  elseif k == 9 then
    os.remove(path); os.execute("ln -s " .. sh(path) .. " " .. sh(path)); return "a symlink loop"
  end
  local g = {}
  for i = 1, math.min(#bytes, 4096) do g[i] = string.char(rnd(0, 255)) end
  write(path, table.concat(g))
  return "random bytes"
end

local function compile_case(kind, pristine, mode, pattern, n)
  local entries = list(pristine, pattern)
  T.ok(#entries > 0, kind .. ": the first process wrote " .. #entries .. " file(s) to mutate")
  if #entries == 0 then return 0 end
  local runs = 0
  for i = 1, n do
    if not time_left() then break end
    local dir = scratch .. "/case"
    copy_dir(pristine, dir)
    local name = entries[rnd(#entries)]
    local path = dir .. "/" .. name
    local how = mutate_file(path, read(path) or "")
    local desc = kind .. " case " .. i .. ": " .. name .. " " .. how
    local out, rc = child(COMPILER, "FUZZ_MODE=" .. mode .. " KILN_CACHE_DIR=" .. sh(dir), 90)
    runs = runs + 1
    local d = tonumber(out:match("##diff (%S+)"))
    local err = out:match("##err ([^\n]*)")
    if rc ~= 0 then failure(desc, "the process ended with status " .. rc .. ": " .. out:sub(-600))
    elseif err then
      if not err:find(name, 1, true) then failure(desc, "an error that does not name the file: " .. err) end
    elseif not d or not (d <= 1e-5) then failure(desc, "the result differs from eager by " .. tostring(d) .. ": " .. out:sub(1, 400))
    elseif kind == "cache" and how == "a directory" then
      -- kiln does not delete a directory it did not make: it must say why
      -- it cannot cache the kernel, naming the entry
      if not out:find("cannot write entry [^\n]*" .. name) then failure(desc, "no warning naming the entry: " .. out:sub(1, 300)) end
    elseif kind == "cache" and rnd(3) == 1 then
      -- the corrupt entry was replaced: a third process hits on every kernel
      local out2 = child(COMPILER, "FUZZ_MODE=" .. mode .. " KILN_CACHE_DIR=" .. sh(dir), 90)
      local hits = tonumber(out2:match("hits (%d+)"))
      local f = io.open(path, "rb")
      local regular = f and f:read(0) ~= nil
      if f then f:close() end
      if not regular or not hits or hits < #entries then
        failure(desc, "the entry was not replaced: hits " .. tostring(hits) .. " of " .. #entries .. ": " .. out2:sub(1, 300))
      end
    end
  end
  return runs
end

local n_rest = math.max(2, max_cases - counts.safetensors)
local pristine = scratch .. "/pristine"
local out, rc = child(COMPILER, "FUZZ_MODE=default KILN_CACHE_DIR=" .. sh(pristine), 120)
T.ok(rc == 0 and out:find("##diff"), "cache: the first process compiles: " .. out:sub(1, 200):gsub("\n", " "))
counts.cache = compile_case("cache", pristine, "default", "%.kjit$", n_rest // 2)

local tuned = scratch .. "/tuned"
-- (a budget that lets the slow sanitizer build measure and save something)
out, rc = child(COMPILER, "FUZZ_BUDGET=30 FUZZ_MODE=max-autotune-no-cudagraphs KILN_CACHE_DIR=" .. sh(tuned), 120)
T.ok(rc == 0 and out:find("##diff"), "autotune: the first process tunes: " .. out:sub(1, 200):gsub("\n", " "))
counts.autotune = compile_case("autotune", tuned, "max-autotune-no-cudagraphs", "^autotune%.tsv$", n_rest - n_rest // 2)

os.execute("chmod -R u+rwx " .. sh(scratch) .. " 2>/dev/null; rm -rf " .. sh(scratch))
io.write(string.format("# seed %d: %d safetensors files (%d loaded, %d refused), %d cache-entry cases, %d autotune.tsv cases, %ds\n",
  seed, counts.safetensors, counts.loaded, counts.refused, counts.cache, counts.autotune, os.time() - start))
T.is(#failures, 0, "every case worked or failed naming the file (seed " .. seed .. ")")
for i = 1, math.min(#failures, 25) do io.write("# " .. failures[i] .. "\n") end
T.done()
