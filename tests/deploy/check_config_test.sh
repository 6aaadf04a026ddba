#!/usr/bin/env bash
# blockread-server --check-config=FILE as a deploy pipeline meets it: exit 0 and one OK line on
# stdout for a good config, even where its devices do not exist and its port is taken (the check
# opens and binds nothing); exit 2 and one line naming the problem on stderr for a bad one.
#
#   tests/deploy/check_config_test.sh BLOCKREAD_SERVER_BINARY
set -euo pipefail

server=${1:?usage: $0 BLOCKREAD_SERVER_BINARY}
tmp=$(mktemp -d)
listener=""
cleanup() {
  [ -z "$listener" ] || kill "$listener" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A port that is in use while the check runs.
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)' >"$tmp/port" &
listener=$!
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
port=$(cat "$tmp/port")
[ -n "$port" ] || fail "could not hold a port"

cat >"$tmp/good.textproto" <<CONFIG
# a comment
listen: "127.0.0.1:$port"
metrics_listen: ""
device: "nvme9=/dev/blockread-test-no-such-device"
serve_files: "/blockread-test-no-such-dir"
CONFIG
code=0
"$server" --check-config="$tmp/good.textproto" >"$tmp/out" 2>"$tmp/err" || code=$?
[ "$code" -eq 0 ] || fail "good config: exit $code: $(cat "$tmp/err")"
[ "$(cat "$tmp/out")" = "blockread-server: $tmp/good.textproto: OK" ] || fail "good config printed: $(cat "$tmp/out")"
[ ! -s "$tmp/err" ] || fail "good config wrote to stderr: $(cat "$tmp/err")"
echo "ok: a good config is OK without its devices and with its port taken"

check_bad() {  # NAME CONFIG_TEXT EXPECTED_SUBSTRING [EXTRA_FLAGS...]
  local name=$1 text=$2 expected=$3
  shift 3
  printf '%s\n' "$text" >"$tmp/$name.textproto"
  code=0
  "$server" --check-config="$tmp/$name.textproto" "$@" >"$tmp/out" 2>"$tmp/err" || code=$?
  [ "$code" -eq 2 ] || fail "$name: exit $code, expected 2 ($(cat "$tmp/out" "$tmp/err"))"
  [ ! -s "$tmp/out" ] || fail "$name: printed on stdout: $(cat "$tmp/out")"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$name: not one line on stderr: $(cat "$tmp/err")"
  grep -qF -- "$expected" "$tmp/err" || fail "$name: stderr does not say '$expected': $(cat "$tmp/err")"
  echo "ok: $name: exit 2, $(cat "$tmp/err")"
}
check_bad syntax 'listen: 7420' "$tmp/syntax.textproto:1:"
check_bad unknown_field 'listne: "127.0.0.1:1"' "listne"
check_bad bad_listen 'listen: "7420"' "is not ADDR:PORT"
check_bad bad_device 'device: "/dev/nvme0n1"' "is not NAME=PATH"
check_bad engine 'max_read_bytes: 100' "max_read_bytes"
check_bad flag_on_top 'listen: "127.0.0.1:1"' "max_read_bytes" --max-read-bytes=100
check_bad two_files 'listen: "127.0.0.1:1"' "name different files" --config="$tmp/good.textproto"
code=0
"$server" --check-config="$tmp/missing.textproto" >/dev/null 2>"$tmp/err" || code=$?
[ "$code" -eq 2 ] && grep -q "cannot read" "$tmp/err" || fail "missing file: exit $code: $(cat "$tmp/err")"
echo "ok: a missing file: exit 2, $(cat "$tmp/err")"
