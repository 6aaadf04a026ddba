#!/usr/bin/env bash
# Issue 11's measurement (the seeds' point: a raw block device against a file on ext4/XFS): the
# same file read both ways by the in-process engine, side by side, 4 KiB random reads at
# QD 1/32/128, on ext4 and on XFS:
#   fiemap         Catalog::ImportFile: the loop block device at the file's FIEMAP offsets
#   fiemap-frozen  the same extents resolved once (no per-read stat of the path; see engine_bench)
#   file           Catalog::AddWholeDevice on the file: O_DIRECT through the filesystem, the
#                  kernel's iomap direct-I/O path
# Per filesystem: a 1 GiB image on a loop device (--direct-io=on), mkfs, a 512 MiB file of random
# data, synced. Each repeat runs every filesystem once, and in each run every QD runs the routes
# one after the other (A B C, A B C ..., the order rotated each repeat), the engine pinned to --cpu
# with taskset. Short runs, many repeats: adjacent runs see the same background load. Two ways of
# waiting for the device: spin (the server worker's way: IOPS; the thread is always busy, so its
# CPU time per read is ~1/IOPS) and block (sleep in io_uring_wait_cqe: the thread's CPU time per
# read is the work a read costs). Then instructions per read under callgrind (user space only;
# block waits, so no spinning is counted; (Ir(2N) - Ir(N)) / N cancels setup; valgrind 3.19 lacks
# openat2, so tests/bench/valgrind_openat2_shim.cc is preloaded there). Then a perf profile of
# each route (where the engine thread's kernel time goes, in us per read; median of
# --perf-repeats runs). Prints the table of
# tests/bench/route_bench_table.py: per route best and median (of the repeats during which the CPU
# was quieter), and the ratios of the routes taken within each repeat.
#
#   tests/bench/run_route_bench.sh [--cpu=1] [--runtime=1] [--ramp=0.25] [--repeats=15]
#       [--qd=1,32,128] [--fs=ext4,xfs] [--routes=fiemap,fiemap-frozen,file] [--wait=spin,block]
#       [--image-dir=/dev/shm] [--callgrind-reads=50000] [--no-callgrind] [--perf-qd=128]
#       [--perf-repeats=3] [--no-perf] [--keep-json=DIR]
# --image-dir holds the loop images: tmpfs by default, so the "device" is fast and the CPU cost of
# each route shows (a disk-backed image makes both routes wait on the disk). NICE=-N raises the
# engine's priority against other load on its CPU. Needs root. Builds into build/bench
# (RelWithDebInfo) unless BUILD_DIR is set.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
cpu=1 runtime=1 ramp=0.25 repeats=15 qd=1,32,128 fs_list=ext4,xfs
routes=fiemap,fiemap-frozen,file waits=spin,block image_dir=/dev/shm cg_reads=50000
callgrind=1 perf_qd=128 perf_repeats=3 keep_json=""
nice=${NICE:-0}
for arg in "$@"; do
  case "$arg" in
    --cpu=*) cpu=${arg#*=} ;;
    --runtime=*) runtime=${arg#*=} ;;
    --ramp=*) ramp=${arg#*=} ;;
    --repeats=*) repeats=${arg#*=} ;;
    --qd=*) qd=${arg#*=} ;;
    --fs=*) fs_list=${arg#*=} ;;
    --routes=*) routes=${arg#*=} ;;
    --wait=*) waits=${arg#*=} ;;
    --image-dir=*) image_dir=${arg#*=} ;;
    --callgrind-reads=*) cg_reads=${arg#*=} ;;
    --no-callgrind) callgrind=0 ;;
    --perf-qd=*) perf_qd=${arg#*=} ;;
    --perf-repeats=*) perf_repeats=${arg#*=} ;;
    --no-perf) perf_qd="" ;;
    --keep-json=*) keep_json=${arg#*=} ;;
    -h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "run_route_bench: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" != 0 ]; then
  echo "run_route_bench: needs root (loop devices, mkfs, mount)" >&2
  exit 2
fi

