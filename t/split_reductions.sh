#!/bin/sh
# split_reductions.sh: the reductions pass (core/compiler/kn_pass_reductions.c)
# on the CPU, where plans leave it off unless KILN_CPU_SPLIT_REDUCTIONS is
# set (the GPU runs it in every plan): t/lib/split_reductions.lua.
# Run by prove through t/run, which sets $KILN.
[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
KILN_DEVICE=cpu KILN_CPU_SPLIT_REDUCTIONS=1 exec "$KILN" t/lib/split_reductions.lua
