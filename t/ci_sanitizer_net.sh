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

# run_probe MODE: run the probe under CI's options with its own log dir (not
# the log dir of a CI run around this test); sets rc, out and reports (what
# .ci/sanitizer_reports printed) and caught (its exit status)
run_probe() {
  logs=$tmp/$1
  mkdir -p "$logs"
  out=$( (kiln_sanitizer_env "$logs"; "$probe" "$1") 2>/dev/null)
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
