#!/usr/bin/env bash
# The real image with a real container runtime (Debian's podman 4.3), on this machine, offline:
#   - base images: debian:bookworm and debian:bookworm-slim made with debootstrap --variant=minbase
#     from the host's own Debian mirror (no registry is reachable), cached between runs;
#   - the image: deploy/Dockerfile built with --pull=never --format=docker (the OCI format drops
#     HEALTHCHECK). By default only the runtime stage, from the host-built binaries given as
#     arguments, so nothing compiles twice in CI; BLOCKREAD_SMOKE_FULL_BUILD=1 builds both stages
#     (the image's own Release build) instead;
#   - runs, each read from the host byte for byte over --network=host on a 127.0.0.1 port, as the
#     image's non-root user with --read-only:
#       a whole loop device passed in read-only, the shipped seccomp profile: io_uring;
#       the same under podman's default seccomp profile: auto falls back to psync, in one line;
#       --io-engine=io_uring under the default profile: exits 1 naming the fix;
#       an ext4 filesystem's files bind-mounted read-only plus its loop device (FIEMAP route);
#     and `podman healthcheck run`, `podman stop` exiting 0 within the grace period.
#
#   tests/deploy/container_smoke.sh BLOCKREAD_SERVER_BINARY BLOCKREAD_CLI_BINARY
#
# Needs root (loop devices, mounts, rootful podman), podman, runc and debootstrap
# (deploy/install-deps.sh installs them). Exits 77 (ctest SKIP_RETURN_CODE) saying why when one is
# missing. Prints how long each stage took. Without systemd as PID 1 podman logs "unable to get
# systemd connection" for each container's health check timer: harmless, `podman healthcheck run`
# still runs the check.
set -euo pipefail

server_bin=${1:?usage: $0 BLOCKREAD_SERVER_BINARY BLOCKREAD_CLI_BINARY}
cli_bin=${2:?usage: $0 BLOCKREAD_SERVER_BINARY BLOCKREAD_CLI_BINARY}
root=$(cd "$(dirname "$0")/../.." && pwd)

