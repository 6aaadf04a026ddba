#!/usr/bin/env bash
# Issue 12: gRPC over TLS against plaintext, side by side in one run (a benchmark, not a test).
# Two blockread-server processes on the same demo device (under $DATA_PARENT, default /dev/shm,
# so the device is not the limit), one plaintext and one TLS (--tls-cert/--tls-key, a throwaway
# CA and server certificate for 127.0.0.1/localhost made with openssl in the temp dir), both
# pinned to CPU $SERVER_CPU (taskset and --cpus: one worker), metrics off. `blockread load` runs
# on CPU $CLIENT_CPU in stream mode (--qd and --bs only, the rest derived), random reads of one
# file:
#
#   4k-qd32:  --bs=4k   --qd=32        128k-qd8:  --bs=128k --qd=8
#
# Throughput (default): for each workload, --rounds rounds alternating plaintext and TLS (the
# first of the pair alternates too), --runtime seconds each after --ramp; prints every round,
# then one table of the best round of each: reads/s, MB/s (10^6 bytes), p50, p99, the server's
# CPU time per read, and TLS/plaintext. Figures swing 10-30% run to run on a shared machine;
# read the ratios.
#
# --callgrind: instead, each server and the load client run under callgrind, for each
# --profile=MODE:BS:QD[:READS] given (default stream:4k:32; READS default --reads; e.g. also
# --profile=unary:4k:32 --profile=stream:128k:8:4000), the server's counters zeroed after its
# startup and a first call, so the TLS handshake of the load's connection is counted but not the
# server's startup (the client's whole process is). Prints instructions per read of each
# process, plaintext and TLS, and for the server the extra instructions per read with TLS by
# object (libcrypto, libssl, libc, ...), the functions whose inclusive cost grew most, and the
# largest self-cost increases. Debian's libssl, libcrypto and libgrpc carry no symbols for
# internal functions: those show as addresses. Under valgrind a `rep movsb` (glibc's memcpy of
# blocks above some KiB) counts one instruction per byte. Output files stay in --keep=DIR.
#
#   tests/bench/tls_vs_plaintext.sh [--runtime=5] [--ramp=1] [--rounds=3] [--file=large]
#                                   [--callgrind] [--reads=20000] [--profile=MODE:BS:QD[:READS]]...
#                                   [--keep=DIR]
# Build dir: $BUILD_DIR (default build/bench, RelWithDebInfo; built here). SERVER_FLAGS and
# CLIENT_FLAGS: extra flags for both servers and for every `blockread load`. NICE=-10: server
# and client at a higher priority (root).
set -euo pipefail
cd "$(dirname "$0")/../.."
runtime=5 ramp=1 rounds=3 file=large callgrind=0 reads=20000 profiles=() keep=""
for arg in "$@"; do
  case "$arg" in
    --runtime=*) runtime=${arg#*=} ;;
    --ramp=*) ramp=${arg#*=} ;;
    --rounds=*) rounds=${arg#*=} ;;
    --file=*) file=${arg#*=} ;;
    --callgrind) callgrind=1 ;;
    --reads=*) reads=${arg#*=} ;;
    --profile=*) profiles+=("${arg#*=}") ;;
    --keep=*) keep=${arg#*=} ;;
    -h | --help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tls_vs_plaintext.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
nice=${NICE:-0}
read -r -a server_flags <<<"${SERVER_FLAGS:-}"
read -r -a client_flags <<<"${CLIENT_FLAGS:-}"
tools=(openssl jq taskset)
[ "$callgrind" = 1 ] && tools+=(valgrind callgrind_control)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || { echo "tls_vs_plaintext.sh: $tool missing" >&2; exit 1; }
done

build=${BUILD_DIR:-build/bench}
echo "tls_vs_plaintext.sh: building $build" >&2
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target blockread-server blockread >/dev/null
server_bin=$build/server/blockread-server
client_bin=$build/client/blockread

work=$(mktemp -d "${DATA_PARENT:-/dev/shm}/blockread-tls-XXXXXX")
declare -A pid=() target=()
cleanup() {
  local k
  for k in "${!pid[@]}"; do kill "${pid[$k]}" 2>/dev/null || true; done
  for k in "${!pid[@]}"; do wait "${pid[$k]}" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# A throwaway CA and a server certificate for 127.0.0.1 and localhost (P-256, as tls_test's).
make_certs() {
  local d=$work/tls
  mkdir -p "$d"
  local key=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  {
    openssl req -x509 "${key[@]}" -keyout "$d/ca.key" -out "$d/ca.pem" -days 2 \
      -subj /CN=blockread-bench-ca
    openssl req -new "${key[@]}" -keyout "$d/server.key" -out "$d/server.csr" -subj /CN=127.0.0.1
    printf 'subjectAltName = IP:127.0.0.1,DNS:localhost\nextendedKeyUsage = serverAuth\n' \
      >"$d/server.ext"
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
      -days 2 -sha256 -extfile "$d/server.ext" -out "$d/server.pem"
  } >"$d/openssl.log" 2>&1 || { cat "$d/openssl.log" >&2; exit 1; }
}

# start_server KIND [WRAPPER...]: KIND plain or tls; sets pid[KIND] and target[KIND].
start_server() {
  local kind=$1
  shift
  local tls=()
  [ "$kind" = tls ] && tls=(--tls-cert="$work/tls/server.pem" --tls-key="$work/tls/server.key")
  nice -n "$nice" taskset -c "$server_cpu" "$@" "$server_bin" --cpus="$server_cpu" \
    --listen=127.0.0.1:0 --metrics-listen= --data-dir="$work/data" "${tls[@]}" \
    "${server_flags[@]}" >"$work/server-$kind.out" 2>"$work/server-$kind.log" &
  pid[$kind]=$!
  local _
  for _ in $(seq 600); do
    grep -q 'listening on' "$work/server-$kind.out" 2>/dev/null && break
    kill -0 "${pid[$kind]}" 2>/dev/null || break
    sleep 0.1
  done
  target[$kind]=$(awk '/listening on/ {print $NF; exit}' "$work/server-$kind.out")
  [ -n "${target[$kind]}" ] || {
    echo "tls_vs_plaintext.sh: $kind server did not start:" >&2
    cat "$work/server-$kind.log" >&2
    exit 1
  }
}

stop_server() {  # KIND: SIGINT (graceful: callgrind writes its file at exit)
  kill -INT "${pid[$1]}" 2>/dev/null || true
  wait "${pid[$1]}" 2>/dev/null || true
  unset "pid[$1]"
}

# client KIND [ARGS...]: the blockread CLI against that server (TLS: --ca; the certificate names
# 127.0.0.1, so no --tls-server-name), pinned to the client CPU.
client() {
  local kind=$1
  shift
  local tls=()
  [ "$kind" = tls ] && tls=(--ca="$work/tls/ca.pem")
  nice -n "$nice" taskset -c "$client_cpu" "${client_wrapper[@]}" "$client_bin" \
    --target="${target[$kind]}" "${tls[@]}" "${client_global[@]}" "$@"
}
client_wrapper=() client_global=()

load() {  # KIND BS QD MODE OUT_JSON [EXTRA...]
  local kind=$1 bs=$2 qd=$3 mode=$4 json=$5
  shift 5
  client "$kind" load --file="$file" --rw=randread --bs="$bs" --qd="$qd" --mode="$mode" \
    --output=json "$@" "${client_flags[@]}" >"$json"
  local errors
  errors=$(jq '[.errors[]] | add // 0' "$json")
  [ "$errors" = 0 ] || { echo "tls_vs_plaintext.sh: $kind $bs QD$qd had $errors errors" >&2; exit 1; }
}

make_certs
workloads=("4k-qd32 4k 32" "128k-qd8 128k 8")

if [ "$callgrind" = 1 ]; then
  out=${keep:-$work/callgrind}
  mkdir -p "$out"
  # Under callgrind the first calls can take longer than the CLI's 10 s deadline.
  client_global=(--timeout-ms=300000)
  [ ${#profiles[@]} -gt 0 ] || profiles=(stream:4k:32)
  for kind in plain tls; do
    echo "tls_vs_plaintext.sh: $kind server under callgrind" >&2
    start_server "$kind" valgrind --tool=callgrind --callgrind-out-file="$out/server-$kind.out"
    client "$kind" health >/dev/null
    dumps=0
    for prof in "${profiles[@]}"; do
      IFS=: read -r mode bs qd n <<<"$prof"
      name=$mode-$bs-qd$qd
      callgrind_control -z "${pid[$kind]}" >>"$out/callgrind_control.log" 2>&1
      client_wrapper=(valgrind --tool=callgrind --callgrind-out-file="$out/client-$kind-$name.out")
      load "$kind" "$bs" "$qd" "$mode" "$out/load-$kind-$name.json" --number="${n:-$reads}" \
        2>"$out/client-$kind-$name.log"
      client_wrapper=()
      callgrind_control -d "$name" "${pid[$kind]}" >>"$out/callgrind_control.log" 2>&1
      dumps=$((dumps + 1))
      mv "$out/server-$kind.out.$dumps" "$out/server-$kind-$name.out"
    done
    stop_server "$kind"
    rm -f "$out/server-$kind.out"  # the shutdown
  done
  for prof in "${profiles[@]}"; do
    IFS=: read -r mode bs qd _ <<<"$prof"
    /usr/bin/python3 - "$out" "$mode-$bs-qd$qd" <<'PY'
import collections, json, re, sys
out, name = sys.argv[1:]

# Reads a callgrind output file: total Ir, self Ir per function, Ir of the calls each function
# makes to others. Functions are "name [object]" (names of libraries without symbols are
# addresses, which repeat across objects; callgrind numbers each function of each object on its
# own). callgrind_annotate is not used: after the counters are zeroed mid-run it credits the
# frames then on the stack (start_thread, Worker::Run) with the whole run as self cost.
def parse(path):
    names = {"ob": {}, "fn": {}}
    fn_obj, call_obj = {}, {}
    self_ir, call_ir = collections.Counter(), collections.Counter()
    total, npos, ob, cob, fn, cfn, in_call = 0, 1, "", None, None, None, False
    def ident(kind, rest):  # "(id) name" defines, "(id)" refers, a bare name is its own id
        m = re.match(r"\((\d+)\)(?: (.*))?$", rest)
        if not m:
            names[kind][rest] = rest
            return rest
        if m.group(2) is not None:
            names[kind][m.group(1)] = m.group(2)
        return m.group(1)
    for line in open(path):
        line = line.rstrip("\n")
        if not line:
            continue
        if line[0].isdigit() or line[0] in "+-*":
            fields = line.split()
            ir = int(fields[npos]) if len(fields) > npos else 0
            if in_call:
                if cfn != fn:
                    call_ir[fn] += ir
                in_call = False
            else:
                self_ir[fn] += ir
            continue
        key, _, rest = line.partition("=")
        if key == "ob":
            ob = names["ob"][ident("ob", rest)].rsplit("/", 1)[-1]
        elif key == "cob":
            cob = names["ob"][ident("ob", rest)].rsplit("/", 1)[-1]
        elif key == "fn":
            fn, cob = ident("fn", rest), None
            fn_obj[fn] = ob
        elif key == "cfn":
            cfn = ident("fn", rest)
            call_obj.setdefault(cfn, cob or ob)
        elif key == "calls":
            in_call = True
        elif line.startswith("positions:"):
            npos = len(line.split()) - 1
        elif line.startswith("summary:") or line.startswith("totals:"):
            total = int(line.split()[1])
    label = lambda f: f"{names['fn'][f]} [{fn_obj.get(f) or call_obj.get(f, '?')}]"
    by_self, by_incl = collections.Counter(), collections.Counter()
    for f in set(self_ir) | set(call_ir):
        by_self[label(f)] += self_ir[f]
        by_incl[label(f)] += self_ir[f] + call_ir[f]
    return total, by_self, by_incl

r = {}
for kind in ("plain", "tls"):
    load = json.load(open(f"{out}/load-{kind}-{name}.json"))
    n = load["issued"]
    total, self_ir, incl = parse(f"{out}/server-{kind}-{name}.out")
    client_total = parse(f"{out}/client-{kind}-{name}.out")[0]
    r[kind] = dict(n=n, server=total / n, client=client_total / n, self=self_ir, incl=incl,
                   settings=load["settings"])
p, t = r["plain"], r["tls"]
st = p["settings"]
print(f"\n{name} (threads={st['threads']} channels={st['channels']} "
      f"streams={st['streams']} batch={st['batch']}), {p['n']} / {t['n']} reads: "
      "instructions per read")
print("| process | plaintext | TLS | TLS - plaintext | TLS / plaintext |")
print("|---|---|---|---|---|")
for proc, note in (("server", "(after startup)"), ("client", "(whole process)")):
    a, b = p[proc], t[proc]
    print(f"| {proc} {note} | {a:,.0f} | {b:,.0f} | {b - a:+,.0f} | {b / a:.2f} |")

def diff(pc, tc, rows, title, group=lambda k: k):
    pg, tg = collections.Counter(), collections.Counter()
    for k, v in pc.items():
        pg[group(k)] += v / p["n"]
    for k, v in tc.items():
        tg[group(k)] += v / t["n"]
    keys = sorted(set(pg) | set(tg), key=lambda k: (-(tg[k] - pg[k]), k))
    print(f"\n{title}: plaintext, TLS, difference (instructions per read)")
    for k in keys[:rows]:
        print(f"  {pg[k]:9,.0f} {tg[k]:9,.0f} {tg[k] - pg[k]:+9,.0f}  {k[:120]}")

diff(p["self"], t["self"], 12, "server, self cost by object", lambda k: k.rsplit(" [", 1)[1][:-1])
diff(p["incl"], t["incl"], 45, "server, largest inclusive increases")
diff(p["self"], t["self"], 20, "server, largest self-cost increases")
PY
  done
  [ -n "$keep" ] && echo "callgrind files in $keep"
  exit 0
fi

start_server plain
start_server tls
# What the TLS server negotiates (openssl s_client; gRPC's client here uses the same OpenSSL).
negotiated=$(openssl s_client -connect "${target[tls]}" -CAfile "$work/tls/ca.pem" -alpn h2 \
  -brief </dev/null 2>&1 | awk -F': ' '/Protocol version|Ciphersuite|Peer Temp Key/ {print $2}' |
  paste -sd' ' || true)
echo "servers on CPU $server_cpu (plaintext ${target[plain]}, TLS ${target[tls]}: ${negotiated:-?})," \
  "load on CPU $client_cpu; file '$file', ${rounds} rounds of ${ramp}+${runtime} s"

hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }  # user, system
# CPU seconds of this shell's waited-for children (the load client) between two outputs of the
# builtin `times` (in this shell: a command substitution would report its own, empty, children).
children_cpu() {  # times_before times_after
  awk 'NR % 2 == 0 {
         t = 0
         for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }
         c[NR] = t
       }
       END { printf "%.3f", c[4] - c[2] }' "$1" "$2"
}
echo "round workload kind iops bw_bytes p50_us p99_us server_us_per_read server_user_us_per_read client_us_per_read" \
  >"$work/rounds.txt"
for round in $(seq "$rounds"); do
  for w in "${workloads[@]}"; do
    read -r wname bs qd <<<"$w"
    order=(plain tls)
    [ $((round % 2)) = 0 ] && order=(tls plain)
    for kind in "${order[@]}"; do
      json=$work/$kind-$wname-$round.json
      read -r user_before sys_before <<<"$(cpu_ticks "${pid[$kind]}")"
      times >"$work/times.before"
      client "$kind" load --file="$file" --rw=randread --bs="$bs" --qd="$qd" --mode=stream \
        --runtime="$runtime" --ramp="$ramp" --output=json "${client_flags[@]}" >"$json"
      times >"$work/times.after"
      read -r user_after sys_after <<<"$(cpu_ticks "${pid[$kind]}")"
      errors=$(jq '[.errors[]] | add // 0' "$json")
      [ "$errors" = 0 ] || { echo "tls_vs_plaintext.sh: $kind $wname: $errors errors" >&2; exit 1; }
      # CPU is taken over ramp + runtime: count that time's reads at the measured rate.
      row=$(jq -r --argjson t "$(awk -v a="$runtime" -v b="$ramp" 'BEGIN {print a + b}')" \
        --argjson su "$(awk -v a="$user_before" -v b="$user_after" -v hz="$hz" 'BEGIN {print (b - a) / hz}')" \
        --argjson ss "$(awk -v a="$sys_before" -v b="$sys_after" -v hz="$hz" 'BEGIN {print (b - a) / hz}')" \
        --argjson ct "$(children_cpu "$work/times.before" "$work/times.after")" \
        '[.iops, .bw_bytes, .lat_us.p50, .lat_us.p99, (($su + $ss) * 1e6 / (.iops * $t)),
          ($su * 1e6 / (.iops * $t)), ($ct * 1e6 / (.iops * $t))] | map(tostring) | join(" ")' "$json")
      echo "$round $wname $kind $row" >>"$work/rounds.txt"
      read -r iops _ p50 _ srv _ cli <<<"$row"
      printf 'round %d %-9s %-5s %9.0f reads/s  p50 %6.0f us  server %5.1f us/read  client %5.1f us/read\n' \
        "$round" "$wname" "$kind" "$iops" "$p50" "$srv" "$cli"
    done
  done
done
[ -z "$keep" ] || { mkdir -p "$keep" && cp "$work"/*.json "$work/rounds.txt" "$keep/"; }

/usr/bin/python3 - "$work/rounds.txt" "$work" <<'PY'
import json, statistics, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
work = sys.argv[2]
by = {}
for rnd, w, kind, *vals in rows:
    by.setdefault(w, {}).setdefault(kind, {})[int(rnd)] = [float(v) for v in vals]
print("\nbest round of each (reads/s, MB/s = 10^6 B/s, p50/p99 µs of that round); ratios TLS/plaintext")
print("| workload | settings | plaintext reads/s | MB/s | p50 | p99 | TLS reads/s | MB/s | p50 | p99 "
      "| TLS/plain (best) | TLS/plain (median of rounds) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
cpu_lines = []
for w, kinds in by.items():
    best = {k: max(kinds[k].values(), key=lambda v: v[0]) for k in ("plain", "tls")}
    ratios = [kinds["tls"][r][0] / kinds["plain"][r][0] for r in kinds["plain"] if r in kinds["tls"]]
    s = json.load(open(f"{work}/plain-{w}-1.json"))["settings"]
    settings = f"{s['streams']} streams, batch {s['batch']}, {s['channels']} ch"
    cells = []
    for k in ("plain", "tls"):
        iops, bw, p50, p99 = best[k][:4]
        cells += [f"{iops:,.0f}", f"{bw / 1e6:,.0f}", f"{p50:,.0f}", f"{p99:,.0f}"]
    print(f"| {w} | {settings} | " + " | ".join(cells) +
          f" | {best['tls'][0] / best['plain'][0]:.2f} | {statistics.median(ratios):.2f} |")
    med = {k: [statistics.median(v[i] for v in kinds[k].values()) for i in (4, 5, 6)]
           for k in kinds}
    mp, mt = med["plain"], med["tls"]
    cpu_lines.append(f"| {w} | {mp[0]:.1f} ({mp[1]:.1f}) | {mt[0]:.1f} ({mt[1]:.1f}) | "
                     f"{mt[0] / mp[0]:.2f} | {mt[0] - mp[0]:+.1f} ({mt[1] - mp[1]:+.1f}) | "
                     f"{mp[2]:.1f} | {mt[2]:.1f} | {mt[2] / mp[2]:.2f} |")
print("\nCPU µs per read, medians of the rounds (server: its process, (user) of which in user space;"
      " client: the load process)")
print("| workload | server plain (user) | server TLS (user) | TLS/plain | TLS - plain (user) "
      "| client plain | client TLS | TLS/plain |")
print("|---|---|---|---|---|---|---|---|")
print("\n".join(cpu_lines))
PY
