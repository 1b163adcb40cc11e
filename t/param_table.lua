-- param_table.lua: kiln.nn.param_table, the table of tensors that counts
-- its writes (an ONNX module's `params`). It reads, writes, iterates and
-- counts as a plain table; a compiled call's direct replay checks its write
-- count instead of its every entry, so replacing a parameter, or adding one
-- behind its back with rawset, still stops the replay and the call traces.
local T = dofile("t/lib/tap.lua")
local nn = kiln.nn

-- as a table
do
  local a, b = kiln.randn({ 2 }, { seed = 1 }), kiln.randn({ 3 }, { seed = 2 })
  local p = nn.param_table({ a = a })
  T.ok(nn.is_param_table(p) and not nn.is_param_table({}), "is_param_table tells one from a plain table")
  T.ok(p.a == a, "a read gives the entry it was made with")
  p.b = b
  T.ok(p.b == b, "a write is read back")
  local seen = {}
  for k, v in pairs(p) do seen[#seen + 1] = k .. "=" .. table.concat(v:shape(), "x") end
  table.sort(seen)
  T.is(table.concat(seen, " "), "a=2 b=3", "pairs gives every entry")
  local list = nn.param_table({ a, b })
  T.is(#list, 2, "# counts the array part")
  local v0 = getmetatable(p).__kiln_replay_version
  p.a = b
  p.a = b
  T.is(getmetatable(p).__kiln_replay_version, v0 + 2, "every write counts, the same value again too")
end

-- an ONNX module's parameters
local REF = "t/data/real_models"
local m = kiln.onnx.load(REF .. "/bert_tiny.onnx")
local io_t = kiln.load_safetensors(REF .. "/bert_tiny.io.safetensors")
local xs = {}
for k, vi in ipairs(m._inputs) do xs[k] = io_t[vi.name] end
T.ok(nn.is_param_table(m.params), "an ONNX module keeps its parameters in a parameter table")
-- the parameter to replace: the largest (ties by name: pairs' order is not fixed)
local n_params, name = 0, nil
for k, t in pairs(m.params) do
  n_params = n_params + 1
  local best = name and m.params[name]
  if t.dtype == "f32" and (not best or t:numel() > best:numel() or (t:numel() == best:numel() and k < name)) then
    name = k
  end
end
T.is(#m:parameters(), n_params, "parameters() lists every entry")

local function maxdiff(a, b) return (a - b):abs():amax():item() end
local cm = kiln.compile(m)
local eager = kiln.no_grad(m, table.unpack(xs))
for _ = 1, 4 do cm(table.unpack(xs)) end
local st = cm:stats()
T.is(st.direct_replays, 3, "calls 2-4 replay directly")
T.ok(st.replay_guard_entries < n_params,
  string.format("the replay compares %d entries, fewer than the %d parameters", st.replay_guard_entries, n_params))
T.ok(maxdiff(cm(table.unpack(xs)), eager) < 1e-5, "a replay gives eager's answer")

-- a parameter replaced: the call traces and uses the new tensor
local before = cm:stats().direct_replays
local old = m.params[name]
m.params[name] = old * 2
local y2 = cm(table.unpack(xs))
T.is(cm:stats().direct_replays, before, "a replaced parameter stops the direct replay: the call traces")
local e2 = kiln.no_grad(m, table.unpack(xs))
local scale = e2:abs():amax():item()
T.ok(maxdiff(y2, e2) <= 1e-5 * scale and maxdiff(e2, eager) > 1e-3 * scale,
  string.format("... and its result uses the new parameter (%s: off eager's by %.3g, the old answer by %.3g)", name,
    maxdiff(y2, e2), maxdiff(e2, eager)))
for _ = 1, 3 do cm(table.unpack(xs)) end
T.ok(cm:stats().direct_replays > before, "the calls after it replay again")

-- rawset on the table itself (past the store) is seen too
before = cm:stats().direct_replays
rawset(m.params, "extra", kiln.zeros({ 1 }))
cm(table.unpack(xs))
T.is(cm:stats().direct_replays, before, "an entry rawset on the parameter table stops the direct replay")
rawset(m.params, "extra", nil)

-- :to moves what the table holds
m.params[name] = old
m:to("f64")
T.is(m.params[name].dtype, "f64", "m:to converts the parameters in the table")

T.done()
