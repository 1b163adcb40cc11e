-- 05_json.lua: kiln's one JSON writer and reader, for everything kiln
-- writes as JSON (KILN_TRACE's event lines, kiln.trace's Chrome events,
-- a kiln.bench result's :json(), the benchmarks' result rows) and reads
-- back (kiln.report_from_trace). It runs first so that every later file
-- can use it (luaopen_kiln runs this file with the kiln table as `...`).
--   kiln._json_encode(v [, nonfinite]) -> one line of JSON
--   kiln._json_decode(text)             -> the value, or nil and why
local kiln = ...

-- NaN and the infinities have no JSON spelling: null by default, or with
-- nonfinite = "string" the strings "nan", "inf" and "-inf", which a reader
-- of benchmark rows shows as they are where null would say nothing.
local NONFINITE = {
  null = { nan = "null", inf = "null", ninf = "null" },
  string = { nan = '"nan"', inf = '"inf"', ninf = '"-inf"' },
}

local ESCAPES = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r" }

local function encode_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return ESCAPES[c] or string.format("\\u%04x", c:byte()) end) .. '"'
end

-- v as JSON on one line: a table with a positive length (or an empty one)
-- is an array, any other table an object with its keys sorted, so that
-- the same value always reads the same and rows diff well; a value JSON
-- has no type for (a function, a tensor) is written as its tostring.
-- `open` holds the tables being written, so that one inside itself is an
-- error instead of a stack overflow.
local function encode(v, nf, open)
  local t = type(v)
  if t == "nil" then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then
    if v ~= v then return nf.nan end
    if v == math.huge then return nf.inf end
    if v == -math.huge then return nf.ninf end
    return math.type(v) == "integer" and tostring(v) or string.format("%.6g", v)
  end
  if t == "string" then return encode_string(v) end
  if t == "table" then
    if open[v] then error("kiln._json_encode: a table that holds itself has no JSON", 0) end
    open[v] = true
    local parts = {}
    if #v > 0 or next(v) == nil then
      for i = 1, #v do parts[i] = encode(v[i], nf, open) end
      open[v] = nil
      return "[" .. table.concat(parts, ",") .. "]"
    end
    local keys, key_of = {}, {}
    for k in pairs(v) do
      local text = tostring(k) -- a key that is not a string is written as its text
      keys[#keys + 1], key_of[text] = text, k
    end
    table.sort(keys)
    for _, text in ipairs(keys) do parts[#parts + 1] = encode_string(text) .. ":" .. encode(v[key_of[text]], nf, open) end
    open[v] = nil
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return encode_string(tostring(v))
end

function kiln._json_encode(v, nonfinite)
  local nf = NONFINITE[nonfinite or "null"]
  if not nf then
    local got = type(nonfinite) == "string" and ("'" .. nonfinite .. "'") or type(nonfinite)
    error("kiln._json_encode: nonfinite must be \"null\" or \"string\", got " .. got, 2)
  end
  local ok, text = pcall(encode, v, nf, {})
  if not ok then error(text, 2) end
  return text
end

-- The reader of what encode writes: objects, arrays, strings, numbers,
-- booleans and null (read as nil).
local function decoder(s)
  local pos = 1
  local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
  local value
  local function str()
    local out, i = {}, pos + 1
    while true do
      local c = s:sub(i, i)
      if c == "" then error("unterminated string", 0) end
      if c == '"' then break end
      if c == "\\" then
        local e = s:sub(i + 1, i + 1)
        if e == "u" then
          out[#out + 1] = utf8.char(tonumber(s:sub(i + 2, i + 5), 16))
          i = i + 6
        else
          out[#out + 1] = ({ n = "\n", t = "\t", r = "\r", b = "\b", f = "\f" })[e] or e
          i = i + 2
        end
      else
        out[#out + 1] = c
        i = i + 1
      end
    end
    pos = i + 1
    return table.concat(out)
  end
  -- the items of an object or array after its opening bracket, up to `close`
  local function items(close, item)
    pos = pos + 1
    ws()
    if s:sub(pos, pos) == close then
      pos = pos + 1
      return
    end
    while true do
      item()
      ws()
      local d = s:sub(pos, pos)
      pos = pos + 1
      if d == close then return end
      if d ~= "," then error("',' or '" .. close .. "' expected at " .. (pos - 1), 0) end
    end
  end
  local WORDS = { ["true"] = true, ["false"] = false }
  function value()
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      local obj = {}
      items("}", function()
        ws()
        local k = str()
        ws()
        if s:sub(pos, pos) ~= ":" then error("':' expected at " .. pos, 0) end
        pos = pos + 1
        obj[k] = value()
      end)
      return obj
    elseif c == "[" then
      local arr, n = {}, 0
      items("]", function()
        n = n + 1
        arr[n] = value()
      end)
      return arr
    elseif c == '"' then
      return str()
    end
    for word, v in pairs(WORDS) do
      if s:sub(pos, pos + #word - 1) == word then
        pos = pos + #word
        return v
      end
    end
    if s:sub(pos, pos + 3) == "null" then
      pos = pos + 4
      return nil
    end
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
    if not num or num == "" then error("unexpected '" .. c .. "' at " .. pos, 0) end
    pos = pos + #num
    return math.tointeger(tonumber(num)) or tonumber(num)
  end
  return value
end

function kiln._json_decode(text)
  if type(text) ~= "string" then error("kiln._json_decode: the text must be a string, got " .. type(text), 2) end
  local ok, v = pcall(decoder(text))
  if not ok then return nil, v end
  return v
end
