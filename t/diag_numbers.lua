-- diag_numbers.lua: the numbers and lines kiln's diagnostics print (issue
-- 16, items 1 and 2), on the CPU:
--   compile time by phase on a cold and on a warm kernel cache (explain's
--   text and cm:last_call(), kiln.bench's compile s);
--   kiln.time's rows numbered as cm:kernels() numbers them, with the copy a
--   reshape makes for a kernel as a sub-row of that kernel;
--   roof% against the bandwidth of the kernel's working set, and "!" with a
--   legend line where a figure is above 100;
--   the user's file:line on ops reached through a tail call (after a graph
--   break, after kiln.eager, in a replayed function, the SVG tooltip).
-- The REPL transcripts and the error stacks are in t/diag_numbers.sh.
local T = dofile("t/lib/tap.lua")
-- the CPU backend's kernels and texts; the GPU paths are checked elsewhere
T.cpu_only("t/diag_numbers.lua")
local LINE, SRC, at = T.tags()
local nn = kiln.nn

local made = {}
local function fresh_dir()
  local d = os.tmpname()
  os.remove(d)
  made[#made + 1] = d
  return d
end

local function quiet_explain(fn, ...)
  local saved = kiln.explain_quiet
  kiln.explain_quiet = true
  local r = kiln.explain(fn, ...)
  kiln.explain_quiet = saved
  return r
end

-- The explain text's compile line with every figure replaced by X.
local function compile_line(r)
  local text = kiln.format_explain(r)
  local line = text:match("\n(Compile time: [^\n]*)\nCall time: [^\n]*$")
  return (line or text):gsub("%d+%.%d+", "X")
end

---------------------------------------------------------------------------
-- 1. Compile time: cold cache, then warm

local saved_dir = kiln.config.cache_dir
kiln.config.cache_dir = fresh_dir()
local w1 = kiln.randn({ 16, 16 }, { seed = 3 })
-- a program no other test compiles: its kernels are not in any cache
local function model(x) return ((x:matmul(w1) * 1.75):tanh() + 0.125):softmax(-1):sum(-1) end
local x16 = kiln.randn({ 8, 16 }, { seed = 4 })

local cold = quiet_explain(model, x16)
local c = cold.compile_s
local phases = c.capture + c.passes + c.codegen + c.backend
T.ok(c.total > 0 and c.backend > 0, string.format("cold: the call's compile time is nonzero (total %.4f s, backend %.4f s)",
  c.total, c.backend))
T.ok(phases <= c.total + 1e-9, string.format("cold: the phases (%.4f s) add up to at most the total (%.4f s)", phases,
  c.total))
T.ok(c.kernels > 0 and c.kernels_cached == 0, string.format("cold: %d generated kernels, none from the cache",
  c.kernels))
T.is(cold.compile_time_s, c.total, "cold: explain's compile time is the call's total")
T.is(compile_line(cold), "Compile time: X s (capture X, passes X, codegen X, backend compile X)",
  "cold: explain's compile line (exact text, figures as X)")

local warm = quiet_explain(model, x16)
c = warm.compile_s
phases = c.capture + c.passes + c.codegen + c.backend
T.ok(c.total > 0 and phases <= c.total + 1e-9, "warm: nonzero, and the phases add up to at most the total")
T.is(c.kernels_cached, c.kernels, "warm: every generated kernel came from the cache")
T.is(compile_line(warm), string.format(
  "Compile time: X s (capture X, passes X, codegen X, backend compile X (%d of %d kernel%s from the cache))",
  c.kernels, c.kernels, c.kernels == 1 and "" or "s"), "warm: explain's compile line says so (exact text)")
T.ok(warm.compile_s.backend < cold.compile_s.backend,
  string.format("warm: the backend compile (%.4f s) is shorter than cold (%.4f s)", warm.compile_s.backend,
    cold.compile_s.backend))

-- cm:stats(): the same counts over every plan built
local cs = kiln.compile(model)
cs(x16)
T.ok(cs:stats().compile_s.kernels == c.kernels and cs:stats().compile_s.kernels_cached == c.kernels,
  "cm:stats().compile_s counts the kernels compiled and those from the cache")

-- kiln.bench: compile s of a fresh compiled model, marked when cached
local b = kiln.bench(model, { x16 }, { modes = { "default" }, iters = 2, warmup = 0 })
T.ok(b[1].compile_s > 0 and b[1].compile_cached == true, "kiln.bench: compile s > 0, from the cache (warm)")
T.like(tostring(b), "\ndefault +[%d.]+ +[%d.]+ +[%d.]+x!? +%d+%.%d%d%* ", "kiln.bench: compile s with '*'")
T.like(tostring(b), "\n%* its generated kernels came from the cache %(kiln.config.cache_dir%)$",
  "kiln.bench: the '*' legend")
kiln.config.cache_dir = fresh_dir()
b = kiln.bench(model, { x16 }, { modes = { "default" }, iters = 2, warmup = 0 })
T.ok(b[1].compile_s > 0 and b[1].compile_cached == nil and not tostring(b):find("*", 1, true),
  "kiln.bench: a cold cache has no '*'")
kiln.config.cache_dir = saved_dir

---------------------------------------------------------------------------
-- 2. kiln.time numbers rows as cm:kernels(); a copy is a sub-row

local wc = kiln.randn({ 64, 32 }, { seed = 2 })
local copying = kiln.compile(function(x)
  local h = (x * 2):relu()
  -- x viewed {8, 4, 16} is not contiguous: the reshape copies, for the matmul
  local y = x:permute({ 2, 1, 3 }):reshape({ 8, 64 }):matmul(wc)
  return (y + 1):sum(-1), h
end)
local x3 = kiln.randn({ 4, 8, 16 }, { seed = 1 })
copying(x3)
local list = copying:kernels()
local tm = kiln.time(copying, x3, { iters = 2, warmup = 1, profile_iters = 2 })
local rows = tm.kernels
local names, subs = {}, {}
for _, k in ipairs(rows) do
  if k.sub then subs[#subs + 1] = k else names[#names + 1] = k end
end
T.is(#names, #list, "kiln.time: one kernel row per kernel of cm:kernels()")
local same = true
for _, k in ipairs(names) do
  local e = list[k.number or 0]
  if not e or e.name ~= k.name then same = false end
end
T.ok(same, "kiln.time: each row's number is its kernel's place in cm:kernels(), from 1")
local mm
for i, e in ipairs(list) do
  if e.name:find("matmul") then mm = i end
end
T.is(#subs, 1, "kiln.time: the reshape's copy is one sub-row")
T.is(subs[1] and subs[1].label, string.format("  #%d.copy contiguous_f32_8x4x16", mm),
  "kiln.time: the sub-row is labelled #N.copy NAME, N the number of the matmul that reads it")
local text = tostring(tm)
local tlines = {}
for l in text:gmatch("[^\n]+") do tlines[#tlines + 1] = l end
local expect = {}
for i, e in ipairs(list) do
  expect[#expect + 1] = string.format("%3d  %s", i, e.name)
  if i == mm then expect[#expect + 1] = string.format("       #%d.copy contiguous_f32_8x4x16", mm) end
end
local got, head = {}, 1
-- the table starts after its header (lines above it say what compiled)
for i, l in ipairs(tlines) do if l:match("^%s*#%s+kernel") then head = i break end end
for i = head + 1, head + #expect do got[#got + 1] = (tlines[i] or ""):match("^(.-)%s%s+%a+%s+%d+%s") end
T.is(table.concat(got, "\n"), table.concat(expect, "\n"),
  "kiln.time's table: kernel numbers as :kernels, the copy indented under its kernel (exact text)")

-- several graphs (samples/breaks.lua breaks twice): numbers run on across
-- the graphs as in cm:kernels(), whose names restart at k0 in each graph
local bspec = dofile("samples/breaks.lua")
local cbt = kiln.compile(bspec.model)
local bx = bspec.inputs({ small = true })[1]
cbt(bx)
local blist = cbt:kernels()
local bt = kiln.time(cbt, bx, { iters = 2, warmup = 1, profile_iters = 2 })
local bnums, bgood = {}, #bt.kernels == #blist
for _, k in ipairs(bt.kernels) do
  local e = k.number and blist[k.number]
  if not e or e.name ~= k.name or k.sub then bgood = false end
  bnums[#bnums + 1] = tostring(k.number)
end
local bwant = {}
for i = 1, #blist do bwant[i] = tostring(i) end
T.is(table.concat(bnums, " "), table.concat(bwant, " "), "three graphs: rows numbered 1.." .. #blist
  .. " in order")
T.ok(bgood, "... each row named as the kernel of cm:kernels() with its number")

-- a copy made inside a kernel's own call (the CPU's reference max reads
-- its transposed input through a contiguous copy): a sub-row of that
-- kernel, its time inside the kernel's, so not added to the total
local inside = kiln.compile(function(x)
  local v, i = x:t():max(-1)
  return v, i
end)
local xm = kiln.randn({ 64, 32 }, { seed = 8 })
inside(xm)
local ilist = inside:kernels()
local tin = kiln.time(inside, xm, { iters = 2, warmup = 1, profile_iters = 2 })
local inner_row, kernel_sum = nil, 0
for _, k in ipairs(tin.kernels) do
  if k.sub then inner_row = k else kernel_sum = kernel_sum + k.calls * k.median_us end
end
local maxk
for i, e in ipairs(ilist) do
  if e.name:find("_max_") then maxk = i end
end
T.is(inner_row and inner_row.label, string.format("  #%d.copy contiguous_f32_32x64", maxk),
  "a copy inside a kernel's call is its sub-row #N.copy NAME")
T.ok(inner_row and inner_row.inner == true, "... marked as timed inside the kernel")
T.near(tin.kernel_us, kernel_sum, 1e-6, "... and not added again to the kernels' total")

---------------------------------------------------------------------------
-- 3. roof%: the bandwidth of the kernel's working set; "!" above 100

local small = kiln.compile(function(x) return (x + 1):relu() end)
local xs = kiln.randn({ 64, 64 }, { seed = 5 })
small(xs)
local fake = { copy_gbps = 1, f32_gflops = 1000, bf16_gflops = 0,
  bandwidth = { { bytes = 1e3, gbps = 500 }, { bytes = 1e6, gbps = 1 } } }
local r = kiln.time(small, xs, { iters = 2, warmup = 1, profile_iters = 2, ceilings = fake })
local k0 = r.kernels[1]
-- 64x64 f32 in and out: 32 KiB, between the two points: the curve there,
-- interpolated in log bytes
T.ok(k0.bytes > 1e3 and k0.bytes < 1e6, "the add-relu kernel moves between the two points (" .. k0.bytes .. " bytes)")
local at_bytes = 500 + (1 - 500) * (math.log(k0.bytes) - math.log(1e3)) / (math.log(1e6) - math.log(1e3))
T.near(k0.roof_pct, k0.gbps / at_bytes * 100, 1e-9 * k0.roof_pct, "roof% is against the bandwidth of the kernel's working set")
local slow = { copy_gbps = 1e-3, f32_gflops = 1000, bf16_gflops = 0 }
r = kiln.time(small, xs, { iters = 2, warmup = 1, profile_iters = 2, ceilings = slow })
T.ok(r.kernels[1].roof_pct > 100, "a ceiling far too low gives roof% above 100")
T.like(tostring(r), "%d+!\n", "... printed with '!'")
T.like(tostring(r), "\nroof%% with !: above the measured ceiling, which is then too low %(measured under load%?%): "
  .. "kiln%.ceilings{remeasure = true}$", "... and the legend line explains it")
r = kiln.time(small, xs, { iters = 2, warmup = 1, profile_iters = 2, ceilings = fake })
T.ok(not tostring(r):find("!", 1, true), "no '!' and no legend where every figure is at most 100")

kiln.config.cache_dir = fresh_dir()
local ceil = kiln.ceilings({ remeasure = true })
local bw = ceil.bandwidth or {}
-- each point as measured: a small working set's one pass also pays a
-- kernel's start, so the curve may rise before the caches end
local steps = #bw >= 3 and bw[1].gbps > 0
for i = 2, #bw do
  if not (bw[i].bytes == bw[2].bytes / bw[1].bytes * bw[i - 1].bytes and bw[i].gbps > 0) then steps = false end
end
T.ok(steps, string.format("measured: bandwidth by working set, %d points in equal steps, each above 0", #bw))
T.is(ceil.copy_gbps, bw[#bw] and bw[#bw].gbps, "copy_gbps is the largest working set's (DRAM)")
local again = kiln.ceilings({})
T.is(#(again.bandwidth or {}), #bw, "the ceilings file keeps the bandwidth table")
kiln.config.cache_dir = saved_dir

---------------------------------------------------------------------------
-- 4. Source lines

-- a user's module whose forward tail-calls another module
local Net = nn.Module {
  name = "DiagNet",
  init = function(self) self.a = nn.Linear(4, 4); self.b = nn.Linear(4, 2) end,
  forward = function(self, x)
    local h = self.a(x):relu() -- @net_body
    return self.b(h) -- @net_tail
  end,
}
local net = Net():eval() -- inference: replayed (in train mode a call keeps what backward needs)
local cnet = kiln.compile(net)
local x4 = kiln.randn({ 2, 4 }, { seed = 6 })
for _ = 1, 3 do cnet(x4) end -- @net_call

local function op_lines(cm)
  local out = {}
  for gi, g in ipairs(cm:graphs()) do
    for _, n in ipairs(g.nodes) do
      if n.op ~= "input" and n.op ~= "constant" then out[#out + 1] = string.format("%d %s %s", gi, n.op, n.where) end
    end
  end
  return table.concat(out, "\n")
end

local function expect_lines(spec)
  local out = {}
  for _, s in ipairs(spec) do out[#out + 1] = string.format("%d %s %s", s[1], s[2], at(s[3])) end
  return table.concat(out, "\n")
end

T.is(cnet:stats().replayable, "yes", "the module's function is replayed")
T.is(op_lines(cnet), expect_lines {
  { 1, "permute", "net_body" }, { 1, "matmul", "net_body" }, { 1, "add", "net_body" }, { 1, "relu", "net_body" },
  { 1, "permute", "net_tail" }, { 1, "matmul", "net_tail" }, { 1, "add", "net_tail" },
}, "a tail call into a module keeps the user's line, not the line calling cm (exact lines)")

-- after a kiln.eager break, and a tail call at the end
local lin, head = nn.Linear(4, 4), nn.Linear(4, 2)
local triple = kiln.eager(function(t) return t * 3 end)
local ceager = kiln.compile(function(x)
  local h = lin(x):relu() -- @eager_before
  h = triple(h)
  h = h + 1 -- @eager_after
  return head(h) -- @eager_tail
end)
ceager(x4)
ceager(x4)
T.is(op_lines(ceager), expect_lines {
  { 1, "permute", "eager_before" }, { 1, "matmul", "eager_before" }, { 1, "add", "eager_before" },
  { 1, "relu", "eager_before" },
  { 2, "add", "eager_after" }, { 2, "permute", "eager_tail" }, { 2, "matmul", "eager_tail" },
  { 2, "add", "eager_tail" },
}, "ops after a kiln.eager break keep their lines, the tail-called head too (exact lines)")

-- samples/breaks.lua: the head after two breaks, in the text and the SVG
local spec = dofile("samples/breaks.lua")
local cb = kiln.compile(spec.model)
cb(table.unpack(spec.inputs({ small = true })))
local graph3 = op_lines(cb):match("\n(3 .*)$") or ""
T.is(graph3:match("3 permute.*$"), "3 permute samples/breaks.lua:44\n3 matmul samples/breaks.lua:44\n"
  .. "3 add samples/breaks.lua:44", "samples/breaks.lua: the head's ops after the breaks are at line 44")
T.ok(not op_lines(cb):find(" %?"), "no op of any graph has '?' for its line")
local svg = fresh_dir() .. ".svg"
local ok_svg = pcall(kiln.render, cb, svg, { view = "captured", format = "svg" })
if ok_svg then
  local f = io.open(svg)
  local s = f and f:read("a") or ""
  if f then f:close() end
  os.remove(svg)
  T.ok(s:find("matmul at samples/breaks.lua:44", 1, true) ~= nil and not s:find(" at ?", 1, true),
    "the SVG tooltip says 'matmul at samples/breaks.lua:44', and no tooltip says 'at ?'")
else
  T.ok(true, "# skip: kiln.render could not draw (no Graphviz)")
end
---------------------------------------------------------------------------
-- 5. An error inside a compiled function: the user's frames in its stack,
-- and the function works again after it

local function inner(x)
  return x:matmul(w1) -- @err_inner
end
local function middle(x)
  local y = inner(x) -- @err_middle
  return y + 1
end
local cerr = kiln.compile(middle)
local okc, tb = xpcall(cerr, debug.traceback, kiln.randn({ 2, 4 }))
T.ok(not okc, "a bad shape inside a compiled function raises")
T.like(tb, "^" .. at("err_inner"):gsub("%p", "%%%0") .. ": matmul: ", "... at the user's line")
T.ok(tb:find("\n\t" .. at("err_inner") .. ": in upvalue 'inner'\n\t" .. at("err_middle") .. ": in function <", 1, true)
  ~= nil, "... its traceback shows inner <- middle inside the compiled call")
local good = cerr(kiln.randn({ 2, 16 }, { seed = 7 }))
local ref = middle(kiln.randn({ 2, 16 }, { seed = 7 }))
T.ok(good and (good - ref):abs():amax():item() == 0, "the compiled function runs again after the error, as eager")
T.is(cerr:last_call().graph_count, 1, "... capturing one graph")
T.ok(kiln.randn({ 2 }) * 2 ~= nil, "eager ops after the error run eagerly (no capture left on)")

for _, d in ipairs(made) do os.execute("rm -rf '" .. d .. "' '" .. d .. ".svg'") end
-- an embedding gather moves the rows it copies (and its index), not the
-- whole table: 8 rows of 64 f32 out of a 10,000-row table
local table_w = kiln.randn({ 10000, 64 }, { seed = 9 })
local emb = kiln.compile(function(ids) return table_w:index_select(1, ids):relu() end)
local ids = kiln.tensor({ 1, 5, 9, 13, 17, 21, 25, 29 }, { dtype = "i64" })
emb(ids)
local te = kiln.time(emb, ids, { iters = 2, warmup = 1, profile_iters = 2 })
local gather_row
for _, k in ipairs(te.kernels) do
  if k.name:find("index_select") then gather_row = k end
end
local want_bytes = 8 * 64 * 4 * 2 + 8 * 8 -- the rows read and written, and the ids
T.is(gather_row and gather_row.bytes, want_bytes, "index_select's bytes: the copied rows twice and the ids (" ..
  tostring(gather_row and gather_row.bytes) .. ")")

T.done()
