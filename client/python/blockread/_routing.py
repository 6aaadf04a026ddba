"""Where a read goes when a Client has several servers: the pieces, without any gRPC.

The C++ client's rules (client/server_choice.h, client/cluster_client.cc; README "Many servers"),
restated for Python so that both clients route and back off alike:

- Targets (TargetSpec): "host:port", a comma-separated list of them or a Python list,
  "dns:///name:port" (every address the name resolves to, one server each) and "@FILE" (the
  targets in FILE, one per line or comma-separated, read again at every resolve). Each address
  once, in the order first named.
- Health (ServerHealth): a server that could not be reached is backed off, 200 ms doubling per
  failure in a row up to 10 s, each times a random jitter in [0.5, 1.5]; failures while it is
  backed off already do not count again, and an answer clears it. Its latency is a peak EWMA of
  this client's round trips: a sample above the estimate replaces it, one below pulls it by 0.1.
  While no read is outstanding to it and none is answered, it decays toward 0 with a 0.5 s time
  constant (a server avoided for being slow is tried again now and then); while reads are
  outstanding it holds (a server that stopped answering must not look faster for it).
- Choice (least_loaded_of_two): the power of two choices on expected wait,
  max(latency, 50 us) x (reads outstanding + 1); fewer outstanding on a tie.
- Replicas (build_replica_table): two servers' files of one name are replicas when their size
  and declared version agree; when servers disagree, the largest agreeing group holds the name
  (on a tie, the group whose first server comes first in target order).

Thread-safety: ServerHealth may be used by any number of threads (each has its own lock). The
functions are pure, apart from the random.Random and the clock they are given or read.
"""

import dataclasses
import math
import random
import socket
import threading
import time

from blockread import errors

# How often a Client with several servers resolves its targets again and re-reads their lists.
RESOLVE_INTERVAL = 10.0
# A server's ListFiles, page by page, while refreshing the table: a hung server costs this once,
# then it is backed off.
LIST_TIMEOUT = 2.0
# The latency estimate (seconds): weight of a sample below it, decay time constant, and floor.
LATENCY_WEIGHT = 0.1
LATENCY_DECAY = 0.5
# Never below this in expected_wait: a server nothing is known of yet, or one decayed to nothing,
# still costs more the more reads it holds (one that stopped answering is not handed every read).
LATENCY_FLOOR = 50e-6


@dataclasses.dataclass(frozen=True)
class BackoffPolicy:
    """A failed server's first back-off (seconds), doubling per failure in a row up to `maximum`."""

    initial: float = 0.2
    maximum: float = 10.0


# ---- Targets --------------------------------------------------------------------------------


def split_targets(target):
    """The parts of a target: a string split at commas, or a list (or tuple) of strings, each
    split the same way; whitespace and empty parts dropped. TypeError for anything else,
    ValueError when nothing is named."""
    if isinstance(target, str):
        pieces = [target]
    elif isinstance(target, (list, tuple)) and all(isinstance(t, str) for t in target):
        pieces = list(target)
    else:
        raise TypeError("target must be a 'host:port' string (or several, comma-separated, "
                        f"'dns:///name:port', '@FILE') or a list of them, not {target!r}")
    parts = [p.strip() for piece in pieces for p in piece.split(",")]
    parts = [p for p in parts if p]
    if not parts:
        raise ValueError(f"target {target!r} names no server")
    for part in parts:
        if part.startswith("dns:"):
            _split_dns(part)  # a malformed one fails now, not at the first call
    return parts


def _split_dns(part):
    """(host, port) of "dns:///host:port"; ValueError for another form."""
    rest = part[len("dns:///"):] if part.startswith("dns:///") else None
    host, _, port = (rest or "").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"target {part!r}: expected dns:///name:port")
    return host.strip("[]"), port


