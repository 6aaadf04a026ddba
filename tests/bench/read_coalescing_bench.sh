#!/usr/bin/env bash
# BlockReadClient::Read() called from many threads (coalesced onto shared streams) against raw
# unary ReadBlock calls and against `blockread load --mode=stream`, side by side in one run.
# A benchmark, not a test. One server worker pinned to CPU $SERVER_CPU with the demo device on
# tmpfs (the device is not the limit), every client in turn on CPU $CLIENT_CPU; rounds alternate
# the order, figures are medians over the rounds.
#
#   tests/bench/read_coalescing_bench.sh [BUILD_DIR]     (default build/rel; needs rpc_bench)
#   THREADS=32 RUNTIME=5 ROUNDS=3 BS=4k DATA_PARENT=/dev/shm ...
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/rel}
threads=${THREADS:-32}
runtime=${RUNTIME:-5}
rounds=${ROUNDS:-3}
bs=${BS:-4k}
parent=${DATA_PARENT:-/dev/shm}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
# NICE=-10: run the server and the clients at a higher priority than other work on a shared
# machine (root), so they are not preempted by it as often.
nice=${NICE:-0}

work=$(mktemp -d "$parent/blockread-coalesce-XXXXXX")
# shellcheck source=tests/bench/bench_server.sh
. "$(dirname "$0")/bench_server.sh"
start_bench_server "$build" "$work" "$server_cpu" "$nice"
echo "server $target on CPU $server_cpu (demo device under $parent), clients on CPU $client_cpu," \
  "file 'large' random $bs reads, $threads reads in flight, ${runtime}s per run, $rounds rounds"
/usr/bin/python3 - "$build" "$target" "$threads" "$runtime" "$rounds" "$bs" "$client_cpu" "$nice" <<'PY'
import json, re, statistics, subprocess, sys
build, target, threads, runtime, rounds, bs, cpu, nice = sys.argv[1:]
size = {"k": 1024, "m": 1 << 20}.get(bs[-1].lower(), 1) * int(bs.rstrip("kKmM"))

def rpc_bench(*flags):
    def run():
        out = subprocess.run(["nice", "-n", nice, "taskset", "-c", cpu,
                              f"{build}/tests/bench/rpc_bench",
                              f"--target={target}", "--file=large", f"--bs={size}",
                              f"--qd={threads}", "--number=0", f"--seconds={runtime}", *flags],
                             check=True, capture_output=True, text=True).stdout
        f = dict(re.findall(r"(\w+)=([\d.]+)", out))
        return float(f["iops"]), float(f["p50"]), float(f["p99"])
    return run

def load(mode):
    def run():
        out = subprocess.run(["nice", "-n", nice, "taskset", "-c", cpu, f"{build}/client/blockread",
                          "load",
                              f"--target={target}", "--file=large", f"--mode={mode}",
                              f"--bs={bs}", f"--qd={threads}", f"--runtime={runtime}s",
                              "--ramp=0.5s", "--output=json"], check=True, capture_output=True,
                             text=True).stdout
        d = json.loads(out)
        return d["iops"], d["lat_us"]["p50"], d["lat_us"]["p99"]
    return run

clients = [
    (f"Read() from {threads} threads, one client, coalesced", rpc_bench("--shared_client")),
    (f"Read() from {threads} threads, one client, coalescing off (unary RPCs)",
     rpc_bench("--shared_client", "--nocoalesce")),
    (f"Read() from {threads} threads, a client (channel) each (unary RPCs)", rpc_bench()),
    (f"load --mode=unary --qd={threads} (async, one thread)", load("unary")),
    (f"load --mode=stream --qd={threads} (derived settings, one thread)", load("stream")),
]
runs = {name: [] for name, _ in clients}
for r in range(int(rounds)):
    for name, run in (clients if r % 2 == 0 else clients[::-1]):
        runs[name].append(run())
stream = statistics.median(x[0] for x in runs[clients[-1][0]])
print(f"| client | reads/s | p50 us | p99 us | / load stream | each run (reads/s) |")
print(f"|---|---|---|---|---|---|")
for name, _ in clients:
    iops = statistics.median(x[0] for x in runs[name])
    p50 = statistics.median(x[1] for x in runs[name])
    p99 = statistics.median(x[2] for x in runs[name])
    each = " ".join(f"{x[0]:.0f}" for x in runs[name])
    print(f"| {name} | {iops:,.0f} | {p50:.0f} | {p99:.0f} | {iops / stream:.2f} | {each} |")
PY
