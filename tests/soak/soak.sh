#!/usr/bin/env bash
# Soak (issue 13; a script, bounded, not part of the test command): a blockread-server serving
# a faulty device (nbdkit's error filter through nbdfuse and a --direct-io=on loop device, errors
# switched on and off) and a healthy one, under mixed load for --minutes (default 10):
#   - cycles of `blockread load --verify --verify-file` on the faulty device: 40 s with errors off
#     (every read must succeed) then 20 s with EIO on 5% of reads (errors must all be DATA_LOSS,
#     and there must be some: the block layer merges requests, so counts are not compared);
#   - throughout: a verified unary load on the healthy device (no error at all), a client
#     flooding 1 MiB reads on a stream it never reads, and a client whose reads carry deadlines
#     of 0-2 ms and whose streams are cancelled at random (tests/soak/misbehave.py).
# Pass: zero wrong bytes, the error rules above, server RSS at the end within 10% of its RSS after
# the first cycle (warm-up), and no growth of its open descriptors. Prints a table per cycle and
# the totals; exits 0 on pass, 1 on failure. Needs root, nbdkit, nbdfuse (libnbd-bin), fuse3,
# python3-grpcio.
#
#   tests/soak/soak.sh [--minutes=10] [--build-dir=build/release]
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
minutes=10 build=build/release
for arg in "$@"; do
  case "$arg" in
    --minutes=*) minutes=${arg#*=} ;;
    --build-dir=*) build=${arg#*=} ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-/usr/bin/python3}  # Debian's, which has python3-grpcio
for tool in nbdkit nbdfuse fusermount3 losetup "$python"; do
  command -v "$tool" >/dev/null || { echo "soak.sh: needs $tool" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "soak.sh: needs root (loop devices, FUSE)" >&2; exit 1; }
[ -x "$build/server/blockread-server" ] || cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target blockread-server blockread >/dev/null
server_bin=$root/$build/server/blockread-server
cli=$root/$build/client/blockread

work=$(mktemp -d /var/tmp/blockread-soak.XXXXXX)
pids=() loop="" server_pid=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null || true
  sleep 0.5
  fusermount3 -u "$work/fuse" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "soak: images and the faulty device under $work"
head -c $((64 << 20)) /dev/urandom >"$work/faulty.img"
head -c $((64 << 20)) /dev/urandom >"$work/healthy.img"
mkdir "$work/fuse"
nbdfuse "$work/fuse/disk" --command nbdkit -s --exit-with-parent --filter=error file "$work/faulty.img" \
  error=EIO error-pread-rate=0.05 error-pread-file="$work/errors-on" >"$work/nbdfuse.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/fuse/disk" ] && break; sleep 0.1; done
loop=$(losetup --find --show --direct-io=on "$work/fuse/disk")

port=$((20000 + RANDOM % 20000))
"$server_bin" --listen=127.0.0.1:$port --metrics-listen= \
  --device=faulty=$loop,healthy=$work/healthy.img >"$work/server.log" 2>&1 &
server_pid=$!
target=127.0.0.1:$port
for _ in $(seq 100); do "$cli" --target=$target health >/dev/null 2>&1 && break; sleep 0.1; done

export PYTHONPATH=$root/client/python
"$python" tests/soak/misbehave.py flood $target healthy >"$work/flood.log" 2>&1 &
pids+=($!)
"$python" tests/soak/misbehave.py cancel $target faulty >"$work/cancel.log" 2>&1 &
pids+=($!)
sleep 3
for p in "${pids[@]:1}"; do
  kill -0 "$p" 2>/dev/null || { echo "soak: a misbehaving client died:"; cat "$work"/flood.log "$work"/cancel.log; exit 1; }
done
total_s=$((minutes * 60))
"$cli" --target=$target load --file=healthy --verify --verify-file="$work/healthy.img" \
  --mode=unary --bs=16k --qd=8 --runtime=${total_s}s --output=json >"$work/healthy.json" 2>&1 &
healthy_pid=$!