build=${BUILD_DIR:-build/bench}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target engine_bench valgrind_openat2_shim >/dev/null
bench="$build/tests/bench/engine_bench"
# valgrind 3.19 fails openat2, which the FIEMAP import opens the file with: see the shim.
shim="$root/$build/tests/bench/libvalgrind_openat2_shim.so"
case "$build" in /*) shim="$build/tests/bench/libvalgrind_openat2_shim.so" ;; esac

work=$(mktemp -d "$image_dir/route-bench.XXXXXX")
mounts=()
loops=()
cleanup() {
  local m l
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir "$work/json"

for fs in ${fs_list//,/ }; do
  img="$work/$fs.img"
  fallocate -l 1G "$img" 2>/dev/null || truncate -s 1G "$img"
  loop=$(losetup --find --show --direct-io=on "$img")
  loops+=("$loop")
  case "$fs" in
    ext4) mkfs.ext4 -q -F "$loop" ;;
    xfs) mkfs.xfs -q -f "$loop" ;;
    *) echo "run_route_bench: unknown filesystem $fs (ext4, xfs)" >&2; exit 2 ;;
  esac
  mkdir "$work/mnt-$fs"
  mount "$loop" "$work/mnt-$fs"
  mounts+=("$work/mnt-$fs")
  echo "run_route_bench: $fs on $loop (image in $image_dir): writing 512 MiB of random data" >&2
  dd if=/dev/urandom of="$work/mnt-$fs/data" bs=1M count=512 conv=fsync status=none
  sync
  echo "run_route_bench: $fs: $(filefrag "$work/mnt-$fs/data" | sed 's/.*: //')" >&2
done

echo "run_route_bench: engine pinned to CPU $cpu (nice $nice), ${runtime}s per run after" \
  "${ramp}s ramp, $repeats repeats" >&2
IFS=, read -r -a route_array <<<"$routes"
for ((rep = 1; rep <= repeats; rep++)); do
  # Rotate the order each repeat (A B C, B C A, C A B ...), so no route always runs first.
  rotated=()
  for ((i = 0; i < ${#route_array[@]}; i++)); do
    rotated+=("${route_array[(i + rep - 1) % ${#route_array[@]}]}")
  done
  order=$(IFS=,; echo "${rotated[*]}")
  for fs in ${fs_list//,/ }; do
    echo "run_route_bench: repeat $rep/$repeats, $fs" >&2
    log="$work/json/run.$fs.$rep.log"
    if ! nice -n "$nice" taskset -c "$cpu" "$bench" --file="$work/mnt-$fs/data" --cpu="$cpu" \
      --route="$order" --qd="$qd" --wait="$waits" --simple_max_bytes=4096 --runtime="$runtime" \
      --ramp="$ramp" --nofio --json >"$work/json/run.$fs.$rep.json" 2>"$log"; then
      cat "$log" >&2
      exit 1
    fi
  done
done

if [ "$callgrind" = 1 ]; then
  if ! command -v valgrind >/dev/null; then
    echo "run_route_bench: valgrind is not installed (apt-get install -y valgrind): no" \
      "instruction counts" >&2
  else
    echo "run_route_bench: callgrind, $cg_reads and $((2 * cg_reads)) reads per route and QD" >&2
    for fs in ${fs_list//,/ }; do
      for route in ${routes//,/ }; do
        for q in ${qd//,/ }; do
          for n in "$cg_reads" "$((2 * cg_reads))"; do
            out="$work/json/cg.$fs.$route.$q.$n"
            if ! LD_PRELOAD="$shim" taskset -c "$cpu" valgrind --tool=callgrind \
              --callgrind-out-file="$out.out" "$bench" --file="$work/mnt-$fs/data" --cpu="$cpu" \
              --route="$route" --qd="$q" --number="$n" --wait=block --simple_max_bytes=4096 \
              --nofio --json >"$out.json" 2>"$out.log"; then
              grep -v '^==' "$out.log" >&2
              exit 1
            fi
            callgrind_annotate "$out.out" 2>/dev/null |
              awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}' >"$out.ir"
            rm -f "$out.out"
          done
        done
      done
    done
  fi
fi

# Where the engine thread's kernel time goes, per route: one run each at --perf-qd, wait=block,
# sampled with perf's cpu-clock (a software event: this VM has no hardware counters), routes
# alternating. The table
# turns each function's inclusive share into microseconds per read.
if [ -n "$perf_qd" ]; then
  if ! command -v perf >/dev/null; then
    echo "run_route_bench: perf is not installed: no kernel profile" >&2
  else
    echo "run_route_bench: perf profile of each route at QD $perf_qd, $perf_repeats repeats" >&2
    for ((rep = 1; rep <= perf_repeats; rep++)); do
      for fs in ${fs_list//,/ }; do
        for route in ${routes//,/ }; do
          out="$work/json/perf.$fs.$route.$rep"
          if ! perf record -q -e cpu-clock -F 10000 -g -o "$out.data" -- taskset -c "$cpu" \
            "$bench" --file="$work/mnt-$fs/data" --cpu="$cpu" --route="$route" --qd="$perf_qd" \
            --wait=block --simple_max_bytes=4096 --runtime=4 --ramp=0.5 --nofio --json \
            >"$out.json" 2>"$out.log"; then
            cat "$out.log" >&2
            exit 1
          fi
          perf report -q -i "$out.data" --children --sort sym -g none --stdio >"$out.txt" \
            2>/dev/null
          rm -f "$out.data"
        done
      done
    done
  fi
fi

[ -n "$keep_json" ] && mkdir -p "$keep_json" && cp "$work"/json/* "$keep_json"/

/usr/bin/python3 "$root/tests/bench/route_bench_table.py" "$work/json"
