# ci_sanitizer_net.sh: CI's sanitizer net (.ci/sanitizer_env.sh and
# .ci/sanitizer_reports) catches every real report, also from a process
# whose non-zero exit is expected, and only real ones. Runs in the
# sanitizer build only (t/sanitizer_probe exists there).
. t/lib/tap.sh
probe=$(dirname "$KILN")/t/sanitizer_probe
if [ ! -x "$probe" ]; then
  echo "1..0 # SKIP not the sanitizer build (KILN_BUILD=build-asan)"
  exit 0
fi
. .ci/sanitizer_env.sh

# run_probe MODE: run the probe under CI's options (and LeakSanitizer's
# $LSAN_OPTIONS_FULL, if set) with its own log dir (not the log dir of a CI
# run around this test); sets rc, out and reports (what
# .ci/sanitizer_reports printed) and caught (its exit status)
run_probe() {
  logs=$tmp/$1${LSAN_OPTIONS_FULL:+-full}
  mkdir -p "$logs"
  out=$( (kiln_sanitizer_env "$logs"
           [ -n "${LSAN_OPTIONS_FULL-}" ] && LSAN_OPTIONS="$LSAN_OPTIONS:$LSAN_OPTIONS_FULL"
           "$probe" "$1") 2>/dev/null)
  rc=$?
  reports=$(.ci/sanitizer_reports "$logs")
  caught=$?
}

run_probe ub
is "$rc" 1 "ub: the process fails (no recovery)"
is "$caught" 1 "ub: the report reaches the log files, not stderr only"
like "$reports" "signed integer overflow" "ub: the report is UBSan's"

run_probe heap
is "$caught" 1 "heap: ASan's report is caught"
like "$reports" "heap-use-after-free" "heap: it is the use after free"

run_probe leak
is "$caught" 1 "leak: LeakSanitizer's report is caught"
like "$reports" "detected memory leaks" "leak: it is the leak"

# a Graphviz graph never closed is reported, with either unwinder: the
# suppressions of Graphviz's own leaks (t/lib/lsan.supp) do not cover
# cgraph's allocator, whose stack is all the fast unwinder sees, nor do
# they match anything on the full stack of a graph kiln opened
run_probe graph
is "$caught" 1 "graph: a graph never closed is reported"
like "$reports" "agalloc" "graph: it is cgraph's allocation"
LSAN_OPTIONS_FULL=fast_unwind_on_malloc=0
run_probe graph
LSAN_OPTIONS_FULL=
is "$caught" 1 "graph, full stacks (as the tests that draw run): still reported"
like "$reports" "agopen" "graph, full stacks: the report has the whole stack down to agopen"

# a layout freed as kiln frees one: Graphviz's own leaks, which the
# suppressions match by its layout's frames once stacks are full (as the
# tests that draw run), and only then; a layout left unfreed is reported
LSAN_OPTIONS_FULL=fast_unwind_on_malloc=0
run_probe layout
is "$caught" 0 "layout, full stacks: Graphviz's own leaks are suppressed"
run_probe layout-kept
LSAN_OPTIONS_FULL=
is "$caught" 1 "layout-kept, full stacks: a layout never freed (no gvFreeLayout) is reported"
like "$reports" "dot_layout" "layout-kept: it is the layout's data"
run_probe layout
is "$caught" 1 "layout, fast stacks: not suppressed, which is why the tests that draw need full stacks"

run_probe huge
is "$out" "null" "huge: ASan returns NULL (allocator_may_return_null=1)"
like "$(cat "$tmp"/huge/* 2>/dev/null)" "WARNING: AddressSanitizer failed to allocate" "huge: ASan logged its warning"
is "$caught" 0 "huge: the warning alone is not a report"

run_probe clean
is "$rc" 3 "clean: the probe exits as asked"
is "$caught" 0 "clean: no report"

# the warning and a real report in one process's file: still a report
mkdir -p "$tmp/mixed"
printf '==12==WARNING: AddressSanitizer failed to allocate 0x4000000000000 bytes\n==12==ERROR: AddressSanitizer: heap-use-after-free on address 0x602000000010\n' > "$tmp/mixed/asan.12"
.ci/sanitizer_reports "$tmp/mixed" > /dev/null
is "$?" 1 "a file with the warning and a real report counts"
printf '==13==WARNING: AddressSanitizer failed to allocate 0x4000000000000 bytes (and more)\n' > "$tmp/mixed/asan.13"
rm "$tmp/mixed/asan.12"
.ci/sanitizer_reports "$tmp/mixed" > /dev/null
is "$?" 1 "only the exact warning line is filtered"

echo "1..$n"
[ "$failed" -eq 0 ]
