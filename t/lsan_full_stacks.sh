# lsan_full_stacks.sh: the tests that lay out drawings with Graphviz run
# with LeakSanitizer's full stacks in CI's sanitizer run, which is what
# lets t/lib/lsan.supp match Graphviz's own leaks by the layout's frames
# (.ci/sanitizer_env.sh says why): t/run gives them the option, and every
# test that draws is in KILN_LSAN_FULL_STACK_TESTS. Runs in every build.
. t/lib/tap.sh
. .ci/sanitizer_env.sh
kiln_sanitizer_env "$tmp/logs"
listed=$KILN_LSAN_FULL_STACK_TESTS

# t/run: the option for a listed test only, after the options CI set
printf 'echo "$LSAN_OPTIONS"\n' > "$tmp/probe.sh"
got=$(KILN_LSAN_FULL_STACK_TESTS="t/other.lua $tmp/probe.sh" LSAN_OPTIONS=a=1 sh t/run "$tmp/probe.sh")
is "$got" "a=1:fast_unwind_on_malloc=0" "t/run gives a listed test full stacks, after the other options"
got=$(KILN_LSAN_FULL_STACK_TESTS="t/other.lua" LSAN_OPTIONS=a=1 sh t/run "$tmp/probe.sh")
is "$got" "a=1" "... and leaves a test that is not listed alone"
got=$(unset KILN_LSAN_FULL_STACK_TESTS; LSAN_OPTIONS= sh t/run "$tmp/probe.sh")
is "$got" "" "... and every test, outside CI's sanitizer run"

# every test that draws (renders SVG, or writes a report, which holds
# drawings) is listed; the others need not pay for full stacks
draws='kiln\.render|:graph([^s_a-z]|$)|cmd\.graph|kiln\.report\(|KILN_REPORT|:report([^s_a-z]|$)|cmd\.report|report_from_trace|kiln report'
missing=""
for f in $(grep -lE "$draws" t/*.lua t/*.sh t/*.c); do
  case " $(echo $listed) t/lsan_full_stacks.sh " in # (this file only names the pattern)
    *" $f "*) ;;
    *) missing="$missing $f" ;;
  esac
done
is "$missing" "" "every test that draws is in KILN_LSAN_FULL_STACK_TESTS (.ci/sanitizer_env.sh)"
stale=""
for f in $listed; do [ -f "$f" ] || stale="$stale $f"; done
is "$stale" "" "every test listed exists"
like "$listed" "t/viz_render.lua" "the drawing tests are listed"

echo "1..$n"
[ "$failed" -eq 0 ]
