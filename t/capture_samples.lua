-- capture_samples.lua: every model of samples/ in its small size (a
-- training sample's model in eval mode), compiled
-- with kiln.compile, against eager (README): equal outputs
-- (max abs diff within 1e-5 of the largest magnitude) on two calls, the
-- second call served from the version cache with no recompilation, and
-- kiln.explain's report: 1 graph and 0 breaks, except samples/breaks.lua,
-- which breaks at line 14 on purpose (two blocks: 3 graphs, 2 breaks).
local T = dofile("t/lib/tap.lua")

local function lit(s) return (s:gsub("%p", "%%%0")) end

-- Every samples/*.lua, sorted, so a new sample is covered without editing this file.
local names = {}
do
  local p = io.popen("ls samples/*.lua 2>/dev/null")
  for path in p:lines() do names[#names + 1] = path:match("^samples/(.*)%.lua$") end
  p:close()
  table.sort(names)
end
T.ok(#names >= 6, "samples/ holds the models (found " .. #names .. ")")

-- What kiln.explain must report per sample; the default is one graph, no break.
local expect = {
  breaks = { graphs = 3, breaks = 2, where = "samples/breaks.lua:14",
    stack = "samples/breaks.lua:14 samples/breaks.lua:30 samples/breaks.lua:43" },
}

local function maxdiff(a, b)
  local d = (a:cast("f32") - b:cast("f32")):abs():amax():item()
  return d == d and d or math.huge -- NaN never passes
end

local function same_shape(a, b) return table.concat(a:shape(), ",") == table.concat(b:shape(), ",") end

local saved_small = kiln.session.small
kiln.session.small = true -- large_linear and gcn read it while the file loads
local device = kiln.default_device()
for _, name in ipairs(names) do
  local ok, spec = pcall(dofile, "samples/" .. name .. ".lua")
  if not (ok and type(spec) == "table") then
    T.ok(false, name .. ": loads (" .. tostring(spec) .. ")")
  else
    local inputs = spec.inputs({ small = true, dtype = "f32", device = device })
    -- a training sample (train_step; t/training_samples.lua trains it):
    -- here its model's inference, in eval mode. In train mode BatchNorm's
    -- running-statistics update traces Lua numbers inside kiln's nn code,
    -- which a graph keys by the caller's line, so two calls from two lines
    -- would recompile once
    if spec.train_step then spec.model:eval() end
    local want = spec.model(table.unpack(inputs))
    local cm = kiln.compile(spec.model)
    local y1 = cm(table.unpack(inputs))
    local s1 = cm:stats()
    local y2 = cm(table.unpack(inputs))
    local s2 = cm:stats()
    local scale = math.max(1, want:abs():amax():item())
    T.ok(same_shape(y1, want) and y1.dtype == want.dtype and maxdiff(y1, want) <= 1e-5 * scale,
      name .. ": compiled output equals eager (first call)")
    T.ok(same_shape(y2, want) and maxdiff(y2, want) <= 1e-5 * scale, name .. ": and on the second call")
    local graphs = (expect[name] or {}).graphs or 1
    T.is(s2.version_hits - s1.version_hits, graphs,
      name .. ": the second call reuses each graph's cached version (" .. graphs .. " version hits)")
    T.is(s2.version_misses, s1.version_misses, name .. ": the second call compiles nothing")
    T.is(#cm:recompiles(), 0, name .. ": no recompilation")

    kiln.explain_quiet = true
    local okx, r = pcall(kiln.explain, spec.model, table.unpack(inputs))
    kiln.explain_quiet = nil
    local e = expect[name] or { graphs = 1, breaks = 0 }
    T.ok(okx and r.graph_count == e.graphs and r.graph_break_count == e.breaks and #r.break_reasons == e.breaks,
      string.format("%s: kiln.explain reports %d graph%s and %d breaks", name, e.graphs, e.graphs == 1 and "" or "s",
        e.breaks))
    if okx and e.where then
      local b = r.break_reasons[1]
      T.ok(b.category == "data-dependent control flow" and b.where == e.where and table.concat(b.stack, " ", 1, 3) == e.stack,
        name .. ": the break is at " .. e.where .. ", called from " .. e.stack:match("%S+ (%S+)") .. " and line 43")
      T.is(#cm:breaks(), 1, name .. ": cm:breaks() has the one distinct break (both blocks break at the same line)")
      T.like((cm:breaks()[1] or {}).message, lit("    samples/breaks.lua:30 in function 'run'\n"),
        name .. ": the user stack names 'run'")
    end
  end
end
kiln.session.small = saved_small

T.done()
