-- bench_onnx_row.lua: the benchmark's ONNX row (transformer_block_onnx) on
-- the CPU, without PyTorch: an ONNX file of the transformer block written as
-- the exporters do (t/lib/onnx_transformer.lua) stands in for
-- bench/export_onnx.py's, beside the output of the model in f64 (f32 row) and
-- of the Lua model in bf16 (bf16 row). kiln_bench.lua times it in eager and
-- default mode and checks it against that output; a missing export gives a
-- 'skipped' row with the export's reason; gpu_bench.sh runs the row through
-- report.py's table; report.py shows a failed export in the header.
local T = dofile("t/lib/tap.lua")
if not kiln.onnx.available then T.skip_all("kiln was built without ONNX import (protobuf-c missing)") end
MAKE_ONNX_LIB = true
local W = dofile("samples/onnx/make_onnx.lua")
local build = dofile("t/lib/onnx_transformer.lua")
local KILN = os.getenv("KILN") or "build/kiln"

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "/ref' '" .. dir .. "/failed' '" .. dir .. "/out'"))
local ref = dir .. "/ref"

-- the fixture: B 2, T 16, the Lua sample's weights; a fresh input
local spec = kiln.load("samples/transformer_block.lua", { quiet = true })
W.write(ref .. "/transformer_block.onnx", build(spec.model:state_dict(), { B = 2, T = 16 }, { mask = "where_ones" }))
local x = kiln.randn({ 2, 16, 512 }, { seed = 4242 })
local m64 = kiln.load("samples/transformer_block.lua", { quiet = true }).model:to("f64")
local y64 = m64(x:to("f64"))
kiln.save_safetensors(ref .. "/transformer_block_onnx-f32.io.safetensors", { input = x, output = y64:to("f32"), output_f64 = y64 })
local mb = kiln.load("samples/transformer_block.lua", { quiet = true }).model:to("bf16")
kiln.save_safetensors(ref .. "/transformer_block_onnx-bf16.io.safetensors", { input = x, output = mb(x:to("bf16")) })

local run = T.output
local function field(line, k) return line:match('"' .. k .. '":"([^"]*)"') or line:match('"' .. k .. '":([-0-9.e]+)') end
local function bench_row(onnx_dir, mode, dtype)
  local out = run(string.format("KILN_BENCH_DEVICE=cpu KILN_BENCH_ONNX_DIR='%s' REPS=1 CALLS=2 WARMUP=1 %s "
    .. "bench/kiln_bench.lua transformer_block_onnx %s %s", onnx_dir, KILN, mode, dtype))
  local line = ""
  for l in out:gmatch("[^\n]+") do if l:sub(1, 1) == "{" then line = l end end
  return line, out
end

for _, c in ipairs { { "eager", "f32", 1e-5 }, { "default", "f32", 1e-5 }, { "default", "bf16", 5e-2 } } do
  local mode, dtype, tol = c[1], c[2], c[3]
  local line, out = bench_row(ref, mode, dtype)
  local what = mode .. " " .. dtype .. ": "
  local ms, rel = tonumber(field(line, "ms_per_call")), tonumber(field(line, "max_rel_err"))
  if not T.ok(ms and ms > 0, what .. "a time per call") then io.write("# " .. out:gsub("\n", "\n# ") .. "\n") end
  T.is(field(line, "ref"), "torch-eager", what .. "compared with the output beside the file")
  T.ok(rel and rel == rel and rel <= tol, what .. "max rel err " .. tostring(rel) .. " <= " .. tol)
  T.is(field(line, "onnx_opset"), "17", what .. "the row records the file's opset")
  if dtype == "f32" then -- the float64 output beside it: the accuracy against float64, measured in f64
    local rel64 = tonumber(field(line, "f64_max_rel_err"))
    T.ok(rel64 and rel64 == rel64 and rel64 <= tol, what .. "max rel err against float64 " .. tostring(rel64))
  end
end

-- no file: the row is skipped, with the reason export_onnx.py left
local f = assert(io.open(dir .. "/failed/transformer_block.onnx.json", "w"))
f:write('{"side": "env-onnx-export", "error": "ModuleNotFoundError: No module named \'onnxscript\'"}\n')
f:close()
local line = bench_row(dir .. "/failed", "eager", "f32")
T.like(field(line, "skipped") or "", "^no ONNX export at .*transformer_block%.onnx: ModuleNotFoundError: No module named 'onnxscript'",
  "a failed export: the row is skipped with the exporter's error")
line = bench_row(dir .. "/nothing_here", "eager", "f32")
T.like(field(line, "skipped") or "", "bench/export_onnx%.py did not write one", "no export at all: the row says so")

local has_python = os.execute("python3 -c 'import json' >/dev/null 2>&1")
if not has_python then
  for _ = 1, 8 do
    T.n = T.n + 1
    io.write("ok " .. T.n .. " # SKIP no python3 for gpu_bench.sh and report.py\n")
  end
  T.done()
end

-- gpu_bench.sh with the file made beforehand: the row in report.py's table
-- (KILN_COMMIT names the commit over the tree's own .git: a copy of the
-- tree on the GPU machine carried an older one; one of digits alone stays
-- a string in the raw rows)
local out = run(string.format("KILN_COMMIT=1234567 MODELS=transformer_block_onnx DTYPES=f32 KILN_MODES=eager,default TORCH_MODES=eager "
  .. "KILN_BENCH_DEVICE=cpu BENCH_REF_DIR='%s' KILN_WARM=0 REPS=1 CALLS=2 WARMUP=1 BUDGET_S=200 KILN=%s "
  .. "sh bench/gpu_bench.sh '%s/out'", ref, KILN, dir))
