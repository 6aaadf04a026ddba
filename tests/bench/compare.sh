#!/usr/bin/env bash
# End to end (a benchmark, not a test): blockread against the local ceiling and against the peer
# users pick today for remote block reads, side by side in one run on one loop device holding an
# image of random data.
#
#   (a) local:     fio --ioengine=io_uring --direct=1 on the device
#   (b) blockread: blockread-server serving the whole device, driven by `blockread load` with its
#                  own defaults and only --bs, --qd and --mode given (unary: ReadBlock; stream:
#                  ReadBlocks), as a user would run it
#   (c) qemu-nbd:  qemu-nbd -r --cache=none --aio=io_uring, driven by fio --ioengine=nbd, the queue
#                  depth split over up to --connections NBD connections (fio jobs)
#
# Workloads: 4K randread QD1, 4K QD32, 16K QD16, 128K QD8, each run for the same time. The server
# side (fio in (a), blockread-server, qemu-nbd) is pinned to CPU $SERVER_CPU, the load generator
# to CPU $CLIENT_CPU. Single runs of the references swing by up to 1.6x on shared machines, so
# the systems run in --rounds rounds, in a different order each round, and the table gives the
# median of each figure over the rounds: IOPS, MiB/s, p50, p99, and the server side's CPU time
# per read (fio's own CPU for (a)); then the ratios blockread/local fio and blockread/qemu-nbd.
# With --before=DIR (the build directory of another tree, e.g. a checkout of the commit before a
# change, built with the same cmake), its server and client run as two more systems, "before
# unary" and "before stream", in the same rounds, so a change is measured side by side.
#
#   tests/bench/compare.sh [--rounds=5] [--runtime=5] [--ramp=1] [--size-mib=1024]
#                          [--connections=4] [--keep-json=DIR] [--before=BUILD_DIR]
# Needs root (loop device). Build dir: $BUILD_DIR (default build/bench, RelWithDebInfo). The image
# goes in $IMAGE_DIR (default /var/tmp): on this project's shared machines the disk under /var/tmp
# varies several-fold from minute to minute, so for a change on the CPU side (the server, the
# client) put it in memory, IMAGE_DIR=/dev/shm, and the device stops being the bottleneck.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=5 runtime=5 ramp=1 size_mib=1024 connections=4 keep_json="" before=""
for arg in "$@"; do
  case "$arg" in
    --rounds=*) rounds=${arg#*=} ;;
    --runtime=*) runtime=${arg#*=} ;;
    --ramp=*) ramp=${arg#*=} ;;
    --size-mib=*) size_mib=${arg#*=} ;;
    --connections=*) connections=${arg#*=} ;;
    --keep-json=*) keep_json=${arg#*=} ;;
    --before=*) before=${arg#*=} ;;
    -h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
for tool in fio qemu-nbd jq losetup taskset; do
  command -v "$tool" >/dev/null || { echo "compare.sh: $tool missing (deploy/install-deps.sh)" >&2; exit 1; }
done

build=${BUILD_DIR:-build/bench}
echo "compare.sh: building $build" >&2
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target blockread-server blockread >/dev/null
for bin in "$build" ${before:+"$before"}; do
  for b in server/blockread-server client/blockread; do
    [ -x "$bin/$b" ] || { echo "compare.sh: $bin/$b missing" >&2; exit 1; }
  done
done

work=$(mktemp -d "${IMAGE_DIR:-/var/tmp}/blockread-compare-XXXXXX")
loop="" peer_pid=""
stop_peer() {
  if [ -n "$peer_pid" ]; then
    kill "$peer_pid" 2>/dev/null || true
    wait "$peer_pid" 2>/dev/null || true
    peer_pid=""
  fi
}
cleanup() {
  stop_peer
  [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

echo "compare.sh: writing a ${size_mib} MiB image of random data" >&2
head -c "$((size_mib << 20))" /dev/urandom >"$work/disk.img"
loop=$(losetup --find --show --direct-io=on "$work/disk.img")
echo "compare.sh: device $loop" >&2

hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
port() { echo $((20000 + RANDOM % 20000)); }

# One result row per round: system|workload|iops|bw_bytes|p50_us|p99_us|cpu_us_per_read
rows=()
add_row() { rows+=("$(printf '%s|%s|%s|%s|%s|%s|%s' "$@")"); }

# CPU microseconds per read from process ticks taken around the whole run, ramp included, so the
# reads are counted over the whole run too (measured IOPS x (runtime + ramp)).
cpu_per_read() {  # ticks_before ticks_after iops
  awk -v b="$1" -v a="$2" -v i="$3" -v t="$((runtime + ramp))" -v hz="$hz" \
    'BEGIN { n = i * t; if (n > 0) printf "%.1f", (a - b) / hz * 1e6 / n; else print "-" }'
}

fio_row() {  # system workload json_file cpu_us_per_read
  local json=$3
  add_row "$1" "$2" "$(jq '.jobs[0].read.iops' "$json")" "$(jq '.jobs[0].read.bw_bytes' "$json")" \
    "$(jq '.jobs[0].read.clat_ns.percentile["50.000000"] / 1000' "$json")" \
    "$(jq '.jobs[0].read.clat_ns.percentile["99.000000"] / 1000' "$json")" "$4"
}

# workload name, block size, queue depth
workloads=("4k-qd1 4k 1" "4k-qd32 4k 32" "16k-qd16 16k 16" "128k-qd8 128k 8")
systems=("local fio" "blockread unary" "blockread stream" "qemu-nbd")
[ -n "$before" ] && systems+=("before unary" "before stream")
fio_common=(--rw=randread --runtime="$runtime" --ramp_time="$ramp" --time_based
            --output-format=json --group_reporting)

# (a) local ceiling: fio on the device, on the server CPU (it plays the server's part). Its CPU
# per read is its own, from fio's usr_cpu and sys_cpu (percent of the measured time).
run_local() {  # round
  local w wname bs qd json
  for w in "${workloads[@]}"; do
    read -r wname bs qd <<<"$w"
    json=$work/local-$wname-$1.json
    taskset -c "$server_cpu" fio --name=local --filename="$loop" --ioengine=io_uring --direct=1 \
      --bs="$bs" --iodepth="$qd" --numjobs=1 "${fio_common[@]}" --output="$json" >/dev/null
    fio_row "local fio" "$wname" "$json" "$(jq --argjson t "$runtime" \
      '.jobs[0] | (.usr_cpu + .sys_cpu) / 100 * $t * 1e6 / (.read.iops * $t) * 10 | round / 10' "$json")"
  done
}

# (b) blockread: one worker on the server CPU, the load client on the other.
run_blockread() {  # system build_dir mode round
  local system=$1 bin=$2 mode=$3 round=$4 w wname bs qd json before after errors bport
  bport=$(port)
  taskset -c "$server_cpu" "$bin/server/blockread-server" --cpus="$server_cpu" --listen=127.0.0.1:$bport \
    --device=disk="$loop" >"$work/server.out" 2>"$work/server.log" &
  peer_pid=$!
  for _ in $(seq 100); do grep -q listening "$work/server.out" 2>/dev/null && break; sleep 0.1; done
  grep -q listening "$work/server.out" || { cat "$work/server.log" >&2; exit 1; }
  for w in "${workloads[@]}"; do
    read -r wname bs qd <<<"$w"
    json=$work/${system// /-}-$wname-$round.json
    before=$(cpu_ticks "$peer_pid")
    taskset -c "$client_cpu" "$bin/client/blockread" load --target=127.0.0.1:$bport --file=disk \
      --bs="$bs" --qd="$qd" --mode="$mode" --runtime="$runtime" --ramp="$ramp" --output=json >"$json"
    after=$(cpu_ticks "$peer_pid")
    errors=$(jq '[.errors[]] | add // 0' "$json")
    [ "$errors" = 0 ] || { echo "compare.sh: $system $wname had $errors errors" >&2; exit 1; }
    add_row "$system" "$wname" "$(jq .iops "$json")" "$(jq .bw_bytes "$json")" \
      "$(jq .lat_us.p50 "$json")" "$(jq .lat_us.p99 "$json")" \
      "$(cpu_per_read "$before" "$after" "$(jq .iops "$json")")"
  done
  stop_peer
}

# (c) qemu-nbd over TCP on loopback, fio's nbd engine (libnbd) as the client.
run_nbd() {  # round
  local w wname bs qd json before after conns nport
  nport=$(port)
  taskset -c "$server_cpu" qemu-nbd -r --cache=none --aio=io_uring -f raw -b 127.0.0.1 -p "$nport" \
    --persistent --shared=8 "$loop" 2>"$work/qemu-nbd.log" &
  peer_pid=$!
  sleep 1
  for w in "${workloads[@]}"; do
    read -r wname bs qd <<<"$w"
    conns=$((qd < connections ? qd : connections))
    json=$work/nbd-$wname-$1.json
    before=$(cpu_ticks "$peer_pid")
    taskset -c "$client_cpu" fio --name=nbd --ioengine=nbd --uri="nbd://127.0.0.1:$nport" \
      --bs="$bs" --numjobs="$conns" --iodepth="$((qd / conns))" "${fio_common[@]}" \
      --output="$json" >/dev/null
    after=$(cpu_ticks "$peer_pid")
    fio_row "qemu-nbd" "$wname" "$json" \
      "$(cpu_per_read "$before" "$after" "$(jq '.jobs[0].read.iops' "$json")")"
  done
  stop_peer
}

run_system() {  # system round
  case "$1" in
    "local fio") run_local "$2" ;;
    "blockread unary") run_blockread "$1" "$build" unary "$2" ;;
    "blockread stream") run_blockread "$1" "$build" stream "$2" ;;
    "before unary") run_blockread "$1" "$before" unary "$2" ;;
    "before stream") run_blockread "$1" "$before" stream "$2" ;;
    "qemu-nbd") run_nbd "$2" ;;
  esac
}

