#!/bin/sh
# module.sh: `require "kiln"` from the stock lua5.4 interpreter, and the
# module links no second copy of Lua.
build=${KILN_BUILD:-build}
if ! command -v lua5.4 >/dev/null; then echo "1..0 # SKIP no lua5.4 interpreter on this machine"; exit 0; fi
echo "1..4"
n=0
check() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi; }

if ldd "$build/kiln.so" | grep -q liblua; then check 1 "kiln.so links no liblua"; else check 0 "kiln.so links no liblua"; fi

# A sanitizer build of the module needs the sanitizer runtime loaded first.
pre=""
if ldd "$build/kiln.so" | grep -q libasan; then
  pre="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
fi
out=$(LD_PRELOAD="$pre" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" lua5.4 -e "
  package.cpath = '$build/?.so;' .. package.cpath
  local kiln = require 'kiln'
  local x = kiln.randn({2, 3}, {seed = 7})
  local y = (x * 2):sum()
  print(#kiln.ops() > 40, x:shape()[2], math.abs(y:item() - 2 * x:sum():item()) < 1e-5, kiln.nn ~= nil)
" 2>&1)
check $? "lua5.4 loads the module and runs ops"
[ "$out" = "true	3	true	true" ]; check $? "results are right (got: $out)"
out=$(LD_PRELOAD="$pre" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" lua5.4 -e "
  package.cpath = '$build/?.so;' .. package.cpath
  local kiln = require 'kiln'
  local ok, err = pcall(function() return kiln.randn({2, 3}):matmul(kiln.randn({4, 5})) end)
  print(ok, err)
" 2>&1)
case "$out" in *"matmul: shapes {2,3} and {4,5} cannot be multiplied"*) check 0 "errors reach the stock interpreter as Lua errors";;
  *) check 1 "errors reach the stock interpreter as Lua errors (got: $out)";; esac
