#!/bin/sh
# hostile_lua.sh: issue 14, class 1, the cases that need a FIFO or a signal
# (the rest are in hostile_lua.lua). A FIFO where kiln expects a file must
# be refused, not block kiln forever; a SIGTERM during a C compile must not
# leave the compiler running or its temporary folder behind.
# Run by prove through t/run, which sets $KILN.
. "$(dirname "$0")/lib/tap.sh"
[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
command -v mkfifo >/dev/null 2>&1 || { echo "1..0 # SKIP no mkfifo"; exit 0; }

# A FIFO given as a safetensors file: opening it for reading blocked until
# a writer came, that is forever. (timeout: a hang fails instead of hanging.)
mkfifo "$tmp/weights.safetensors"
out=$(cd "$tmp" && timeout 20 "$KILN" -e 'print(pcall(kiln.load_safetensors, "weights.safetensors"))' 2>&1)
like "$out" "false" "load_safetensors of a FIFO returns an error"
like "$out" "weights.safetensors: not a regular file" "which names the file and what is wrong"

# A FIFO left in the kernel cache where an entry belongs: a miss, the kernel
# compiled again, the entry replaced.
PROG='local f = kiln.compile(function(x) return (x + 1):relu() * 2 end)
local y = f(kiln.full({3}, -0.5))
local j = kiln.jit_stats()
print(string.format("%g %g %d", y:tolist()[1], y:tolist()[3], j.hits))'
mkdir "$tmp/cache"
first=$(KILN_CACHE_DIR="$tmp/cache" timeout 60 "$KILN" -e "$PROG" 2>&1)
is "$first" "1 1 0" "first process compiles the kernel: relu(-0.5 + 1) * 2"
entry=$(ls "$tmp/cache"/*.kjit 2>/dev/null | head -n 1)
if [ -n "$entry" ]; then
    rm -f "$entry" && mkfifo "$entry"
    second=$(KILN_CACHE_DIR="$tmp/cache" timeout 20 "$KILN" -e "$PROG" 2>&1)
    is "$second" "1 1 0" "a FIFO as the cache entry: a miss, compiled again, same result"
    if [ -f "$entry" ] && [ ! -p "$entry" ]; then pass "the FIFO is replaced by a regular entry"
    else fail "the FIFO is replaced by a regular entry" "$(ls -l "$entry")"; fi
else
    fail "a cache entry was written" "$(ls -la "$tmp/cache")"
fi

echo "1..$n"
[ "$failed" -eq 0 ]