for round in $(seq "$rounds"); do
  # Each round starts one system later than the one before, so none always runs first or last.
  for i in $(seq 0 $((${#systems[@]} - 1))); do
    system=${systems[$(((i + round - 1) % ${#systems[@]}))]}
    echo "compare.sh: round $round/$rounds: $system" >&2
    run_system "$system" "$round"
  done
done

[ -n "$keep_json" ] && mkdir -p "$keep_json" && cp "$work"/*.json "$keep_json"/

# The median over the rounds of one figure (field 2..6 of a row after system|workload).
median() {  # system workload field
  local r
  for r in "${rows[@]}"; do
    IFS='|' read -r -a f <<<"$r"
    [ "${f[0]}" = "$1" ] && [ "${f[1]}" = "$2" ] && echo "${f[$3]}"
  done | sort -g | awk '{v[NR] = $1} END {
    if (NR == 0 || v[1] == "-") { print "-"; exit }
    if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo
echo "device $loop (${size_mib} MiB random, loop --direct-io=on), ${rounds} rounds of ${runtime}s" \
  "+ ramp ${ramp}s, medians; server side on CPU $server_cpu, load on CPU $client_cpu;" \
  "qemu-nbd over up to $connections connections"
printf '%-18s %-9s %10s %9s %9s %9s %14s\n' system workload IOPS MiB/s p50_us p99_us cpu_us/read
for w in "${workloads[@]}"; do
  read -r wname _ _ <<<"$w"
  for system in "${systems[@]}"; do
    printf '%-18s %-9s %10.0f %9.1f %9.1f %9.1f %14s\n' "$system" "$wname" \
      "$(median "$system" "$wname" 2)" \
      "$(awk -v b="$(median "$system" "$wname" 3)" 'BEGIN {print b / 1048576}')" \
      "$(median "$system" "$wname" 4)" "$(median "$system" "$wname" 5)" \
      "$(median "$system" "$wname" 6)"
  done
done
echo
printf '%-9s %-17s %11s %11s %11s %11s %13s\n' workload system IOPS/local IOPS/nbd p50/nbd \
  p99/nbd cpu/rd/local
for w in "${workloads[@]}"; do
  read -r wname _ _ <<<"$w"
  for system in "${systems[@]}"; do
    [ "$system" = "local fio" ] || [ "$system" = qemu-nbd ] && continue
    awk -v w="$wname" -v m="$system" \
      -v bi="$(median "$system" "$wname" 2)" -v ni="$(median qemu-nbd "$wname" 2)" \
      -v li="$(median "local fio" "$wname" 2)" \
      -v bp50="$(median "$system" "$wname" 4)" -v np50="$(median qemu-nbd "$wname" 4)" \
      -v bp99="$(median "$system" "$wname" 5)" -v np99="$(median qemu-nbd "$wname" 5)" \
      -v bc="$(median "$system" "$wname" 6)" -v lc="$(median "local fio" "$wname" 6)" \
      'BEGIN { printf "%-9s %-17s %10.2fx %10.2fx %10.2fx %10.2fx %12.2fx\n", w, m, bi / li,
               bi / ni, bp50 / np50, bp99 / np99, bc / lc }'
  done
done
