#!/bin/sh
# progress_piped.sh: the progress lines of :time and :bench (issue 16,
# item 7) are for a terminal: a run longer than a second with stderr piped
# prints none (t/repl_pty.c checks that a terminal gets them), and the
# results are printed as before.
# Run by prove through t/run, which sets $KILN.
. "$(dirname "$0")/lib/tap.sh"

[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
export TMPDIR="$tmp" KILN_CACHE_DIR="$tmp/cache"

start=$(date +%s)
printf 'kiln.session.small = true\n:load samples/transformer_block.lua\n:time 150\n:bench 40\n' |
    "$KILN" >"$tmp/out" 2>"$tmp/err"
rc=$?
took=$(( $(date +%s) - start ))
out=$(cat "$tmp/out")
err=$(cat "$tmp/err")
is "$rc" 0 ":time and :bench with piped output succeed"
# the check below means something only if they ran past the one second
is "$([ "$took" -ge 2 ] && echo long)" long "they ran long enough for a progress line on a terminal (${took} s)"
like "$out" "us per call (device)" ":time prints its table"
like "$out" "compiled ms" ":bench prints its table"
case "$err$out" in
    *":time ["*|*":bench "*"["*|*"[K"*) fail "no progress line or terminal control in piped output" ;;
    *) pass "no progress line or terminal control in piped output" ;;
esac
echo "1..$n"
[ "$failed" -eq 0 ]
