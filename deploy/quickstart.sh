#!/usr/bin/env bash
# The run command: on a fresh Debian 12 machine (as root, or with sudo) installs what is missing,
# builds, and starts blockread-server in the foreground on the embedded default: a demo device
# (a regular file, no NVMe needed) with a handful of demo files, created once under
# ./blockread-data. Extra arguments go to the server (see `blockread-server --help`).
# Stop it with Ctrl-C (graceful shutdown).
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install-deps.sh
build=build/release
echo "quickstart: building into $build" >&2
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target blockread-server blockread
echo "quickstart: starting the server; in another shell try:" >&2
echo "  $build/client/blockread ls" >&2
echo "  $build/client/blockread read hello.txt 0 4k" >&2
exec "$build/server/blockread-server" "$@"
