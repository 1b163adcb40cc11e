#!/bin/sh
# repl_stdin.sh: the kiln program without a terminal: Lua lines and
# :commands piped into it, -e, scripts with their arg table, --help and
# --version, exit statuses, Ctrl-C (SIGINT) during a running chunk.
# Run by prove through t/run, which sets $KILN.
. "$(dirname "$0")/lib/tap.sh"
# unlike GOT SUBSTRING NAME
unlike() {
    case $1 in *"$2"*) fail "$3" "got:" "$1" "not to contain:" "$2" ;; *) pass "$3" ;; esac
}
skip() { n=$((n + 1)); echo "ok $n # skip $1"; }

# feed INPUT [ARGS...]: run kiln with INPUT on stdin; sets out, err, rc.
feed() {
    input=$1
    shift
    out=$(printf '%s' "$input" | "$KILN" "$@" 2>"$tmp/err")
    rc=$?
    err=$(cat "$tmp/err")
}
# run ARGS...: run kiln with no input; sets out, err, rc.
run() {
    out=$("$KILN" "$@" </dev/null 2>"$tmp/err")
    rc=$?
    err=$(cat "$tmp/err")
}

[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
# the default device (cpu, or cuda with a GPU): where :run puts the inputs
dev=$("$KILN" -e 'io.write(kiln.default_device())' 2>/dev/null)
[ -n "$dev" ] || dev="(kiln.default_device() failed)"

# ---- --version, --help
run --version
is "$out" "kiln 0.1.0 (Lua 5.4)" "--version prints the version"
is "$rc" 0 "--version exits 0"
run --help
is "$rc" 0 "--help exits 0"
like "$out" "-e code" "--help names -e"
like "$out" "-i " "--help names -i"
like "$out" "--version" "--help names --version"
like "$out" ":load FILE.lua" "--help lists the :load command"
like "$out" ":run [n]" "--help lists the :run command"
run --no-such-option
is "$rc" 1 "an unknown option exits 1"
like "$err" "unrecognized option '--no-such-option'" "... and says which"

# ---- lines on stdin
feed '1+1
'
is "$out" "2" "an expression prints its value"
is "$rc" 0 "no failure: exit 0"
feed 'return 1, "a", nil
'
is "$out" "1	a	nil" "several values print tab-separated"
feed '{1, 2, {a = 1, b = "x"}}
'
is "$out" '{1, 2, {a = 1, b = "x"}}' "a table prints as a constructor"
feed 'x = 5
x * 2
'
is "$out" "10" "a statement prints nothing; globals persist between lines"
feed 'function f(a)
  local b = a * 2
  return b
end
f(21)
'
is "$out" "42" "a multi-line chunk is read until complete"
is "$rc" 0 "... and exits 0"
feed 'print("a")
error("boom")
print("b")
'
is "$out" "a
b" "a failing line does not stop the next ones"
like "$err" "stdin:2: boom" "the error names the line of stdin"
like "$err" "stack traceback" "the error has a traceback"
is "$rc" 1 "a failing line makes the exit status 1"
feed 'x = = 1
print("after")
'
like "$err" "stdin:1:" "a syntax error names its line"
is "$out" "after" "processing goes on after a syntax error"
is "$rc" 1 "a syntax error makes the exit status 1"
feed 'for i = 1, 2 do
'
like "$err" "'end' expected" "input that ends inside a chunk is an error"
is "$rc" 1 "... with exit status 1"

# ---- commands
feed ':foo
'
is "$err" "unknown command ':foo' (try :help)" "an unknown command says so, without a traceback"
is "$rc" 1 "an unknown command is a failure"
feed ':help
'
like "$out" ":load FILE.lua" ":help lists :load"
like "$out" ":mode [MODE]" ":help lists :mode"
like "$out" ":device" ":help lists :device"
is "$rc" 0 ":help exits 0"
feed ':help run
'
like "$out" "small = kiln.session.small" ":help run gives the details"
feed ':help nothing
'
is "$err" "unknown command ':nothing' (try :help)" ":help of an unknown command"
feed ':run
'
is "$err" "no model loaded (use :load FILE.lua)" ":run with no model loaded"
is "$rc" 1 "... fails"
feed ':mode
:mode eager
'
is "$out" "mode: eager
mode: eager" ":mode shows and sets the mode"
feed ':mode turbo
'
like "$err" "unknown mode 'turbo' (known: eager, default," ":mode rejects an unknown mode"
if "$KILN" -e 'os.exit(kiln.compile and 0 or 1)' >/dev/null 2>&1; then
    skip "this build has kiln.compile: :mode default works"
else
    feed ':mode default
'
    like "$err" "mode 'default' needs kiln.compile" ":mode default without the compiler says why"
fi
feed ':device
'
like "$out" "CPU   " ":device shows the CPU"
like "$out" "CUDA  " ":device shows CUDA's state"
is "$rc" 0 ":device exits 0"
feed 'print(1)
:quit
print(2)
'
is "$out" "1" ":quit stops reading"
is "$rc" 0 ":quit after good lines exits 0"
feed 'error("x")
:quit
'
is "$rc" 1 ":quit after a failed line still exits 1"

# ---- a model file through :load and :run
cat >"$tmp/double.lua" <<'EOF'
return {
  name = "double",
  model = function(x) return x * 2 end,
  inputs = function(opts)
    local rows = opts.small and 1 or 4
    return {kiln.ones({rows, 3}, {device = opts.device, dtype = opts.dtype})}
  end,
}
EOF
feed ":load $tmp/double.lua
:run 2
kiln.session.small = true
:run
"
like "$out" "loaded double from $tmp/double.lua: a function" ":load reports the model"
like "$out" "output {4,3} f32 · 2 runs · " ":run 2 reports the output and the run count"
like "$out" "ms per call (min " ":run reports the time per call"
like "$out" "eager on $dev" ":run reports the mode and the default device"
like "$out" "output {1,3} f32 · 1 run · " "kiln.session.small = true reaches inputs(opts)"
is "$rc" 0 "the model pipeline exits 0"

if [ -f samples/simple_linear.lua ]; then
    feed ':load samples/simple_linear.lua
:mode eager
:run 3
'
    like "$out" "loaded " "the sample pipeline loads samples/simple_linear.lua"
    like "$out" "mode: eager" "the sample pipeline sets the mode"
    like "$out" "· 3 runs · " "the sample pipeline runs 3 times"
    is "$rc" 0 "the sample pipeline exits 0"
else
    skip "samples/simple_linear.lua is not there yet"
fi

# ---- -e
run -e 'print(1 + 1)'
is "$out" "2" "-e runs a chunk"
is "$rc" 0 "-e exits 0"
run -e 'x = 1 + 1'
is "$out" "" "-e prints no values"
run -e 'a = 20' -e 'print(a + 1)'
is "$out" "21" "several -e run in order"
run -e 'error("E")'
like "$err" "kiln: (command line):1: E" "a failing -e names the chunk"
is "$rc" 1 "a failing -e exits 1"
run -e
is "$rc" 1 "-e with no chunk exits 1"
run -e 'assert(require("kiln") == kiln); print(type(kiln.randn))'
is "$out" "function" "the global kiln is require 'kiln'"
feed 'a * 10
' -e 'a = 4' -i
is "$out" "40" "-i after -e reads the REPL lines"

# ---- scripts
cat >"$tmp/script.lua" <<'EOF'
print(select("#", ...), ...)
print(arg[0]:match("[^/]*$"), arg[1], arg[2], #arg)
print(kiln.version)
EOF
run "$tmp/script.lua" one two
is "$out" "2	one	two
script.lua	one	two	2
0.1.0" "a script gets its arguments as ... and in arg"
is "$rc" 0 "a good script exits 0"
printf 'local t = nil\nreturn t.x\n' >"$tmp/bad.lua"
run "$tmp/bad.lua"
like "$err" "kiln: $tmp/bad.lua:2:" "a failing script reports file:line"
like "$err" "stack traceback" "... with a traceback"
is "$rc" 1 "a failing script exits 1"
run "$tmp/no_such_script.lua"
like "$err" "cannot open" "a missing script is reported"
is "$rc" 1 "... and exits 1"

# ---- SIGINT during a running chunk
"$KILN" -e 'while true do end' </dev/null >/dev/null 2>"$tmp/err" &
pid=$!
sleep 1
kill -INT "$pid"
wait "$pid"
rc=$?
like "$(cat "$tmp/err")" "interrupted" "SIGINT stops a running -e chunk with 'interrupted'"
is "$rc" 1 "... and it exits 1"
printf 'while true do end\nprint("after")\n' >"$tmp/loop.txt"
"$KILN" <"$tmp/loop.txt" >"$tmp/out" 2>"$tmp/err" &
pid=$!
sleep 1
kill -INT "$pid"
wait "$pid"
rc=$?
like "$(cat "$tmp/err")" "interrupted" "SIGINT stops a running stdin line"
is "$(cat "$tmp/out")" "after" "... and the next line runs"
is "$rc" 1 "... and the exit status is 1"

echo "1..$n"
[ "$failed" -eq 0 ]