local md = ""
local p = io.popen("cat '" .. dir .. "'/out/*.md 2>/dev/null")
md = p:read("a")
p:close()
local row = md:match("\n(| transformer_block_onnx | f32 | [^\n]*)") or ""
if not T.like(row, "| %d+%.%d+ | %d+%.%d+ | %- | %- | %d+%.%d+ %(%a+%)", "gpu_bench.sh: eager and default times in the table row") then
  io.write("# " .. out:gsub("\n", "\n# ") .. "\n")
end
T.like(md, "commit 1234567,", "gpu_bench.sh: the header names KILN_COMMIT's commit")
local acc = md:match("\n(| transformer_block_onnx | f32 | [^\n]*)\n[^\n]*\n*## First call") or
  md:match("## Compile, memory, accuracy.-\n(| transformer_block_onnx | f32 | [^\n]*)") or ""
T.like(acc, "| %d[%d%.e%-]* / %- |$", "report.py: the f32 row's error against float64 (kiln's; no PyTorch row here)")
p = io.popen("cat '" .. dir .. "'/out/*.jsonl 2>/dev/null")
local rawrows = p:read("a")
p:close()
T.like(rawrows, '"commit": "1234567"', "gpu_bench.sh: a commit of digits alone is recorded as a string")

-- report.py: a failed export in the header, the skipped rows' reason in the notes
local raw = dir .. "/failed.jsonl"
f = assert(io.open(raw, "w"))
f:write('{"side": "env-onnx-export", "row": "transformer_block_onnx", "error": "ModuleNotFoundError: No module named \'torch\'"}\n')
f:write('{"side": "kiln", "model": "transformer_block_onnx", "mode": "eager", "dtype": "f32", "phase": "cold", '
  .. '"skipped": "no ONNX export at x/transformer_block.onnx: ModuleNotFoundError: No module named \'torch\'"}\n')
f:close()
md = run("python3 bench/report.py '" .. raw .. "'")
T.like(md, "ONNX export %(transformer_block_onnx%): failed: ModuleNotFoundError", "report.py: the failed export in the header")
T.like(md, "| transformer_block_onnx | f32 | [^\n]*skipped %[1%]", "report.py: the row is there, skipped, with a note")

-- the real-model suite's kiln row times the host's work of a call on its
-- own (a CPU row here: the whole call), and report.py holds a row that
-- replays a CUDA graph to 50 us of it
local line = run(string.format("KILN_BENCH_DEVICE=cpu REF_DIR=t/data/real_models REPS=1 CALLS=2 WARMUP=1 %s "
  .. "bench/real_models.lua bert_tiny reduce-overhead f32 2>/dev/null", KILN))
local host_us = tonumber(line:match('"host_us_per_call":%s*([%d%.eE+-]+)'))
T.ok(host_us and host_us > 0, "real_models.lua: the row has the host's time per call (" .. tostring(host_us) .. " us)")
-- the part running the graph is a mean over the same calls, each inside
-- its call's wall time: at most the mean of those (the median can be
-- smaller, when one call of a loaded machine runs long)
local run_us = tonumber(line:match('"host_run_us_per_call":%s*([%d%.eE+-]+)'))
local mean_us = tonumber(line:match('"host_mean_us_per_call":%s*([%d%.eE+-]+)'))
T.ok(run_us and mean_us and run_us > 0 and run_us <= mean_us * 1.01 + 1,
  "real_models.lua: and the part of it running the graph (" .. tostring(run_us) .. " us of a mean "
  .. tostring(mean_us) .. ")")
raw = dir .. "/host.jsonl"
f = assert(io.open(raw, "w"))
for _, m in ipairs({ { "bert", 60 }, { "gpt2", 30 } }) do
  f:write(string.format('{"side": "torch", "model": "%s", "mode": "reduce-overhead", "dtype": "bf16", "ms_per_call": 0.27}\n', m[1]))
  f:write(string.format('{"side": "kiln", "model": "%s", "mode": "reduce-overhead", "dtype": "bf16", "ms_per_call": 0.2, '
    .. '"max_rel_err": 0.01, "cuda_graph_replays": 510, "host_us_per_call": %d%s}\n', m[1], m[2],
    m[1] == "gpt2" and ', "host_run_us_per_call": 20.4, "host_launch_us_per_call": 9.2' or ""))
end
f:close()
md = run("python3 bench/report.py '" .. raw .. "'")
T.like(md, "| bert | bf16 | [^\n]*| 0%.200 %(reduce%-overhead%) | 60 ✗ | 0%.74 | no %(host%) |",
  "report.py: a CUDA graph's row over 50 us of host time a call misses its target")
T.like(md, "| gpt2 | bf16 | [^\n]*| 0%.200 %(reduce%-overhead%) | 30 %(run 20, launch 9%) | 0%.74 | yes |",
  "report.py: one under it keeps its ratio's verdict; the split shown (running the graph, its launch)")

os.execute("rm -rf '" .. dir .. "'")
T.done()
