#!/usr/bin/env bash
# Writes deploy/seccomp-io_uring.json: the container runtime's default seccomp profile with the
# three io_uring system calls allowed, and nothing else changed. Default profiles block io_uring
# (podman/containers-common, Docker 25+, containerd 2's RuntimeDefault), so blockread's engine
# cannot start its rings under them.
#
#   deploy/make-seccomp-profile.sh [DEFAULT_PROFILE [OUT]]
#
# DEFAULT_PROFILE defaults to podman's, /usr/share/containers/seccomp.json (Debian 12 package
# golang-github-containers-common). The io_uring calls are taken out of every rule that names
# them (a rule left with no name goes) and allowed by one rule of their own, unconditionally.
# tests/deploy/seccomp_profile_test.sh checks the committed file is exactly this script's output.
set -euo pipefail

in=${1:-/usr/share/containers/seccomp.json}
out=${2:-"$(dirname "$0")/seccomp-io_uring.json"}
[ -r "$in" ] || {
  echo "make-seccomp-profile: cannot read $in (Debian: apt-get install golang-github-containers-common)" >&2
  exit 1
}

jq --tab '
  ["io_uring_enter", "io_uring_register", "io_uring_setup"] as $io_uring
  | .syscalls |= (
      map(if has("names") then .names -= $io_uring else . end
          | select((has("names") | not) or (.names | length > 0)))
      + [{names: $io_uring, action: "SCMP_ACT_ALLOW", args: [],
          comment: "blockread: io_uring for its read engine (deploy/make-seccomp-profile.sh)",
          includes: {}, excludes: {}}])
' "$in" >"$out.tmp"
mv "$out.tmp" "$out"
