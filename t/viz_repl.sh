#!/bin/sh
# viz_repl.sh: the REPL command :graph (issue 7; docs/repl.md) on
# samples/breaks.lua through kiln's standard input: the text outline, the
# temporary SVG, a named .svg or .dot file, the words collapse, lines and
# lr, the heat and the host's share after :time, and a clear error for a
# word it does not know.
# Run by prove through t/run, which sets $KILN.
. "$(dirname "$0")/lib/tap.sh"

[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
export TMPDIR="$tmp" KILN_CACHE_DIR="$tmp/cache"

# feed INPUT: run kiln with INPUT on stdin; sets out, err, rc
feed() {
    printf '%s' "$1" | "$KILN" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
}

feed ':load samples/breaks.lua
:graph captured text
'
is "$rc" 0 ":graph captured text succeeds"
like "$out" "(mode eager: compiled with mode default for this drawing; :run stays eager)" "an eager session says what it drew"
like "$out" "forward (samples/breaks.lua:42) · captured graph · mode default · 3 graphs, 2 breaks" "the outline's title"
like "$out" "break 1: data-dependent control flow at samples/breaks.lua:14: Tensor.__lt needs the value of a traced tensor" "the outline shows the break"
case $out in *"drew the"*) fail "text writes no picture" ;; *) pass "text writes no picture" ;; esac

feed ':load samples/breaks.lua
:graph
'
is "$rc" 0 ":graph succeeds"
like "$out" "fused graph" ":graph draws the fused view by default"
like "$out" "drew the fused view: $tmp/kiln-breaks-fused.svg" ":graph prints the temporary SVG's path"
svg=$(cat "$tmp/kiln-breaks-fused.svg" 2>/dev/null)
like "$svg" "<title>cluster_g0_k0</title>" "the temporary SVG holds the kernels"

feed ":load samples/breaks.lua
:graph captured $tmp/b.svg
:graph fused collapse lr $tmp/c.dot
"
is "$rc" 0 ":graph to named files succeeds"
like "$out" "wrote the captured view: $tmp/b.svg" ":graph FILE.svg says where"
like "$(cat "$tmp/b.svg" 2>/dev/null)" "<title>break1</title>" "the named SVG has the breaks"
dot=$(cat "$tmp/c.dot" 2>/dev/null)
like "$dot" "rankdir=LR" "lr: left to right"
like "$dot" "subgraph cluster_g0_k0 " "a .dot file holds DOT text"
case $out in *"graph 0 (version"*) fail "a named file prints no outline" ;; *) pass "a named file prints no outline" ;; esac

feed ":load samples/breaks.lua
:graph captured lines $tmp/lines.svg
"
is "$rc" 0 ":graph captured lines FILE.svg succeeds"
like "$(cat "$tmp/lines.svg" 2>/dev/null)" ">samples/breaks.lua:13</text>" "lines: each node's file:line in its label"

feed ':load samples/breaks.lua
:mode default
:time 3
:graph text
'
is "$rc" 0 ":time then :graph succeeds"
like "$out" " us per call in kernels" "after :time the outline has the kernels' times"
like "$out" "host overhead " "and the host's share of a call beside them"

feed ':load samples/breaks.lua
:graph bogus
'
[ "$rc" -ne 0 ] && pass "an unknown word fails" || fail "an unknown word fails"
like "$err" "unknown word 'bogus' for :graph (expected captured, fused, text, collapse, lines, lr, tb, or FILE.svg / FILE.dot)" "and says which words it knows"

feed ":load samples/breaks.lua
:graph $tmp/no/such/dir/x.svg
"
like "$err" "cannot write '$tmp/no/such/dir/x.svg': No such file or directory" "an unwritable file is named"

feed ':graph
'
like "$err" "no model loaded (use :load FILE.lua)" ":graph without a model"

feed ':help graph
'
like "$out" ":graph [captured|fused] [FILE.svg|FILE.dot|text]" ":help graph shows the usage"
like "$out" ":graph [VIEW] text       the outline only" ":help graph explains text"

echo "1..$n"
[ "$failed" -eq 0 ]
