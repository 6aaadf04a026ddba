#!/usr/bin/env bash
# Where a read's instructions go, end to end (a profile, not a test): blockread-server and
# `blockread load` both run under callgrind for a fixed number of 4K random reads on the demo
# device, in unary and in stream mode; prints instructions per read for each process and the
# server's main inclusive costs per read, and the largest callers of the server's memcpy.
# Instruction counts do not depend on the machine's speed, so they compare across runs where
# wall-clock figures cannot. Each mode runs twice, N and 2N reads: the figures are the difference
# over the extra reads, so start-up and teardown do not count.
#
#   tests/bench/profile_rpc.sh [--reads=20000] [--qd=32] [--connections=N] [--batch=N]
# The load runs with its own defaults for everything but --qd (what a user gets), unless
# --connections (threads, one channel each, --qd reads in flight each) or --batch are given.
# Output files stay in $PROFILE_DIR (default /tmp/blockread-profile) for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/../.."
reads=20000 connections="" qd=32 batch=""
for arg in "$@"; do
  case "$arg" in
    --reads=*) reads=${arg#*=} ;;
    --connections=*) connections=${arg#*=} ;;
    --qd=*) qd=${arg#*=} ;;
    --batch=*) batch=${arg#*=} ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "profile_rpc.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "profile_rpc.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
build=${BUILD_DIR:-build/bench}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target blockread-server blockread >/dev/null
out=${PROFILE_DIR:-/tmp/blockread-profile}
rm -rf "$out" && mkdir -p "$out"
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; true' EXIT

total_ir() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }
# The largest callers of memcpy: "instructions function" lines, most first.
memcpy_callers() {  # file, count
  callgrind_annotate --tree=caller --threshold=100 "$1" 2>/dev/null |
    awk '/^ *$/ {n = 0; next}
         / < / {lines[n++] = $0; next}
         /\* .*__memcpy_avx_unaligned_erms/ {for (i = 0; i < n; i++) print lines[i]; exit}
         {n = 0}' |
    sed -E 's/^ *([0-9,]+) \([^)]*\) +< +[^:]*:(.*) \([0-9,]+x\).*/\1 \2/; :a; s/^([0-9]+),([0-9])/\1\2/; ta' |
    sort -k1,1 -nr | head -n "$2"
}
inclusive_ir() {  # file, function pattern
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk -v pat="$2" 'index($0, pat) {gsub(",", "", $1); if ($1 + 0 > max) max = $1 + 0}
                     END {print max + 0}'
}

# One run of `mode` with `count` reads under callgrind, server and client: leaves
# $out/{server,client}-$mode-$count.out and $out/load-$mode-$count.json.
profile_run() {  # mode count
  local mode=$1 count=$2 port
  local load_flags=(--bs=4k --qd="$qd" --mode="$mode")
  [ -n "$connections" ] && load_flags+=(--threads="$connections" --channels="$connections")
  [ -n "$batch" ] && [ "$mode" = stream ] && load_flags+=(--batch="$batch")
  port=$((20000 + RANDOM % 20000))
  taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$out/server-$mode-$count.out" \
    "$build/server/blockread-server" --cpus=0 --data-dir="$out/data" --listen=127.0.0.1:$port \
    --metrics-listen= >"$out/server-$mode-$count.stdout" 2>"$out/server-$mode-$count.log" &
  server_pid=$!
  for _ in $(seq 120); do grep -q listening "$out/server-$mode-$count.stdout" 2>/dev/null && break; sleep 0.5; done
  # Then one call through, with no short deadline: under callgrind on a busy machine the server's
  # first calls took longer than the load's 10 s per call, and the load failed DEADLINE_EXCEEDED.
  "$build/client/blockread" --target=127.0.0.1:$port --timeout-ms=300000 health >/dev/null
  taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$out/client-$mode-$count.out" \
    "$build/client/blockread" load --target=127.0.0.1:$port --file=large "${load_flags[@]}" \
    --number="$count" --output=json >"$out/load-$mode-$count.json" 2>"$out/client-$mode-$count.log"
  kill -INT "$server_pid"; wait "$server_pid" || true
  server_pid=""
}

# Per read: the difference between a run of 2N reads and a run of N, over the extra reads, so
# process start and exit (loading, connecting, tearing down: tens of millions of instructions)
# do not count.
for mode in unary stream; do
  profile_run "$mode" "$reads"
  profile_run "$mode" "$((2 * reads))"
  n1=$(jq .issued "$out/load-$mode-$reads.json")
  n2=$(jq .issued "$out/load-$mode-$((2 * reads)).json")
  per() { awk -v a="$1" -v b="$2" -v n="$((n2 - n1))" 'BEGIN { printf "%8.0f", (b - a) / n }'; }
  s1=$out/server-$mode-$reads.out s2=$out/server-$mode-$((2 * reads)).out
  c1=$out/client-$mode-$reads.out c2=$out/client-$mode-$((2 * reads)).out
  server_inclusive() {  # function pattern
    per "$(inclusive_ir "$s1" "$1")" "$(inclusive_ir "$s2" "$1")"
  }
  echo "$mode ($(jq -r '.settings | to_entries | map("\(.key)=\(.value)") | join(" ")' \
    "$out/load-$mode-$((2 * reads)).json"), QD$qd;" \
    "$n2 - $n1 reads): instructions per read"
  echo "  client process total           $(per "$(total_ir "$c1")" "$(total_ir "$c2")")"
  echo "  server process total           $(per "$(total_ir "$s1")" "$(total_ir "$s2")")"
  echo "    gRPC queue polling/transport $(server_inclusive "CompletionQueue::AsyncNextInternal")"
  echo "    engine PollOnce (+callbacks) $(server_inclusive "EngineContext::PollOnce()")"
  echo "    engine StartRead             $(server_inclusive "EngineContext::StartRead(")"
  echo "    ReadPipeline::OnReadDone     $(server_inclusive "ReadPipeline::OnReadDone(")"
  echo "    ReadPipeline::StartItem      $(server_inclusive "ReadPipeline::StartItem(")"
  if [ "$mode" = stream ]; then
    echo "    ReadBlocksCall::OnEvent      $(server_inclusive "ReadBlocksCall::OnEvent(")"
    echo "    ReadBlocksCall::Flush        $(server_inclusive "ReadBlocksCall::Flush()")"
  fi
  echo "    memcpy                       $(server_inclusive "__memcpy_avx_unaligned_erms")"
  # Of the longer run (the annotate pipelines stop reading early: SIGPIPE upstream is expected).
  memcpy_callers "$s2" 3 | while read -r ir name; do
    echo "      from $(awk -v a="$ir" -v n="$n2" 'BEGIN { printf "%8.0f", a / n }')   ${name:0:70}"
  done || true
done
