-- bench_util.lua: what the kiln side of the benchmarks shares (kiln_bench.lua,
-- real_models.lua, kiln_train.lua): env knobs, whether a file exists, one-line
-- JSON, the median, the error against a reference, a copy of cm:stats() and
-- the device sync.
--   local U = dofile(ROOT .. "bench/bench_util.lua")
local kiln = rawget(_G, "kiln") or require("kiln")
local U = {}

function U.env(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then return default end
  return v
end

-- Whether a file can be opened for reading.
function U.exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

function U.list(s)
  local t = {}
  for w in s:gmatch("[^,%s]+") do t[#t + 1] = w end
  return t
end

-- JSON on one line with sorted keys, so rows diff well (kiln's one JSON
-- writer); NaN and infinities as strings ("nan", "inf"), which the report
-- reads as failed numbers and shows as they are.
function U.json(v) return kiln._json_encode(v, "string") end

function U.median(v)
  local s = { table.unpack(v) }
  table.sort(s)
  local n = #s
  if n % 2 == 1 then return s[(n + 1) // 2] end
  return 0.5 * (s[n // 2] + s[n // 2 + 1])
end

-- Max abs difference, and that over the largest |expected| (in f32, on the
-- CPU). A NaN anywhere gives NaN, and a reference whose largest value is 0
-- gives an infinite relative error: neither passes a tolerance.
-- Max abs difference and that over the largest |expected|, computed in
-- `at` (default f32; "f64" against a float64 reference).
function U.errors(y, expected, at)
  at = at or "f32"
  local a, b = y:to("cpu"):to(at), expected:to("cpu"):to(at)
  local sa, sb = a:shape(), b:shape()
  if #sa ~= #sb then return nil, nil end
  for i = 1, #sa do
    if sa[i] ~= sb[i] then return nil, nil end
  end
  local d = (a - b):abs():amax():item()
  local nan = a:ne(a):sum():item() > 0 or b:ne(b):sum():item() > 0
  if nan then d = 0 / 0 end
  local scale = b:abs():amax():item()
  return d, scale > 0 and d / scale or math.huge
end

function U.stat_copy(st)
  local out = {}
  for k, v in pairs(st or {}) do
    if type(v) == "number" or type(v) == "string" or type(v) == "boolean" then out[k] = v end
  end
  for _, sub in ipairs { "compile_s", "first_call" } do
    if type(st) == "table" and type(st[sub]) == "table" then
      out[sub] = {}
      for k, v in pairs(st[sub]) do out[sub][k] = v end
    end
  end
  return out
end

-- What a timed row records of its compiled callable cm: the stats, and the
-- evidence that the mode did what it says (kiln accepts every mode name):
-- CUDA-graph replays, and for max-autotune whether it searched or reused.
function U.compiled_stats(r, cm, mode)
  local st = cm:stats()
  r.stats = U.stat_copy(st)
  r.peak_bytes = st.peak_bytes
  r.cuda_graph_replays = st.replays
  if mode:match("^max%-autotune") then
    r.autotuned = (tonumber(st.autotune_s) or 0) > 0 or (tonumber(st.autotune_cache_hits) or 0) > 0
  end
end

function U.sync(device)
  if type(kiln.synchronize) == "function" then kiln.synchronize(device) end
end

-- Free device memory (bytes) of the first GPU, nil on the CPU.
function U.device_free(device)
  if device ~= "cuda" then return nil end
  local d = (kiln.device_info().cuda or {}).devices
  return d and d[1] and d[1].free_bytes or nil
end

return U
