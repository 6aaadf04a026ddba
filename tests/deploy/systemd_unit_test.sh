#!/usr/bin/env bash
# deploy/systemd: the unit passes `systemd-analyze verify` without a word, its offline security
# exposure stays at or below 2.0 ("OK"), it allows io_uring and reads its devices read-only, the
# sysusers.d snippet makes the user it runs as, and the example config passes --check-config.
#
#   tests/deploy/systemd_unit_test.sh BLOCKREAD_SERVER_BINARY
#
# Exit 77 (ctest SKIP_RETURN_CODE) without systemd-analyze (Debian package systemd). Needs no
# systemd running: verify and security --offline read the unit file.
set -euo pipefail

server=$(realpath "${1:?usage: $0 BLOCKREAD_SERVER_BINARY}")
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
systemd_dir=$source_dir/deploy/systemd
# Exposure in tenths: 1.7 when this was written; "OK" is anything below 5.0. A rise means a
# hardening directive went missing.
max_exposure=20

command -v systemd-analyze >/dev/null || { echo "SKIP: no systemd-analyze (Debian package systemd)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The unit as installed, but starting this build's binary: verify checks ExecStart= exists.
unit=$tmp/blockread.service
sed "s#^ExecStart=/usr/local/bin/blockread-server #ExecStart=$server #" "$systemd_dir/blockread.service" >"$unit"
grep -q "^ExecStart=$server " "$unit" || fail "no ExecStart=/usr/local/bin/blockread-server to substitute"

# verify exits 0 on unknown keys and bad values and only says so: any output is a failure.
out=$(systemd-analyze verify --man=no "$unit" 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify complains: $out"
echo "ok: systemd-analyze verify --man=no is silent"

code=0
systemd-analyze security --offline=yes --threshold=$max_exposure "$unit" >"$tmp/security" 2>&1 || code=$?
grep -E "✗" "$tmp/security" | sed 's/  */ /g' || true
overall=$(grep "Overall exposure level" "$tmp/security" || true)
[ -n "$overall" ] || fail "systemd-analyze security --offline=yes: $(cat "$tmp/security")"
[ "$code" -eq 0 ] || fail "exposure above $max_exposure tenths: $overall"
echo "ok: $overall"

# io_uring is allowed and no deny list takes it away again; devices are read-only.
grep -qE '^SystemCallFilter=@system-service io_uring_setup io_uring_enter io_uring_register$' "$unit" ||
  fail "SystemCallFilter= does not allow @system-service plus the three io_uring calls"
for group in $(sed -n 's/^SystemCallFilter=~//p' "$unit"); do
  ! systemd-analyze syscall-filter "$group" 2>/dev/null | grep -qw 'io_uring_[a-z]*' ||
    fail "SystemCallFilter=~$group denies io_uring"
done
devices=$(grep '^DeviceAllow=' "$unit") || fail "no DeviceAllow="
! grep '^DeviceAllow=' "$unit" | grep -vqE '^DeviceAllow=[^ ]+ r$' || fail "a DeviceAllow= is not read-only: $devices"
grep -qx 'DevicePolicy=closed' "$unit" || fail "DevicePolicy= is not closed"
echo "ok: io_uring allowed, devices read-only ($(echo $devices))"

user=$(sed -n 's/^User=//p' "$unit")
if command -v systemd-sysusers >/dev/null; then
  mkdir -p "$tmp/root/etc"
  systemd-sysusers --root="$tmp/root" "$systemd_dir/blockread.sysusers.conf" >/dev/null 2>&1 ||
    fail "systemd-sysusers rejects blockread.sysusers.conf"
  grep -q "^$user:" "$tmp/root/etc/passwd" || fail "blockread.sysusers.conf does not create User=$user"
  echo "ok: blockread.sysusers.conf creates $user"
else
  echo "note: no systemd-sysusers; blockread.sysusers.conf not checked"
fi

out=$("$server" --check-config="$systemd_dir/server.textproto" 2>&1) ||
  fail "deploy/systemd/server.textproto fails --check-config: $out"
echo "ok: $out"
