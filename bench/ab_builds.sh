#!/bin/sh
# ab_builds.sh KILN_A KILN_B [OUT]: two kiln programs (a build before and
# after a change) on the same samples, modes and dtypes in one run, rounds
# interleaved (A, B, A, B, ...) so drift of the machine falls on both. For
# a refactor that must not change speed.
#
#   export LD_LIBRARY_PATH=$PWD/build/devlibs
#   bench/ab_builds.sh build-before/kiln build/kiln $OUT
#
# Env: MODELS, KILN_MODES (default,reduce-overhead), DTYPES (f32,bf16),
# ROUNDS (3), REPS (5), CALLS (100), KILN_BENCH_DEVICE (cuda), and the rest
# of bench/kiln_bench.lua's. Writes OUT/ab.jsonl (every row, with "build"
# and "round") and prints, per row, each build's median ms per call over
# the rounds and B/A.
set -u
a=${1:?usage: ab_builds.sh KILN_A KILN_B [OUT]}
b=${2:?usage: ab_builds.sh KILN_A KILN_B [OUT]}
out=${3:-.}
export MODELS=${MODELS:-simple_linear,large_linear,convnet,transformer_block,gcn}
export KILN_MODES=${KILN_MODES:-default,reduce-overhead}
export DTYPES=${DTYPES:-f32,bf16}
ROUNDS=${ROUNDS:-3}
mkdir -p "$out"
raw=$out/ab.jsonl
: >"$raw"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for side in A B; do
        prog=$a
        [ $side = B ] && prog=$b
        # each round in a fresh cache: both builds compile cold the same way
        cache=$(mktemp -d)
        echo "ab_builds: round $r build $side ($prog)" >&2
        KILN_CACHE_DIR=$cache "$prog" bench/kiln_bench.lua 2>>"$out/ab.err" |
            grep '^{' | sed "s/^{/{\"build\":\"$side\",\"round\":$r,/" >>"$raw"
        rm -rf "$cache"
    done
    r=$((r + 1))
done
# the table: per model/mode/dtype, each build's median over rounds
cat >"$out/ab_table.lua" <<'LUA'
local rows, order = {}, {}
for line in io.lines(arg[1]) do
  local build = line:match("\"build\":\"(%a)\"")
  local model, mode, dtype = line:match("\"model\":\"([^\"]+)\""), line:match("\"mode\":\"([^\"]+)\""),
                             line:match("\"dtype\":\"([^\"]+)\"")
  local ms = tonumber(line:match("\"ms_per_call\":([-%d.e+]+)"))
  if build and model and ms then
    local key = model .. " " .. mode .. " " .. dtype
    if not rows[key] then rows[key] = {A = {}, B = {}}; order[#order + 1] = key end
    table.insert(rows[key][build], ms)
  end
end
local function median(t)
  if #t == 0 then return nil end
  table.sort(t)
  return #t % 2 == 1 and t[(#t + 1) // 2] or (t[#t // 2] + t[#t // 2 + 1]) / 2
end
print(string.format("%-44s %10s %10s %7s", "row", "A ms", "B ms", "B/A"))
for _, key in ipairs(order) do
  local ma, mb = median(rows[key].A), median(rows[key].B)
  print(string.format("%-44s %10s %10s %7s", key, ma and string.format("%.4f", ma) or "-",
                      mb and string.format("%.4f", mb) or "-",
                      (ma and mb) and string.format("%.3f", mb / ma) or "-"))
end
LUA
"$a" "$out/ab_table.lua" "$raw" | tee "$out/ab.txt"
