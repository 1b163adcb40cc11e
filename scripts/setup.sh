#!/bin/sh
# scripts/setup.sh [BUILD_DIR] [cmake options...]
# Installs what kiln needs and is missing (Debian packages), then configures
# and builds kiln in BUILD_DIR (default: build). Safe to run again: it only
# installs what is missing and only rebuilds what changed.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
[ $# -gt 0 ] && shift

pkgs="cmake make gcc pkg-config liblua5.4-dev lua5.4 libgraphviz-dev libedit-dev perl"
pkgs="$pkgs protobuf-c-compiler libprotobuf-c-dev libonnx-dev libonnx-testdata"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

cmake -S . -B "$build" "$@" >/dev/null
cmake --build "$build" -j "$(nproc)" 2>&1 | grep -v -E '^\[ *[0-9]+%\]|^-- ' || true
test -x "$build/kiln" || { echo "setup: the build failed (see above)" >&2; exit 1; }
echo "setup: built $build/kiln"