def _resolve_name(part):
    """Every address "dns:///host:port" resolves to now, as "ip:port" or "[ip6]:port"."""
    host, port = _split_dns(part)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise errors.Unavailable(f"target {part}: cannot resolve {host}: {e}") from None
    addresses = []
    for family, _, _, _, sockaddr in found:
        if family == socket.AF_INET:
            addresses.append(f"{sockaddr[0]}:{port}")
        elif family == socket.AF_INET6:
            addresses.append(f"[{sockaddr[0]}]:{port}")
    return addresses


def _read_target_file(part):
    """The parts listed in "@FILE" (one per line or comma-separated)."""
    path = part[1:]
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise errors.NotFound(f"target {part}: cannot read it: {e.strerror}") from None
    parts = [p.strip() for p in text.replace("\n", ",").split(",") if p.strip()]
    if any(p.startswith("@") for p in parts):
        raise errors.InvalidArgument(f"target {part}: a target file cannot name another")
    return parts


class TargetSpec:
    """What a Client was told to talk to, and the addresses that means now.

    `fixed`: the one address when the target names exactly one server and can never name more
    (no "dns:", no "@FILE"): the Client then talks to it alone, as a single-server client.
    Otherwise the Client is a cluster client and resolve() is called again and again.
    """

    def __init__(self, target):
        self.parts = split_targets(target)
        self.text = ",".join(self.parts)
        dynamic = any(p.startswith(("dns:", "@")) for p in self.parts)
        unique = list(dict.fromkeys(self.parts))
        self.fixed = unique[0] if not dynamic and len(unique) == 1 else None

    def resolve(self):
        """The server addresses, each once, in the order first named. Raises a blockread.Error:
        NotFound (an @FILE cannot be read), Unavailable (a name does not resolve),
        InvalidArgument (nothing named)."""
        addresses = []
        for part in self.parts:
            if part.startswith("@"):
                for inner in _read_target_file(part):
                    addresses += _resolve_name(inner) if inner.startswith("dns:") else [inner]
            elif part.startswith("dns:"):
                addresses += _resolve_name(part)
            else:
                addresses.append(part)
        addresses = list(dict.fromkeys(addresses))
        if not addresses:
            raise errors.InvalidArgument(f"target {self.text!r} names no server")
        return addresses

    def hosts_named(self):
        """The host names the target names without resolving anything (for the plaintext-token
        warning): listed addresses, dns names and what @FILEs list now."""
        hosts = []
        for part in self.parts:
            inner = [part]
            if part.startswith("@"):
                try:
                    inner = _read_target_file(part)
                except errors.Error:
                    inner = []
            for p in inner:
                hosts.append(_split_dns(p)[0] if p.startswith("dns:") else p.rpartition(":")[0])
        return hosts


# ---- Health -----------------------------------------------------------------------------------


