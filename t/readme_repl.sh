#!/bin/sh
# readme_repl.sh: README.md as a new user meets it (issue 16 item 9):
#  * every ```lua block, pasted line by line into the REPL (kiln's standard
#    input), runs without an error and makes the files it names;
#  * the tour's : commands run in the REPL without an error;
#  * `kiln FILE.lua` on a model file says what to do with it; `kiln -i
#    FILE.lua` loads it, so :run works; -i on a plain script still runs it;
#  * README and docs/ never send users to ../shared; the docs README links
#    exist; docs/repl.md has every command of :help, and docs/logs.md's
#    KILN_LOGS names are the ones kiln.log accepts.
# Run by prove through t/run, which sets $KILN.
. "$(dirname "$0")/lib/tap.sh"

[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
root=$(pwd)
export KILN_CACHE_DIR="$tmp/cache"
export KILN_DEVICE=cpu

# the README's ```lua blocks, in order
awk '/^```lua$/ {on = 1; next} /^```$/ {on = 0} on' README.md >"$tmp/snippets.lua"
lines=$(wc -l <"$tmp/snippets.lua")
[ "$lines" -gt 5 ] && pass "README has Lua snippets ($lines lines)" || fail "README has Lua snippets" "got $lines lines"
(cd "$tmp" && "$KILN" <snippets.lua >out 2>err)
rc=$?
is "$rc" 0 "README's Lua snippets run in the REPL (exit status 0: no line failed)"
# the snippet with a graph break is told once that it re-traces (a note,
# not an error); anything else on stderr is
is "$(grep -v 're-traces on every call' "$tmp/err")" "" "and print nothing else on stderr (no error, no recompile)"
grep -q 'f re-traces on every call (1 graph break at stdin:' "$tmp/err" &&
  pass "the snippet with a break gets the re-trace note" || fail "the snippet with a break gets the re-trace note" "$(cat "$tmp/err")"
[ -s "$tmp/fused.svg" ] && pass "kiln.render wrote fused.svg" || fail "kiln.render wrote fused.svg"
[ -s "$tmp/report.html" ] && pass "kiln.report wrote report.html" || fail "kiln.report wrote report.html"
like "$(cat "$tmp/out")" "10	f32" "the first snippet prints the output's size and dtype"

# the tour: the : lines of the block after "A short tour"
awk '/A short tour/ {t = 1} t && /^```$/ {if (on) exit; on = 1; next} on' README.md >"$tmp/tour.txt"
like "$(cat "$tmp/tour.txt")" ":load samples/breaks.lua" "the tour loads a sample"
ln -s "$root/samples" "$tmp/samples"
(cd "$tmp" && "$KILN" <tour.txt >tour.out 2>tour.err)
rc=$?
is "$rc" 0 "the tour's commands run in the REPL without an error"
like "$(cat "$tmp/tour.out")" "Graph break in user code at samples/breaks.lua:14" "the tour shows the break"
[ -s "$tmp/session.html" ] && pass ":report wrote session.html" || fail ":report wrote session.html" "$(cat "$tmp/tour.err")"

# a model file as a script, and with -i
out=$("$KILN" samples/gcn.lua 2>&1)
rc=$?
is "$out" "samples/gcn.lua returns a model (gcn): use \`kiln -i samples/gcn.lua\` or \`:load samples/gcn.lua\` in the REPL to run it" \
    "kiln FILE.lua on a model file says what to do"
is "$rc" 0 "and succeeds"
out=$(printf ':run 2\n' | "$KILN" -i samples/breaks.lua 2>&1)
rc=$?
like "$out" "loaded breaks from samples/breaks.lua: 612 parameters" "kiln -i FILE loads the model"
like "$out" "output {8,4} f32 · 2 runs · " ":run works after -i"
is "$rc" 0 "kiln -i FILE with :run succeeds"
printf 'print("plain script")\n' >"$tmp/plain.lua"
out=$(printf 'print(1 + 1)\n' | "$KILN" -i "$tmp/plain.lua" 2>&1)
is "$out" "plain script
2" "-i on a script that returns nothing runs it, then the REPL"
out=$(printf ':run\n' | "$KILN" -i "$tmp/plain.lua" 2>&1)
like "$out" "no model loaded (use :load FILE.lua)" "and loads no model"

# the docs
if grep -rn '\.\./shared' README.md docs samples >/dev/null; then
    fail "no ../shared in README, docs/ or samples/" "$(grep -rn '\.\./shared' README.md docs samples)"
else
    pass "no ../shared in README, docs/ or samples/"
fi
missing=""
for f in $(grep -o 'docs/[a-z_-]*\.md' README.md | sort -u); do
    [ -f "$f" ] || missing="$missing $f"
done
is "$missing" "" "every docs/ file README names exists"
for f in docs/lua-api.md docs/repl.md docs/messages.md docs/modes.md docs/logs.md; do
    [ -s "$f" ] && pass "$f is there" || fail "$f is there"
done
cmds=$("$KILN" -e 'io.write(kiln.repl.help_text())' | sed -n 's/^  :\([a-z_-]*\).*/\1/p')
missing=""
for c in $cmds; do
    grep -q "\`:$c" docs/repl.md || missing="$missing :$c"
done
is "$missing" "" "docs/repl.md describes every command :help lists ($(echo $cmds | wc -w) commands)"
names=$(sed -n 's/^| `\([a-z_]*\)` |.*/\1/p' docs/logs.md)
is "$(echo $names | wc -w)" 12 "docs/logs.md lists 12 KILN_LOGS names"
bad=""
for w in $names; do
    # read from KILN_LOGS at start-up only: kiln.log refuses them, by design
    [ "$w" = library ] || [ "$w" = nvrtc ] && continue
    "$KILN" -e "kiln.log{'$w'}" >/dev/null 2>&1 || bad="$bad $w"
done
is "$bad" "" "kiln.log accepts each name docs/logs.md lists"

echo "1..$n"
[ "$failed" -eq 0 ]
