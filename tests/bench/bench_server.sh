# Sourced by benchmark scripts (tests/bench/*.sh, client/python/bench/*.sh): a blockread-server on
# its embedded demo device, pinned to one CPU, stopped when the script exits.
#
#   start_bench_server BUILD_DIR WORK_DIR CPU [NICE]
# Starts BUILD_DIR/server/blockread-server on 127.0.0.1 (free port, metrics off) with the demo
# device under WORK_DIR/data, pinned to CPU (taskset and --cpus) at priority NICE (default 0),
# waits for its port and sets $target (127.0.0.1:PORT). Exits the script if it does not start.
# WORK_DIR is removed on exit, after the server is stopped.

bench_server_pid=
bench_server_work=

stop_bench_server() {
  if [ -n "$bench_server_pid" ]; then
    kill "$bench_server_pid" 2>/dev/null || true
    wait "$bench_server_pid" 2>/dev/null || true
    bench_server_pid=
  fi
  [ -z "$bench_server_work" ] || rm -rf "$bench_server_work"
}

start_bench_server() {
  local build=$1 work=$2 cpu=$3 priority=${4:-0}
  bench_server_work=$work
  trap stop_bench_server EXIT
  nice -n "$priority" taskset -c "$cpu" "$build/server/blockread-server" --cpus="$cpu" \
    --listen=127.0.0.1:0 --metrics-listen= --data-dir="$work/data" >"$work/out" 2>"$work/log" &
  bench_server_pid=$!
  for _ in $(seq 100); do grep -q 'listening on' "$work/out" 2>/dev/null && break; sleep 0.1; done
  target=$(awk '/listening on/ {print $NF; exit}' "$work/out")
  [ -n "$target" ] || { echo "server did not start:"; cat "$work/log"; exit 1; }
}
