-- t/json.lua: kiln's one JSON writer and reader (scripting/lua/05_json.lua),
-- which the trace files, kiln.trace, a bench result's :json() and the
-- benchmarks' rows (bench/bench_util.lua) all use.
local T = dofile("t/lib/tap.lua")
local enc, dec = kiln._json_encode, kiln._json_decode

T.is(enc(nil), "null", "nil is null")
T.is(enc(true), "true", "a boolean")
T.is(enc(3), "3", "an integer as itself")
T.is(enc(0.1), "0.1", "a float with 6 significant digits")
T.is(enc("a\"b\\c\nd\1"), '"a\\"b\\\\c\\nd\\u0001"', "a string's quotes, backslashes and control bytes escaped")
T.is(enc({}), "[]", "an empty table is an empty array")
T.is(enc({ 1, "two", { 3 } }), '[1,"two",[3]]', "an array")
T.is(enc({ b = 1, a = { c = false } }), '{"a":{"c":false},"b":1}', "an object, its keys sorted")
T.is(enc({ [2] = "x", name = "n" }), '{"2":"x","name":"n"}', "a number key is written as its text, with its value")
T.is(enc({ x = 0 / 0, y = math.huge, z = -math.huge }), '{"x":null,"y":null,"z":null}',
  "NaN and the infinities are null by default")
T.is(enc({ x = 0 / 0, y = math.huge, z = -math.huge }, "string"), '{"x":"nan","y":"inf","z":"-inf"}',
  "or strings, for benchmark rows")
T.raises(function() enc(1, "text") end, 'nonfinite must be "null" or "string", got \'text\'', "a bad nonfinite mode")
T.raises(function() enc(1, {}) end, 'nonfinite must be "null" or "string", got table$', "... named by its type, not an address")
local loop = { name = "loop" }
loop.self = { loop }
T.raises(function() enc(loop) end, "kiln%._json_encode: a table that holds itself has no JSON$", "a table inside itself")
local shared = { 1 }
T.is(enc({ a = shared, b = shared }), '{"a":[1],"b":[1]}', "one table in two places is no loop")

local value = { name = "k1_add", t = 1.5, n = -2, list = { 1, 2, 3 }, nested = { ok = true, s = "q\"\t" } }
local back = dec(enc(value))
T.is(enc(back), enc(value), "what the writer writes reads back as the same value")
T.is(back.nested.s, "q\"\t", "escapes read back")
T.is(dec("[1, null, 3]")[3], 3, "null in an array keeps the places after it")
T.is(dec('"\\u00e9"'), "é", "\\u escapes read as UTF-8")
local none, why = dec('{"a" 1}')
T.ok(none == nil and why:match("':' expected"), "a malformed text is nil and why: " .. tostring(why))
T.raises(function() dec(42) end, "the text must be a string, got number", "the reader wants a string")

-- The benchmarks write their rows with kiln's writer, not one of their own.
local U = dofile("bench/bench_util.lua")
T.is(U.json({ ms = 0 / 0, [3] = true }), '{"3":true,"ms":"nan"}', "bench_util's rows: kiln's writer, NaN as a string")
local src = io.open("bench/bench_util.lua"):read("a")
T.ok(not src:find("gsub", 1, true), "bench_util.lua has no string escaping of its own")

T.done()
