# tap.sh: the TAP helpers kiln's shell tests share (sourced, not run).
# Sets KILN (the kiln program, absolute), a temporary dir $tmp removed at
# exit, and the counters n and failed; pass, fail, is and like print TAP.
KILN=${KILN:-build/kiln}
case $KILN in /*) ;; *) KILN=$(pwd)/$KILN ;; esac

n=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pass() { n=$((n + 1)); echo "ok $n - $1"; }
fail() {
    n=$((n + 1)); failed=$((failed + 1))
    echo "not ok $n - $1"
    shift
    for line in "$@"; do printf '%s\n' "$line" | sed 's/^/#   /'; done
}
# is GOT WANT NAME
is() {
    if [ "$1" = "$2" ]; then pass "$3"; else fail "$3" "got:" "$1" "expected:" "$2"; fi
}
# like GOT SUBSTRING NAME
like() {
    case $1 in *"$2"*) pass "$3" ;; *) fail "$3" "got:" "$1" "to contain:" "$2" ;; esac
}