rss_kib() { awk '/VmRSS/ {print $2}' /proc/$server_pid/status; }
fds() { ls /proc/$server_pid/fd | wc -l; }
json() { "$python" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

fail=0 cycles=$((total_s / 60)) reads=0 faults_reads=0 errors_in=0 errors_out=0
[ "$cycles" -ge 1 ] || cycles=1
printf '%-6s %-7s %10s %8s %-24s %9s %5s\n' cycle phase reads errors codes rss_mib fds
for cycle in $(seq "$cycles"); do
  for phase in clean faults; do
    if [ $phase = faults ]; then touch "$work/errors-on"; secs=20; else rm -f "$work/errors-on"; secs=40; fi
    out=$work/faulty-$cycle-$phase.json
    "$cli" --target=$target load --file=faulty --verify --verify-file="$work/faulty.img" \
      --mode=stream --bs=64k --qd=16 --runtime=${secs}s --output=json >"$out" 2>&1 || true
    n=$(json "$out" 'd["reads"]') codes=$(json "$out" '",".join(f"{k}:{v}" for k,v in d["errors"].items()) or "-"')
    errs=$(json "$out" 'sum(d["errors"].values())')
    wrong=$(json "$out" 'd.get("verify_failure","")')
    reads=$((reads + n))
    if [ -n "$wrong" ]; then echo "soak: FAIL wrong bytes: $wrong"; fail=1; fi
    if [ $phase = clean ]; then
      errors_out=$((errors_out + errs))
      [ "$errs" = 0 ] || { echo "soak: FAIL errors outside a fault window: $codes"; fail=1; }
    else
      faults_reads=$((faults_reads + n)); errors_in=$((errors_in + errs))
      other=$(json "$out" 'sum(v for k,v in d["errors"].items() if k != "DATA_LOSS")')
      [ "$other" = 0 ] || { echo "soak: FAIL non-DATA_LOSS errors in a fault window: $codes"; fail=1; }
      [ "$errs" -gt 0 ] || { echo "soak: FAIL no error in a fault window (is the filter on?)"; fail=1; }
    fi
    rss=$(rss_kib) fd=$(fds)
    printf '%-6s %-7s %10s %8s %-24s %9s %5s\n' "$cycle" $phase "$n" "$errs" "$codes" $((rss / 1024)) "$fd"
    if [ "$cycle" = 1 ] && [ $phase = faults ]; then rss_warm=$rss fds_warm=$fd; fi
  done
done
rm -f "$work/errors-on"
wait "$healthy_pid" || true
healthy_reads=$(json "$work/healthy.json" 'd["reads"]')
healthy_errors=$(json "$work/healthy.json" 'sum(d["errors"].values())')
healthy_wrong=$(json "$work/healthy.json" 'd.get("verify_failure","")')
[ "$healthy_errors" = 0 ] || { echo "soak: FAIL the healthy device had errors"; fail=1; }
[ -z "$healthy_wrong" ] || { echo "soak: FAIL wrong bytes on the healthy device: $healthy_wrong"; fail=1; }
rss_end=$(rss_kib) fds_end=$(fds)
echo "soak: faulty device $reads reads ($faults_reads in fault windows), errors $errors_in in fault windows, $errors_out outside"
echo "soak: healthy device $healthy_reads reads, $healthy_errors errors; cancel client: $(tail -1 "$work/cancel.log")"
echo "soak: server RSS $((rss_warm / 1024)) MiB after warm-up, $((rss_end / 1024)) MiB at the end; fds $fds_warm -> $fds_end"
if [ $((rss_end * 10)) -gt $((rss_warm * 11)) ]; then echo "soak: FAIL RSS grew more than 10%"; fail=1; fi
if [ "$fds_end" -gt "$fds_warm" ]; then echo "soak: FAIL descriptors grew"; fail=1; fi
kill -0 "$server_pid" 2>/dev/null || { echo "soak: FAIL the server died"; fail=1; }
for p in "${pids[@]:1}"; do
  kill -0 "$p" 2>/dev/null || { echo "soak: FAIL a misbehaving client died early"; fail=1; }
done
if [ $fail = 0 ]; then echo "soak: PASS"; else echo "soak: FAIL"; fi
exit $fail
