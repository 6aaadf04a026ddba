#!/usr/bin/env bash
# compare.sh for two or more source trees, alternately (a benchmark, not a test): for a change
# measured on a noisy machine, each tree's runs are interleaved with the others', so that load
# which comes and goes falls on all of them, and every blockread figure is also given as a ratio
# to the references measured in the same run (qemu-nbd, local fio), which share that run's
# conditions.
#
#   tests/bench/compare_before_after.sh TREE TREE... [--rounds=2] [compare.sh options]
# Each tree needs its release build in $BUILD_DIR (default build/rel) and its own
# tests/bench/compare.sh (run from that tree). Runs are named by the tree's directory name and the
# round. Needs root, as compare.sh does. Keeps each run's table in $OUT (default
# /tmp/blockread-before-after/<run>.txt) and prints, for 128K QD8 and 4K QD32, stream then unary:
# IOPS, MiB/s, p50, and IOPS over qemu-nbd's and local fio's.
set -euo pipefail
trees=()
rounds=2
args=()
for arg in "$@"; do
  case "$arg" in
    --rounds=*) rounds=${arg#*=} ;;
    --*) args+=("$arg") ;;
    *) trees+=("$arg") ;;
  esac
done
[ ${#trees[@]} -ge 2 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
out=${OUT:-/tmp/blockread-before-after}
mkdir -p "$out"
export BUILD_DIR=${BUILD_DIR:-build/rel}

runs=()
count=${#trees[@]}
for round in $(seq "$rounds"); do
  # Each round starts one tree later than the last: no tree always gets the same slot.
  for i in $(seq 0 $((count - 1))); do
    tree=${trees[$(((i + round - 1) % count))]}
    run=$(basename "$tree")-$round
    echo "compare_before_after.sh: $run ($tree) from $(date +%T)" >&2
    (cd "$tree" && tests/bench/compare.sh "${args[@]}") >"$out/$run.txt"
    runs+=("$run")
  done
done

printf '%-10s %-9s %-7s %9s %9s %9s %9s %10s %9s %10s\n' \
  run workload mode IOPS MiB/s p50_us nbd_IOPS local_IOPS IOPS/nbd IOPS/local
for run in "${runs[@]}"; do
  for w in 128k-qd8 4k-qd32; do
    for mode in stream unary; do
      # compare.sh's table: "blockread MODE WORKLOAD IOPS MiB/s p50 ...", "qemu-nbd WORKLOAD
      # IOPS ...", "local fio WORKLOAD IOPS ...".
      awk -v run="$run" -v w="$w" -v m="$mode" '
        $1 == "blockread" && $2 == m && $3 == w {iops = $4; mib = $5; p50 = $6}
        $1 == "qemu-nbd" && $2 == w {nbd = $3}
        $1 == "local" && $3 == w {loc = $4}
        END {printf "%-10s %-9s %-7s %9.0f %9.1f %9.0f %9.0f %10.0f %8.2fx %9.3fx\n",
                    run, w, m, iops, mib, p50, nbd, loc, iops / nbd, iops / loc}' "$out/$run.txt"
    done
  done
done
