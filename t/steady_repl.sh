#!/bin/sh
# steady_repl.sh: what the REPL says that must not mislead (issue 32 items 4
# and 8), through kiln's standard input as a script would feed it: :run and
# :bench time a call that compiled (a first call, a recompile after a shape
# change or a changed number) apart from the steady state and say what it
# compiled; :help fits in 100 columns; piped input gets no banner; and
# KILN_LOGS=passes tags its lines with the pass and says "(unchanged)"
# instead of printing the same graph again.
# Run by prove through t/run, which sets $KILN.
. "$(dirname "$0")/lib/tap.sh"
KILN_CACHE_DIR="$tmp/cache"
export KILN_CACHE_DIR

# feed INPUT: run kiln with INPUT on stdin; sets out, err, rc.
feed() {
    printf '%s' "$1" | "$KILN" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
}
# matches GOT ERE NAME: some line of GOT matches the extended regex
matches() {
    if printf '%s\n' "$1" | grep -Eq "$2"; then pass "$3"; else fail "$3" "got:" "$1" "to have a line matching:" "$2"; fi
}

[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
dev=$("$KILN" -e 'io.write(kiln.default_device())' 2>/dev/null)

# ---- :run after a shape change: the recompiling call is timed apart --------
# inputs() gives a batch of 8 the first time, then 2: the second :run's
# first call recompiles (x dim 1: 8 -> 2)
cat >"$tmp/grow.lua" <<'LUA'
local kiln = rawget(_G, "kiln") or require("kiln")
local n = 0
kiln.nn.manual_seed(0)
local lin = kiln.nn.Linear(64, 64)
return { name = "grow", model = lin, inputs = function(o)
  n = n + 1
  return { kiln.randn({ n == 1 and 8 or 2, 64 }, { seed = 0, device = o.device }) }
end }
LUA
feed ":load $tmp/grow.lua
:mode default
:run 2
r = kiln.cmd.run(2)
print('runs', r.runs, #r.times_ms, #r.compiles, r.compiles[1].what)
print('calls', kiln.session.compiled:stats().calls)
"
is "$rc" 0 ":run twice across a shape change: exit status 0"
is "$err" "" "... nothing on stderr"
T='[0-9]+\.[0-9]+ m?s'
matches "$out" "^first call \(compiling\): $T$" ":run: the first call is timed apart as the compile"
matches "$out" "^recompiled \(x dim 1: 8 -> 2\): $T$" ":run after a shape change: the recompile, what changed and its time"
matches "$out" "^output \{2,64\} f32 · 2 runs · [0-9.]+ ms per call \(min [0-9.]+\) · default on $dev$" \
    "... then 2 runs that compiled nothing, timed"
like "$out" "runs	2	2	1	recompiled (x dim 1: 8 -> 2)" \
    "kiln.cmd.run: runs and times_ms count the steady calls; compiles lists the one that compiled"
like "$out" "calls	6" "the compiled model ran 6 times: 2 compiles and 4 timed calls"
line=$(printf '%s\n' "$out" | grep -n '^recompiled' | cut -d: -f1)
next=$(printf '%s\n' "$out" | sed -n "$((line + 1))p")
case $next in output*) pass "the recompile line comes before the output line of its :run" ;;
    *) fail "the recompile line comes before the output line of its :run" "got:" "$out" ;; esac

# ---- a number that changes: the recompile on the second call is apart ------
cat >"$tmp/stepper.lua" <<'LUA'
local kiln = rawget(_G, "kiln") or require("kiln")
local lr = 0.5
local function step(x)
  lr = lr * 0.9
  return x * lr
end
return { name = "stepper", model = step, inputs = function() return { kiln.ones({2, 2}) } end }
LUA
feed ":load $tmp/stepper.lua
:mode default
:run 3
"
is "$rc" 0 ":run 3 of a function whose number changes: exit status 0"
matches "$out" "^first call \(compiling\): $T$" "... the first call compiles"
matches "$out" "^recompiled \(lr \($tmp/stepper.lua:5\): 0\.45 -> 0\.405\): $T$" \
    "... the second recompiles (the number becomes dynamic): named with its line and values"
matches "$out" "^output \{2,2\} f32 · 3 runs · " "... and 3 calls that compiled nothing are timed"

# :bench: each mode's model is compiled afresh; its warm-up recompiles
feed ":load $tmp/stepper.lua
:bench 3
"
is "$rc" 0 ":bench of a function whose number changes: exit status 0"
for mode in default reduce-overhead max-autotune; do
    matches "$out" "^$mode: recompiled \(lr \($tmp/stepper.lua:5\): [0-9.]+ -> [0-9.]+\): $T$" \
        ":bench: $mode's recompile is printed under the table, apart from its figures"
done

# ---- :help fits in 100 columns ----------------------------------------------
feed ':help
'
widest=$(printf '%s\n' "$out" | awk '{ if (length($0) > w) w = length($0) } END { print w }')
if [ "$widest" -le 100 ]; then pass ":help fits in 100 columns (widest line: $widest)"
else fail ":help fits in 100 columns" "widest line: $widest" "$out"; fi
matches "$out" '^  :graph \[captured\|fused\] \[FILE.svg\|FILE.dot\|text\]$' \
    ":help: a usage too long for the column has a line of its own"
matches "$out" '^  :run \[n\]  +run the loaded model \(or training step\) n times' ":help: a short usage shares its line with the summary"

# ---- no banner on piped input -----------------------------------------------
feed '1+1
'
is "$out" "2" "piped input: no banner, only the results (the banner is for a terminal)"
banner=$("$KILN" -e 'io.write(kiln.repl.banner())')
matches "$banner" "^kiln [0-9.]+ \(Lua 5\.4\) · mode eager · device $dev" "the banner: version, mode, device"
matches "$banner" ':help for the commands' "... and where help is"

# ---- KILN_LOGS=passes --------------------------------------------------------
cat >"$tmp/passes.lua" <<'LUA'
local kiln = rawget(_G, "kiln") or require("kiln")
local cm = kiln.compile(function(x) return x:relu() + x:relu() end)
cm(kiln.ones({2, 3}))
LUA
KILN_LOGS=passes "$KILN" "$tmp/passes.lua" >"$tmp/out" 2>"$tmp/err"
rc=$?
err=$(cat "$tmp/err")
is "$rc" 0 "KILN_LOGS=passes: the script runs"
untagged=$(printf '%s\n' "$err" | grep -cv '^\[passes:[a-z_]*\] ')
is "$untagged" 0 "every line of the passes log is tagged with its pass"
matches "$err" '^\[passes:capture\] [0-9]+ nodes, [0-9]+ ops$' "the captured graph comes first, with its size"
matches "$err" '^\[passes:dce\] \(unchanged\)$' "a pass that changed nothing says (unchanged)"
matches "$err" '^\[passes:cse\] [0-9]+ nodes, [0-9]+ ops$' "a pass that changed the graph prints it (cse merges the two relus)"
matches "$err" '^\[passes:cse\] +[0-9]+  relu ' "... its node lines tagged too"
relus=$(printf '%s\n' "$err" | grep -c '^\[passes:capture\] .* relu ')
is "$relus" 2 "the captured graph has both relus"

echo "1..$n"
[ "$failed" -eq 0 ]
