#!/bin/sh
# gpu_bench.sh: kiln against PyTorch on the GPU machine, in one run: the table
# of the five samples (time per call per mode, best modes, the 0.8 target,
# compile time, peak memory, error against PyTorch eager).
#
# From the repo root on the GPU machine, with the build made on the
# development machine taken along in build/ (nothing is built here; Lua
# comes from build/devlibs):
#
#   export LD_LIBRARY_PATH=$PWD/build/devlibs; bench/gpu_bench.sh $OUT
#
# OUT (default bench/results) receives DATE-GPU-gpu.jsonl, the raw rows,
# appended as each finishes so a cut-off run keeps what it measured, and
# DATE-GPU-gpu.md, the tables (also printed at the end). To redo the tables
# from raw files, of one run or of several split ones:
#   python3 bench/report.py OUT1/*.jsonl OUT2/*.jsonl > table.md
#
# Order: PyTorch eager (which also exports weights, input and output per
# model and dtype for kiln to load), the ONNX export of the ONNX rows
# (bench/export_onnx.py), every kiln row, then PyTorch's compiled modes, one
# mode at a time; each row is its own process with a timeout.
#
# The ONNX row transformer_block_onnx is PyTorch's transformer_block exported
# with torch.onnx.export and loaded with kiln.onnx.load: kiln's times beside
# the Lua sample's, its error against PyTorch's output for the exported
# weights, and PyTorch's columns from its transformer_block rows (the same
# module). Where the export fails the row is 'skipped' with the reason.
#
# Env knobs (defaults fit one 10-minute command, about 7 minutes before the
# ONNX row, which adds its export and 12 kiln rows: where BUDGET_S runs out,
# split the run, e.g. MODELS=transformer_block,transformer_block_onnx):
#   MODELS=simple_linear,large_linear,convnet,transformer_block,transformer_block_onnx,gcn
#       (NAME_onnx: an ONNX row; PyTorch runs the models without _onnx)
#   DTYPES=f32,bf16
#   TORCH_MODES=eager,default,reduce-overhead   add max-autotune for PyTorch's
#       best (up to ~95 s of compile a row: run it split, e.g. MODELS=convnet,gcn);
#       eager always runs, since it makes the reference kiln is checked against
#   KILN_MODES=eager,default,reduce-overhead,max-autotune   (set but empty: no kiln rows)
#   REPS=5 CALLS=100 WARMUP=10
#   BUDGET_S=540      no row starts later than this after the start
#   ROW_TIMEOUT=150   per PyTorch row (s), MA_ROW_TIMEOUT=240 per PyTorch
#                     max-autotune row, KILN_ROW_TIMEOUT=120 per kiln row,
#                     EXPORT_TIMEOUT=240 for the ONNX export
#   KILN_WARM=1       0: skip the warm persistent-cache probe (one more
#                     process per model and dtype, default mode)
#   KILN=build/kiln PYTHON=python3 KILN_BENCH_DEVICE=cuda
#   KILN_COMMIT       the commit to record, over what the tree's .git says
#                     (a copy of the tree on another machine may carry an
#                     older .git: one run recorded 31143e5+dirty for 020c17d)
#   KEEP=1            keep the scratch folder (exports, compile caches)
#   BENCH_REF_DIR     where PyTorch's exports go and kiln reads them (default:
#                     the scratch folder; a test without PyTorch points it at
#                     exports made beforehand: an ONNX file already there is
#                     used, not exported again)
set -u

out=${1:-bench/results}
MODELS=${MODELS:-simple_linear,large_linear,convnet,transformer_block,transformer_block_onnx,gcn}
DTYPES=${DTYPES:-f32,bf16}
TORCH_MODES=${TORCH_MODES:-eager,default,reduce-overhead}
KILN_MODES=${KILN_MODES-eager,default,reduce-overhead,max-autotune}
REPS=${REPS:-5}
CALLS=${CALLS:-100}
WARMUP=${WARMUP:-10}
BUDGET_S=${BUDGET_S:-540}
ROW_TIMEOUT=${ROW_TIMEOUT:-150}
KILN_ROW_TIMEOUT=${KILN_ROW_TIMEOUT:-120}
MA_ROW_TIMEOUT=${MA_ROW_TIMEOUT:-240}
EXPORT_TIMEOUT=${EXPORT_TIMEOUT:-240}
KILN_WARM=${KILN_WARM:-1}
KILN=${KILN:-build/kiln}
PYTHON=${PYTHON:-python3}
KILN_BENCH_DEVICE=${KILN_BENCH_DEVICE:-cuda}
export MODELS DTYPES REPS CALLS WARMUP ROW_TIMEOUT KILN_BENCH_DEVICE MA_ROW_TIMEOUT

