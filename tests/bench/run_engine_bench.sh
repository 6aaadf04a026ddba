#!/usr/bin/env bash
# The engine benchmark of issue 3, end to end: a 1 GiB image of random data on a loop device
# (--direct-io=on), the in-process engine at QD 1/32/128 with the simple path on and off, and fio
# on the same device, QD and CPU, side by side. Then instruction counts per read on each path
# (callgrind, fixed work, setup cancelled out by differencing two run lengths).
#
#   tests/bench/run_engine_bench.sh [--json] [--cpu=N] [--runtime=S] [--no-callgrind]
# Needs root (loop device). Builds into build/bench (RelWithDebInfo) unless BUILD_DIR is set.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
cpu=1
runtime=5
json=""
callgrind=1
for arg in "$@"; do
  case "$arg" in
    --json) json=--json ;;
    --cpu=*) cpu=${arg#--cpu=} ;;
    --runtime=*) runtime=${arg#--runtime=} ;;
    --no-callgrind) callgrind=0 ;;
    *) echo "usage: $0 [--json] [--cpu=N] [--runtime=S] [--no-callgrind]" >&2; exit 2 ;;
  esac
done

build=${BUILD_DIR:-build/bench}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target engine_bench >/dev/null
bench="$build/tests/bench/engine_bench"

work=$(mktemp -d)
loop=""
cleanup() {
  [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
echo "run_engine_bench: writing a 1 GiB image of random data" >&2
dd if=/dev/urandom of="$work/disk.img" bs=1M count=1024 status=none
loop=$(losetup --find --show --direct-io=on "$work/disk.img")
echo "run_engine_bench: $loop, engine and fio pinned to CPU $cpu" >&2

"$bench" --device="$loop" --cpu="$cpu" --qd=1,32,128 --runtime="$runtime" --ramp=1 $json

if [ "$callgrind" = 1 ] && command -v valgrind >/dev/null; then
  echo
  echo "instructions per read (callgrind, QD32, (Ir(N=40000) - Ir(N=20000)) / 20000):"
  for simple in 4096 0; do
    ir=()
    for n in 20000 40000; do
      out="$work/cg.$simple.$n"
      valgrind --tool=callgrind --callgrind-out-file="$out" "$bench" --device="$loop" \
        --cpu="$cpu" --qd=32 --number=$n --simple_max_bytes=$simple --nofio >/dev/null 2>&1
      ir+=("$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')")
    done
    per_read=$(( (ir[1] - ir[0]) / 20000 ))
    echo "  simple_max_bytes=$simple: $per_read instructions per read (user space)"
  done
fi
