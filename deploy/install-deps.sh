#!/usr/bin/env bash
# Installs the Debian 12 packages blockread needs to build, test and run, skipping those already
# installed. Needs root (or sudo). Everything comes from apt; nothing is downloaded otherwise.
#
#   deploy/install-deps.sh               build, tests, benchmarks, Python client, deploy tests
#   deploy/install-deps.sh --build-only  only what a build of the two binaries needs (configure
#                                        with -DBLOCKREAD_TESTS=OFF): the image's build stage
#   deploy/install-deps.sh --runtime     only the shared libraries the two binaries load: the
#                                        image's runtime stage
set -euo pipefail

set=all
case "${1:-}" in
  "") ;;
  --build-only) set=build ;;
  --runtime) set=runtime ;;
  *) echo "usage: $0 [--build-only | --runtime]" >&2; exit 2 ;;
esac

if [ "$set" = runtime ]; then
  # What ldd shows for blockread-server and blockread, by package (the -dev packages below
  # depend on these).
  packages=(libgrpc++1.51 libprotobuf32 libabsl20220623 liburing2 libisal2
            libprometheus-cpp-pull1.0 libblkid1)
else
packages=(
  # build
  build-essential cmake ninja-build pkg-config
  # libraries
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler liburing-dev libabsl-dev
  libisal-dev libcli11-dev nlohmann-json3-dev prometheus-cpp-dev libssl-dev libblkid-dev
)
[ "$set" = build ] || packages+=(
  # tests: GoogleTest, real filesystems on loop devices, fio as the reference, curl to scrape
  libgtest-dev libgmock-dev util-linux mount fdisk e2fsprogs xfsprogs btrfs-progs fio curl
  # tests: ccache, so that the test command's rebuilds of its four trees compile only what changed
  ccache
  # tests: the libFuzzer targets (tests/fuzz), built with clang and its fuzzer runtime
  clang-14 libclang-rt-14-dev
  # tests: devices that stall or fail on demand (nbdkit filters, exposed as a file by nbdfuse)
  nbdkit libnbd-bin fuse3
  # benchmarks: qemu-nbd is the peer server tests/bench/compare.sh measures against
  qemu-utils jq valgrind
  # Python client (client/python) and its tests: Debian's python3 with gRPC and protobuf (stubs
  # from protoc + grpc_python_plugin, above), pytest, venv/pip/setuptools for the offline
  # pip install test, openssl for test certificates, torch for blockread.torch (~150 MB), mypy
  # for the package's type hints
  python3 python3-grpcio python3-protobuf python3-pytest python3-venv python3-pip
  python3-setuptools openssl python3-torch python3-mypy
  # `blockread load --report` is checked in a real browser: headless Chromium renders the page
  chromium
)
if [ "$set" = all ]; then
  # deploy tests (tests/deploy): manifests parsed as YAML, podman's default seccomp profile that
  # deploy/seccomp-io_uring.json extends, systemd-analyze; Debian's kubectl only where there is
  # none.
  packages+=(python3-yaml golang-github-containers-common systemd)
  command -v kubectl >/dev/null || packages+=(kubernetes-client)
  # the container smoke test (tests/deploy/container_smoke.sh): podman, runc (the runtime its
  # containers.conf names), debootstrap for the base images (no registry is reachable)
  packages+=(podman runc debootstrap)
fi
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
