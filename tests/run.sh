#!/usr/bin/env bash
# The test command. On a fresh Debian 12 machine as root: installs what is missing, builds, and
# runs every test through ctest three times: a normal build, an ASan+UBSan build and a TSan build;
# then the libFuzzer targets (tests/fuzz) in a clang build of the gRPC-free code, each replaying
# its corpus and running a fixed number of inputs from a fixed seed. Exits non-zero on any failure.
# Tests that need root (loop devices, mounts) skip with a stated reason otherwise; skipped cases
# are listed after each ctest, and a case that needs root skipping while this runs as root is a
# failure.
#
#   tests/run.sh                 everything
#   BLOCKREAD_SKIP_SANITIZERS=1  only the normal build (quicker while iterating; no fuzzing)
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
  # Every test binary appends its skipped cases, with the reasons, here (tests/support/test_main.cc).
  local skipped="$root/$dir/skipped-cases.txt" status=0
  rm -f "$skipped"
  BLOCKREAD_SKIPPED_LOG="$skipped" ctest --test-dir "$dir" --output-on-failure -j "$jobs" || status=$?
  if [ -s "$skipped" ]; then
    echo "=== tests/run.sh: test cases skipped in $dir:"
    sort "$skipped" | sed 's/^blockread-skipped: /  /'
    if [ "$(id -u)" -eq 0 ] && grep -q '^blockread-skipped: [^ ]*: needs root' "$skipped"; then
      echo "tests/run.sh: running as root, yet test cases that need root skipped (above)" >&2
      exit 1
    fi
  fi
  [ "$status" -eq 0 ] || exit "$status"
}

run_suite build/test-release -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${BLOCKREAD_SKIP_SANITIZERS:-0}" != 1 ]; then
  # halt_on_error: a sanitizer report fails the test instead of scrolling past.
  export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run_suite build/test-asan -DCMAKE_BUILD_TYPE=Debug -DBLOCKREAD_SANITIZE=asan-ubsan
  unset ASAN_OPTIONS UBSAN_OPTIONS
  # Suppressions: only races inside the uninstrumented gRPC/Abseil libraries (see the file).
  # history_size=7: the longest access history, so that the other access of a race is still
  # there to be matched against tsan.supp (with the default, a gRPC-internal race under
  # PerformOps was reported with "[failed to restore the stack]" and escaped its suppression).
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=7:suppressions=$root/tests/tsan.supp"
  run_suite build/test-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBLOCKREAD_SANITIZE=tsan
  unset TSAN_OPTIONS
  # GCC has no libFuzzer; deploy/install-deps.sh installs clang-14 for it. Without it the fuzz
  # stage cannot run, and a test command that silently ran less would pass for the wrong reason.
  if ! command -v clang++-14 >/dev/null; then
    echo "tests/run.sh: clang++-14 is missing (deploy/install-deps.sh tests installs it): the fuzz targets cannot run" >&2
    exit 1
  fi
  run_suite build/test-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
    -DBLOCKREAD_FUZZ=ON
fi
echo "=== tests/run.sh: all tests passed"
