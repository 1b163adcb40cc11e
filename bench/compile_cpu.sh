#!/bin/sh
# compile_cpu.sh [small|full] [calls]: bench/compile_cpu.lua with a fresh
# persistent cache (cold compile), then again in a new process with the
# cache it filled (the second process should hit it for every kernel).
build=${KILN_BUILD:-build}
dir=$(mktemp -d)
echo "== cold cache ($dir)"
KILN_CACHE_DIR=$dir "$build/kiln" bench/compile_cpu.lua "$@"
echo "== warm cache (a second process)"
KILN_CACHE_DIR=$dir "$build/kiln" bench/compile_cpu.lua "$@"
rm -rf "$dir"
