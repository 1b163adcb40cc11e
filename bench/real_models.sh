#!/bin/sh
# real_models.sh: the real-model suite on the GPU machine: torchvision and
# Hugging Face models (bench/real_models.py) exported to ONNX, run by kiln in
# each mode and dtype (bench/real_models.lua) and by PyTorch in each
# torch.compile mode, in one run, into the table of bench/report.py.
#
#   export LD_LIBRARY_PATH=$PWD/build/devlibs; sh bench/real_models.sh OUT
#
# OUT receives DATE-GPU-real.jsonl (raw rows, appended as each finishes) and
# DATE-GPU-real.md (the tables). To join split runs:
#   python3 bench/report.py OUT1/*.jsonl OUT2/*.jsonl > table.md
#
# Order: the exports (skipped for a model whose files are already in
# REF_DIR), every kiln row, then PyTorch, a mode at a time. Each row is its
# own process with a timeout.
#
# Env knobs:
#   MODELS=resnet18,resnet50,mobilenet_v3_large,vit_b_16,bert,bert_eager,gpt2
#   DTYPES=f32,bf16
#   KILN_MODES=eager,default,reduce-overhead,max-autotune   (set but empty: no kiln rows)
#   TORCH_MODES=eager,default,reduce-overhead,max-autotune  (set but empty: no PyTorch rows)
#   REF_DIR      the exports (default: a scratch folder; kept between runs on
#                one machine when set, e.g. /tmp/real)
#   BUDGET_S=560 no row starts later than this after the start
#   KILN_ROW_TIMEOUT=150 ROW_TIMEOUT=240 MA_ROW_TIMEOUT=420
#   REPS=5 CALLS=100 WARMUP=10 KILN=build/kiln PYTHON=python3
#   KILN_COMMIT  the commit to record, over what the tree's .git says (the GPU
#                machine's copy of a tree may carry an older .git: pass it there)
set -u
out=${1:-bench/results}
MODELS=${MODELS:-resnet18,resnet50,mobilenet_v3_large,vit_b_16,bert,bert_eager,gpt2}
DTYPES=${DTYPES:-f32,bf16}
KILN_MODES=${KILN_MODES-eager,default,reduce-overhead,max-autotune}
TORCH_MODES=${TORCH_MODES-eager,default,reduce-overhead,max-autotune}
BUDGET_S=${BUDGET_S:-560}
KILN_ROW_TIMEOUT=${KILN_ROW_TIMEOUT:-150}
KILN=${KILN:-build/kiln}
PYTHON=${PYTHON:-python3}
export REPS=${REPS:-5} CALLS=${CALLS:-100} WARMUP=${WARMUP:-10}

start=$(date +%s)
deadline=$((start + BUDGET_S))
left() { echo $((deadline - $(date +%s))); }
say() { echo "real_models: $*" >&2; }
commas() { echo "$1" | tr ',' ' '; }

mkdir -p "$out" || exit 2
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-real.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
REF_DIR=${REF_DIR:-$work/ref}
mkdir -p "$REF_DIR" || exit 2
export REF_DIR

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oE '[A-Z]{1,2}[0-9]{2,4}' | head -1 | tr '[:upper:]' '[:lower:]')
raw="$out/$(date +%Y-%m-%d)-${gpu:-gpu}-real.jsonl"
md="${raw%.jsonl}.md"
commit=${KILN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
echo "{\"side\":\"env-host\",\"date\":\"$(date +%Y-%m-%d)\",\"commit\":\"$commit\",\"gpu\":\"$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)\",\"driver\":\"$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)\",\"reps\":$REPS,\"calls\":$CALLS,\"warmup\":$WARMUP,\"models\":\"$MODELS\"}" >>"$raw"
"$PYTHON" bench/real_models.py env >>"$raw" 2>/dev/null || say "PyTorch does not start"
"$KILN" bench/kiln_bench.lua info 2>/dev/null | grep '^{' >>"$raw" || say "kiln does not start: is LD_LIBRARY_PATH=\$PWD/build/devlibs exported?"

# 1. exports
for model in $(commas "$MODELS"); do
    if [ -f "$REF_DIR/$model.onnx" ] && [ -f "$REF_DIR/$model.io.safetensors" ]; then
        say "export $model: using the files in $REF_DIR"
    else
        "$PYTHON" bench/real_models.py export "$REF_DIR" "$model" >>"$work/export.jsonl" 2>>"$work/export.err"
    fi
    [ -f "$REF_DIR/$model.onnx.json" ] && tr -d '\n' <"$REF_DIR/$model.onnx.json" >>"$raw" && echo >>"$raw"
done

# 2. kiln
kiln_row() { # model mode dtype phase cache
    t=$(left)
    if [ "$t" -lt 10 ]; then
        echo "{\"side\":\"kiln\",\"model\":\"$1\",\"mode\":\"$2\",\"dtype\":\"$3\",\"phase\":\"$4\",\"skipped\":\"bench time budget spent\"}" >>"$raw"
        return
    fi
    [ "$t" -gt "$KILN_ROW_TIMEOUT" ] && t=$KILN_ROW_TIMEOUT
    t0=$(date +%s)
    fo=0
    [ "$4" = warm ] && fo=1
    KILN_CACHE_DIR="$5" KILN_BENCH_FIRST_ONLY=$fo timeout -k 5 "$t" "$KILN" bench/real_models.lua "$1" "$2" "$3" \
        >"$work/row.out" 2>"$work/row.err"
    rc=$?
    line=$(grep '^{' "$work/row.out" | tail -1)
    if [ -z "$line" ]; then
        why="exit status $rc"
        { [ $rc = 124 ] || [ $rc = 137 ]; } && why="timeout after $t s"
        why="$why: $(tail -c 400 "$work/row.err" | tr '\n"\\' '   ')"
        line="{\"side\":\"kiln\",\"model\":\"$1\",\"mode\":\"$2\",\"dtype\":\"$3\",\"phase\":\"$4\",\"error\":\"$why\"}"
    fi
    echo "$line" >>"$raw"
    say "kiln $1 $2 $3 $4: $(($(date +%s) - t0)) s, $(echo "$line" | grep -oE '"(first_call_s|ms_per_call|max_rel_err)":[^,]*|"error":"[^"]{0,200}' | tr '\n' ' ')"
}
for mode in $(commas "$KILN_MODES"); do
    for model in $(commas "$MODELS"); do
        for dt in $(commas "$DTYPES"); do
            cache="$work/cache/$model-$dt-$mode"
            mkdir -p "$cache"
            kiln_row "$model" "$mode" "$dt" cold "$cache"
            case "$mode" in default|max-autotune) kiln_row "$model" "$mode" "$dt" warm "$cache" ;; esac
        done
    done
done

# 3. PyTorch, a mode at a time
if [ -n "$TORCH_MODES" ]; then
    BENCH_JSONL="$raw" BENCH_DEADLINE=$deadline MODELS=$MODELS TORCH_MODES=$TORCH_MODES DTYPES=$DTYPES \
        "$PYTHON" bench/real_models.py run >/dev/null
fi

"$PYTHON" bench/report.py "$raw" >"$md" && cat "$md"
say "done in $(($(date +%s) - start)) s: $md"
