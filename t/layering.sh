#!/bin/sh
# layering.sh: kiln's layers hold (scripts/check_layers.lua on the sources
# and the built objects), and the check itself fails on what it must catch:
# a call from a lower layer to a higher one, an include of a kernels/ header
# from core/, a call from scripting's parts into onnx's Lua binding (which
# uses them), Lua's headers outside the Lua side, and a circle between two
# scripting files or two kernels/cuda files.
. t/lib/tap.sh
build=${KILN_BUILD:-build}
if ! command -v lua5.4 >/dev/null; then echo "1..0 # SKIP no lua5.4 interpreter on this machine"; exit 0; fi
echo "1..16"

out=$(lua5.4 scripts/check_layers.lua --build "$build" 2>&1)
st=$?
is "$st" 0 "the project's layers hold (includes and symbols of $build)"
[ "$st" = 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
like "$out" "modules in circles: core      0 of" "no circle among core/ modules"
like "$out" "modules in circles: kernels   0 of" "no circle among kernels/ modules (the CPU and CUDA backends)"
like "$out" "modules in circles: scripting 0 of" "no circle among scripting/ modules"
like "$out" "modules in circles: onnx      0 of" "no circle among onnx/ modules"

# The real tree with one violating include added: must fail, naming it.
mkdir -p "$tmp/real"
cp -R core kernels scripting viz repl onnx "$tmp/real/"
printf '#include "kn_capture.h"\n' >> "$tmp/real/core/base/kn_status.c"
out=$(lua5.4 scripts/check_layers.lua --src "$tmp/real" 2>&1)
is "$?" 1 "an include of capture from core/base fails the check"
like "$out" "core/base may not use core/capture: core/base/kn_status.c:" "the message names the layers and the line"

# onnx's binding sits between scripting's parts and luaopen_kiln: a part
# that reaches it would close a circle; the reader stays free of Lua.
rm -rf "$tmp/real" && mkdir -p "$tmp/real" && cp -R core kernels scripting viz repl onnx "$tmp/real/"
printf '#include "kn_lua_onnx.h"\n' >> "$tmp/real/scripting/kn_lua_util.c"
printf '#include <lua.h>\n' >> "$tmp/real/onnx/reader/kn_onnx.c"
out=$(lua5.4 scripts/check_layers.lua --src "$tmp/real" 2>&1)
is "$?" 1 "scripting's parts including onnx's binding, or the reader including lua.h, fail the check"
like "$out" "scripting may not use onnx: scripting/kn_lua_util.c:" "a part of scripting may not use onnx's binding"
like "$out" "onnx/reader may not include Lua's C API: onnx/reader/kn_onnx.c:" "the ONNX reader may not include lua.h"

# A small tree with objects: calls found from symbols alone (no include).
s="$tmp/small"
mkdir -p "$s/core/base" "$s/core/capture" "$s/kernels/cuda" "$s/core/tensor" "$s/scripting" "$s/b/CMakeFiles/x.dir"
cat > "$s/core/base/kn_low.c" <<'EOF'
int kn_high_fn(void);
int kn_low_fn(void);
int kn_low_fn(void) { return kn_high_fn(); }
EOF
cat > "$s/core/capture/kn_high.c" <<'EOF'
int kn_high_fn(void);
int kn_high_fn(void) { return 1; }
EOF
printf '/* empty */\n' > "$s/kernels/cuda/kn_cuda.h"
printf '#include "cuda/kn_cuda.h"\n' > "$s/core/tensor/kn_t.c"
cat > "$s/scripting/kn_a.c" <<'EOF'
int kn_b_fn(int);
int kn_a_fn(int);
int kn_a_fn(int n) { return n ? kn_b_fn(n - 1) : 0; }
EOF
cat > "$s/scripting/kn_b.c" <<'EOF'
int kn_a_fn(int);
int kn_b_fn(int);
int kn_b_fn(int n) { return n ? kn_a_fn(n - 1) : 1; }
EOF
ok=1
for f in core/base/kn_low.c core/capture/kn_high.c scripting/kn_a.c scripting/kn_b.c; do
    mkdir -p "$s/b/CMakeFiles/x.dir/$(dirname $f)"
    ${CC:-cc} -c "$s/$f" -o "$s/b/CMakeFiles/x.dir/$f.o" || ok=0
done
if [ $ok = 1 ]; then
    out=$(lua5.4 scripts/check_layers.lua --src "$s" --build "$s/b" 2>&1)
    is "$?" 1 "the check fails on the small tree"
    like "$out" "core/base may not use core/capture: core/base/kn_low uses kn_high_fn" "a call found from the objects' symbols"
    like "$out" "core/tensor may not use kernels/cuda: core/tensor/kn_t.c:1 includes cuda/kn_cuda.h" "core/ including a kernels/ header"
    like "$out" "circle of 2 modules: scripting/kn_a scripting/kn_b" "a circle between two scripting files"
else
    for i in 1 2 3 4; do fail "compiling the small tree's objects"; done
fi
# Two kernels/cuda files that include each other's header, and nothing
# else wrong: the circle alone fails the check.
c="$tmp/cuda_circle"
mkdir -p "$c/kernels/cuda"
for m in a b; do
    printf 'int kn_cuda_%s_fn(void);\n' $m > "$c/kernels/cuda/kn_cuda_$m.h"
done
printf '#include "kn_cuda_a.h"\n#include "kn_cuda_b.h"\nint kn_cuda_a_fn(void) { return kn_cuda_b_fn(); }\n' \
    > "$c/kernels/cuda/kn_cuda_a.c"
printf '#include "kn_cuda_b.h"\n#include "kn_cuda_a.h"\nint kn_cuda_b_fn(void) { return kn_cuda_a_fn(); }\n' \
    > "$c/kernels/cuda/kn_cuda_b.c"
out=$(lua5.4 scripts/check_layers.lua --src "$c" 2>&1)
is "$?" 1 "a circle between two kernels/cuda files fails the check"
like "$out" "layering: circle of 2 modules: kernels/cuda/kn_cuda_a kernels/cuda/kn_cuda_b" "the message names the circle's modules"
[ $failed -eq 0 ]
