#!/usr/bin/env bash
# Issue 4's measurements, on the demo device: p50/p99 of 10,000 sequential 4 KiB ReadBlock calls,
# server CPU time per read at QD1 and QD32, and the idle server's CPU use over 30 s. The server is
# pinned to CPU 0 (--cpus=0), the load generator to CPU 1.
#   tests/bench/run_rpc_bench.sh [--idle-seconds=30]
set -euo pipefail
cd "$(dirname "$0")/../.."
idle=30
for arg in "$@"; do
  case "$arg" in
    --idle-seconds=*) idle=${arg#--idle-seconds=} ;;
    *) echo "usage: $0 [--idle-seconds=N]" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-build/bench}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target blockread-server rpc_bench >/dev/null
work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
port=$((20000 + RANDOM % 20000))
"$build/server/blockread-server" --cpus=0 --data_dir="$work/data" --listen=127.0.0.1:$port \
  >"$work/server.out" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do grep -q listening "$work/server.out" 2>/dev/null && break; sleep 0.1; done
ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }
hz=$(getconf CLK_TCK)

before=$(ticks); sleep "$idle"; after=$(ticks)
echo "idle ${idle}s: server CPU $(( (after - before) * 1000 / hz )) ms ($(awk -v t=$((after - before)) -v hz=$hz -v s=$idle 'BEGIN {printf "%.3f", 100 * t / hz / s}')% of one CPU)"
bench="taskset -c 1 $build/tests/bench/rpc_bench --target=127.0.0.1:$port --server_pid=$server_pid"
$bench --qd=1 --number=1000 >/dev/null  # warm up
echo "sequential (QD1): $($bench --qd=1 --number=10000)"
echo "QD32:             $($bench --qd=32 --number=0 --seconds=10)"
