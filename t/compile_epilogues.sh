#!/bin/sh
# compile_epilogues.sh: plans fold the pointwise kernel after a matmul
# (Linear's bias, its ReLU, the transformer's residual add in f32; a
# convolution's ReLU) into the library call's epilogue (core/compiler/kn_plan_build.c plan_epilogues;
# cuBLASLt's BIAS / RELU_BIAS epilogues and a cuDNN conv-bias-ReLU graph on
# the GPU; a strict-f32 convolution keeps its ReLU apart, as measured
# faster). On the CPU the fold runs only
# with KILN_CPU_FOLD_EPILOGUES=1, so CI tests the plan logic: the folded
# plans give the same values as eager (bit for bit in f32, where the
# reference rounds each step the same way), and a graph whose matmul
# output is read twice is not folded. Run by prove through t/run.
. "$(dirname "$0")/lib/tap.sh"

[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }

CHUNK='kiln.session.small = true
for _, dt in ipairs{"f32", "bf16"} do
  for _, name in ipairs{"simple_linear", "large_linear", "transformer_block", "convnet"} do
    local spec = dofile("samples/" .. name .. ".lua")
    spec.model:to("cpu")
    if dt ~= "f32" then spec.model:to(dt) end
    local x = spec.inputs({small = true, device = "cpu", dtype = dt})
    local ref = spec.model(table.unpack(x))
    local cm = kiln.compile(spec.model)
    cm(table.unpack(x))
    local y = cm(table.unpack(x))
    local d = (y:to("f64") - ref:to("f64")):abs():amax():item()
    print(name, dt, cm:stats().library_epilogues, d == d and string.format("%.3g", d) or "nan")
  end
end
-- the matmul value is also an output: its own value must exist
local w, b = kiln.randn({8, 4}, {seed = 1, device = "cpu"}), kiln.randn({8}, {seed = 2, device = "cpu"})
local cm = kiln.compile(function(x) local m = x:matmul(w:t()) return m + b, m end)
local x = kiln.randn({3, 4}, {seed = 3, device = "cpu"})
cm(x)
local y, m = cm(x)
local d = (y - (x:matmul(w:t()) + b)):abs():amax():item() + (m - x:matmul(w:t())):abs():amax():item()
print("two_readers", "f32", cm:stats().library_epilogues, string.format("%.3g", d))'

out=$(KILN_CPU_FOLD_EPILOGUES=1 "$KILN" -e "$CHUNK" 2>&1)
status=$?
is "$status" 0 "the folded plans run" 
check() { # name dtype min-folded max-error
    line=$(printf '%s\n' "$out" | awk -v n="$1" -v d="$2" '$1 == n && $2 == d')
    set -- "$1" "$2" "$3" "$4" $line
    if [ -n "$7" ] && [ "$7" -ge "$3" ] && awk -v e="$8" -v m="$4" 'BEGIN { exit !(e != "nan" && e + 0 <= m + 0) }'; then
        pass "$1 $2: $7 kernels folded, max difference from eager $8"
    else
        fail "$1 $2: at least $3 kernels folded and a difference within $4" "got: $line" "$out"
    fi
}
check simple_linear f32 1 0
check large_linear f32 4 0
check transformer_block f32 3 1e-5
check simple_linear bf16 1 0
check large_linear bf16 4 0
# bf16: the residual x + proj(y) goes to the second layer norm's kernel
# instead of proj's epilogue (kn_fuse_group.c: residual_in_row)
check transformer_block bf16 2 0.05
check convnet f32 1 1e-5
check convnet bf16 5 0.05
line=$(printf '%s\n' "$out" | awk '$1 == "two_readers"')
is "$line" "two_readers	f32	0	0" "a matmul whose value is also an output is not folded"
# without the switch the CPU plans fold nothing
got=$("$KILN" -e 'kiln.session.small = true local s = dofile("samples/large_linear.lua") s.model:to("cpu")
local cm = kiln.compile(s.model) cm(s.inputs({small = true, device = "cpu"})[1]) io.write(cm:stats().library_epilogues)' 2>&1)
is "$got" 0 "CPU plans keep one kernel per step unless KILN_CPU_FOLD_EPILOGUES is set"

echo "1..$n"
[ "$failed" -eq 0 ]
