#!/usr/bin/python3
"""Reads/s and MiB/s of the Python client: random reads of one file for a fixed time.

    read_many_bench.py --target=127.0.0.1:7420 --file=large --bs=4k --depth=128 --batch=32

--mode=read_many (default) calls read_many with --calls-of reads at a time, back to back;
read_iter streams all reads over one stream; read calls read() one at a time. Prints one JSON
object. python_vs_cpp.sh runs it beside `blockread load`.
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import blockread  # noqa: E402


def size(text):
    units = {"k": 1 << 10, "m": 1 << 20}
    text = text.lower()
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True)
    p.add_argument("--file", default="large")
    p.add_argument("--bs", default="4k")
    p.add_argument("--depth", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--calls-of", type=int, default=4096, help="reads per read_many call")
    p.add_argument("--runtime", type=float, default=10)
    p.add_argument("--ramp", type=float, default=1, help="warm-up seconds, not counted")
    p.add_argument("--mode", choices=["read_many", "read_iter", "read"], default="read_many")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    bs = size(args.bs)
    client = blockread.Client(args.target, depth=args.depth, batch=args.batch, timeout=None)
    blocks = client.stat(args.file).size // bs
    rng = random.Random(args.seed)
    # Offsets drawn ahead of time, so the timed loop measures the client, not the RNG.
    reads = [(args.file, rng.randrange(blocks) * bs, bs) for _ in range(1 << 16)]

    def calls():
        at = 0
        while True:
            chunk = reads[at:at + args.calls_of]
            at = (at + args.calls_of) % len(reads)
            yield chunk

    def run(seconds):
        n = 0
        start = time.perf_counter()
        end = start + seconds
        if args.mode == "read_many":
            for chunk in calls():
                n += len(client.read_many(chunk))
                if time.perf_counter() >= end:
                    break
        elif args.mode == "read_iter":
            def forever():
                while True:
                    yield from reads
            stream = client.read_iter(forever())
            for _ in stream:
                n += 1
                if n % 1024 == 0 and time.perf_counter() >= end:
                    break
            stream.close()
        else:
            for r in calls():
                for read in r:
                    client.read(*read)
                    n += 1
                if time.perf_counter() >= end:
                    break
        return n, time.perf_counter() - start

    if args.ramp > 0:
        run(args.ramp)
    cpu0 = time.process_time()
    n, seconds = run(args.runtime)
    cpu = time.process_time() - cpu0
    print(json.dumps({"client": "python", "mode": args.mode, "bs": bs, "depth": args.depth,
                      "batch": args.batch, "reads": n, "seconds": round(seconds, 3),
                      "iops": round(n / seconds, 1),
                      "mib_s": round(n * bs / seconds / (1 << 20), 2),
                      "client_cpu_us_per_read": round(cpu / n * 1e6, 2)}))


if __name__ == "__main__":
    main()
