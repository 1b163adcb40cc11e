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
#   KILN_LSAN_FULL_STACK_TESTS: the tests that lay out drawings with
#     Graphviz, which t/run runs with fast_unwind_on_malloc=0. Graphviz
#     2.42's dot layout leaks objects of its own, which t/lib/lsan.supp
#     suppresses by the layout phases they leak in; Debian builds Graphviz
#     without frame pointers, so the fast unwinder's stack of such an
#     object ends at Graphviz's allocator (gmalloc, or cgraph's agalloc)
#     and no phase is there to match. Suppressing the allocators instead
#     (as lsan.supp did with gmalloc) also hides what kiln could leak: a
#     graph it forgets to close, a layout it forgets to free
#     (t/ci_sanitizer_net.sh checks that both are reported). The full
#     unwinder finds the phases but makes every allocation slower: on a
#     sample of the suite (attention, autotune_entries, diag_numbers,
#     compile_samples, fuzz_lua_api, kir, report, steady) the CPU time
#     went from 80 s to 155 s, compile_samples from 10 s to 50 s, so only
#     these tests pay for it. t/lsan_full_stacks.sh checks that every
#     test that draws is listed.
kiln_sanitizer_env() {
  export ASAN_OPTIONS="log_path=$1/asan:detect_leaks=1:abort_on_error=0:allocator_may_return_null=1"
  export UBSAN_OPTIONS="log_path=$1/ubsan:print_stacktrace=1:halt_on_error=1"
  export LSAN_OPTIONS="suppressions=$PWD/t/lib/lsan.supp:print_suppressions=0"
  export KILN_LSAN_FULL_STACK_TESTS="t/diag_numbers.lua t/diag_numbers.sh t/fusion_reasons.lua t/options_checked.lua
    t/readme_repl.sh t/report.lua t/report_record.lua t/steady_repl.sh t/viz_render.lua t/viz_repl.sh"
}
