#!/usr/bin/env bash
# Issue 5's end-to-end benchmark (a benchmark, not a test): blockread against the local ceiling
# and against the peer users pick today for remote block reads, side by side in one run on one
# loop device holding a 1 GiB image of random data.
#
#   (a) local:     fio --ioengine=io_uring --direct=1 on the device
#   (b) blockread: blockread-server serving the whole device, driven by `blockread load`,
#                  unary (ReadBlock) and stream (ReadBlocks, --batch) modes
#   (c) qemu-nbd:  qemu-nbd -r --cache=none --aio=io_uring, driven by fio --ioengine=nbd
#
# Workloads: 4K randread QD1, 4K randread QD32, 128K randread QD8, each run for the same time.
# The server side (fio in (a), blockread-server, qemu-nbd) is pinned to CPU $SERVER_CPU, the
# load generator to CPU $CLIENT_CPU. Prints one table with IOPS, MiB/s, p50, p99, the server
# side's CPU time per read, and the ratios blockread/qemu-nbd and blockread/local.
#
# The queue depth is split over --connections client connections (blockread: load threads, one
# channel each; qemu-nbd: fio jobs, one NBD connection each), the same for both, so each side
# gets the same reads in flight over the same number of TCP connections; a stream carries its
# whole share of reads in one message (batch = queue depth per connection, at most
# --stream-batch).
#
#   tests/bench/compare.sh [--runtime=10] [--ramp=2] [--size-mib=1024] [--stream-batch=8]
#                          [--connections=4] [--keep-json=DIR]
# Needs root (loop device). Build dir: $BUILD_DIR (default build/bench, RelWithDebInfo). The image
# goes in $IMAGE_DIR (default /var/tmp): on this project's shared machines the disk under /var/tmp
# varies several-fold from minute to minute, so for a change on the CPU side (the server, the
# client) put it in memory, IMAGE_DIR=/dev/shm, and the device stops being the bottleneck.
set -euo pipefail
cd "$(dirname "$0")/../.."
runtime=10 ramp=2 size_mib=1024 stream_batch=8 connections=4 keep_json=""
for arg in "$@"; do
  case "$arg" in
    --runtime=*) runtime=${arg#*=} ;;
    --ramp=*) ramp=${arg#*=} ;;
    --size-mib=*) size_mib=${arg#*=} ;;
    --stream-batch=*) stream_batch=${arg#*=} ;;
    --connections=*) connections=${arg#*=} ;;
    --keep-json=*) keep_json=${arg#*=} ;;
    -h | --help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
server_bin=$build/server/blockread-server
client_bin=$build/client/blockread

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

# One result row: name workload iops bw_bytes p50_us p99_us server_cpu_us_per_read
rows=()
add_row() { rows+=("$(printf '%s|%s|%s|%s|%s|%s|%s' "$@")"); }

# CPU microseconds the server-side process used per read. The ticks are taken around the whole
# run, ramp included, so the reads are counted over the whole run too (measured IOPS x
# (runtime + ramp)).
cpu_per_read() {  # ticks_before ticks_after reads seconds_total
  awk -v b="$1" -v a="$2" -v n="$3" -v hz="$hz" 'BEGIN { if (n > 0) printf "%.1f", (a - b) / hz * 1e6 / n; else print "-" }'
}

fio_row() {  # name workload json_file [total_seconds ticks_before ticks_after]: CPU/read if given
  local name=$1 workload=$2 json=$3 ticks_b=${5:-} ticks_a=${6:-}
  local iops bw p50 p99 cpu="-"
  iops=$(jq '.jobs[0].read.iops' "$json")
  bw=$(jq '.jobs[0].read.bw_bytes' "$json")
  p50=$(jq '.jobs[0].read.clat_ns.percentile["50.000000"] / 1000' "$json")
  p99=$(jq '.jobs[0].read.clat_ns.percentile["99.000000"] / 1000' "$json")
  if [ -n "$ticks_b" ]; then
    local total_reads
    total_reads=$(awk -v i="$iops" -v t="$4" 'BEGIN {printf "%d", i * t}')
    cpu=$(cpu_per_read "$ticks_b" "$ticks_a" "$total_reads")
  fi
  add_row "$name" "$workload" "$iops" "$bw" "$p50" "$p99" "$cpu"
}

# workload name, block size, queue depth
workloads=("4k-qd1 4k 1" "4k-qd32 4k 32" "128k-qd8 128k 8")
fio_common=(--rw=randread --runtime="$runtime" --ramp_time="$ramp" --time_based
            --output-format=json --group_reporting)
# Connections for a queue depth (never more than the reads in flight), and the depth of each.
conns_for() { echo $(($1 < connections ? $1 : connections)); }

# (a) local ceiling: fio on the device, on the server CPU (it plays the server's part).
for w in "${workloads[@]}"; do
  read -r wname bs qd <<<"$w"
  echo "compare.sh: local fio $wname" >&2
  taskset -c "$server_cpu" fio --name=local --filename="$loop" --ioengine=io_uring --direct=1 \
    --bs="$bs" --iodepth="$qd" --numjobs=1 "${fio_common[@]}" \
    --output="$work/local-$wname.json" >/dev/null
  fio_row "local fio" "$wname" "$work/local-$wname.json"
done

# (b) blockread: one worker on the server CPU, the load client on the other.
bport=$(port)
taskset -c "$server_cpu" "$server_bin" --cpus="$server_cpu" --listen=127.0.0.1:$bport \
  --device=disk="$loop" >"$work/server.out" 2>"$work/server.log" &
peer_pid=$!
for _ in $(seq 100); do grep -q listening "$work/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$work/server.out" || { cat "$work/server.log" >&2; exit 1; }
for mode in unary stream; do
  for w in "${workloads[@]}"; do
    read -r wname bs qd <<<"$w"
    conns=$(conns_for "$qd")
    per_conn=$((qd / conns))
    batch=1
    [ "$mode" = stream ] && batch=$((per_conn < stream_batch ? per_conn : stream_batch))
    echo "compare.sh: blockread $mode $wname ($conns x QD$per_conn, batch $batch)" >&2
    json=$work/blockread-$mode-$wname.json
    before=$(cpu_ticks "$peer_pid")
    taskset -c "$client_cpu" "$client_bin" load --target=127.0.0.1:$bport --file=disk \
      --rw=randread --bs="$bs" --threads="$conns" --channels="$conns" --qd="$per_conn" \
      --mode="$mode" --batch="$batch" --runtime="$runtime" --ramp="$ramp" --output=json >"$json"
    after=$(cpu_ticks "$peer_pid")
    errors=$(jq '[.errors[]] | add // 0' "$json")
    [ "$errors" = 0 ] || { echo "compare.sh: blockread $mode $wname had $errors errors" >&2; exit 1; }
    # Ramp reads are served too; count them at the measured rate so CPU/read is comparable.
    total=$(jq --argjson t "$((runtime + ramp))" '.iops * $t | floor' "$json")
    add_row "blockread $mode" "$wname" "$(jq .iops "$json")" "$(jq .bw_bytes "$json")" \
      "$(jq .lat_us.p50 "$json")" "$(jq .lat_us.p99 "$json")" \
      "$(cpu_per_read "$before" "$after" "$total")"
  done
done
stop_peer

# (c) qemu-nbd over TCP on loopback, fio's nbd engine (libnbd) as the client.
nport=$(port)
taskset -c "$server_cpu" qemu-nbd -r --cache=none --aio=io_uring -f raw -b 127.0.0.1 -p "$nport" \
  --persistent --shared=8 "$loop" 2>"$work/qemu-nbd.log" &
peer_pid=$!
sleep 1
for w in "${workloads[@]}"; do
  read -r wname bs qd <<<"$w"
  conns=$(conns_for "$qd")
  echo "compare.sh: qemu-nbd $wname ($conns x QD$((qd / conns)))" >&2
  before=$(cpu_ticks "$peer_pid")
  taskset -c "$client_cpu" fio --name=nbd --ioengine=nbd --uri="nbd://127.0.0.1:$nport" \
    --bs="$bs" --numjobs="$conns" --iodepth="$((qd / conns))" "${fio_common[@]}" \
    --output="$work/nbd-$wname.json" >/dev/null
  after=$(cpu_ticks "$peer_pid")
  fio_row "qemu-nbd" "$wname" "$work/nbd-$wname.json" "$((runtime + ramp))" "$before" "$after"
done
stop_peer

[ -n "$keep_json" ] && mkdir -p "$keep_json" && cp "$work"/*.json "$keep_json"/

# The table, then the ratios for each workload.
value() {  # system workload field(3..7)
  local r
  for r in "${rows[@]}"; do
    IFS='|' read -r -a f <<<"$r"
    [ "${f[0]}" = "$1" ] && [ "${f[1]}" = "$2" ] && { echo "${f[$3]}"; return; }
  done
}
echo
echo "device $loop (${size_mib} MiB random, loop --direct-io=on), runtime ${runtime}s + ramp ${ramp}s," \
  "server side on CPU $server_cpu, load on CPU $client_cpu, up to $connections connections," \
  "stream batch up to $stream_batch"
printf '%-18s %-9s %10s %9s %9s %9s %12s\n' system workload IOPS MiB/s p50_us p99_us srv_cpu_us/rd
for w in "${workloads[@]}"; do
  read -r wname _ _ <<<"$w"
  for system in "local fio" "blockread unary" "blockread stream" "qemu-nbd"; do
    printf '%-18s %-9s %10.0f %9.1f %9.1f %9.1f %12s\n' "$system" "$wname" \
      "$(value "$system" "$wname" 2)" "$(awk -v b="$(value "$system" "$wname" 3)" 'BEGIN {print b / 1048576}')" \
      "$(value "$system" "$wname" 4)" "$(value "$system" "$wname" 5)" "$(value "$system" "$wname" 6)"
  done
done
echo
printf '%-9s %-8s %14s %14s %14s %14s %14s\n' workload mode IOPS/nbd IOPS/local p50/nbd p99/nbd cpu/rd/unary
for w in "${workloads[@]}"; do
  read -r wname _ _ <<<"$w"
  for mode in unary stream; do
    system="blockread $mode"
    awk -v w="$wname" -v m="$mode" \
      -v bi="$(value "$system" "$wname" 2)" -v ni="$(value qemu-nbd "$wname" 2)" \
      -v li="$(value "local fio" "$wname" 2)" \
      -v bp50="$(value "$system" "$wname" 4)" -v np50="$(value qemu-nbd "$wname" 4)" \
      -v bp99="$(value "$system" "$wname" 5)" -v np99="$(value qemu-nbd "$wname" 5)" \
      -v bc="$(value "$system" "$wname" 6)" -v uc="$(value "blockread unary" "$wname" 6)" \
      'BEGIN { printf "%-9s %-8s %13.2fx %13.2fx %13.2fx %13.2fx %13.2fx\n", w, m, bi / ni, bi / li, bp50 / np50, bp99 / np99, bc / uc }'
  done
done
