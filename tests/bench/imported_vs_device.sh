#!/usr/bin/env bash
# Issue 11's serving cost of an imported file: 4 KiB random reads at QD32 over a stream
# (`blockread load --mode=stream`) of a FIEMAP-imported ext4 file against the whole device that
# holds it, side by side from one server, alternating runs (A B A B ...). With leases the imported
# file's reads pay nothing for staying current, so the ratio should be about 1.
#
#   tests/bench/imported_vs_device.sh [--rounds=N] [--runtime=S]
# Needs root (loop device). Builds into build/release unless BUILD_DIR is set. Server on CPU 0,
# load client on CPU 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3
runtime=5
for arg in "$@"; do
  case "$arg" in
    --rounds=*) rounds=${arg#--rounds=} ;;
    --runtime=*) runtime=${arg#--runtime=} ;;
    *) echo "usage: $0 [--rounds=N] [--runtime=S]" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-build/release}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target blockread-server blockread >/dev/null

# The image lives in /dev/shm and is fully allocated: reads of the whole device would otherwise
# often land in holes of a sparse backing file, which cost the loop driver no I/O at all.
work=$(mktemp -d /dev/shm/blockread-imported-XXXXXX)
loop=""
server=""
cleanup() {
  [ -z "$server" ] || { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; }
  mountpoint -q "$work/mnt" && umount "$work/mnt"
  [ -z "$loop" ] || losetup -d "$loop" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
dd if=/dev/zero of="$work/disk.img" bs=1M count=1024 status=none
loop=$(losetup --find --show --direct-io=on "$work/disk.img")
mkfs.ext4 -q -F "$loop"
mkdir -p "$work/mnt"
mount "$loop" "$work/mnt"
mkdir "$work/mnt/data"
echo "imported_vs_device: writing a 512 MiB file on ext4 on $loop" >&2
dd if=/dev/urandom of="$work/mnt/data/file" bs=1M count=512 status=none conv=fsync

taskset -c 0 "$build/server/blockread-server" --cpus=0 --listen=127.0.0.1:0 --metrics-listen= \
  --serve-files="$work/mnt/data" --device="disk=$loop" >"$work/out" 2>"$work/log" &
server=$!
for _ in $(seq 100); do grep -q 'listening on' "$work/out" 2>/dev/null && break; sleep 0.1; done
target=$(awk '/listening on/ {print $NF; exit}' "$work/out")
[ -n "$target" ] || { cat "$work/log"; exit 1; }
"$build/client/blockread" --target="$target" stat file | grep -q 'source: *fiemap' ||
  { echo "the file is not leased and read from the device:" >&2;
    "$build/client/blockread" --target="$target" stat file >&2; exit 1; }

/usr/bin/python3 - "$build" "$target" "$rounds" "$runtime" <<'PY'
import json, statistics, subprocess, sys
build, target, rounds, runtime = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def run(name):
    out = subprocess.run(["taskset", "-c", "1", f"{build}/client/blockread", "load",
                          f"--target={target}", f"--file={name}", "--mode=stream", "--bs=4k",
                          "--qd=32", f"--runtime={runtime}s", "--ramp=0.5s", "--output=json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["iops"]
results = {"file": [], "disk": []}
for r in range(rounds):
    order = ["file", "disk"] if r % 2 == 0 else ["disk", "file"]
    for name in order:
        results[name].append(run(name))
best = {k: max(v) for k, v in results.items()}
print("| target | best IOPS | median IOPS | runs |")
print("|---|---|---|---|")
for k, label in (("file", "imported ext4 file (leased, FIEMAP)"), ("disk", "whole device")):
    print(f"| {label} | {best[k]:.0f} | {statistics.median(results[k]):.0f} | "
          + ", ".join(f"{x:.0f}" for x in results[k]) + " |")
print(f"\nimported / device, best: {best['file'] / best['disk']:.2f}; median: "
      f"{statistics.median(results['file']) / statistics.median(results['disk']):.2f}")
PY
