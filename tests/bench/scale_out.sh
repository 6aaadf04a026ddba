#!/usr/bin/env bash
# Aggregate 4 KiB QD32 stream IOPS of `blockread load` over 1, 2 and 3 servers serving the same
# file (issue 15), side by side in one run. Every server runs one worker pinned to CPU 0
# (--cpus=0), the load client runs on CPU 1 (taskset), so the servers share one CPU whatever
# their number: on a 2-CPU machine the figure shows the client's routing cost and what one
# server CPU can do, not scale. Servers listen on 127.0.0.1 only.
#
#   tests/bench/scale_out.sh [--runtime=5] [--repeat=2] [--build-dir=build/test-release]
set -euo pipefail
cd "$(dirname "$0")/../.."
runtime=5 repeat=2 build=build/test-release
for arg in "$@"; do
  case "$arg" in
    --runtime=*) runtime=${arg#*=} ;;
    --repeat=*) repeat=${arg#*=} ;;
    --build-dir=*) build=${arg#*=} ;;
    -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scale_out.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
[ -x "$build/server/blockread-server" ] || { echo "scale_out.sh: build $build first" >&2; exit 1; }
work=$(mktemp -d /var/tmp/blockread-scale.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
head -c $((256 << 20)) /dev/urandom >"$work/shared.img"
ports=()
for i in 1 2 3; do
  port=$((17600 + RANDOM % 1000 + i * 1000))
  "$build/server/blockread-server" --listen=127.0.0.1:$port --metrics_listen= --cpus=0 \
    --device=shared="$work/shared.img" >"$work/server$i.log" 2>&1 &
  pids+=($!)
  ports+=($port)
done
sleep 2
printf "%-8s %s\n" servers "IOPS (each run)"
for n in 1 2 3; do
  targets=$(for p in "${ports[@]:0:$n}"; do printf "127.0.0.1:%s," "$p"; done)
  line=""
  for r in $(seq "$repeat"); do
    iops=$(taskset -c 1 "$build/client/blockread" load --target="${targets%,}" --file=shared \
      --mode=stream --bs=4k --qd=32 --runtime="$runtime" --output=json |
      python3 -c 'import json,sys; print(round(json.load(sys.stdin)["iops"]))')
    line="$line $iops"
  done
  printf "%-8s%s\n" "$n" "$line"
done
