#!/bin/sh
# compile_cache.sh: the persistent compiled-kernel cache across processes
# (docs/lua-api.md, kiln.config.cache_dir / $KILN_CACHE_DIR): a first
# process compiles and fills the cache, a second starts from it; a corrupt
# entry is reported and rebuilt with the same results; processes started at
# once on an empty cache all succeed with the same results.
# Run by prove through t/run, which sets $KILN.
. "$(dirname "$0")/lib/tap.sh"
# ok CONDITION-EXIT-STATUS NAME DIAG...: pass when the previous test command succeeded
ok() {
    if [ "$1" -eq 0 ]; then pass "$2"; else shift; fail "$@"; fi
}

[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }

# One process: compile samples/transformer_block.lua (small, on the CPU) and
# print "misses hits corrupt checksum", where the checksum is the sum of the
# output with 6 decimals.
CHUNK='kiln.session.small = true
local s = dofile("samples/transformer_block.lua")
if kiln.default_device() ~= "cpu" then s.model:to("cpu") end
local cm = kiln.compile(s.model)
local y = cm(s.inputs({small = true, device = "cpu"})[1])
local j = kiln.jit_stats()
print(j.misses, j.hits, j.corrupt, string.format("%.6f", y:sum():item()))'

# compile DIR OUT: one process with KILN_CACHE_DIR=DIR; stdout to OUT,
# stderr to OUT.err, exit status to OUT.rc.
compile() {
    KILN_CACHE_DIR=$1 "$KILN" -e "$CHUNK" >"$2" 2>"$2.err"
    echo $? >"$2.rc"
}
field() { cut -f "$1" "$2"; }