# PyTorch's models: the ONNX rows (NAME_onnx) are kiln's only
TORCH_MODELS=$(echo "$MODELS" | tr ',' '\n' | grep -v '_onnx$' | paste -sd, -)
ONNX_MODELS=$(echo "$MODELS" | tr ',' '\n' | grep '_onnx$' | paste -sd, -)

start=$(date +%s)
deadline=$((start + BUDGET_S))
left() { echo $((deadline - $(date +%s))); }
say() { echo "gpu_bench: $*" >&2; }
commas() { echo "$1" | tr ',' ' '; }

[ -x "$KILN" ] || { say "$KILN is missing: build on the development machine and take build/ along"; exit 2; }
mkdir -p "$out" || exit 2
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-gpu-bench.XXXXXX") || exit 2
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

gpu=unknown
smi=
if command -v nvidia-smi >/dev/null 2>&1; then
    smi=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
    slug=$(echo "$smi" | cut -d, -f1 | grep -oE '[A-Z]{1,2}[0-9]{2,4}[A-Za-z]?' | head -1 | tr '[:upper:]' '[:lower:]')
    [ -n "$slug" ] && gpu=$slug
fi
date=$(date +%Y-%m-%d)
raw="$out/$date-$gpu-gpu.jsonl"
md="$out/$date-$gpu-gpu.md"
commit=${KILN_COMMIT:-}
if [ -z "$commit" ]; then
    commit=$(git rev-parse --short HEAD 2>/dev/null || true)
    [ -n "$commit" ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit+dirty"
    commit=${commit:-unknown}
fi
say "raw rows -> $raw; scratch $work"

case ",$TORCH_MODES," in
*,max-autotune,*) ;;
*) say "note: PyTorch max-autotune is not run (TORCH_MODES=$TORCH_MODES); its compile takes up to ~95 s a row." \
       "Add it with TORCH_MODES=eager,max-autotune and a MODELS subset per command." ;;
esac

# json KEY=VALUE ...: one JSON object (values that look numeric stay numbers,
# except those of names and labels: a commit of digits alone stays a string)
json() {
    "$PYTHON" -c '
import json, sys
TEXT = {"commit", "date", "gpu", "driver", "smi_cuda", "model", "mode", "dtype", "phase", "side"}
r = {}
for a in sys.argv[1:]:
    k, _, v = a.partition("=")
    if k not in TEXT:
        try:
            v = int(v)
        except ValueError:
            pass
    r[k] = v
print(json.dumps(r))' "$@"
}

# host facts the programs cannot see themselves
smi_cuda=$(nvidia-smi 2>/dev/null | grep -oE 'CUDA Version: [0-9.]+' | head -1 | cut -d' ' -f3)
json side=env-host date="$date" commit="$commit" gpu="$(echo "$smi" | cut -d, -f1)" \
    driver="$(echo "$smi" | cut -d, -f2 | tr -d ' ')" smi_cuda="$smi_cuda" reps="$REPS" calls="$CALLS" \
    warmup="$WARMUP" models="$MODELS" dtypes="$DTYPES" torch_modes="$TORCH_MODES" kiln_modes="$KILN_MODES" \
    >>"$raw"
"$PYTHON" bench/torch_models.py env >>"$raw" 2>"$work/env-torch.err" ||
    say "PyTorch does not start: $(tail -1 "$work/env-torch.err")"
"$KILN" bench/kiln_bench.lua info 2>"$work/env-kiln.err" | grep '^{' >>"$raw" ||
    say "kiln does not start ($(tail -1 "$work/env-kiln.err")): is LD_LIBRARY_PATH=\$PWD/build/devlibs exported?"

export EXPORT_DIR="${BENCH_REF_DIR:-$work/ref}" BENCH_JSONL="$raw" BENCH_DEADLINE=$deadline

# 1. PyTorch eager, exporting the reference
if [ -n "$TORCH_MODELS" ]; then
    say "PyTorch eager (exports to $EXPORT_DIR)"
    MODELS=$TORCH_MODELS TORCH_MODES=eager "$PYTHON" bench/torch_models.py run >/dev/null
fi

