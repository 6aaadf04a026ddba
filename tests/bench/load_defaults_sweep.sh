#!/usr/bin/env bash
# `blockread load --mode=stream` with only --bs and --qd (the derived defaults) against hand-tuned
# settings of streams, batch and channels (see candidates() below), side by side in one run: for
# each block size and queue depth, the defaults' IOPS, the best tuned setting's IOPS and
# defaults / best.
# A benchmark, not a test. One server worker pinned to CPU $SERVER_CPU with the demo device on
# tmpfs (so the device is not the limit), the load (one thread, as fio's --qd means) on
# CPU $CLIENT_CPU. Rounds run the settings of a cell in alternating order so drift on a shared
# machine hits all of them; each setting's figure is the median of its rounds.
#
#   tests/bench/load_defaults_sweep.sh [BUILD_DIR]      (default build/rel)
#   RUNTIME=2 RAMP=0.5 ROUNDS=3 BS="4k 16k 128k" QD="1 8 32 64" DATA_PARENT=/dev/shm ...
#   KEEP=FILE   also write every run (setting, IOPS) as JSON lines to FILE
#   CONFIRM=N   then run the defaults and the best tuned setting against each other N more
#               rounds, alternately, and report that ratio too: the best of many noisy settings
#               is biased upwards (it won partly by luck), the confirmation rounds are not.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/rel}
runtime=${RUNTIME:-2}
ramp=${RAMP:-0.5}
rounds=${ROUNDS:-3}
sizes=${BS:-4k 16k 128k}
depths=${QD:-1 8 32 64}
parent=${DATA_PARENT:-/dev/shm}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
# NICE=-10: run the server and the clients at a higher priority than other work on a shared
# machine (root), so they are not preempted by it as often.
nice=${NICE:-0}
keep=${KEEP:-}
confirm=${CONFIRM:-0}

work=$(mktemp -d "$parent/blockread-sweep-XXXXXX")
# shellcheck source=tests/bench/bench_server.sh
. "$(dirname "$0")/bench_server.sh"
start_bench_server "$build" "$work" "$server_cpu" "$nice"
echo "server $target on CPU $server_cpu (demo device under $parent), load on CPU $client_cpu," \
  "file 'large' (16 MiB) random reads, stream mode, ${runtime}s (+${ramp}s ramp) per run," \
  "$rounds rounds"
/usr/bin/python3 - "$build" "$target" "$runtime" "$ramp" "$rounds" "$sizes" "$depths" \
  "$client_cpu" "$keep" "$nice" "$confirm" <<'PY'
import json, statistics, subprocess, sys
build, target, runtime, ramp, rounds, sizes, depths, cpu, keep, nice, confirm = sys.argv[1:]
log = open(keep, "w") if keep else None

def run(bs, qd, flags):
    out = subprocess.run(["nice", "-n", nice, "taskset", "-c", cpu, f"{build}/client/blockread",
                          "load",
                          f"--target={target}", "--file=large", "--mode=stream", f"--bs={bs}",
                          f"--qd={qd}", f"--runtime={runtime}s", f"--ramp={ramp}s",
                          "--output=json", *flags], check=True, capture_output=True,
                         text=True).stdout
    d = json.loads(out)
    s = d["settings"]
    return d["iops"], f"{s['streams']}x{qd // s['streams']} b{s['batch']} c{s['channels']}"

def candidates(bs, qd):
    # Streams per thread and reads per message, powers of two that fit the depth, on one
    # connection; and 2 and 4 streams on a connection each.
    out = []
    for streams in (1, 2, 4):
        if streams > qd:
            continue
        depth = qd // streams
        for batch in sorted({1, 2, 4, 8, 16} & set(range(1, depth + 1))):
            out.append([f"--streams={streams}", f"--batch={batch}", "--channels=1"])
        if streams > 1:
            out.append([f"--streams={streams}", f"--batch={min(8, depth)}",
                        f"--channels={streams}"])
    return out

confirm_head = " confirmed defaults / best |" if int(confirm) else ""
print(f"| bs | qd | defaults | IOPS | best tuned | IOPS | defaults / best |{confirm_head}")
print(f"|---|---|---|---|---|---|---|{'---|' if int(confirm) else ''}")
for bs in sizes.split():
    for qd in map(int, depths.split()):
        settings = [[]] + candidates(bs, qd)  # [] = the defaults
        runs = {}
        for r in range(int(rounds)):
            order = settings if r % 2 == 0 else settings[::-1]
            for flags in order:
                iops, label = run(bs, qd, flags)
                runs.setdefault(tuple(flags), (label, []))[1].append(iops)
                if log:
                    log.write(json.dumps({"bs": bs, "qd": qd, "flags": flags, "settings": label,
                                          "iops": iops}) + "\n")
                    log.flush()
        med = {k: (label, statistics.median(v)) for k, (label, v) in runs.items()}
        dlabel, diops = med[()]
        best_flags, best = max(((k, v) for k, v in med.items() if k), key=lambda kv: kv[1][1])
        confirmed = ""
        if int(confirm):
            pair = {(): [], best_flags: []}
            for r in range(int(confirm)):
                for flags in ([(), best_flags] if r % 2 == 0 else [best_flags, ()]):
                    pair[flags].append(run(bs, qd, list(flags))[0])
            ratio = statistics.median(pair[()]) / statistics.median(pair[best_flags])
            confirmed = f" {ratio:.2f} |"
        print(f"| {bs} | {qd} | {dlabel} | {diops:,.0f} | {best[0]} | {best[1]:,.0f} |"
              f" {diops / best[1]:.2f} |{confirmed}", flush=True)
PY