class ServerHealth:
    """One server as this client sees it: back-off, reads outstanding, latency. Thread-safe.

    Times are time.monotonic() seconds; `now` arguments default to the current time.
    """

    def __init__(self, backoff=BackoffPolicy(), rng=None):
        self._backoff = backoff
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self.failures = 0       # failures in a row
        self.retry_at = 0.0     # backed off until then
        self.outstanding = 0    # reads sent (or handed to a stream) and not answered yet
        self._latency = 0.0     # the peak EWMA at _sampled_at; 0: nothing known
        self._sampled_at = 0.0

    def available(self, now=None):
        """Not backed off: a read may go to it."""
        return self.retry_at <= (time.monotonic() if now is None else now)

    def failed(self):
        """It could not be reached: back it off (see BackoffPolicy). The other reads that were in
        flight to it fail too; while it is backed off they do not count again."""
        with self._lock:
            now = time.monotonic()
            if self.retry_at > now:
                return
            self.failures += 1
            backoff = min(self._backoff.maximum,
                          self._backoff.initial * 2 ** min(self.failures - 1, 16))
            self.retry_at = now + backoff * self._rng.uniform(0.5, 1.5)

    def succeeded(self):
        """It answered: whatever back-off it had is over."""
        if self.failures:
            with self._lock:
                self.failures = 0
                self.retry_at = 0.0

    def add_outstanding(self, count):
        """`count` reads sent to it (negative: answered or given up)."""
        with self._lock:
            self.outstanding += count

    def answered(self, took, now=None):
        """A read sent `took` seconds ago was answered: a latency sample."""
        with self._lock:
            now = time.monotonic() if now is None else now
            current = self._latency_at(now)
            self._latency = took if took >= current else current + (took - current) * LATENCY_WEIGHT
            self._sampled_at = now

    def latency(self, now=None):
        """The estimate in seconds (0: nothing known)."""
        return self._latency_at(time.monotonic() if now is None else now)

    def _latency_at(self, now):
        latency, idle = self._latency, now - self._sampled_at
        if latency == 0 or self.outstanding > 0 or idle <= 0:
            return latency  # nothing known, or it holds reads: no decay
        return latency * math.exp(-idle / LATENCY_DECAY)

    def expected_wait(self, now=None, extra=0):
        """How long a read sent now would take: the latency estimate for each read it holds and
        this one (`extra`: reads about to be handed to it besides)."""
        return max(self.latency(now), LATENCY_FLOOR) * (self.outstanding + extra + 1)


def least_loaded_of_two(count, wait_of, outstanding_of, rng):
    """The power of two choices: two distinct candidates of `count` at random, the index of the
    one with the shorter wait_of(i), or with fewer outstanding_of(i) on a tie."""
    if count == 1:
        return 0
    a = rng.randrange(count)
    b = rng.randrange(count - 1)
    if b >= a:
        b += 1
    wait_a, wait_b = wait_of(a), wait_of(b)
    if wait_a != wait_b:
        return a if wait_a < wait_b else b
    return a if outstanding_of(a) <= outstanding_of(b) else b


def pick_server(servers, rng, now=None):
    """One of `servers` (objects with a .health), by least_loaded_of_two."""
    now = time.monotonic() if now is None else now
    return servers[least_loaded_of_two(
        len(servers), lambda i: servers[i].health.expected_wait(now),
        lambda i: servers[i].health.outstanding, rng)]


def spread(count, servers, rng, now=None):
    """For `count` reads to be sent at once, the server of each (a list of `count` entries of
    `servers`): each chosen by least_loaded_of_two as if the reads before it were outstanding
    already. The latencies are taken once; nothing is changed."""
    now = time.monotonic() if now is None else now
    latency = [max(s.health.latency(now), LATENCY_FLOOR) for s in servers]
    load = [s.health.outstanding for s in servers]
    chosen = []
    for _ in range(count):
        i = least_loaded_of_two(len(servers), lambda j: latency[j] * (load[j] + 1),
                                load.__getitem__, rng)
        load[i] += 1
        chosen.append(servers[i])
    return chosen


# ---- Replicas ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Replicas:
    """A name in the table: its FileInfo message (from the first server of the holding group)
    and the servers holding it, in target order."""

    info: object
    servers: list


def build_replica_table(servers, files_of):
    """{name: Replicas} over `servers` in target order; files_of(server) is what it listed (the
    FileInfo messages). See the module docstring for the rule."""
    groups = {}  # name -> {(size, version): [servers in target order]}
    infos = {}   # (name, size, version) -> the first server's FileInfo
    for server in servers:
        for info in files_of(server):
            content = (info.size, info.version)
            groups.setdefault(info.name, {}).setdefault(content, []).append(server)
            infos.setdefault((info.name, *content), info)
    position = {id(s): i for i, s in enumerate(servers)}
    table = {}
    for name, by_content in groups.items():
        # Largest group first; on a tie, the one whose first server comes first.
        content, holders = min(by_content.items(),
                               key=lambda kv: (-len(kv[1]), position[id(kv[1][0])]))
        table[name] = Replicas(info=infos[(name, *content)], servers=holders)
    return table
