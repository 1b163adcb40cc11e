#!/bin/sh
# gathered_loads.sh: embedding lookups read inside the kernel that uses
# them (t/lib/gathered_loads.lua), on the CPU with KILN_CPU_GATHER_LOADS=1.
# Run by prove through t/run, which sets $KILN.
[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
KILN_CACHE_DIR="$tmp" KILN_CPU_GATHER_LOADS=1 exec "$KILN" t/lib/gathered_loads.lua