# The checksum of the uncompiled model, to compare with.
eager=$("$KILN" -e 'kiln.session.small = true
local s = dofile("samples/transformer_block.lua")
if kiln.default_device() ~= "cpu" then s.model:to("cpu") end
print(string.format("%.6f", s.model(s.inputs({small = true, device = "cpu"})[1]):sum():item()))' 2>&1)

# ---- cold, then warm
cache="$tmp/cache"
mkdir "$cache"
compile "$cache" "$tmp/first"
is "$(cat "$tmp/first.rc")" 0 "first process on an empty cache: exit status 0"
is "$(cat "$tmp/first.err")" "" "... nothing on stderr"
misses=$(field 1 "$tmp/first"); hits=$(field 2 "$tmp/first"); sum1=$(field 4 "$tmp/first")
[ "${misses:-0}" -ge 1 ] 2>/dev/null && [ "$hits" = 0 ]
ok $? "first process: kiln.jit_stats() misses >= 1, hits == 0" "got: $(cat "$tmp/first")"
# the sums of the compiled and eager outputs agree to rounding (the kernels
# round differently: compiled = eager is t/compile_samples.lua's job)
awk -v a="$sum1" -v b="$eager" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && d <= 1e-5 * (m > 1 ? m : 1)) }'
ok $? "first process: the output's sum is eager's to 1e-5 ($sum1, eager $eager)"
files=$(ls "$cache"/*.kjit 2>/dev/null | wc -l)
[ "$files" -ge 1 ]
ok $? "the cache dir holds the compiled code (*.kjit files: $files)"

compile "$cache" "$tmp/second"
is "$(cat "$tmp/second.rc")" 0 "second process with the same cache: exit status 0"
misses=$(field 1 "$tmp/second"); hits=$(field 2 "$tmp/second")
[ "$misses" = 0 ] && [ "${hits:-0}" -ge 1 ] 2>/dev/null
ok $? "second process starts from the persistent cache: misses == 0, hits >= 1" "got: $(cat "$tmp/second")"
is "$(field 4 "$tmp/second")" "$sum1" "second process: the same output"

# ---- corruption: flip one byte in the middle of each cache file (with kiln
# itself: io.open r+b)
for f in "$cache"/*.kjit; do
    F=$f "$KILN" -e 'local f = assert(io.open(os.getenv("F"), "r+b"))
local size = f:seek("end")
f:seek("set", size // 2)
local b = f:read(1)
f:seek("set", size // 2)
f:write(string.char(b:byte() ~ 0xff))
f:close()'
done
compile "$cache" "$tmp/corrupt"
is "$(cat "$tmp/corrupt.rc")" 0 "after corrupting the cache: exit status 0"
like "$(cat "$tmp/corrupt.err")" "is corrupt" "... the corruption is reported on stderr"
like "$(cat "$tmp/corrupt.err")" "kiln cache: entry $cache/" "... naming the cache entry"
misses=$(field 1 "$tmp/corrupt"); corrupt=$(field 3 "$tmp/corrupt")
[ "${misses:-0}" -ge 1 ] 2>/dev/null && [ "${corrupt:-0}" -ge 1 ] 2>/dev/null
ok $? "... the entry is rebuilt: misses >= 1, corrupt >= 1" "got: $(cat "$tmp/corrupt")"
is "$(field 4 "$tmp/corrupt")" "$sum1" "... and the output is the same"
compile "$cache" "$tmp/repaired"
misses=$(field 1 "$tmp/repaired"); hits=$(field 2 "$tmp/repaired")
[ "$misses" = 0 ] && [ "${hits:-0}" -ge 1 ] 2>/dev/null && [ ! -s "$tmp/repaired.err" ]
ok $? "the next process finds the rebuilt entry: misses == 0, hits >= 1, nothing on stderr" \
    "got: $(cat "$tmp/repaired")" "stderr: $(cat "$tmp/repaired.err")"

# A truncated entry is corrupt too.
for f in "$cache"/*.kjit; do
    F=$f "$KILN" -e 'local f = assert(io.open(os.getenv("F"), "rb"))
local data = f:read("a")
f:close()
f = assert(io.open(os.getenv("F"), "wb"))
f:write(data:sub(1, #data // 3))
f:close()'
done
compile "$cache" "$tmp/truncated"
like "$(cat "$tmp/truncated.err")" "is corrupt" "a truncated cache entry is reported as corrupt"
is "$(cat "$tmp/truncated.rc") $(field 4 "$tmp/truncated")" "0 $sum1" "... and rebuilt with the same output"

# ---- concurrency: 4 processes at once on an empty cache
cache2="$tmp/cache2"
mkdir "$cache2"
for i in 1 2 3 4; do compile "$cache2" "$tmp/par$i" & done
wait
all_ok=0
sums=""
for i in 1 2 3 4; do
    [ "$(cat "$tmp/par$i.rc")" = 0 ] && [ ! -s "$tmp/par$i.err" ] || all_ok=1
    sums="$sums $(field 4 "$tmp/par$i")"
done
ok $all_ok "4 processes started at once on an empty cache: all exit 0, nothing on stderr" \
    "$(for i in 1 2 3 4; do echo "process $i: rc $(cat "$tmp/par$i.rc"): $(cat "$tmp/par$i") $(cat "$tmp/par$i.err")"; done)"
is "$sums" " $sum1 $sum1 $sum1 $sum1" "... with the same output"
compile "$cache2" "$tmp/after"
misses=$(field 1 "$tmp/after"); hits=$(field 2 "$tmp/after")
[ "$misses" = 0 ] && [ "${hits:-0}" -ge 1 ] 2>/dev/null
ok $? "... and they leave a valid cache: the next process hits it" "got: $(cat "$tmp/after")" "stderr: $(cat "$tmp/after.err")"
# (with a GPU the cache also holds the CUDA modules of the eager ops that
# made the model, cuda-KEY.cubin; their temporaries are .tmp-cuda-*)
left=$(ls -A "$cache2" | grep -v -e '\.kjit$' -e '^cuda-[0-9a-f]*\.cubin$' | tr '\n' ' ')
is "$left" "" "... no temporary files are left in the cache dir"

# ---- kiln.config.cache_dir follows $KILN_CACHE_DIR
got=$(KILN_CACHE_DIR="$cache2" "$KILN" -e 'io.write(kiln.config.cache_dir)')
is "$got" "$cache2" "kiln.config.cache_dir is \$KILN_CACHE_DIR"


# ---- kiln.config.cache_dir set from Lua wins; another graph is another entry
LINEAR='kiln.session.small = true
local s = dofile("samples/simple_linear.lua")
if kiln.default_device() ~= "cpu" then s.model:to("cpu") end
local cm = kiln.compile(s.model)
cm(s.inputs({small = true, device = "cpu"})[1])
local j = kiln.jit_stats()
print(j.misses, j.hits)'
got=$(KILN_CACHE_DIR="$tmp/unused" "$KILN" -e "kiln.config.cache_dir = '$cache2'" -e "$LINEAR" 2>&1)
is "$got" "1	0" "a different graph (simple_linear) misses a cache that holds transformer_block's code"
# (no cache entry under $KILN_CACHE_DIR: with a GPU, the CUDA modules of
# the eager ops that make the model follow kiln.config.cache_dir too)
[ -z "$(ls "$tmp/unused"/*.kjit "$tmp/unused"/cuda-* 2>/dev/null)" ] && [ "$(ls "$cache2"/*.kjit | wc -l)" -ge 2 ]
ok $? "kiln.config.cache_dir set from Lua is where the entry goes (not \$KILN_CACHE_DIR)" "$(ls -A "$tmp/unused" "$cache2" 2>&1)"

echo "1..$n"
[ "$failed" -eq 0 ]