# 1b. the ONNX file of the ONNX rows, with PyTorch's output for its weights
# (a failed export is recorded; the rows then say why)
if [ -n "$ONNX_MODELS" ]; then
    t=$(left)
    [ "$t" -gt "$EXPORT_TIMEOUT" ] && t=$EXPORT_TIMEOUT
    if [ -n "${BENCH_REF_DIR:-}" ] && [ -f "$EXPORT_DIR/transformer_block.onnx" ]; then
        say "ONNX export: using $EXPORT_DIR/transformer_block.onnx, made beforehand (BENCH_REF_DIR)"
    elif [ "$t" -lt 10 ]; then
        say "ONNX export skipped: bench time budget spent"
    else
        say "ONNX export for $ONNX_MODELS (bench/export_onnx.py, up to $t s)"
        timeout -k 5 "$t" "$PYTHON" bench/export_onnx.py "$EXPORT_DIR" >"$work/export.out" 2>"$work/export.err"
        rc=$?
        if grep '^{' "$work/export.out" | tail -1 >"$work/export.line" && [ -s "$work/export.line" ]; then
            cat "$work/export.line" >>"$raw"
        else
            why="exit status $rc"
            { [ $rc = 124 ] || [ $rc = 137 ]; } && why="timeout after $t s"
            why="$why: $(tail -c 300 "$work/export.err" | tr '\n' ' ')"
            json side=env-onnx-export error="$why" >>"$raw"
            # no half-written file for kiln to read
            rm -f "$EXPORT_DIR/transformer_block.onnx"
            mkdir -p "$EXPORT_DIR" && json error="$why" >"$EXPORT_DIR/transformer_block.onnx.json"
        fi
        grep '^export_onnx:' "$work/export.err" | while IFS= read -r l; do say "$l"; done
    fi
fi

# 2. kiln
kiln_row() { # model mode dtype phase cache
    t=$(left)
    if [ "$t" -lt 10 ]; then
        json side=kiln model="$1" mode="$2" dtype="$3" phase="$4" skipped="bench time budget spent" >>"$raw"
        return
    fi
    [ "$t" -gt "$KILN_ROW_TIMEOUT" ] && t=$KILN_ROW_TIMEOUT
    t0=$(date +%s)
    fo=0
    [ "$4" = warm ] && fo=1
    KILN_CACHE_DIR="$5" KILN_BENCH_REF="$EXPORT_DIR" KILN_BENCH_FIRST_ONLY=$fo \
        timeout -k 5 "$t" "$KILN" bench/kiln_bench.lua "$1" "$2" "$3" >"$work/row.out" 2>"$work/row.err"
    rc=$?
    line=$(grep '^{' "$work/row.out" | tail -1)
    if [ -n "$line" ]; then
        echo "$line" >>"$raw"
        what=$(echo "$line" | grep -oE '"(first_call_s|ms_per_call)":[0-9.e-]+|"(error|skipped)":"[^"]{0,120}' | tr '\n' ' ')
    else
        what="exit status $rc"
        { [ $rc = 124 ] || [ $rc = 137 ]; } && what="timeout after $t s"
        json side=kiln model="$1" mode="$2" dtype="$3" phase="$4" \
            error="$what: $(tail -c 600 "$work/row.err") $(tail -c 200 "$work/row.out")" >>"$raw"
    fi
    say "kiln $1 $2 $3 $4: $(($(date +%s) - t0)) s, $what"
}
for mode in $(commas "$KILN_MODES"); do
    for model in $(commas "$MODELS"); do
        for dt in $(commas "$DTYPES"); do
            cache="$work/cache/$model-$dt-$mode"
            rm -rf "$cache" && mkdir -p "$cache"
            kiln_row "$model" "$mode" "$dt" cold "$cache"
            if { [ "$mode" = default ] || [ "${mode#max-autotune}" != "$mode" ]; } && [ "$KILN_WARM" = 1 ]; then
                kiln_row "$model" "$mode" "$dt" warm "$cache"
            fi
        done
    done
done

# 3. PyTorch's compiled modes
rest=$(echo ",$TORCH_MODES," | sed 's/,eager,/,/g; s/^,//; s/,$//')
if [ -n "$rest" ]; then
    say "PyTorch $rest"
    [ -n "$TORCH_MODELS" ] && MODELS=$TORCH_MODELS TORCH_MODES=$rest "$PYTHON" bench/torch_models.py run >/dev/null
fi

"$PYTHON" bench/report.py "$raw" >"$md" && cat "$md"
say "done in $(($(date +%s) - start)) s: $md, $raw"
