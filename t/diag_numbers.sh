#!/bin/sh
# diag_numbers.sh: issue 16 items 1 and 2 as a user sees them, through
# kiln's standard input and command line (exact text where it is fixed):
# :explain's compile time on a cold and a warm cache; :time numbering its
# rows as :kernels does, with the copy a reshape makes as a sub-row of the
# kernel that reads it; :graph's source lines after breaks; and the stack
# of an error raised inside a compiled function, as eager shows it.
# Run by prove through t/run, which sets $KILN.
. "$(dirname "$0")/lib/tap.sh"
[ -x "$KILN" ] || { echo "1..0 # SKIP no kiln program at $KILN"; exit 0; }
# a cache of its own: the first compile is cold
KILN_CACHE_DIR="$tmp/cache"
export KILN_CACHE_DIR
export KILN_DEVICE=cpu # the CPU backend's kernels and texts

# a model whose reshape of a permuted input copies, for the matmul after it
cat >"$tmp/heads.lua" <<'LUA'
local kiln = rawget(_G, "kiln") or require("kiln")
local nn = kiln.nn
local Heads = nn.Module {
  name = "Heads",
  init = function(self) self.proj = nn.Linear(64, 32) end,
  forward = function(self, x)
    local h = (x * 2):relu()
    return self.proj(x:permute({ 2, 1, 3 }):reshape({ 8, 64 })):sum(-1), h
  end,
}
nn.manual_seed(0)
return { name = "heads", model = Heads(),
  inputs = function(opts) return { kiln.randn({ 4, 8, 16 }, { seed = 1, device = opts and opts.device }) } end }
LUA

# ---- :explain, cold then warm: the figures vary, the words do not
out=$(printf ':load %s\n:explain\n:explain\n' "$tmp/heads.lua" | "$KILN" 2>&1 | grep '^Compile time' |
      sed 's/[0-9][0-9]*\.[0-9][0-9]*/X/g')
is "$out" "Compile time: X s (capture X, passes X, codegen X, backend compile X)
Compile time: X s (capture X, passes X, codegen X, backend compile X (2 of 2 kernels from the cache))" \
   ":explain: the cold compile, then '(2 of 2 kernels from the cache)' on the warm one (exact text)"
cold=$(printf ':load %s\n:explain\n' "$tmp/heads.lua" | KILN_CACHE_DIR="$tmp/cold2" "$KILN" 2>&1 |
       sed -n 's/^Compile time: \([0-9.]*\) s .*backend compile \([0-9.]*\).*/\1 \2/p')
case $cold in
    "0.00 0.00" | "") fail ":explain on a cold cache: nonzero compile time" "got: $cold" ;;
    *) pass ":explain on a cold cache: nonzero compile time and backend compile ($cold)" ;;
esac

# ---- :time numbers its rows as :kernels (from 1); the copy is a sub-row of kernel 2
out=$(printf ':load %s\n:mode default\n:kernels\n:time 2\n' "$tmp/heads.lua" | "$KILN" 2>&1)
kernels=$(printf '%s\n' "$out" | sed -n '/^  #  kernel  *kind  *group/,/^[0-9]* kernels/p' |
          sed -n 's/^ *\([0-9][0-9]*\)  \(k[0-9a-z_]*\) .*/\1 \2/p')
is "$kernels" "1 k0_mul_relu_f32_4x8x16
2 k1_matmul_f32_8x32
3 k2_add_sum_f32_8" ":kernels lists the three kernels, numbered from 1"
rows=$(printf '%s\n' "$out" | sed -n '/^  #  kernel  *kind  *calls/,/^total/p' | sed -e '1d' -e '$d' |
       sed 's/^\(.*[^ ]\)  *\(generated\|cpu\)  .*/\1/')
is "$rows" "  1  k0_mul_relu_f32_4x8x16
  2  k1_matmul_f32_8x32
       #2.copy contiguous_f32_8x4x16
  3  k2_add_sum_f32_8" ":time: the rows by kernel number, the reshape's copy under kernel 2 (exact text)"

# ---- :graph captured text: the head after two breaks keeps line 44
out=$(printf ':load samples/breaks.lua\n:graph captured text\n' | "$KILN" 2>&1 | grep -E '^  (permute|matmul) ')
is "$(printf '%s\n' "$out" | sed 's/  */ /g')" " permute {16, 16} f32 samples/breaks.lua:13
 matmul {8, 16} f32 samples/breaks.lua:13
 permute {16, 16} f32 samples/breaks.lua:13
 matmul {8, 16} f32 samples/breaks.lua:13
 permute {16, 4} f32 samples/breaks.lua:44
 matmul {8, 4} f32 samples/breaks.lua:44" ":graph captured text: the head's ops at samples/breaks.lua:44, not '?'"

# ---- an error inside a compiled function shows the user's stack
cat >"$tmp/err.lua" <<'LUA'
local function inner(x)
  return x:matmul(kiln.randn({ 3, 3 }))
end
local function middle(x)
  local y = inner(x)
  return y + 1
end
local fn = arg[1] == "compiled" and kiln.compile(middle) or middle
fn(kiln.randn({ 2, 4 }))
LUA
cd "$tmp" || exit 1
eager=$("$KILN" err.lua 2>&1)
compiled=$("$KILN" err.lua compiled 2>&1)
rc=$?
cd - >/dev/null || exit 1
is "$eager" "kiln: err.lua:2: matmul: shapes {2,4} and {3,3} cannot be multiplied
stack traceback:
	[C]: in function 'kiln.matmul'
	err.lua:2: in upvalue 'inner'
	err.lua:5: in local 'fn'
	err.lua:9: in main chunk
	[C]: in ?" "eager: the error's stack (inner <- middle)"
is "$compiled" "kiln: err.lua:2: matmul: shapes {2,4} and {3,3} cannot be multiplied
stack traceback:
	[C]: in function 'kiln.matmul'
	err.lua:2: in upvalue 'inner'
	err.lua:5: in function <err.lua:4>
	[C]: in local 'fn'
	err.lua:9: in main chunk
	[C]: in ?" "compiled: the same user frames (inner <- middle) above the compiled call (exact text)"
is "$rc" 1 "... exit status 1"

# :device on a machine without an NVIDIA driver says so, not the CUDA
# runtime's "driver version is insufficient" (which it also says for none)
dev=$(printf ':device\n' | "$KILN" 2>&1)
cuda_line=$(printf '%s\n' "$dev" | grep '^CUDA')
case "$cuda_line" in
  *"driver version is insufficient"*) fail ":device: why there is no GPU" "$cuda_line" ;;
  *"not built"*|*"no NVIDIA driver is installed (no GPU on this machine)"*|*"driver is too old"*|*GB*|*GiB*|*[0-9]" device"*)
    pass ":device: why there is no GPU, or the GPU ($cuda_line)" ;;
  *) fail ":device: why there is no GPU, or the GPU" "$cuda_line" ;;
esac

echo "1..$n"
[ "$failed" -eq 0 ]
