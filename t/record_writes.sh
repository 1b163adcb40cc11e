#!/bin/sh
# record_writes.sh: t/lib/record_writes.lua with KILN_RECORD_WRITES=1 (the
# switch is read once a process): a training step's recording that writes
# the parameters and the optimizer's state itself, against eager steps, on
# the GPU (a TAP skip without one). Run by prove through t/run, which sets $KILN.
[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
KILN_RECORD_WRITES=1 exec "$KILN" t/lib/record_writes.lua
