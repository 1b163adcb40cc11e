#!/bin/sh
# capture_repl.sh: the REPL's capture commands (:explain, :breaks,
# :recompiles, :guards; docs/repl.md) on samples/breaks.lua through
# kiln's standard input, with the message formats of section 4; and
# KILN_LOGS=graph_breaks,recompiles on a script, exact stderr.
# Run by prove through t/run, which sets $KILN.
. "$(dirname "$0")/lib/tap.sh"

# feed INPUT: run kiln with INPUT on stdin; sets out, err, rc. "Compile
# time" lines and :run's timings vary: they are replaced by fixed text.
feed() {
    printf '%s' "$1" | "$KILN" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    out=$(sed -e 's/^Compile time: .*/Compile time: (varies)/' -e 's/^Call time: .*/Call time: (varies)/' \
              -e 's/^first call (compiling): .*/first call (compiling): (varies)/' \
              -e 's/^\(recompiled.*)\): [0-9.]* m\{0,1\}s$/\1: (varies)/' \
              -e 's/ · [0-9.]* ms per call (min [0-9.]*) · / · (time) · /' "$tmp/out")
    err=$(cat "$tmp/err")
}

[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
dev=$("$KILN" -e 'io.write(kiln.default_device())' 2>/dev/null)

NOTE="(mode eager: compiled with mode default for this inspection; :run stays eager)"
BREAK="Graph break in user code at samples/breaks.lua:14
  Reason: data-dependent control flow: Tensor.__lt needs the value of a traced tensor
  Hint: keep the branch inside the graph with kiln.where, or move it out of the compiled function
  User stack:
    samples/breaks.lua:14 in function 'forward'
    samples/breaks.lua:30 in function 'run'
    samples/breaks.lua:43 in function 'forward'"
REASON="data-dependent control flow at samples/breaks.lua:14: Tensor.__lt needs the value of a traced tensor
       from samples/breaks.lua:30
       from samples/breaks.lua:43"

# ---- :explain and :breaks in eager mode (compiled with mode default for the inspection)
feed ':load samples/breaks.lua
:explain
:breaks
'
is "$out" "loaded breaks from samples/breaks.lua: 612 parameters
$NOTE
Graph count: 3
Graph break count: 2
Op count: 18
Break reasons:
  1. $REASON
  2. $REASON
Ops per graph: 6, 8, 4
Compile time: (varies)
Call time: (varies)
$NOTE
$BREAK" ":explain prints the report, :breaks the break with its user stack (exact text)"
is "$rc" 0 "... exit status 0"
is "$err" "" "... nothing on stderr"
if grep -Eq '^Compile time: [0-9]+\.[0-9]{2} s \(capture [0-9]+\.[0-9]{2}, passes [0-9]+\.[0-9]{2}, codegen [0-9]+\.[0-9]{2}, backend compile [0-9]+\.[0-9]{2}( \([0-9]+ of [0-9]+ kernels? from the cache\))?\)$' "$tmp/out"; then
    pass ":explain's compile time line has the design's format"
else
    fail ":explain's compile time line has the design's format" "got:" "$(grep '^Compile time' "$tmp/out")"
fi

# ---- :recompiles and :guards: none, then a mode change recompiles each graph
feed ':load samples/breaks.lua
:recompiles
:mode default
:run
:recompiles
:mode max-autotune
:run
:recompiles
'
is "$out" "loaded breaks from samples/breaks.lua: 612 parameters
$NOTE
no recompilations
mode: default
first call (compiling): (varies)
output {8,4} f32 · 1 run · (time) · default on $dev
no recompilations
mode: max-autotune
recompiled 3 graphs (mode changed: default -> max-autotune): (varies)
output {8,4} f32 · 1 run · (time) · max-autotune on $dev
Recompiling forward (samples/breaks.lua:42), graph 0, version 1
  triggered by the guard failure(s):
  - 0/0: mode changed: default -> max-autotune
Recompiling forward (samples/breaks.lua:42), graph 1, version 1
  triggered by the guard failure(s):
  - 1/0: mode changed: default -> max-autotune
Recompiling forward (samples/breaks.lua:42), graph 2, version 1
  triggered by the guard failure(s):
  - 2/0: mode changed: default -> max-autotune" ":recompiles: 'no recompilations', then one entry per graph after :mode (exact text)"
is "$rc" 0 "... exit status 0"

feed ':load samples/breaks.lua
:mode default
:guards
'
is "$(printf '%s\n' "$out" | sed -n '3,10p')" "Guards of forward (samples/breaks.lua:42), graph 0, version 0:
  mode default
  tensor 'x' shape {8, 16} dtype f32 device $dev contiguous
  parameter 'blocks.1.fc.weight' shape {16, 16} dtype f32 device $dev contiguous, same object, requires_grad
  parameter 'blocks.1.fc.bias' shape {16} dtype f32 device $dev contiguous, same object, requires_grad
  number at samples/breaks.lua:14 == 0.25
  graph structure: 10 nodes, 6 ops
Guards of forward (samples/breaks.lua:42), graph 1, version 0:" ":guards compiles and runs the model once, then lists graph 0's guards"
like "$out" "Guards of forward (samples/breaks.lua:42), graph 2, version 0:
  mode default" ":guards lists every graph"
case $out in *"mode eager"*) fail ":guards in a compiled mode prints no eager note" "$out" ;; *) pass ":guards in a compiled mode prints no eager note" ;; esac

