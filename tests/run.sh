#!/usr/bin/env bash
# The test command. On a fresh Debian 12 machine as root: installs what is missing, builds, and
# runs every test through ctest three times: a normal build, an ASan+UBSan build and a TSan build.
# Exits non-zero on any failure. Tests that need root (loop devices, mounts) skip with a stated
# reason otherwise.
#
#   tests/run.sh                 everything
#   BLOCKREAD_SKIP_SANITIZERS=1  only the normal build (quicker while iterating)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

deploy/install-deps.sh

jobs=$(nproc)
run_suite() {
  local dir=$1; shift
  echo "=== tests/run.sh: configure and build $dir $*"
  cmake -S "$root" -B "$dir" -G Ninja -DBLOCKREAD_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  echo "=== tests/run.sh: ctest in $dir"
  ctest --test-dir "$dir" --output-on-failure -j "$jobs"
}

run_suite build/test-release -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${BLOCKREAD_SKIP_SANITIZERS:-0}" != 1 ]; then
  # halt_on_error: a sanitizer report fails the test instead of scrolling past.
  export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run_suite build/test-asan -DCMAKE_BUILD_TYPE=Debug -DBLOCKREAD_SANITIZE=asan-ubsan
  unset ASAN_OPTIONS UBSAN_OPTIONS
  # Suppressions: only races inside the uninstrumented gRPC/Abseil libraries (see the file).
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp"
  run_suite build/test-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBLOCKREAD_SANITIZE=tsan
fi
echo "=== tests/run.sh: all tests passed"
