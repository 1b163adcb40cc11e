#!/bin/sh
# cache_concurrency.sh: processes sharing one cache dir (issue 14): 8 kiln
# processes started at once, each autotuning (max-autotune-no-cudagraphs, on
# the CPU) a model of its own shape into ONE KILN_CACHE_DIR. Afterwards
# autotune.tsv holds every process's choices (a save merges under a lock
# instead of the last rename winning), parses cleanly, and a second round of
# processes takes every choice from it without measuring; every result
# equals eager.
# Run by prove through t/run, which sets $KILN.
. "$(dirname "$0")/lib/tap.sh"
ok() {
    if [ "$1" -eq 0 ]; then pass "$2"; else shift; fail "$@"; fi
}

[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }

N=8
cache="$tmp/cache"

# Process I: a pointwise and a row kernel on a {I+3, 8*I+24} input (each
# process its own shapes, so its own kernel signatures). Prints
# "tuned CACHE_HITS MEASURED KERNELS MAXDIFF": the kernels cm:autotune()
# lists, how many came from the file and how many were measured now, and
# the largest difference from eager (inf for NaN: NaN never passes).
CHUNK='local i = tonumber(os.getenv("PROC"))
kiln.config.autotune_budget_s = 20
local function f(x)
  local h = (x * 2 + 1):tanh()
  return kiln.softmax(h, -1) + h
end
local x = kiln.randn({i + 3, 8 * i + 24}, {seed = i, device = "cpu"})
local ref = f(x)
local cm = kiln.compile(f, {mode = "max-autotune-no-cudagraphs"})
local y = cm(x)
local d = (y - ref):abs():amax():item()
if d ~= d then d = math.huge end
local st = cm:stats()
print(string.format("tuned %d %d %d %.3g", st.autotune_cache_hits, st.autotune_kernels, #cm:autotune(), d))'

# round NAME: N processes at once; PROC's stdout+stderr in $tmp/NAME.PROC,
# its exit status in $tmp/NAME.PROC.rc
round() {
    i=1
    while [ $i -le $N ]; do
        (PROC=$i KILN_CACHE_DIR=$cache "$KILN" -e "$CHUNK" >"$tmp/$1.$i" 2>&1; echo $? >"$tmp/$1.$i.rc") &
        i=$((i + 1))
    done
    wait
}

round first
total=0
i=1
while [ $i -le $N ]; do
    out=$(cat "$tmp/first.$i")
    is "$(cat "$tmp/first.$i.rc")" 0 "first round, process $i: exit status 0"
    set -- $(printf '%s\n' "$out" | grep '^tuned ')
    [ "$#" -eq 5 ] && [ "$3" -ge 1 ] && [ "$4" -eq "$3" ]
    ok $? "first round, process $i measured all its tunable kernels" "got: $out"
    awk -v d="${5:-inf}" 'BEGIN { exit !(d + 0 == d && d < 1e-4) }'
    ok $? "first round, process $i: the compiled result equals eager (max diff ${5:-none})" "got: $out"
    total=$((total + ${3:-0}))
    i=$((i + 1))
done

file="$cache/autotune.tsv"
[ -f "$file" ]
ok $? "the processes wrote $file"
entries=$(grep -vc '^#' "$file")
is "$entries" "$total" "autotune.tsv holds every process's choices ($total measured in all)"
bad=$(grep -v '^#' "$file" | awk -F '\t' 'NF != 8 || length($1) != 16 || $1 ~ /[^0-9a-f]/ || length($2) != 16 || $2 ~ /[^0-9a-f]/ || ($6 != 0 && $6 != 1)' | head -3)
is "$bad" "" "every entry line parses: 8 tab-separated fields, two 16-hex-digit keys, pinned 0 or 1"
is "$(head -1 "$file")" "# kiln autotune cache v1" "the file starts with its magic line"
is "$(ls "$cache" | grep -c '\.tmp\.')" 0 "no temporary file is left in the cache dir"

round second
i=1
while [ $i -le $N ]; do
    out=$(cat "$tmp/second.$i")
    is "$(cat "$tmp/second.$i.rc")" 0 "second round, process $i: exit status 0"
    like "$out" "tuned " "second round, process $i printed its counts"
    set -- $(printf '%s\n' "$out" | grep '^tuned ')
    [ "$#" -eq 5 ] && [ "$2" -ge 1 ] && [ "$2" -eq "$4" ] && [ "$3" -eq 0 ]
    ok $? "second round, process $i took every choice from the file and measured none" "got: $out"
    awk -v d="${5:-inf}" 'BEGIN { exit !(d + 0 == d && d < 1e-4) }'
    ok $? "second round, process $i: the result equals eager (max diff ${5:-none})" "got: $out"
    case $out in *corrupt*) fail "second round, process $i: no corrupt-file report" "got: $out" ;;
    *) pass "second round, process $i: no corrupt-file report" ;; esac
    i=$((i + 1))
done

echo "1..$n"
[ "$failed" -eq 0 ]
