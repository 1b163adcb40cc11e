-- options_checked.lua: every API that takes an options table or a name
-- checks it with the one checker (scripting/kn_lua_util.c, issue 32, item
-- 2): an unknown key or a bad name is an error at the user's line, naming
-- it, listing the known ones, and naming the one a near miss meant ("did
-- you mean 'fullgraph'?"). The REPL's commands, :mode and :graph words say
-- the same; KILN_LOGS and kiln.log are in log_names.lua.
local T = dofile("t/lib/tap.lua")

-- A literal as a Lua pattern.
local function lit(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end

-- fn raises exactly `message`, at this file's line.
local function says(fn, message, name)
  local ok, err = pcall(fn)
  if ok then return T.ok(false, name .. " (no error)") end
  return T.like(tostring(err), "^t/options_checked%.lua:%d+: " .. lit(message) .. "$", name)
end

-- fn raises an error whose text ends with `tail` (REPL usage errors carry
-- no line).
local function ends(fn, tail, name)
  local ok, err = pcall(fn)
  if ok then return T.ok(false, name .. " (no error)") end
  return T.like(tostring(err), lit(tail) .. "$", name)
end

local MODES = "eager, default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs"
local f = function(v) return v + 1 end
local x = kiln.randn({ 2, 3 }, { device = "cpu", seed = 1 })

---------------------------------------------------------------------------
-- the matcher

local near = kiln._did_you_mean
T.is(near("fullgrpah", { "mode", "fullgraph", "dynamic" }), "fullgraph", "did you mean: two letters swapped")
T.is(near("iter", { "iters", "warmup" }), "iters", "did you mean: a letter missing")
T.is(near("Default", { "eager", "default" }), "default", "did you mean: the case")
T.is(near("ker", { "kernels", "guards" }), "kernels", "did you mean: the start of one name only")
T.is(near("max", { "max-autotune", "max-autotune-no-cudagraphs" }), nil, "did you mean: not when two names start so")
T.is(near("fast", { "eager", "default", "reduce-overhead" }), nil, "did you mean: nothing for a word near no name")
T.is(near("x", { "y", "xy" }), nil, "did you mean: a one-letter word is no one's typo")

---------------------------------------------------------------------------
-- kiln.compile and modes

says(function() kiln.compile(f, { fullgrpah = true }) end,
  "kiln.compile: unknown option 'fullgrpah' (known: mode, fullgraph, dynamic, backend, autocast); did you mean 'fullgraph'?",
  "kiln.compile: a misspelt key")
says(function() kiln.compile(f, { mode = "fast" }) end,
  "kiln.compile: unknown mode 'fast' (known: " .. MODES .. ")", "kiln.compile: an unknown mode lists the modes")
says(function() kiln.compile(f, { mode = "reduce_overhead" }) end,
  "kiln.compile: unknown mode 'reduce_overhead' (known: " .. MODES .. "); did you mean 'reduce-overhead'?",
  "kiln.compile: a near mode")
says(function() kiln.compile(f, { backend = "cdua" }) end,
  "kiln.compile: unknown backend 'cdua' (known: cpu, cuda); did you mean 'cuda'?", "kiln.compile: a near backend")
says(function() kiln.compile(f, { "default" }) end, "kiln.compile: options are named ({mode = ...}), got a list entry",
  "kiln.compile: a list entry for an option")
says(function() kiln.compile(f, { zzz = 1, aaa = 2 }) end,
  "kiln.compile: unknown option 'aaa' (known: mode, fullgraph, dynamic, backend, autocast)",
  "kiln.compile: of two unknown keys, the first by name (the same every run)")
local cm = kiln.compile(f)
says(function() cm:set_mode("max_autotune") end,
  "set_mode: unknown mode 'max_autotune' (known: " .. MODES .. "); did you mean 'max-autotune'?", "cm:set_mode")
says(function() cm:source("cdua") end, "source: unknown target 'cdua' (known: c, cuda); did you mean 'cuda'?",
  "cm:source: the target")
T.ok(pcall(kiln.compile, f, { mode = "default", fullgraph = false, dynamic = false, backend = "cpu" }),
  "kiln.compile: every known key passes")

---------------------------------------------------------------------------
-- timing

says(function() kiln.time(cm, x, { iter = 5 }) end,
  "kiln.time: unknown option 'iter' (known: iters, warmup, profile_iters, device, ceilings, quiet); did you mean 'iters'?",
  "kiln.time: a misspelt key is an error, not an argument for the function")
says(function() kiln.time(cm, x, { iters = 1, foo = 1 }) end,
  "kiln.time: unknown option 'foo' (known: iters, warmup, profile_iters, device, ceilings, quiet)",
  "kiln.time: an unknown key beside known ones")
local got
local r = kiln.time(function(v, o) got = o return v end, x, { scale = 2 })
T.ok(r and got and got.scale == 2, "kiln.time: a table near no option is the function's argument")
says(function() kiln.profile(cm, x, { warm = 0 }) end,
  "kiln.profile: unknown option 'warm' (known: warmup, profile_iters, device, ceilings); did you mean 'warmup'?",
  "kiln.profile")
says(function() kiln.bench(f, { x }, { iter = 2 }) end,
  "kiln.bench: unknown option 'iter' (known: modes, iters, warmup, device, fullgraph, quiet); did you mean 'iters'?",
  "kiln.bench: a key")
says(function() kiln.bench(f, { x }, { modes = { "eager", "defualt" } }) end,
  "kiln.bench: unknown mode 'defualt' (known: " .. MODES .. "); did you mean 'default'?", "kiln.bench: a mode")
says(function() kiln.ceilings({ remeasue = true }) end,
  "kiln.ceilings: unknown option 'remeasue' (known: device, remeasure, progress); did you mean 'remeasure'?",
  "kiln.ceilings")
says(function() kiln.device({ progres = print }) end,
  "kiln.device: unknown option 'progres' (known: remeasure, progress); did you mean 'progress'?", "kiln.device")

---------------------------------------------------------------------------
-- tensors

says(function() kiln.randn({ 2 }, { sed = 1 }) end,
  "randn: unknown option 'sed' (known: dtype, device, seed, requires_grad); did you mean 'seed'?", "kiln.randn")
says(function() kiln.rand({ 2 }, { hihg = 2 }) end,
  "rand: unknown option 'hihg' (known: low, high, dtype, device, seed, requires_grad); did you mean 'high'?", "kiln.rand")
says(function() kiln.randint(0, 5, { 2 }, { seeds = 1 }) end,
  "randint: unknown option 'seeds' (known: dtype, device, seed, requires_grad); did you mean 'seed'?", "kiln.randint")
says(function() kiln.zeros({ 2 }, { dtpye = "f32" }) end,
  "zeros: unknown option 'dtpye' (known: dtype, device, requires_grad); did you mean 'dtype'?", "kiln.zeros")
says(function() kiln.zeros({ 2 }, { seed = 1 }) end, "zeros: unknown option 'seed' (known: dtype, device, requires_grad)",
  "kiln.zeros: a seed means nothing there")
says(function() kiln.ones(2, 3, { devce = "cpu" }) end,
  "ones: unknown option 'devce' (known: dtype, device, requires_grad); did you mean 'device'?", "kiln.ones after numbers")
says(function() kiln.full({ 2 }, 1, { dtyp = "f32" }) end,
  "full: unknown option 'dtyp' (known: dtype, device, requires_grad); did you mean 'dtype'?", "kiln.full")
says(function() kiln.arange(4, { dtpe = "i32" }) end,
  "arange: unknown option 'dtpe' (known: dtype, device, requires_grad); did you mean 'dtype'?", "kiln.arange")
says(function() kiln.tensor({ 1, 2 }, { dvice = "cpu" }) end,
  "tensor: unknown option 'dvice' (known: dtype, device, requires_grad); did you mean 'device'?", "kiln.tensor")
says(function() x:to({ dtype = "bf16", devcie = "cpu" }) end,
  "to: unknown option 'devcie' (known: dtype, device); did you mean 'device'?", "x:to{...}")
says(function() kiln.zeros({ 2 }, { dtype = "f23" }) end,
  "unknown dtype 'f23' (expected f32, f64, bf16, f16, i32, i64 or bool); did you mean 'f32'?", "a near dtype")
says(function() kiln.zeros({ 2 }, { device = "cdua:1" }) end,
  "unknown device 'cdua:1' (expected cpu or cuda); did you mean 'cuda:1'?", "a near device, its number kept")
says(function() kiln.zeros({ 2 }, 7) end, "zeros: options must be a table, got number", "options that are no table")
T.like(select(2, pcall(x.to, x, "bf61")), "did you mean 'bf16'%?$", "x:to(\"bf61\")")

---------------------------------------------------------------------------
-- ops

says(function() x:sum(1, { keepdims = true }) end,
  "sum: unknown option 'keepdims' (known: keepdim, correction, unbiased); did you mean 'keepdim'?", "a reduction")
local img = kiln.randn({ 1, 1, 4, 4 }, { device = "cpu" })
says(function() kiln.conv2d(img, kiln.randn({ 1, 1, 1, 1 }, { device = "cpu" }), nil, { strdie = 1 }) end,
  "conv2d: unknown option 'strdie' (known: stride, padding, dilation, groups); did you mean 'stride'?", "conv2d")
says(function() kiln.max_pool2d(img, 2, { ceil = true }) end,
  "max_pool2d: unknown option 'ceil' (known: stride, padding, ceil_mode, count_include_pad); did you mean 'ceil_mode'?",
  "max_pool2d")
says(function() kiln.scaled_dot_product_attention(x, x, x, { casual = true }) end,
  "scaled_dot_product_attention: unknown option 'casual' (known: causal, scale, mask); did you mean 'causal'?",
  "scaled_dot_product_attention")
local idx = kiln.tensor({ 1, 2 }, { dtype = "i64", device = "cpu" })
says(function() kiln.gather_scatter(x, idx, idx, { wieght = x }) end,
  "gather_scatter: unknown option 'wieght' (known: weight, base, rows); did you mean 'weight'?", "gather_scatter")

---------------------------------------------------------------------------
-- kiln.nn

local nn = kiln.nn
says(function() nn.Linear(2, 3, { baias = false }) end,
  "Linear: unknown option 'baias' (known: bias); did you mean 'bias'?", "nn.Linear")
says(function() nn.Conv2d(1, 1, 3, { paddding = 1 }) end,
  "Conv2d: unknown option 'paddding' (known: stride, padding, dilation, groups, bias); did you mean 'padding'?",
  "nn.Conv2d")
says(function() nn.BatchNorm2d(4, { momentun = 0.1 }) end,
  "BatchNorm2d: unknown option 'momentun' (known: eps, momentum, affine); did you mean 'momentum'?", "nn.BatchNorm2d")
says(function() nn.LayerNorm(4, { elementwise_afine = false }) end,
  "LayerNorm: unknown option 'elementwise_afine' (known: eps, elementwise_affine, bias); did you mean "
  .. "'elementwise_affine'?", "nn.LayerNorm")
says(function() nn.GELU({ approximate = "tahn" }) end,
  "GELU: unknown approximation 'tahn' (known: none, tanh); did you mean 'tanh'?", "nn.GELU: the approximation")
says(function() nn.MaxPool2d(2, { strid = 2 }) end,
  "MaxPool2d: unknown option 'strid' (known: stride, padding, ceil_mode); did you mean 'stride'?", "nn.MaxPool2d")
local lin = nn.Linear(2, 3)
says(function() lin:to({ devcie = "cpu" }) end,
  "to: unknown option 'devcie' (known: device, dtype); did you mean 'device'?", "module:to{...}")
says(function() lin:to("bf61") end, "to: 'bf61' is neither a device (cpu, cuda) nor a dtype; did you mean 'bf16'?",
  "module:to(a near dtype)")
local tmp = os.tmpname()
says(function() lin:save_safetensors(tmp, { index_bsae = 0 }) end,
  "save_safetensors: unknown option 'index_bsae' (known: index_base, metadata); did you mean 'index_base'?",
  "module:save_safetensors")
lin:save_safetensors(tmp)
says(function() lin:load_safetensors(tmp, { stirct = false }) end,
  "load_safetensors: unknown option 'stirct' (known: strict, index_base); did you mean 'strict'?",
  "module:load_safetensors")
os.remove(tmp)

---------------------------------------------------------------------------
-- drawing, loading, ONNX, kiln.config, kiln.log

cm(x)
says(function() kiln.render(cm, nil, { veiw = "fused" }) end,
  "kiln.render: unknown option 'veiw' (known: view, format, rankdir, collapse, labels, timings, inputs); did you mean 'view'?",
  "kiln.render: a key")
says(function() kiln.render(cm, nil, { view = "fsued" }) end,
  "kiln.render: unknown view 'fsued' (known: captured, fused); did you mean 'fused'?", "kiln.render: a view")
says(function() kiln.outline(cm, { colapse = true }) end,
  "kiln.outline: unknown option 'colapse' (known: view, format, rankdir, collapse, labels, timings, inputs); did you mean "
  .. "'collapse'?", "kiln.outline")
says(function() kiln.load("no-such-model.lua", { quite = true }) end,
  "kiln.load: unknown option 'quite' (known: sizes, quiet); did you mean 'quiet'?", "kiln.load")
if kiln.onnx.available then
  says(function() kiln.onnx.load("no-such.onnx", { size = { N = 1 } }) end,
    "kiln.onnx.load: unknown option 'size' (known: sizes, device, fuse); did you mean 'sizes'?", "kiln.onnx.load")
  local path = os.tmpname() .. ".onnx"
  says(function() kiln.onnx.save(lin, path, { kiln.randn({ 1, 2 }, { device = "cpu" }) }, { opst = 18 }) end,
    "kiln.onnx.save: unknown option 'opst' (known: opset); did you mean 'opset'?", "kiln.onnx.save")
  lin:to("cpu")
  kiln.onnx.save(lin, path, { kiln.randn({ 1, 2 }, { device = "cpu" }) })
  local m = kiln.onnx.load(path)
  says(function() m:to("f32", { keep_io_type = true }) end,
    "OnnxModel:to: unknown option 'keep_io_type' (known: keep_io_types); did you mean 'keep_io_types'?",
    "OnnxModel:to")
  os.remove(path)
else
  T.ok(true, "# skip: this kiln has no ONNX import")
end
says(function() kiln.config.chanels_last = true end,
  "kiln.config: unknown setting 'chanels_last' (known: cache_size_limit, error_on_recompile, allow_tf32, f32_precision, replay, "
  .. "dynamic_numbers, compiler, check_numerics, fold_epilogues, channels_last, autotune_budget_s, cache_dir, activation_memory_budget); did "
  .. "you mean 'channels_last'?", "kiln.config: a misspelt setting is not stored")
T.is(rawget(kiln.config, "chanels_last"), nil, "kiln.config: ... and reads as nothing")
T.ok(pcall(function() kiln.config.channels_last = "auto" end), "kiln.config: a known setting passes")
-- f32_precision: a word of three; allow_tf32 is its alias, both ways
T.is(kiln.config.f32_precision, "ieee", "kiln.config.f32_precision: ieee by default")
says(function() kiln.config.f32_precision = "fast" end,
  "kiln.config.f32_precision: unknown precision 'fast' (known: ieee, tf32, fastest); did you mean 'fastest'?",
  "kiln.config.f32_precision: an unknown word names the valid ones")
T.is(kiln.config.f32_precision, "ieee", "kiln.config.f32_precision: ... and is not stored")
says(function() kiln.config.f32_precision = true end,
  "kiln.config.f32_precision: precision must be a string, one of ieee, tf32, fastest; got boolean",
  "kiln.config.f32_precision: a boolean is refused")
kiln.config.f32_precision = "tf32"
T.is(kiln.config.allow_tf32, true, "f32_precision = 'tf32' reads back as allow_tf32 = true")
kiln.config.allow_tf32 = false
T.is(kiln.config.f32_precision, "ieee", "allow_tf32 = false reads back as f32_precision 'ieee'")
kiln.config.allow_tf32 = true
T.is(kiln.config.f32_precision, "tf32", "allow_tf32 = true reads back as f32_precision 'tf32'")
kiln.config.f32_precision = "fastest"
T.is(kiln.config.allow_tf32, true, "f32_precision = 'fastest' allows TF32 too")
kiln.config.f32_precision = nil
T.is(kiln.config.f32_precision, "ieee", "f32_precision = nil is the default, 'ieee'")
T.is(kiln.config.allow_tf32, false, "... and allow_tf32 false")
T.like(select(2, pcall(kiln.log, { "kernel" })), "kiln%.log: unknown log 'kernel' %(known: .*%); did you mean 'kernels'%?$",
  "kiln.log")

---------------------------------------------------------------------------
-- the REPL: commands, :mode, :graph words

ends(function() kiln.repl.command(":kernls") end, "unknown command ':kernls' (try :help); did you mean ':kernels'?",
  "a misspelt command")
ends(function() kiln.repl.command(":nosuch") end, "unknown command ':nosuch' (try :help)",
  "a command near none: no guess")
ends(function() kiln.cmd.help("rnu") end, "unknown command ':rnu' (try :help); did you mean ':run'?", ":help of a typo")
ends(function() kiln.cmd.mode("defualt") end, "unknown mode 'defualt' (known: " .. MODES .. "); did you mean 'default'?",
  ":mode")
ends(function() kiln.cmd.graph("captred") end,
  "unknown word 'captred' for :graph (expected captured, fused, text, collapse, lines, lr, tb, or FILE.svg / FILE.dot); "
  .. "did you mean 'captured'?", ":graph")

T.done()