# ---- a size change through :run recompiles, and :recompiles says why
feed ':load samples/breaks.lua
:mode default
:run
kiln.session.small = true
:run
:recompiles
'
like "$out" "output {2,4} f32 · 1 run · " "kiln.session.small = true: the second :run has a batch of 2"
like "$out" "Recompiling forward (samples/breaks.lua:42), graph 0, version 1
  triggered by the guard failure(s):
  - 0/0: tensor 'x' size mismatch at dim 1: expected 8, actual 2" ":recompiles names the failed size guard"

# ---- no breaks; Lua functions; errors
feed 'kiln.session.small = true
:load samples/simple_linear.lua
:breaks
'
like "$out" "$NOTE
no graph breaks" ":breaks on a model without breaks says so"
feed ':load samples/breaks.lua
return #kiln.cmd.breaks(), kiln.cmd.breaks()[1].where, #kiln.cmd.recompiles(), #kiln.cmd.guards()
'
like "$out" "1	samples/breaks.lua:14	0	3" "kiln.cmd.breaks/recompiles/guards return cm:breaks(), cm:recompiles(), cm:guards()"
feed 'kiln.explain_quiet = true
:load samples/breaks.lua
r = kiln.cmd.explain()
r.graph_count, r.graph_break_count, kiln.explain_quiet
'
like "$out" "Graph count: 3" ":explain prints the report even with kiln.explain_quiet set"
like "$out" "3	2	true" "kiln.cmd.explain() returns the report and leaves kiln.explain_quiet as it was"
for c in explain breaks recompiles guards; do
    feed ":$c
"
    is "$err" "no model loaded (use :load FILE.lua)" ":$c with no model loaded says so"
    is "$rc" 1 "... and is a failure"
done
feed ':help
'
like "$out" ":explain " ":help lists :explain"
like "$out" ":breaks " ":help lists :breaks"
like "$out" ":recompiles " ":help lists :recompiles"
like "$out" ":guards " ":help lists :guards"
feed ':help breaks
'
like "$out" "user stack, innermost first" ":help breaks gives the details"

# ---- KILN_LOGS=graph_breaks,recompiles on a script: exact stderr
cat >"$tmp/script.lua" <<'EOF'
local function f(x, scale)
  local y = x * scale
  if y:sum() < 0 then y = -y end
  return y + 1
end
local cm = kiln.compile(f)
cm(kiln.ones({4}, {device = "cpu"}), 0.5)
cm(kiln.ones({4}, {device = "cpu"}), 0.25)
cm(kiln.ones({4}, {device = "cpu"}), 0.25)
print("done")
EOF
out=$(KILN_LOGS=graph_breaks,recompiles "$KILN" "$tmp/script.lua" 2>"$tmp/err")
rc=$?
is "$(cat "$tmp/err")" "Graph break in user code at $tmp/script.lua:3
  Reason: data-dependent control flow: Tensor.__lt needs the value of a traced tensor
  Hint: keep the branch inside the graph with kiln.where, or move it out of the compiled function
  User stack:
    $tmp/script.lua:3 in function 'f'
    $tmp/script.lua:7 in main chunk
Recompiling f ($tmp/script.lua:1), graph 0, version 1
  triggered by the guard failure(s):
  - 0/0: number 'scale' at $tmp/script.lua:2 changed: 0.5 -> 0.25
  number 'scale' at $tmp/script.lua:2 is dynamic from now on" \
    "KILN_LOGS=graph_breaks,recompiles: the break once, then the recompilation, on stderr (exact text)"
is "$out" "done" "... stdout has only the script's output"
is "$rc" 0 "... exit status 0"
out=$("$KILN" "$tmp/script.lua" 2>"$tmp/err")
is "$(cat "$tmp/err")" "" "without KILN_LOGS the same script prints nothing on stderr"
out=$(KILN_LOGS= "$KILN" -e 'kiln.log{"graph_breaks"}' "$tmp/script.lua" 2>"$tmp/err")
like "$(cat "$tmp/err")" "Graph break in user code at $tmp/script.lua:3" "kiln.log{...} turns logs on from Lua"

echo "1..$n"
[ "$failed" -eq 0 ]
