#!/usr/bin/env bash
# Issue 6's measurement (a benchmark, not a test): what scraping /metrics every 100 ms costs a
# loaded server. blockread-server runs pinned to CPU $SERVER_CPU (workers and the metrics thread
# share it, the worst case); `blockread load` (4K randread, QD32) and the scraper (curl) run on
# CPU $CLIENT_CPU. Runs alternate without and with scraping, --pairs times, so drift on this
# shared machine hits both sides alike; prints each run and the IOPS ratio with/without.
#
#   tests/bench/scrape_cost.sh [--runtime=8] [--pairs=4] [--mode=stream|unary] [--interval=0.1]
set -euo pipefail
cd "$(dirname "$0")/../.."
runtime=8 pairs=4 mode=stream interval=0.1
for arg in "$@"; do
  case "$arg" in
    --runtime=*) runtime=${arg#*=} ;;
    --pairs=*) pairs=${arg#*=} ;;
    --mode=*) mode=${arg#*=} ;;
    --interval=*) interval=${arg#*=} ;;
    -h | --help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scrape_cost.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
build=${BUILD_DIR:-build/bench}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target blockread-server blockread >/dev/null

work=$(mktemp -d /var/tmp/blockread-scrape-XXXXXX)
server_pid="" scraper_pid=""
cleanup() {
  [ -n "$scraper_pid" ] && kill "$scraper_pid" 2>/dev/null
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
port=$((20000 + RANDOM % 20000))
metrics_port=$((port + 1))
taskset -c "$server_cpu" "$build/server/blockread-server" --cpus="$server_cpu" \
  --data-dir="$work/data" --listen=127.0.0.1:$port --metrics-listen=127.0.0.1:$metrics_port \
  >"$work/server.out" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do grep -q "metrics on" "$work/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q "metrics on" "$work/server.out" || { cat "$work/server.log" >&2; exit 1; }
bytes=$(curl -s "http://127.0.0.1:$metrics_port/metrics" | wc -c)
echo "scrape size: $bytes bytes; load: $mode 4K randread QD32 on 'large', ${runtime}s per run"

batch=1
[ "$mode" = stream ] && batch=8
run_load() {
  taskset -c "$client_cpu" "$build/client/blockread" load --target=127.0.0.1:$port --file=large \
    --rw=randread --bs=4k --qd=32 --mode="$mode" --batch=$batch --runtime="$runtime" --ramp=1 \
    --output=json | jq .iops
}
# One curl process on one kept-alive connection, paced by curl itself (--rate), so the scraper
# costs the client CPU little more than a remote Prometheus would cost this machine: nothing.
per_minute=$(awk -v i="$interval" 'BEGIN { printf "%d", 60 / i }')
scraper() {
  taskset -c "$client_cpu" curl -s --rate "${per_minute}/m" -o /dev/null \
    -w '%{stderr}%{http_code}\n' "http://127.0.0.1:$metrics_port/metrics?scrape=[1-1000000]" \
    2>"$work/scrapes" &
  scraper_pid=$!
}
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }
off_total=0 on_total=0
for i in $(seq "$pairs"); do
  off=$(run_load)
  scraper
  on=$(run_load)
  kill "$scraper_pid"; wait "$scraper_pid" 2>/dev/null || true
  scraper_pid=""
  printf 'pair %d: no scraping %8.0f IOPS, scraping every %ss %8.0f IOPS (%s scrapes)  ratio %.4f\n' \
    "$i" "$off" "$interval" "$on" "$(grep -c '^200$' "$work/scrapes")" "$(calc "$on / $off")"
  off_total=$(calc "$off_total + $off")
  on_total=$(calc "$on_total + $on")
done
printf 'overall: with/without scraping = %.4f (cost %.2f%% of IOPS)\n' \
  "$(calc "$on_total / $off_total")" "$(calc "100 * (1 - $on_total / $off_total)")"
# Server CPU per scrape, from the exposer's own counter and a quiet server.
before=$(awk '{print $14 + $15}' "/proc/$server_pid/stat")
for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$metrics_port/metrics"; done
after=$(awk '{print $14 + $15}' "/proc/$server_pid/stat")
echo "idle server: $(( (after - before) * 1000000 / $(getconf CLK_TCK) / 200 )) us CPU per scrape (200 scrapes, worker idle-spin included)"
