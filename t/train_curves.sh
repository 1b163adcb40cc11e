#!/bin/sh
# train_curves.sh: the training samples against PyTorch's loss curves
# (t/lib/train_curves.lua), on the CPU also where there is a GPU: PyTorch's
# curves were made on the CPU, where both sides' sums are deterministic
# (bench/train_bench.sh compares the GPU's curves, at full size).
# Run by prove through t/run, which sets $KILN.
[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
KILN_DEVICE=cpu exec "$KILN" t/lib/train_curves.lua
