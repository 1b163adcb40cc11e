# .ci/sanitizer_env.sh (sourced by .ci/run and t/ci_sanitizer_net.sh):
# kiln_sanitizer_env LOGDIR exports the options the sanitizer build runs
# under in CI. Run from the repository root (the suppressions file).
#   log_path: every report goes to a file in LOGDIR as well, so a report
#     inside a child process whose non-zero exit a test expects still fails
#     CI (UBSan honours it because the build links libubsan statically with
#     GCC: see CMakeLists.txt).
#   allocator_may_return_null=1: a deliberately impossible request returns
#     NULL, so kiln's "out of memory" error path runs as in a normal build
#     instead of ASan aborting; ASan logs one WARNING line for it, which
#     .ci/sanitizer_reports does not count.
kiln_sanitizer_env() {
  export ASAN_OPTIONS="log_path=$1/asan:detect_leaks=1:abort_on_error=0:allocator_may_return_null=1"
  export UBSAN_OPTIONS="log_path=$1/ubsan:print_stacktrace=1:halt_on_error=1"
  export LSAN_OPTIONS="suppressions=$PWD/t/lib/lsan.supp:print_suppressions=0"
}
