#!/bin/sh
# record_writes.sh: t/lib/record_writes.lua twice, as the switch is read once
# a process: by default, where a training step's recording writes the
# parameters and the optimizer's state itself, and with KILN_RECORD_WRITES=0,
# where the caller copies them; both against eager steps, on the GPU (a TAP
# skip without one). Run by prove through t/run, which sets $KILN.
[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
# one TAP stream: each run's plan line is dropped and the total printed last
unset KILN_RECORD_WRITES
on=$("$KILN" t/lib/record_writes.lua) || { printf '%s\n' "$on"; echo "not ok - record_writes.lua (default) exited non-zero"; exit 1; }
off=$(KILN_RECORD_WRITES=0 "$KILN" t/lib/record_writes.lua) || { printf '%s\n' "$off"; echo "not ok - record_writes.lua (KILN_RECORD_WRITES=0) exited non-zero"; exit 1; }
case "$on" in "1..0"*) printf '%s\n' "$on"; exit 0;; esac
all=$(printf '%s\n%s\n' "$on" "$off" | grep -v '^1\.\.' | sed -E 's/^(not )?ok [0-9]+ /\1ok /')
printf '%s\n' "$all"
echo "1..$(printf '%s\n' "$all" | grep -cE '^(not )?ok')"