skip() {
  echo "SKIP: $*"
  # The skip log tests/run.sh lists (tests/support/test_main.cc writes the same lines).
  if [ -n "${BLOCKREAD_SKIPPED_LOG:-}" ]; then
    echo "blockread-skipped: deploy_container_smoke_test: $*" >>"$BLOCKREAD_SKIPPED_LOG"
  fi
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root (loop devices, mounts, rootful podman)"
for tool in podman runc debootstrap losetup mkfs.ext4 python3; do
  command -v "$tool" >/dev/null || skip "no $tool (deploy/install-deps.sh installs it)"
done

start_s=$(date +%s)
stage_s=$start_s
timing() {  # NAME: seconds since the previous stage
  local now
  now=$(date +%s)
  echo "time: $1: $((now - stage_s)) s"
  stage_s=$now
}
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

tmp=$(mktemp -d /tmp/blockread-smoke.XXXXXX)
containers=()
loops=()
modes=()  # "MODE UID:GID NODE" to put back
mounted=""
cleanup() {
  for c in "${containers[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  [ -z "$mounted" ] || umount "$mounted" || true
  for m in "${modes[@]}"; do
    read -r mode owner node <<<"$m"
    chmod "$mode" "$node" && chown "$owner" "$node" || true
  done
  for l in "${loops[@]}"; do losetup -d "$l" || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# Containers a killed run left behind.
podman rm -f -t 0 blockread-smoke-whole-uring blockread-smoke-whole-auto blockread-smoke-refused \
  blockread-smoke-fiemap >/dev/null 2>&1 || true

# ---- podman's configuration: the known fixes for Debian's podman 4.3 in this sandbox ----
# runc (not crun) as the runtime, cgroupfs (no systemd as PID 1), and default ulimits that runc
# may set: this sandbox gives root no CAP_SYS_RESOURCE, so no limit may exceed the one runc
# inherits. That is our hard limit for nofile and memlock, and for nproc 32768 at most (podman
# runs conmon, runc's parent, with RLIMIT_NPROC 32768; podman's own defaults, nofile=1048576 and
# nproc above that, fail). memlock stays at the hard limit: registered I/O buffers count against
# it (see --simple-slots/--generic-slots below).
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
[ "$nproc" != unlimited ] && [ "$nproc" -le 32768 ] || nproc=32768
memlock_kib=$(ulimit -Hl)
memlock=$([ "$memlock_kib" = unlimited ] && echo -1 || echo $((memlock_kib * 1024)))
cat >"$tmp/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc", "memlock=$memlock:$memlock"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
export CONTAINERS_CONF="$tmp/containers.conf"

# ---- base images from the host's Debian mirror, cached ----
# The host's bookworm suites (sources.list one-line entries and deb822 .sources stanzas), as
# one-line entries for the image: the build stage reaches the mirror the way the host does.
python3 - "$tmp/sources.list" <<'PY'
import glob, sys
entries = []
def add(uri, suites, components):
    for suite in suites:
        if suite.startswith("bookworm") and "/debian" in uri:
            entries.append(f"deb {uri} {suite} {' '.join(components) or 'main'}")
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        words = line.split("#")[0].split()
        if len(words) >= 3 and words[0] == "deb":
            if words[1].startswith("["):
                while not words[1].endswith("]"):
                    words.pop(1)
                words.pop(1)
            add(words[1], [words[2]], words[3:])
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in open(path).read().split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if ":" in line and not line.startswith((" ", "#")):
                key, value = line.split(":", 1)
                fields[key.strip().lower()] = value.split()
        if "deb" in fields.get("types", []) and fields.get("enabled", ["yes"]) != ["no"]:
            for uri in fields.get("uris", []):
                add(uri, fields.get("suites", []), fields.get("components", []))
if not entries:
    sys.exit("no Debian bookworm mirror in /etc/apt/sources.list{,.d}")
open(sys.argv[1], "w").write("\n".join(dict.fromkeys(entries)) + "\n")
PY
mirror=$(awk '$3 == "bookworm" {print $2; exit}' "$tmp/sources.list")
[ -n "$mirror" ] || fail "no bookworm suite in the host's sources: $(cat "$tmp/sources.list")"
# Keyed by mirror and week: a new week (or another mirror) makes a fresh base with its updates.
key="bookworm-minbase-$(sha256sum "$tmp/sources.list" | cut -c1-12)-$(date +%G-W%V)"
cache=${BLOCKREAD_SMOKE_CACHE:-/var/cache/blockread-smoke}
mkdir -p "$cache"
base_tar="$cache/$key.tar"
if [ ! -s "$base_tar" ]; then
  echo "base image: debootstrap --variant=minbase bookworm from $mirror (cached as $base_tar)"
  rm -f "$cache"/bookworm-minbase-*.tar  # older keys
  rootfs="$tmp/rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
    { tail -20 "$tmp/debootstrap.log"; fail "debootstrap"; }
  cp "$tmp/sources.list" "$rootfs/etc/apt/sources.list"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
  tar -C "$rootfs" -cf "$base_tar.part" . && mv "$base_tar.part" "$base_tar"
  rm -rf "$rootfs"
fi
# The names the Dockerfile's FROM lines resolve to, labelled with the key so a cached base is
# imported once.
for name in debian:bookworm debian:bookworm-slim; do
  if [ "$(podman image inspect --format '{{index .Labels "blockread.base"}}' "docker.io/library/$name" 2>/dev/null)" != "$key" ]; then
    podman import --change "LABEL blockread.base=$key" --change 'CMD ["/bin/bash"]' \
      "$base_tar" "docker.io/library/$name" >/dev/null
  fi
done
timing "base images (debootstrap when not cached, import)"

# ---- the image ----
image=localhost/blockread:latest
ctx="$tmp/context"
# The image this run replaces, removed once untagged so runs do not pile images up.
previous=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
if [ "${BLOCKREAD_SMOKE_FULL_BUILD:-0}" = 1 ]; then
  # The repository's tracked files as they are in the work tree (not build trees).
  mkdir -p "$ctx"
  (cd "$root" && git ls-files -z | xargs -0 cp --parents -t "$ctx")
  podman build --pull=never --format=docker --network=host -f "$ctx/deploy/Dockerfile" \
    --target runtime -t "$image" "$ctx" >"$tmp/build.log" 2>&1 ||
    { tail -40 "$tmp/build.log"; fail "podman build (full, two stages)"; }
  timing "image: full two-stage build"
else
  mkdir -p "$ctx/deploy/k8s" "$ctx/bin"
  cp "$root/deploy/Dockerfile" "$root/deploy/install-deps.sh" "$ctx/deploy/"
  cp "$root/deploy/k8s/server.textproto" "$ctx/deploy/k8s/"
  strip -o "$ctx/bin/blockread-server" "$server_bin"
  strip -o "$ctx/bin/blockread" "$cli_bin"
  podman build --pull=never --format=docker --network=host -f "$ctx/deploy/Dockerfile" \
    --target runtime-prebuilt --build-arg BIN_DIR=bin -t "$image" "$ctx" >"$tmp/build.log" 2>&1 ||
    { tail -40 "$tmp/build.log"; fail "podman build (runtime stage, host binaries)"; }
  timing "image: runtime stage from the host's binaries"
fi
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true  # still used by a container: keep it
fi
[ "$(podman image inspect --format '{{.Config.User}}' "$image")" = 65532 ] ||
  fail "image user is not 65532"
podman image inspect --format '{{json .Config.Healthcheck}}' "$image" | grep -q 'blockread health' ||
  fail "image has no HEALTHCHECK (built without --format=docker?)"
[ "$(podman image inspect --format '{{.Config.StopSignal}}' "$image")" = SIGTERM ] ||
  fail "image STOPSIGNAL is not SIGTERM"
ok "image $image: user 65532, HEALTHCHECK, STOPSIGNAL SIGTERM"

# ---- the devices ----
# A whole device: 64 MiB of random bytes on a loop device.
head -c $((64 << 20)) /dev/urandom >"$tmp/disk.img"
disk=$(losetup --find --show --direct-io=on "$tmp/disk.img")
loops+=("$disk")
# An ext4 filesystem with files, on a loop device, mounted on the host.
truncate -s 128M "$tmp/fs.img"
mkfs.ext4 -q -F "$tmp/fs.img"
fsdev=$(losetup --find --show "$tmp/fs.img")
loops+=("$fsdev")
mkdir -p "$tmp/mnt"
mount "$fsdev" "$tmp/mnt"
mounted="$tmp/mnt"
mkdir -p "$tmp/mnt/data/sub"
head -c $((5 << 20)) /dev/urandom >"$tmp/mnt/data/five-mib"
head -c 123457 /dev/urandom >"$tmp/mnt/data/sub/odd-size"
head -c $((40 << 20)) /dev/urandom >"$tmp/mnt/data/forty-mib"
chmod -R a+rX "$tmp/mnt/data"
sync
# The nodes as udev makes them on a real node, root:disk 0660, for the image's user in disk. (This
# machine's /dev has no udev rules: root:root 0600.) Put back as they were at the end.
for node in "$disk" "$fsdev"; do
  modes+=("$(stat -c '%a %u:%g' "$node") $node")
  chgrp disk "$node"
  chmod 0660 "$node"
done
timing "devices"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
cli() { "$cli_bin" --target="127.0.0.1:$port" "$@"; }

# run NAME [PODMAN_RUN_OPTIONS...] -- [SERVER_ARGS...]: starts the container detached, as the
# image's user, read-only, on the host's network with the server on 127.0.0.1:$port, and waits
# until it serves.
run() {
  local name=$1
  shift
  local opts=()
  while [ "$1" != -- ]; do opts+=("$1"); shift; done
  shift
  port=$(free_port)
  containers+=("$name")
  podman run -d --name "$name" --network=host --read-only --cap-drop=ALL --cap-add=LEASE \
    -e BLOCKREAD_HEALTH_TARGET="127.0.0.1:$port" "${opts[@]}" "$image" \
    --listen="127.0.0.1:$port" --metrics-listen= \
    --simple-slots=64 --generic-slots=2 "$@" >/dev/null
  for _ in $(seq 300); do
    cli health >/dev/null 2>&1 && return 0
    [ "$(podman inspect --format '{{.State.Running}}' "$name")" = true ] ||
      { podman logs "$name"; fail "$name exited before serving"; }
    sleep 0.1
  done
  podman logs "$name"
  fail "$name: not serving after 30 s"
}

# same_bytes FILE OFFSET LENGTH HOST_PATH: the server's bytes are the host's.
same_bytes() {
  local file=$1 offset=$2 length=$3 path=$4
  cli read "$file" "$offset" "$length" -o "$tmp/got" || fail "read $file $offset $length"
  python3 - "$path" "$offset" "$length" "$tmp/got" <<'PY' || fail "bytes differ: $file at $offset +$length"
import sys
path, offset, length, got = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with open(path, "rb") as f:
    f.seek(offset)
    want = f.read(length)
sys.exit(0 if open(got, "rb").read() == want else 1)
PY
}

backend_is() {  # EXPECTED: every device's backend in `blockread stats --json`
  cli stats --json | python3 -c '
import json, sys
devices = json.load(sys.stdin)["devices"]
backends = {d["backend"] for d in devices}
sys.exit(0 if devices and backends == {sys.argv[1]} else f"backends: {backends}")' "$1"
}

# stop NAME: SIGTERM through podman stop, exit status 0 well within the grace period.
stop() {
  local name=$1 t0 t1
  t0=$(date +%s%N)
  podman stop -t 30 "$name" >/dev/null
  t1=$(date +%s%N)
  local code
  code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
  [ "$code" -eq 0 ] || { podman logs "$name" | tail; fail "$name: exit status $code after podman stop"; }
  [ $(((t1 - t0) / 1000000)) -lt 15000 ] || fail "$name: podman stop took $(((t1 - t0) / 1000000)) ms"
  ok "$name: podman stop: exit 0 in $(((t1 - t0) / 1000000)) ms"
}

profile="$root/deploy/seccomp-io_uring.json"

# 1. Whole device, the shipped seccomp profile: io_uring, byte for byte, health check, stop.
run blockread-smoke-whole-uring --security-opt seccomp="$profile" --device "$disk:$disk:r" -- \
  --device="disk=$disk" --io-engine=io_uring
podman exec blockread-smoke-whole-uring id -u | grep -qx 65532 || fail "not running as uid 65532"
podman exec blockread-smoke-whole-uring id -G | tr ' ' '\n' | grep -qx 6 || fail "not in the disk group: $(podman exec blockread-smoke-whole-uring id)"
for range in "0 4096" "4096 4096" "$((32 << 20)) 65536" "12345 300000" "$(((64 << 20) - 100)) 4096" \
             "$((7 << 20)) $((1 << 20))"; do
  same_bytes disk $range "$tmp/disk.img"
done
backend_is io_uring || fail "shipped profile: not io_uring"
podman healthcheck run blockread-smoke-whole-uring || fail "podman healthcheck run"
ok "whole device, shipped seccomp profile: io_uring, bytes match, healthy, uid 65532 in disk"
stop blockread-smoke-whole-uring
timing "run: whole device, io_uring"

# 2. podman's default seccomp profile, engine auto: psync, said in one line.
run blockread-smoke-whole-auto --device "$disk:$disk:r" -- --device="disk=$disk"
for range in "0 4096" "8192 4096" "12345 300000" "$(((64 << 20) - 100)) 4096"; do
  same_bytes disk $range "$tmp/disk.img"
done
backend_is psync || fail "default profile, auto: not psync"
lines=$(podman logs blockread-smoke-whole-auto 2>&1 | grep -c 'io_engine auto: ' || true)
[ "$lines" -eq 1 ] || { podman logs blockread-smoke-whole-auto; fail "auto fallback: $lines lines, want 1"; }
podman logs blockread-smoke-whole-auto 2>&1 | grep 'io_engine auto: ' | grep -q 'deploy/seccomp-io_uring.json' ||
  fail "the fallback line does not name the shipped profile"
ok "default seccomp profile, auto: psync, one line naming deploy/seccomp-io_uring.json, bytes match"
stop blockread-smoke-whole-auto
timing "run: whole device, auto -> psync"

# 3. podman's default seccomp profile, --io-engine=io_uring: exits 1 with the message.
code=0
containers+=(blockread-smoke-refused)
podman run --name blockread-smoke-refused --network=host --read-only --cap-drop=ALL --device "$disk:$disk:r" \
  "$image" --listen=127.0.0.1:$(free_port) --metrics-listen= --device="disk=$disk" \
  --io-engine=io_uring >"$tmp/refused.log" 2>&1 || code=$?
[ "$code" -eq 1 ] || { cat "$tmp/refused.log"; fail "--io-engine=io_uring under the default profile: exit $code, want 1"; }
grep -q 'io_uring is not available' "$tmp/refused.log" && grep -q 'deploy/seccomp-io_uring.json' "$tmp/refused.log" ||
  { cat "$tmp/refused.log"; fail "the refusal does not name io_uring and the shipped profile"; }
ok "default seccomp profile, --io-engine=io_uring: exit 1 naming the fix"
timing "run: io_uring refused"

# 4. The FIEMAP route: the filesystem's files read-only plus its raw device, shipped profile.
# podman masks /sys/dev/block, where the server finds the disk (and partition start) under a
# file's st_dev; without it every file falls back to the file route.
run blockread-smoke-fiemap --security-opt seccomp="$profile" --security-opt unmask=/sys/dev/block \
  --device "$fsdev:$fsdev:r" \
  -v "$tmp/mnt/data:/srv/blockread:ro" -- --serve-files=/srv/blockread
for f in five-mib sub/odd-size forty-mib; do
  # Opened, leased and mapped on the first stat or read: give the watcher a moment.
  for _ in $(seq 50); do cli stat "$f" | grep -Eq '^source: +fiemap' && break; sleep 0.1; done
  cli stat "$f" | grep -Eq '^source: +fiemap' || { cli stat "$f"; fail "$f is not served from the raw device (FIEMAP)"; }
done
same_bytes five-mib 0 $((1 << 20)) "$tmp/mnt/data/five-mib"
same_bytes five-mib 4096 4096 "$tmp/mnt/data/five-mib"
same_bytes sub/odd-size 0 123457 "$tmp/mnt/data/sub/odd-size"
same_bytes sub/odd-size 120000 8192 "$tmp/mnt/data/sub/odd-size"
same_bytes forty-mib $((39 << 20)) $((1 << 20)) "$tmp/mnt/data/forty-mib"
same_bytes forty-mib 777 200000 "$tmp/mnt/data/forty-mib"
backend_is io_uring || fail "FIEMAP route: not io_uring"
ok "FIEMAP route: ext4 files read-only plus $fsdev, source fiemap, bytes match"
stop blockread-smoke-fiemap
timing "run: FIEMAP route"

# The compose file: what it mounts and uses exists, and its config passes the server's own check.
python3 - "$root/deploy" <<'PY' || fail "deploy/compose.yaml"
import os, sys, yaml
deploy = sys.argv[1]
service = yaml.safe_load(open(os.path.join(deploy, "compose.yaml")))["services"]["blockread"]
assert service["image"] == "blockread:latest", service["image"]
for opt in service["security_opt"]:
    if opt.startswith("seccomp="):
        assert os.path.isfile(os.path.join(deploy, opt[len("seccomp="):])), opt
for volume in service["volumes"]:
    source, target, mode = volume.split(":")
    assert mode == "ro" and os.path.exists(os.path.join(deploy, source)), volume
assert all(d.endswith(":r") for d in service["devices"]), service["devices"]
assert all(p.startswith("127.0.0.1:") for p in service["ports"]), service["ports"]
PY
"$server_bin" --check-config="$root/deploy/compose.server.textproto" >/dev/null ||
  fail "deploy/compose.server.textproto"
ok "deploy/compose.yaml: profile and config present, devices read-only, ports on loopback; config checks"

echo "container smoke test: all passed in $(($(date +%s) - start_s)) s"
