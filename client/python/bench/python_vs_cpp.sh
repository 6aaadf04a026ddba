#!/usr/bin/env bash
# Python read_many against the C++ load client (`blockread load --mode=stream`), side by side in
# one run: the same server, the same file, the same reads in flight and reads per message.
# The server is pinned to CPU 0 (one worker), each client in turn to CPU 1; rounds alternate
# the clients so drift on a shared machine hits both. Prints reads/s, MiB/s and Python/C++.
#
#   client/python/bench/python_vs_cpp.sh [BUILD_DIR]      (default build/rel)
#   RUNTIME=10 ROUNDS=3 BS="4k 128k" SETTINGS="64/16 256/64" DATA_PARENT=/dev/shm ...
#
# SETTINGS: depth/batch pairs, each run by both clients over one stream (load --qd=depth
# --batch=batch --streams=1 --channels=1, as read_many uses one stream).
# DATA_PARENT: where the demo device is made; tmpfs (default /dev/shm) keeps the device out of
# the measurement, so it compares the clients (and one server CPU); a disk-backed directory
# measures the disk instead.
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${1:-build/rel}
runtime=${RUNTIME:-10}
rounds=${ROUNDS:-3}
sizes=${BS:-4k 128k}
settings=${SETTINGS:-128/32}
parent=${DATA_PARENT:-/dev/shm}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
python=/usr/bin/python3
bench=client/python/bench/read_many_bench.py

work=$(mktemp -d "$parent/blockread-pybench-XXXXXX")
# shellcheck source=tests/bench/bench_server.sh
. "$(dirname "$0")/../../../tests/bench/bench_server.sh"
start_bench_server "$build" "$work" "$server_cpu"
echo "server $target on CPU $server_cpu (demo device under $parent), clients on CPU $client_cpu," \
  "file 'large' (16 MiB) random reads, ${runtime}s per run, $rounds rounds"
"$python" - "$build" "$target" "$runtime" "$rounds" "$sizes" "$settings" "$client_cpu" "$bench" <<'PY'
import json, statistics, subprocess, sys
build, target, runtime, rounds, sizes, settings, cpu, bench = sys.argv[1:]
rows = {}
def cpp(bs, depth, batch):
    out = subprocess.run(["taskset", "-c", cpu, f"{build}/client/blockread", "load",
                          f"--target={target}", "--file=large", "--mode=stream", f"--bs={bs}",
                          f"--qd={depth}", f"--batch={batch}", "--streams=1", "--channels=1",
                          f"--runtime={runtime}s",
                          "--ramp=1s", "--output=json"], check=True, capture_output=True,
                         text=True).stdout
    d = json.loads(out)
    return d["iops"], d["bw_bytes"] / (1 << 20)
def py(bs, depth, batch):
    out = subprocess.run(["taskset", "-c", cpu, "/usr/bin/python3", bench, f"--target={target}",
                          "--file=large", f"--bs={bs}", f"--depth={depth}", f"--batch={batch}",
                          f"--runtime={runtime}", "--ramp=1"], check=True, capture_output=True,
                         text=True).stdout
    d = json.loads(out)
    return d["iops"], d["mib_s"]
for r in range(int(rounds)):
    for bs in sizes.split():
        for s in settings.split():
            depth, batch = s.split("/")
            order = [("C++", cpp), ("Python", py)] if r % 2 == 0 else [("Python", py), ("C++", cpp)]
            for name, f in order:
                rows.setdefault((bs, s, name), []).append(f(bs, depth, batch))
print(f"{'bs':>5} {'depth/batch':>11} {'client':>7} {'reads/s':>9} {'MiB/s':>8}   (median of {rounds}; each run)")
for bs in sizes.split():
    for s in settings.split():
        med = {}
        for name in ("C++", "Python"):
            runs = rows[(bs, s, name)]
            med[name] = (statistics.median(x for x, _ in runs), statistics.median(y for _, y in runs))
            each = " ".join(f"{x:.0f}" for x, _ in runs)
            print(f"{bs:>5} {s:>11} {name:>7} {med[name][0]:>9.0f} {med[name][1]:>8.1f}   [{each}]")
        print(f"{bs:>5} {s:>11} {'ratio':>7} {med['Python'][0] / med['C++'][0]:>9.2f}"
              f" {med['Python'][1] / med['C++'][1]:>8.2f}   Python / C++")
PY
