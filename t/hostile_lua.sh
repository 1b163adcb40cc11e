#!/bin/sh
# hostile_lua.sh: issue 14, class 1, the cases that need a FIFO or a signal
# (the rest are in hostile_lua.lua). A FIFO where kiln expects a file must
# be refused, not block kiln forever; a SIGTERM during a C compile must not
# leave the compiler running or its temporary folder behind.
# Run by prove through t/run, which sets $KILN.
. "$(dirname "$0")/lib/tap.sh"
[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
command -v mkfifo >/dev/null 2>&1 || { echo "1..0 # SKIP no mkfifo"; exit 0; }
# The kernel cache and compiler cases are the C compiler's (the CPU
# backend), also on a machine with a GPU.
export KILN_DEVICE=cpu

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

# SIGTERM while the C compiler runs. The compiler is in its own process
# group (Ctrl-C is kiln's), so it did not get the signal: it ran on as an
# orphan and its kiln-jit-* folder stayed. $CC here is a wrapper that notes
# its process group and takes its time, so the signal surely lands mid-compile.
mkdir "$tmp/tmpdir" "$tmp/cache2"
cat >"$tmp/slow_cc.sh" <<'CC'
case "$1" in --version) exec cc "$@" ;; esac
ps -o pgid= -p $$ | tr -d ' ' >"$SLOW_CC_PGID"
sleep 60
exec cc "$@"
CC
SLOW_CC_PGID="$tmp/cc.pgid" CC="sh $tmp/slow_cc.sh" TMPDIR="$tmp/tmpdir" KILN_CACHE_DIR="$tmp/cache2" \
    "$KILN" -e 'local f = kiln.compile(function(x) return (x * 3 + 1):relu() end)
print(f(kiln.ones({4})))' >"$tmp/slow.out" 2>&1 &
kiln_pid=$!
i=0
while [ ! -s "$tmp/cc.pgid" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
pgid=$(cat "$tmp/cc.pgid" 2>/dev/null)
if [ -n "$pgid" ]; then pass "the compiler started (group $pgid)"; else fail "the compiler started" "$(cat "$tmp/slow.out")"; fi
jit_dirs_during=$(ls "$tmp/tmpdir" | grep -c '^kiln-jit-')
is "$jit_dirs_during" 1 "one kiln-jit-* folder while it compiles"
kill -TERM "$kiln_pid"
{ wait "$kiln_pid"; } 2>/dev/null # the shell's "Terminated" notice is expected here
status=$?
is "$status" 143 "kiln dies of the SIGTERM (status 128 + 15)"
sleep 0.2
left=""
# (a zombie runs no more: its new parent reaps it in its own time)
[ -n "$pgid" ] && left=$(ps -eo pgid=,pid=,stat=,args= | awk -v g="$pgid" '$1 == g && $3 !~ /^Z/')
is "$left" "" "no process of the compiler's group is left"
is "$(ls "$tmp/tmpdir" | grep -c '^kiln-jit-')" 0 "no kiln-jit-* folder is left"
[ -n "$pgid" ] && kill -s KILL -- "-$pgid" 2>/dev/null

echo "1..$n"
[ "$failed" -eq 0 ]
