#!/usr/bin/env python3
"""The table of tests/bench/run_route_bench.sh, from the JSON it keeps (--keep-json=DIR).

  route_bench_table.py DIR

DIR holds run.<fs>.<repeat>.json (engine_bench --file --json, one per filesystem and repeat) and
cg.<fs>.<route>.<qd>.<reads>.ir (callgrind's instruction total for that many reads).

The machine is shared: another process on the engine's CPU slows whichever route runs meanwhile.
Each run records how busy its CPU was apart from the engine thread (/proc/stat), so a repeat of
one (fs, wait, QD), whose routes ran one after the other within seconds, is judged by its busiest
run; the quieter half of the repeats is summarized, the rest only counts for "best". Ratios are
taken within a repeat (routes side by side) and summarized as median [min..max].
"""
import glob
import json
import os
import re
import statistics
import sys


def cpu_us(row):
    return row["thread_user_us"] + row["thread_sys_us"]


def per_read(row, value):
    return value / max(row["reads"], 1)


def other_share(row):
    """Busy time of the pinned CPU not spent by the engine thread, per second of the run."""
    return max(row["pinned_cpu_busy_us"] - cpu_us(row), 0) / (row["seconds"] * 1e6)


def spread(values):
    return f"{statistics.median(values):.3f} [{min(values):.3f}..{max(values):.3f}]"


# Kernel functions the table shows, by column; the first of a column's names present counts.
PERF_COLUMNS = [
    ("io_read", ["io_read"]),  # io_uring's read op: the route's whole submission
    ("read_iter", ["blkdev_read_iter", "ext4_file_read_iter", "xfs_file_read_iter"]),
    ("iomap_dio", ["iomap_dio_rw"]),
    ("iomap_begin", ["ext4_iomap_begin", "xfs_read_iomap_begin"]),
    ("blk_submit", ["blk_mq_submit_bio"]),
    ("fstatat", ["vfs_fstatat"]),  # the catalog's per-read stat of an imported file
    ("cq_wait", ["io_cqring_wait"]),  # sleeping for completions (wait=block)
]


def perf_cells(base):
    """us per read of each PERF_COLUMNS entry in one profiled run (base.txt, base.json)."""
    with open(base + ".json") as f:
        row = json.load(f)["rows"][0]
    share = {}
    with open(base + ".txt") as f:
        for line in f:
            m = re.match(r"\s*([\d.]+)%\s+[\d.]+%\s+\[k\]\s+(\S+)\s*$", line)
            if m:
                share.setdefault(m.group(2), float(m.group(1)) / 100)
    cpu = per_read(row, cpu_us(row))
    cells = [cpu]
    for _, names in PERF_COLUMNS:
        cells.append(next((share[n] * cpu for n in names if share.get(n, 0) >= 0.005), None))
    return row["qd"], cells


def print_perf(directory, fs_list, routes):
    """perf.<fs>.<route>.<repeat>.txt: `perf report --children --sort sym -g none` of one run."""
    found = False
    for fs in fs_list:
        for route in routes:
            runs = [perf_cells(path[:-4]) for path in
                    sorted(glob.glob(os.path.join(directory, f"perf.{fs}.{route}.*.txt")))
                    if os.path.exists(path[:-4] + ".json")]
            if not runs:
                continue
            if not found:
                found = True
                print()
                print("kernel time of the engine thread by function (perf cpu-clock samples,"
                      " wait=block): inclusive share x cpu/rd = us per read, median of"
                      f" {len(runs)} runs per route")
                print(f"{'fs':5} {'qd':>4} {'route':14} {'cpu/rd':>6}"
                      + "".join(f" {name:>11}" for name, _ in PERF_COLUMNS))
            text = []
            for i in range(len(PERF_COLUMNS) + 1):
                values = [cells[i] for _, cells in runs if cells[i] is not None]
                text.append(f"{statistics.median(values):.2f}" if values else "-")
            print(f"{fs:5} {runs[0][0]:>4} {route:14} {text[0]:>6}"
                  + "".join(f" {cell:>11}" for cell in text[1:]))


