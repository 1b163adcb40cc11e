#!/bin/sh
# k_major_weights.sh: the k_major_weights pass (core/compiler/kn_pass_k_major.c)
# on the CPU, where plans leave it off unless KILN_CPU_K_MAJOR_WEIGHTS is
# set (on Hopper the CUDA backend asks for it per matmul shape):
# t/lib/k_major_weights.lua.
# Run by prove through t/run, which sets $KILN.
[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
KILN_DEVICE=cpu KILN_CPU_K_MAJOR_WEIGHTS=1 exec "$KILN" t/lib/k_major_weights.lua
