#!/usr/bin/env bash
# deploy/seccomp-io_uring.json is the container runtime's default profile plus exactly
# io_uring_setup, io_uring_enter and io_uring_register (allowed, unconditionally), and it is what
# deploy/make-seccomp-profile.sh makes of the installed default: regenerate it rather than edit it.
#
#   tests/deploy/seccomp_profile_test.sh [DEFAULT_PROFILE]
#
# Exit 77 (ctest SKIP_RETURN_CODE) when jq or the default profile is missing, saying which.
set -euo pipefail

source_dir=$(cd "$(dirname "$0")/../.." && pwd)
profile=$source_dir/deploy/seccomp-io_uring.json
script=$source_dir/deploy/make-seccomp-profile.sh
default=${1:-/usr/share/containers/seccomp.json}
io_uring='["io_uring_enter","io_uring_register","io_uring_setup"]'

command -v jq >/dev/null || { echo "SKIP: no jq (Debian package jq)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The io_uring calls are named by exactly one rule, which allows them and nothing else, with no
# argument, capability or architecture condition.
jq -e --argjson io "$io_uring" '
  [.syscalls[] | select((.names // []) - $io != (.names // []))] as $rules
  | ($rules | length) == 1
    and ($rules[0].names | sort) == $io
    and $rules[0].action == "SCMP_ACT_ALLOW"
    and ($rules[0].args // []) == []
    and ($rules[0].includes // {}) == {} and ($rules[0].excludes // {}) == {}
' "$profile" >/dev/null || fail "$profile: the io_uring calls are not exactly one unconditional ALLOW rule"
echo "ok: one rule allows exactly io_uring_setup, io_uring_enter, io_uring_register"

# The script moves io_uring out of rules a newer default may already have for it (Docker 25+
# denies it explicitly) instead of leaving a deny beside the allow.
cat >"$tmp/newer.json" <<'JSON'
{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [
  {"names": ["read", "io_uring_enter"], "action": "SCMP_ACT_ALLOW"},
  {"names": ["io_uring_setup", "io_uring_register"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}
JSON
"$script" "$tmp/newer.json" "$tmp/newer-out.json"
jq -e --argjson io "$io_uring" '
  .syscalls == [{names: ["read"], action: "SCMP_ACT_ALLOW"},
                {names: $io, action: "SCMP_ACT_ALLOW", args: [],
                 comment: .syscalls[1].comment, includes: {}, excludes: {}}]
' "$tmp/newer-out.json" >/dev/null || fail "make-seccomp-profile.sh left io_uring in a default's own rules: $(jq -c .syscalls "$tmp/newer-out.json")"
echo "ok: io_uring rules of a newer default are replaced, not duplicated"

if [ ! -r "$default" ]; then
  echo "SKIP: no default profile at $default to compare with (Debian package golang-github-containers-common)"
  exit 77
fi
# Take the added rule away and the default is left, unchanged in every other field and rule.
jq -e --slurpfile default "$default" --argjson io "$io_uring" '
  (.syscalls |= map(select((.names // []) - $io == (.names // [])))) as $rest
  | ($default[0] | .syscalls |= map(if has("names") then .names -= $io else . end
                                    | select((has("names") | not) or (.names | length > 0))))
    == $rest
' "$profile" >/dev/null || fail "$profile is not $default plus the io_uring rule; regenerate it with deploy/make-seccomp-profile.sh"
echo "ok: everything else is $default"

"$script" "$default" "$tmp/regenerated.json"
cmp -s "$tmp/regenerated.json" "$profile" ||
  fail "$profile differs from deploy/make-seccomp-profile.sh's output: regenerate it ($(diff "$tmp/regenerated.json" "$profile" | head -5))"
echo "ok: byte for byte what deploy/make-seccomp-profile.sh makes of $default"
