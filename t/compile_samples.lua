-- compile_samples.lua: the compiler on every model of samples/ in its small
-- size, on the CPU (docs/lua-api.md, docs/modes.md and README): compiled (mode default)
-- against eager on two calls; the kernel groups fusion makes of each sample;
-- cm:stats(); the generated source (C per kernel, CUDA through NVRTC);
-- cm:check and kiln.config.check_numerics, including a deliberately wrong
-- kernel (kiln.config.fault_kernel); the KILN_LOGS=fusion explanation of a
-- refused fusion; kiln.config.compiler = false (op by op).
--
local T = dofile("t/lib/tap.lua")

local KILN = os.getenv("KILN") or "build/kiln"


local function skip(name, why)
  T.n = T.n + 1
  io.write("ok " .. T.n .. " # skip " .. name .. ": " .. why .. "\n")
end

local function lit(s) return (tostring(s):gsub("%p", "%%%0")) end

-- ||c - e|| / ||e|| with kiln ops (2-norms); NaN and shape mismatches give
-- math.huge, so they never pass.
local function relerr(c, e)
  if table.concat(c:shape(), ",") ~= table.concat(e:shape(), ",") or c.dtype ~= e.dtype then return math.huge end
  local d = ((c - e) ^ 2):sum():sqrt():item()
  local n = (e ^ 2):sum():sqrt():item()
  local r = n > 0 and d / n or d
  return r == r and r or math.huge
end

local function ops_of(k) return table.concat(k.ops or {}, ",") end
local function has_op(k, op)
  for _, o in ipairs(k.ops or {}) do if o == op then return true end end
  return false
end
-- "generated:layer_norm cpu:matmul ...": a kernel list in one line, for diagnostics.
local function signature(list)
  local parts = {}
  for i, k in ipairs(list) do parts[i] = k.kind .. ":" .. ops_of(k) end
  return table.concat(parts, " ")
end

-- Run a kiln child process on a Lua script (with env assignments in front);
-- returns stdout, stderr and the exit status.
local function child(code, env)
  local out, rc, err = T.child(code, { env = env, stderr = "apart" })
  return out, err, rc
end

-- ---------------------------------------------------------------------------
-- Every sample: compiled against eager, kernel groups, stats, sources, check

-- large_linear and gcn read kiln.session.small while the file loads.
kiln.session.small = true
local cpu_default = kiln.default_device() == "cpu"

local function load(name)
  local spec = dofile("samples/" .. name .. ".lua")
  -- the kernel groups below are the CPU backend's
  if not cpu_default then spec.model:to("cpu") end
  return spec
end
local function inputs(spec) return spec.inputs({ small = true, dtype = "f32", device = "cpu" }) end

local NAMES = { "simple_linear", "large_linear", "convnet", "gcn", "transformer_block", "breaks" }
local specs, compiled = {}, {}

-- The expected kernel groups, per sample: fn(list) runs the checks.
local groups = {}

groups.simple_linear = function(list)
  T.is(signature(list), "cpu:matmul generated:add", "simple_linear: a cpu matmul, then a generated kernel for the bias add")
end