def main():
    directory = sys.argv[1]
    runs = {}  # (fs, repeat) -> {(qd, wait, route): row}
    routes, depths, waits = [], [], []
    for path in glob.glob(os.path.join(directory, "run.*.json")):
        fs, repeat = re.match(r"run\.(.+)\.(\d+)\.json$", os.path.basename(path)).groups()
        with open(path) as f:
            rows = json.load(f)["rows"]
        runs[fs, int(repeat)] = {(r["qd"], r["wait"], r["route"]): r for r in rows}
        if int(repeat) == 1:  # repeat 1 runs the routes in the order given
            for r in rows:
                for value, seen in ((r["route"], routes), (r["qd"], depths), (r["wait"], waits)):
                    if value not in seen:
                        seen.append(value)
    fs_list = sorted({fs for fs, _ in runs})
    repeats = sorted({repeat for _, repeat in runs})

    def instructions(fs, route, qd):
        files = glob.glob(os.path.join(directory, f"cg.{fs}.{route}.{qd}.*.ir"))
        counts = {}
        for path in files:
            reads = int(path.rsplit(".", 2)[1])
            with open(path) as f:
                text = f.read().strip()
            if text:
                counts[reads] = int(text)
        if len(counts) < 2:
            return None
        small, large = min(counts), max(counts)
        return (counts[large] - counts[small]) / (large - small)

    print(f"4 KiB random reads of one file, engine pinned to one CPU; {len(repeats)} repeats per"
          " (fs, wait, QD), routes side by side in each")
    print("IOPS and cpu/rd: best of all repeats, and median of the quieter half (n = how many);"
          " other: how busy the CPU was apart from the engine (median, quieter half)")
    print("cpu/rd: the engine thread's user+sys us per read (sys: its system part); proc: the"
          " whole process's. spin: the thread never sleeps, so cpu ~ 1e6/IOPS; block: it sleeps"
          " while reads are out, so cpu = what a read costs")
    print("Ir/rd: user-space instructions per read (callgrind, wait=block, same QD)")
    print()
    print(f"{'fs':5} {'qd':>4} {'wait':5} {'route':14} {'n':>3} {'other':>5} {'IOPS best':>10}"
          f" {'median':>8} {'cpu/rd best':>11} {'median':>7} {'sys':>6} {'proc':>6} {'Ir/rd':>6}")
    quiet = {}  # (fs, wait, qd) -> repeats kept
    for wait in waits:
        for fs in fs_list:
            for qd in depths:
                complete = [rep for rep in repeats
                            if all((qd, wait, route) in runs[fs, rep] for route in routes)]
                if not complete:
                    continue
                noise = {rep: max(other_share(runs[fs, rep][qd, wait, route]) for route in routes)
                         for rep in complete}
                ranked = sorted(complete, key=lambda rep: noise[rep])
                kept = ranked[:max(1, (len(ranked) + 1) // 2)]
                quiet[fs, wait, qd] = kept
                for route in routes:
                    every = [runs[fs, rep][qd, wait, route] for rep in complete]
                    rows = [runs[fs, rep][qd, wait, route] for rep in kept]
                    median = statistics.median
                    ir = instructions(fs, route, qd) if wait == "block" else None
                    print(f"{fs:5} {qd:>4} {wait:5} {route:14} {len(rows):>3}"
                          f" {median(other_share(r) for r in rows):>5.2f}"
                          f" {max(r['iops'] for r in every):>10.0f}"
                          f" {median(r['iops'] for r in rows):>8.0f}"
                          f" {min(per_read(r, cpu_us(r)) for r in every):>11.2f}"
                          f" {median(per_read(r, cpu_us(r)) for r in rows):>7.2f}"
                          f" {median(per_read(r, r['thread_sys_us']) for r in rows):>6.2f}"
                          f" {median(per_read(r, r['process_cpu_us']) for r in rows):>6.2f}"
                          f" {'-' if ir is None else f'{ir:.0f}':>6}")
            print()

    print("ratios, route A / route B, per repeat (quieter half): median [min..max]")
    print(f"{'fs':5} {'qd':>4} {'wait':5} {'A / B':30} {'IOPS':>22} {'cpu/rd':>22} {'Ir/rd':>6}")
    for wait in waits:
        for fs in fs_list:
            for qd in depths:
                kept = quiet.get((fs, wait, qd))
                if not kept:
                    continue
                for i, b in enumerate(routes):
                    for a in routes[i + 1:]:
                        pairs = [(runs[fs, rep][qd, wait, a], runs[fs, rep][qd, wait, b])
                                 for rep in kept]
                        iops = spread([x["iops"] / y["iops"] for x, y in pairs])
                        cpu = spread([per_read(x, cpu_us(x)) / per_read(y, cpu_us(y))
                                      for x, y in pairs])
                        ir_a, ir_b = instructions(fs, a, qd), instructions(fs, b, qd)
                        ir = (f"{ir_a / ir_b:.3f}" if wait == "block" and ir_a and ir_b else "-")
                        print(f"{fs:5} {qd:>4} {wait:5} {a + ' / ' + b:30} {iops:>22} {cpu:>22}"
                              f" {ir:>6}")
            print()

    print_perf(directory, fs_list, routes)

    worst = max(r["process_cpu_us"] / max(cpu_us(r), 1)
                for rows in runs.values() for r in rows.values())
    print(f"process CPU / engine thread CPU, worst run: {worst:.3f}"
          + (" (other threads of the process worked too: io_uring's io-wq)" if worst > 1.02
             else ""))


if __name__ == "__main__":
    main()
