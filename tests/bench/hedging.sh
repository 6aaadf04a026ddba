#!/usr/bin/env bash
# Two replicas of one file, one of them 20 ms slower a read (nbdkit's delay filter behind
# nbdfuse and a --direct-io=on loop device): `blockread load --mode=unary --qd=8` p99 and the
# share of reads the slow replica served, without and with --hedge-after=p95, side by side in
# one run. With --reference-cli=PATH, the same runs with another build's load client (e.g. one
# from before the latency-aware choice) alternate with this build's. The servers run on CPU 0,
# the load client on CPU 1. Needs root, nbdkit and nbdfuse. Listens on 127.0.0.1 only.
#
#   tests/bench/hedging.sh [--runtime=5] [--repeat=2] [--build-dir=build/test-release]
#                          [--reference-cli=PATH]
set -euo pipefail
cd "$(dirname "$0")/../.."
runtime=5 repeat=2 build=build/test-release reference=""
for arg in "$@"; do
  case "$arg" in
    --runtime=*) runtime=${arg#*=} ;;
    --repeat=*) repeat=${arg#*=} ;;
    --build-dir=*) build=${arg#*=} ;;
    --reference-cli=*) reference=${arg#*=} ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "hedging.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
[ -x "$build/server/blockread-server" ] || { echo "hedging.sh: build $build first" >&2; exit 1; }
command -v nbdfuse >/dev/null && command -v nbdkit >/dev/null ||
  { echo "hedging.sh: needs nbdkit and nbdfuse (deploy/install-deps.sh)" >&2; exit 1; }
work=$(mktemp -d /var/tmp/blockread-hedging.XXXXXX)
pids=() loop="" nbd_pid=""
# Servers first (they hold the loop device), then the loop device, then nbdfuse (it unmounts).
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "$loop" ]; then losetup -d "$loop" || true; fi
  if [ -n "$nbd_pid" ]; then kill "$nbd_pid" 2>/dev/null || true; wait "$nbd_pid" 2>/dev/null || true; fi
  fusermount3 -u "$work/mnt" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
head -c $((64 << 20)) /dev/urandom >"$work/shared.img"
mkdir "$work/mnt"
slow_file=$work/mnt/disk
nbdfuse "$slow_file" --command nbdkit -s --exit-with-parent --filter=delay file \
  "$work/shared.img" rdelay=20ms >"$work/nbdfuse.log" 2>&1 &
nbd_pid=$!
for _ in $(seq 500); do [ -s "$slow_file" ] && break; sleep 0.01; done
[ -s "$slow_file" ] || { echo "hedging.sh: nbdfuse did not start" >&2; cat "$work/nbdfuse.log"; exit 1; }
loop=$(losetup --find --show --direct-io=on "$slow_file")
ports=()
for device in "$work/shared.img" "$loop"; do
  port=$((17600 + RANDOM % 1000 + ${#ports[@]} * 1000))
  "$build/server/blockread-server" --listen=127.0.0.1:$port --metrics_listen= --cpus=0 \
    --device=shared="$device" >"$work/server$port.log" 2>&1 &
  pids+=($!)
  ports+=($port)
done
sleep 2
fast=127.0.0.1:${ports[0]} slow=127.0.0.1:${ports[1]}
slow_reads() {
  "$build/client/blockread" stats --target="$slow" --json |
    python3 -c 'import json,sys; print(sum(d["reads"] for d in json.load(sys.stdin)["devices"]))'
}
clients=("$build/client/blockread")
[ -n "$reference" ] && clients+=("$reference")
printf "%-40s %-8s %10s %10s %12s %8s\n" client hedging "p99 us" "p50 us" "slow share" hedged
for r in $(seq "$repeat"); do
  for cli in "${clients[@]}"; do
    for hedge in off p95; do
      flags=()
      [ "$hedge" = p95 ] && flags=(--hedge-after=p95)
      before=$(slow_reads)
      out=$(taskset -c 1 "$cli" load --target="$fast,$slow" --file=shared --mode=unary --qd=8 \
        --bs=4k --runtime="$runtime" --output=json "${flags[@]}")
      after=$(slow_reads)
      python3 - "$cli" "$hedge" "$before" "$after" "$out" <<'EOF'
import json, sys
cli, hedge, before, after, out = sys.argv[1:]
run = json.loads(out[out.find("{"):])
share = (int(after) - int(before)) / max(1, run["issued"])
print(f"{cli[-40:]:<40} {hedge:<8} {run['lat_us']['p99']:>10.0f} {run['lat_us']['p50']:>10.0f} "
      f"{share * 100:>11.2f}% {run.get('hedged', 0) / max(1, run['issued']) * 100:>7.2f}%")
EOF
    done
  done
done