groups.large_linear = function(list)
  T.is(#list, 8, "large_linear: 8 kernels")
  local good = true
  for i = 1, 8, 2 do
    local m, e = list[i], list[i + 1]
    good = good and m and e and m.kind == "cpu" and ops_of(m) == "matmul"
      and e.kind == "generated" and ops_of(e) == "add,relu"
  end
  T.ok(good, "large_linear: 4 x (cpu matmul, then generated add + relu)")
  if not good then T.diag(signature(list)) end
end

groups.convnet = function(list)
  local bn, convs, good = false, 0, true
  for i, k in ipairs(list) do
    if has_op(k, "batch_norm") then bn = true end
    if has_op(k, "conv2d") then
      convs = convs + 1
      local nxt = list[i + 1]
      good = good and k.kind == "cpu" and nxt ~= nil and nxt.kind == "generated" and ops_of(nxt) == "relu"
    end
  end
  T.ok(not bn, "convnet: no kernel runs batch_norm (folded into the convolution weights)")
  T.is(convs, 4, "convnet: 4 convolution kernels")
  T.ok(good, "convnet: each convolution is a cpu kernel followed by a generated relu kernel")
  if bn or not good then T.diag(signature(list)) end
end

groups.gcn = function(list)
  local gs, left, names, good = 0, 0, {}, true
  for _, k in ipairs(list) do
    if has_op(k, "gather_scatter") then
      gs = gs + 1
      good = good and k.kind == "cpu"
      names[#names + 1] = k.name:match("^k%d+_(gather_scatter_[a-z_]-)_f32")
    end
    if has_op(k, "index_select") or has_op(k, "index_add") or has_op(k, "relu") or has_op(k, "log_softmax") then
      left = left + 1
    end
  end
  good = good and gs == 2 and left == 0 and names[1] == "gather_scatter_relu" and names[2] == "gather_scatter_log_softmax"
  T.ok(good, "gcn: each prop (index_select, mul, index_add) and the relu or log_softmax after it is one "
    .. "gather_scatter cpu kernel")
  if not good then T.diag(signature(list)) end
end

groups.transformer_block = function(list)
  local ln, attention, matmuls = 0, {}, {}
  for i, k in ipairs(list) do
    if k.kind == "generated" and ops_of(k) == "layer_norm" then ln = ln + 1 end
    if k.kind == "cpu" and ops_of(k) == "scaled_dot_product_attention" then attention[#attention + 1] = k end
    if has_op(k, "matmul") then matmuls[#matmuls + 1] = i end
  end
  T.is(ln, 2, "transformer_block: 2 generated kernels that are one layer norm each")
  T.is(#attention, 1, "transformer_block: q.k, scale, causal mask, softmax and att.v are one attention kernel")
  T.like(attention[1] and attention[1].covers or "", "%(causal mask folded%)$",
    "transformer_block: ... whose causal mask became its causal attribute")
  local all_cpu = #matmuls == 4
  for _, i in ipairs(matmuls) do all_cpu = all_cpu and list[i].kind == "cpu" and ops_of(list[i]) == "matmul" end
  T.ok(all_cpu, "transformer_block: 4 matmuls (qkv, proj, fc1, fc2), each a cpu kernel of its own")
  -- The linear layers' matmuls (output {2,16,N}) are followed by their
  -- epilogue: qkv's bias; proj's bias + residual; fc1's bias + gelu; fc2's
  -- bias + residual.
  local epilogues = {}
  for _, i in ipairs(matmuls) do
    if list[i].name:match("_2x16x%d+$") then
      local nxt = list[i + 1]
      epilogues[#epilogues + 1] = (nxt and nxt.kind or "none") .. ":" .. (nxt and ops_of(nxt) or "")
    end
  end
  T.is(table.concat(epilogues, " "), "generated:add generated:add,add generated:add,gelu generated:add,add",
    "transformer_block: qkv, proj, fc1, fc2 matmuls each followed by a generated kernel with the bias add (fc1's with gelu)")
  -- 11 = 2 layer norms + 4 matmuls + 4 epilogues + attention (its causal
  -- mask folded away). split, reshape and transpose are views: no kernel.
  T.is(#list, 11, "transformer_block: 11 kernels in all")
  if #list ~= 11 then T.diag(signature(list)) end
end

-- samples/breaks.lua breaks its graph twice on purpose: three graphs, each
-- with its own kernels (named from k0 again).
groups.breaks = function(list)
  local graphs, restart = {}, 0
  for _, k in ipairs(list) do
    graphs[#graphs + 1] = tostring(k.graph)
    if k.name:match("^k0_") then restart = restart + 1 end
  end
  T.is(table.concat(graphs, ","), "0,0,0,0,1,1,1,1,1,2,2,2", "breaks: the kernels of its 3 graphs, in order")
  T.is(restart, 3, "breaks: kernel names start at k0 in each graph")
end

for _, name in ipairs(NAMES) do
  local spec = load(name)
  specs[name] = spec
  local cm = kiln.compile(spec.model, { mode = "default" })
  compiled[name] = cm
  local x1, x2 = inputs(spec), inputs(spec)
  local want = spec.model(table.unpack(x1))
  local c1 = cm(table.unpack(x1))
  local r1 = relerr(c1, want)
  T.ok(r1 <= 1e-5, string.format("%s: compiled = eager, first call (relative error %.3g)", name, r1))
  local c2 = cm(table.unpack(x2))
  local r2 = relerr(c2, want)
  T.ok(r2 <= 1e-5, string.format("%s: compiled = eager, second call (relative error %.3g)", name, r2))
  local r1b = relerr(c1, want)
  T.ok(r1b <= 1e-5, string.format("%s: the first call's output is unchanged by the second call (%.3g)", name, r1b))

  local list = cm:kernels()
  groups[name](list)

  local st = cm:stats()
  T.is(st.kernels, #list, name .. ": cm:stats().kernels is the length of cm:kernels()")
  local cs = st.compile_s or {}
  local good = true
  for _, f in ipairs({ "capture", "passes", "codegen", "backend" }) do
    good = good and type(cs[f]) == "number" and cs[f] >= 0
  end
  T.ok(good, name .. ": cm:stats().compile_s has capture, passes, codegen, backend: numbers >= 0")
  T.ok(math.type(st.peak_bytes) == "integer" and st.peak_bytes > 0, name .. ": peak_bytes > 0 (" .. tostring(st.peak_bytes) .. ")")
  if name == "transformer_block" then
    T.ok(st.peak_bytes <= st.eager_peak_bytes, string.format("%s: peak_bytes %d <= eager_peak_bytes %d",
      name, st.peak_bytes, st.eager_peak_bytes))
  end

  -- kernel names are kN_..., N its position in its graph
  local gen_ok, ngen, pos = true, 0, {}
  for _, k in ipairs(list) do
    pos[k.graph] = (pos[k.graph] or -1) + 1
    if not k.name:match("^k" .. pos[k.graph] .. "_") then
      gen_ok = false
      T.diag(name .. ": kernel " .. k.name .. " is number " .. pos[k.graph] .. " of graph " .. tostring(k.graph))
    end
    if k.kind == "generated" then
      ngen = ngen + 1
      local ok = type(k.source) == "string" and k.source:find(k.name, 1, true) ~= nil
      if not ok then T.diag(name .. ": kernel " .. k.name .. " has no source naming it") end
      gen_ok = gen_ok and ok
    elseif k.source ~= nil then
      gen_ok = false
      T.diag(name .. ": " .. k.kind .. " kernel " .. k.name .. " has a source")
    end
  end
  T.ok(gen_ok and ngen > 0, name .. ": kernels are named kN_ in their graph; generated ones (" .. ngen
    .. ") have a source that names them, the others none")

  local cuda = cm:source("cuda")
  local res = table.pack(kiln.nvrtc_compile(cuda))
  if res.n == 0 then
    skip(name .. ": CUDA source compiles with NVRTC", "this kiln was built without CUDA")
  else
    T.ok(res[1] == true and #cuda > 0, name .. ": cm:source('cuda') compiles with NVRTC")
    if res[1] ~= true then T.diag(tostring(res[2])) end
  end

  local report = cm:check(table.unpack(inputs(spec)))
  T.ok(type(report) == "table" and report.ok == true and report.checks >= 1
    and report.message == "every kernel agrees with the reference",
    name .. ": cm:check reports every kernel agrees with the reference")
  if not (type(report) == "table" and report.ok) then T.diag(type(report) == "table" and report.message or tostring(report)) end
end

-- cm:check returns the report, then the call's results.
do
  local spec, cm = specs.simple_linear, compiled.simple_linear
  local x = inputs(spec)
  local r, y = cm:check(table.unpack(x))
  T.ok(r.ok and y ~= nil and relerr(y, spec.model(table.unpack(x))) <= 1e-5,
    "cm:check returns the report, then the call's results")
end

-- ---------------------------------------------------------------------------
-- A wrong kernel on purpose: cm:check and check_numerics name it (in a child
-- process, so that the warning on stderr can be matched).

do
  local list = compiled.transformer_block:kernels()
  local K, kname
  for i, k in ipairs(list) do
    if has_op(k, "gelu") then K, kname = i - 1, k.name end
  end
  local prefix = [[
kiln.session.small = true
local s = dofile("samples/transformer_block.lua")
if kiln.default_device() ~= "cpu" then s.model:to("cpu") end
local x = s.inputs({small = true, device = "cpu"})[1]
local cm = kiln.compile(s.model)
]]
  local out, err, rc = child(prefix .. string.format([[
kiln.config.fault_kernel = %d
local r = cm:check(x)
print(r.ok, r.message)
kiln.config.fault_kernel = nil
r = cm:check(x)
print(r.ok, r.message)
]], K))
  local lines = {}
  for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
  local wanted = "kernel " .. tostring(kname) .. " (ops add at samples/transformer_block.lua:34 gelu at "
    .. "samples/transformer_block.lua:34) differs from the reference: "
  T.like(lines[1] or "", "^false\t" .. lit(wanted),
    "fault_kernel = " .. tostring(K) .. " (fc1's bias + gelu kernel): cm:check names that kernel and its ops with their source lines")
  T.is(lines[2], "true\tevery kernel agrees with the reference", "fault_kernel reset: cm:check agrees again")
  T.like(err, "^kiln: numerics check of forward %(samples/transformer_block%.lua:21%): " .. lit(wanted),
    "... and warns on stderr, naming the compiled function")
  T.is(rc, 0, "... the child exits 0")

  out, err = child(prefix .. [[
kiln.config.check_numerics = true
cm(x)
cm(x)
io.write("done")
]])
  T.is(out .. "|" .. err, "done|", "check_numerics = true on transformer_block: no warning")
  out, err = child(prefix .. string.format([[
kiln.config.check_numerics = true
kiln.config.fault_kernel = %d
cm(x)
io.write("done")
]], K))
  T.like(out .. "|" .. err, "^done|kiln: numerics check of forward %(samples/transformer_block%.lua:21%): " .. lit(wanted),
    "check_numerics = true with a wrong kernel: the call warns on stderr and names it")
end

-- ---------------------------------------------------------------------------
-- KILN_LOGS=fusion explains a refused fusion

do
  local code = [[
local function f(a, b, w)
  return (a + b):matmul(w)
end
local cm = kiln.compile(f)
cm(kiln.randn({4, 8}, {seed = 1, device = "cpu"}), kiln.randn({4, 8}, {seed = 2, device = "cpu"}),
  kiln.randn({8, 3}, {seed = 3, device = "cpu"}))
]]
  local out, _, _, script = T.child(code, { env = "KILN_LOGS=fusion" })
  T.is(out, "Fusion of f (" .. script .. ":1): 2 kernels, 1 edge between kernels\n"
    .. "  k0_add_f32_4x8 -> k1_matmul_f32_4x3: matmul (" .. script .. ":2) is a library call, which reads its inputs "
    .. "from memory, so its producer add (" .. script .. ":2) ends a kernel\n",
    "KILN_LOGS=fusion: an add feeding a matmul is not fused, and the log says why, naming both ops' lines (exact text)")
  local p = io.popen("KILN_LOGS= " .. KILN .. " -e " .. "'" .. code:gsub("'", "") .. "' 2>&1")
  out = p:read("a")
  p:close()
  T.is(out, "", "without KILN_LOGS=fusion the same function logs nothing")
end

-- ---------------------------------------------------------------------------
-- kiln.config.compiler = false: op by op

do
  local spec = specs.transformer_block
  local x = inputs(spec)
  local want = spec.model(table.unpack(x))
  kiln.config.compiler = false
  local ok, err = pcall(function()
    local cm = kiln.compile(spec.model)
    local y = cm(table.unpack(x))
    local list = cm:kernels()
    local good = #list > 0
    for _, k in ipairs(list) do good = good and k.kind == "cpu" and #k.ops == 1 and k.source == nil end
    -- 21 = the 37 ops of the graph less its 16 views (split, reshape,
    -- transpose, the weights' transposes)
    T.ok(good and #list == 21, "compiler = false: cm:kernels() lists one cpu kernel per op (21, no generated source)")
    if not good then T.diag(signature(list)) end
    T.is(relerr(y, want), 0.0, "compiler = false: the result equals eager")
    T.is(cm:stats().kernels, #list, "compiler = false: cm:stats().kernels is the length of cm:kernels()")
  end)
  kiln.config.compiler = true
  if not ok then T.ok(false, "compiler = false runs: " .. tostring(err)) end
end

T.done()
