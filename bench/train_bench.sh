#!/bin/sh
# train_bench.sh: training steps, kiln against PyTorch in one run on the GPU
# machine: each training sample (gcn, convnet, transformer; samples/train_*.lua
# and their twins in bench/torch_train.py) in f32 and bf16 (autocast), ms a
# step per mode, the first step (compile included), peak device memory, and
# the loss curve: kiln starts from PyTorch's initial weights on PyTorch's
# batch, and every kiln row's 100 losses are checked against PyTorch's eager
# curve (f32: relative error 1e-4 at every step; bf16: 2e-2).
#
#   export LD_LIBRARY_PATH=$PWD/build/devlibs; sh bench/train_bench.sh OUT
#
# OUT (default bench/results) receives DATE-GPU-train.jsonl (the raw rows,
# appended as each finishes) and DATE-GPU-train.md (bench/train_report.py's
# tables). Order: PyTorch eager (which exports the initial weights, the
# batch and its curve), every kiln row, then PyTorch's compiled modes; each
# row is its own process with a timeout.
#
# Env: SAMPLES=gcn,convnet,transformer DTYPES=f32,bf16
#   TORCH_MODES=eager,default,reduce-overhead (eager always runs)
#   KILN_MODES=eager,default,reduce-overhead
#   STEPS=100 REPS=5 CALLS=50 ROW_TIMEOUT=240 (s a row) BUDGET_S=540
#   KILN=build/kiln PYTHON=python3 KILN_COMMIT (the commit to record)
set -u
out=${1:-bench/results}
SAMPLES=${SAMPLES:-gcn,convnet,transformer}
DTYPES=${DTYPES:-f32,bf16}
TORCH_MODES=${TORCH_MODES:-eager,default,reduce-overhead}
KILN_MODES=${KILN_MODES-eager,default,reduce-overhead}
ROW_TIMEOUT=${ROW_TIMEOUT:-240}
BUDGET_S=${BUDGET_S:-540}
KILN=${KILN:-build/kiln}
PYTHON=${PYTHON:-python3}
export STEPS=${STEPS:-100} REPS=${REPS:-5} CALLS=${CALLS:-50}

start=$(date +%s)
deadline=$((start + BUDGET_S))
say() { echo "train_bench: $*" >&2; }
commas() { echo "$1" | tr ',' ' '; }
[ -x "$KILN" ] || { say "$KILN is missing: build on the development machine and take build/ along"; exit 2; }
mkdir -p "$out" || exit 2
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-train-bench.XXXXXX") || exit 2
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
slug=$(echo "$gpu" | grep -oE '[A-Z]{1,2}[0-9]{2,4}[A-Za-z]?' | head -1 | tr '[:upper:]' '[:lower:]')
raw="$out/$(date +%Y-%m-%d)-${slug:-gpu}-train.jsonl"
md="${raw%.jsonl}.md"
commit=${KILN_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
echo "{\"side\": \"env-host\", \"commit\": \"$commit\", \"gpu\": \"$gpu\", \"steps\": $STEPS, \"reps\": $REPS, \"calls\": $CALLS}" >>"$raw"

# row KIND SAMPLE MODE DTYPE: one process, its JSON line appended (a
# timeout or a crash is a row with that error)
row() {
    kind=$1 s=$2 m=$3 d=$4
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "{\"side\": \"$kind\", \"sample\": \"$s\", \"mode\": \"$m\", \"dtype\": \"$d\", \"error\": \"skipped: BUDGET_S ran out\"}" >>"$raw"
        return
    fi
    say "$kind $s $m $d"
    if [ "$kind" = torch ]; then
        EXPORT_DIR="$work" timeout "$ROW_TIMEOUT" "$PYTHON" bench/torch_train.py row "$s" "$m" "$d" >"$work/row.json" 2>"$work/row.err"
    else
        KILN_TRAIN_REF="$work" timeout "$ROW_TIMEOUT" "$KILN" bench/kiln_train.lua "$s" "$m" "$d" >"$work/row.json" 2>"$work/row.err"
    fi
    rc=$?
    if [ $rc -eq 0 ] && [ -s "$work/row.json" ]; then
        tail -1 "$work/row.json" >>"$raw"
    else
        why=$(tail -3 "$work/row.err" | tr '"\\\n' "'/ " | cut -c1-300)
        [ $rc -eq 124 ] && why="timeout after $ROW_TIMEOUT s"
        echo "{\"side\": \"$kind\", \"sample\": \"$s\", \"mode\": \"$m\", \"dtype\": \"$d\", \"error\": \"exit $rc: $why\"}" >>"$raw"
    fi
}

for s in $(commas "$SAMPLES"); do for d in $(commas "$DTYPES"); do row torch "$s" eager "$d"; done; done
for s in $(commas "$SAMPLES"); do for d in $(commas "$DTYPES"); do for m in $(commas "$KILN_MODES"); do
    row kiln "$s" "$m" "$d"
done; done; done
for m in $(commas "$TORCH_MODES"); do
    [ "$m" = eager ] && continue
    for s in $(commas "$SAMPLES"); do for d in $(commas "$DTYPES"); do row torch "$s" "$m" "$d"; done; done
done
"$PYTHON" bench/train_report.py "$raw" >"$md" && cat "$md"
say "rows in $raw, tables in $md"
