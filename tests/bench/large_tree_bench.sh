#!/usr/bin/env bash
# Serving a large tree: how long until a server answers with FILES names (default 1,000,000, 4 KiB
# each, 500 a directory, on ext4 on a loop device), its memory per name (RSS against the same
# server on an empty tree), its descriptors, the time to apply one directory event (a new
# directory with a file, until StatFile finds it) and the first read of a cold file against a
# second read of it (each a CLI process: compare the two, not the absolute figures).
#
#   tests/bench/large_tree_bench.sh [FILES]
# Needs root (loop device, mount). Builds into build/release unless BUILD_DIR is set. The server
# runs on CPU 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
files=${1:-1000000}
build=${BUILD_DIR:-build/release}
# An existing build directory is used as it is configured (BUILD_DIR=build/test-release works).
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target blockread-server blockread >/dev/null
server_bin=$build/server/blockread-server
cli=$build/client/blockread

work=$(mktemp -d /tmp/blockread-large-tree-XXXXXX)
loop=""
server=""
cleanup() {
  [ -z "$server" ] || { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; }
  mountpoint -q "$work/mnt" && umount "$work/mnt"
  [ -z "$loop" ] || losetup -d "$loop" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
image_mib=$(( files * 5 / 1024 + 512 ))
truncate -s "${image_mib}M" "$work/disk.img"
loop=$(losetup --find --show --direct-io=on "$work/disk.img")
mkfs.ext4 -q -F -N $(( files + 10000 )) "$loop"
mkdir -p "$work/mnt" "$work/empty"
mount "$loop" "$work/mnt"
start=$(date +%s.%N)
python3 - "$work/mnt/tree" "$files" <<'EOF'
import os, sys
root, files = sys.argv[1], int(sys.argv[2])
block = bytes(range(256)) * 16
for i in range(files):
    if i % 500 == 0:
        os.makedirs(f"{root}/d{i // 500}", exist_ok=True)
    with open(f"{root}/d{i // 500}/f{i}.bin", "wb") as f:
        f.write(block)
EOF
echo "made $files files in $(echo "$(date +%s.%N) - $start" | bc) s"

port=$(( 20000 + RANDOM % 20000 ))
# Starts a server on $1 (in this shell: $server is its pid), waits until it answers; $ready is
# the seconds from start to answer.
serve() {
  local begin; begin=$(date +%s.%N)
  taskset -c 0 "$server_bin" --serve_files="$1" --listen=127.0.0.1:$port --metrics_listen= \
    >"$work/server.out" 2>"$work/server.log" &
  server=$!
  until "$cli" --target=127.0.0.1:$port stats >/dev/null 2>&1; do
    kill -0 "$server" || { cat "$work/server.log"; exit 1; }
    sleep 0.05
  done
  ready=$(echo "$(date +%s.%N) - $begin" | bc)
}
stop() { kill "$server"; wait "$server" || true; server=""; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }

serve "$work/empty"
empty_rss=$(rss_kib)
stop
serve "$work/mnt/tree"
rss=$(rss_kib)
fds=$(ls "/proc/$server/fd" | wc -l)
echo "$files names: answering $ready s after start; RSS $((rss / 1024)) MiB (empty tree: $((empty_rss / 1024)) MiB): $(( (rss - empty_rss) * 1024 / files )) bytes per name; $fds descriptors"

ms() { echo "($(date +%s%N) - $1) / 1000000" | bc; }
t=$(date +%s%N)
mkdir "$work/mnt/tree/new-dir" && head -c 4096 /dev/urandom >"$work/mnt/tree/new-dir/f.bin"
until "$cli" --target=127.0.0.1:$port stat new-dir/f.bin >/dev/null 2>&1; do :; done
echo "a new directory with a file: served $(ms "$t") ms after close (CLI polling included)"
name="d$(( files / 1000 ))/f$(( files / 1000 * 500 )).bin"
t=$(date +%s%N); "$cli" --target=127.0.0.1:$port read "$name" 0 4k -o /dev/null >/dev/null
cold=$(ms "$t")
t=$(date +%s%N); "$cli" --target=127.0.0.1:$port read "$name" 0 4k -o /dev/null >/dev/null
echo "first read of a cold file: $cold ms; again: $(ms "$t") ms (each a CLI process)"
stop
