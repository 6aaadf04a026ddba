"""blockread.Client with several servers (issue 15): targets, the file table, routing, failover.

The routing pieces (_routing.py) are tested alone first. Then small gRPC servers written here
check which status codes fail over, and real blockread-server processes on 127.0.0.1 check the
rest byte for byte: reads spread over replicas, a SIGKILLed server is ridden through and used
again once restarted on its port, and only servers agreeing on size and version are replicas.
"""

import concurrent.futures
import json
import random
import threading
import time

import grpc
import pytest

import blockread
from blockread import _routing
from blockread._proto.blockread.v1 import blockread_pb2 as pb
from blockread._proto.blockread.v1 import blockread_pb2_grpc as pb_grpc
from conftest import ServerProcess, files_dir

SHARED_SIZE = 4 << 20
OWN_SIZE = 1 << 20


def reads_served(stats):
    """Reads a server has answered (GetStats: every path's reads)."""
    return sum(p.reads for p in stats.paths)


def random_reads(rng, name, size, count):
    return [(name, rng.randrange(0, size - 4096), rng.choice([512, 4096, 8192, 65536]))
            for _ in range(count)]


# ---- The routing pieces ----------------------------------------------------------------------


def test_targets_list_comma_and_dedup():
    spec = _routing.TargetSpec(" 127.0.0.1:1, 127.0.0.1:2,127.0.0.1:1 ,")
    assert spec.resolve() == ["127.0.0.1:1", "127.0.0.1:2"]
    assert spec.fixed is None
    assert _routing.TargetSpec(["127.0.0.1:1", "127.0.0.1:2,127.0.0.1:3"]).resolve() == [
        "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
    # One address, however written, is a one-server Client.
    for one in ("127.0.0.1:1", ["127.0.0.1:1"], "127.0.0.1:1,127.0.0.1:1"):
        assert _routing.TargetSpec(one).fixed == "127.0.0.1:1"
    assert blockread.Client(["127.0.0.1:1"]).target == "127.0.0.1:1"
    with pytest.raises(TypeError):
        blockread.Client(["127.0.0.1:1", None])
    with pytest.raises(ValueError):
        blockread.Client([])
    with pytest.raises(ValueError):
        blockread.Client("dns:///no-port")


def test_targets_file_read_again_at_every_resolve(tmp_path):
    listed = tmp_path / "servers"
    listed.write_text("127.0.0.1:1\n127.0.0.1:2, 127.0.0.1:3\n\n")
    spec = _routing.TargetSpec(f"@{listed}")
    assert spec.fixed is None  # a file may name more servers later
    assert spec.resolve() == ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
    listed.write_text("127.0.0.1:4\n")
    assert spec.resolve() == ["127.0.0.1:4"]
    with pytest.raises(blockread.NotFound, match="cannot read"):
        blockread.Client(f"@{tmp_path / 'missing'}")
    (tmp_path / "nested").write_text(f"@{listed}\n")
    with pytest.raises(blockread.InvalidArgument):
        _routing.TargetSpec(f"@{tmp_path / 'nested'}").resolve()


def test_targets_dns_resolves_every_address():
    # Resolved only: no connection is made (the machine may map localhost to ::1 as well).
    spec = _routing.TargetSpec("dns:///localhost:7420")
    assert spec.fixed is None
    addresses = spec.resolve()
    assert "127.0.0.1:7420" in addresses
    assert all(a in ("127.0.0.1:7420", "[::1]:7420") for a in addresses), addresses
    assert _routing.TargetSpec("dns:///127.0.0.1:9").resolve() == ["127.0.0.1:9"]
    with pytest.raises(blockread.Unavailable, match="cannot resolve"):
        _routing.TargetSpec("dns:///no-such-host.invalid:1").resolve()


def test_backoff_doubles_with_jitter_counts_once_and_clears():
    health = _routing.ServerHealth(rng=random.Random(1))
    assert health.available()
    waits = []
    for failures in range(1, 9):
        before = time.monotonic()
        health.failed()
        waits.append(health.retry_at - before)
        health.failed()  # while backed off: not counted again
        assert health.failures == failures
        assert not health.available()
        health.retry_at = 0.0  # as if its time were up
    for n, wait in enumerate(waits):
        nominal = min(10.0, 0.2 * 2 ** n)
        assert 0.5 * nominal - 0.01 <= wait <= 1.5 * nominal + 0.01, (n, wait)
    health.failed()
    health.succeeded()
    assert health.failures == 0 and health.available()


def test_latency_is_a_peak_ewma_that_decays():
    health = _routing.ServerHealth()
    assert health.latency(100.0) == 0
    assert health.expected_wait(100.0) == pytest.approx(50e-6)  # the floor
    health.answered(0.010, now=100.0)
    assert health.latency(100.0) == pytest.approx(0.010)
    health.answered(0.002, now=100.0)  # below: pulled by 0.1
    assert health.latency(100.0) == pytest.approx(0.010 - 0.1 * 0.008)
    health.answered(0.050, now=100.0)  # above: replaces
    assert health.latency(100.0) == pytest.approx(0.050)
    assert health.latency(100.5) == pytest.approx(0.050 * 2.718281828 ** -1)  # tau = 0.5 s
    health.add_outstanding(3)
    assert health.expected_wait(100.0) == pytest.approx(0.050 * 4)
    # While it holds reads the estimate holds too: one that stopped answering looks no faster.
    assert health.latency(105.0) == pytest.approx(0.050)


class _Fake:
    def __init__(self, latency=0.0, outstanding=0):
        self.health = _routing.ServerHealth()
        if latency:
            self.health.answered(latency)
        self.health.add_outstanding(outstanding)


def test_two_choices_prefers_the_shorter_expected_wait():
    rng = random.Random(3)
    slow, fast = _Fake(latency=0.010), _Fake(latency=0.001)
    picks = [_routing.pick_server([slow, fast], rng) for _ in range(200)]
    assert all(p is fast for p in picks)
    # Equal waits: fewer outstanding wins; both unknown and idle: either.
    busy, idle = _Fake(outstanding=5), _Fake(outstanding=0)
    assert all(_routing.pick_server([busy, idle], rng) is idle for _ in range(50))
    # spread(): a batch of reads is divided as the outstanding counts would grow.
    a, b, c = _Fake(), _Fake(), _Fake()
    counts = {id(s): 0 for s in (a, b, c)}
    for s in _routing.spread(3000, [a, b, c], rng):
        counts[id(s)] += 1
    assert all(900 <= n <= 1100 for n in counts.values()), counts


def test_replica_table_rule():
    def info(name, size, version=""):
        return pb.FileInfo(name=name, size=size, version=version)
    s0, s1, s2, s3 = "s0", "s1", "s2", "s3"
    listed = {s0: [info("a", 10, "v1"), info("b", 5), info("c", 1)],
              s1: [info("a", 10, "v1"), info("b", 6), info("c", 1)],
              s2: [info("a", 10, "v2"), info("b", 6)],
              s3: [info("a", 11, "v1")]}
    table = _routing.build_replica_table([s0, s1, s2, s3], listed.get)
    assert table["a"].servers == [s0, s1] and table["a"].info.version == "v1"  # size and version
    assert table["b"].servers == [s1, s2] and table["b"].info.size == 6        # the larger group
    assert table["c"].servers == [s0, s1]
    # A tie: the group whose first server comes first in target order.
    tie = _routing.build_replica_table([s2, s0], listed.get)
    assert tie["a"].servers == [s2] and tie["a"].info.version == "v2"


# ---- Which errors fail over: small gRPC servers ---------------------------------------------


class _FakeReplica(pb_grpc.BlockReadServicer):
    """Lists file "f" (1 MiB) while `listed`; reads answer `code` (None: OK, bytes of `fill`)."""

    def __init__(self, fill):
        self.fill = fill
        self.code = None
        self.listed = True
        self.reads = 0

    def ListFiles(self, request, context):
        files = [pb.FileInfo(name="f", size=1 << 20)] if self.listed else []
        return pb.ListFilesResponse(files=files)

    def ReadBlock(self, request, context):
        self.reads += 1
        if self.code is not None:
            context.abort(self.code, f"fake {self.code.name}")
        return pb.ReadBlockResponse(data=self.fill * request.length)

    def ReadBlocks(self, request_iterator, context):
        for request in request_iterator:
            response = pb.ReadBlocksResponse()
            for item in request.reads:
                self.reads += 1
                if self.code is not None:
                    response.results.add(tag=item.tag, code=self.code.value[0],
                                         error_message=f"fake {self.code.name}")
                else:
                    response.results.add(tag=item.tag, data=self.fill * item.length)
            yield response


@pytest.fixture()
def fake_pair():
    replicas, servers, targets = [], [], []
    for fill in (b"a", b"b"):
        replica = _FakeReplica(fill)
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_BlockReadServicer_to_server(replica, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        replicas.append(replica)
        servers.append(server)
        targets.append(f"127.0.0.1:{port}")
    yield replicas, targets
    for server in servers:
        server.stop(None)


@pytest.mark.parametrize("code", [grpc.StatusCode.DATA_LOSS, grpc.StatusCode.INVALID_ARGUMENT,
                                  grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.PERMISSION_DENIED,
                                  grpc.StatusCode.RESOURCE_EXHAUSTED])
def test_errors_that_are_the_answer_are_not_retried(fake_pair, code):
    replicas, targets = fake_pair
    for replica in replicas:
        replica.code = code
    with blockread.Client(targets, timeout=5) as c:
        with pytest.raises(blockread.Error) as e:
            c.read("f", 0, 10)
        assert e.value.code == code
        assert sum(r.reads for r in replicas) == 1
        with pytest.raises(blockread.Error) as e:
            c.read_many([("f", 0, 10)] * 3 + [("f", 0, 1)])
        assert e.value.code == code and e.value.index is not None
        assert sum(r.reads for r in replicas) <= 5  # each item once at most


def test_unavailable_answer_goes_to_another_replica(fake_pair):
    """A server that answers UNAVAILABLE over a live connection (its device gone): the read goes
    to the other replica, and the server is not backed off (it is reachable)."""
    replicas, targets = fake_pair
    replicas[0].code = grpc.StatusCode.UNAVAILABLE
    with blockread.Client(targets, timeout=5) as c:
        for _ in range(20):
            assert c.read("f", 0, 3) == b"bbb"
        assert c.read_many([("f", i, 2) for i in range(300)]) == [b"bb"] * 300
        assert list(c.read_iter(iter([("f", 0, 1)] * 50), depth=8)) == [b"b"] * 50
        cluster = c._cluster()
        assert all(s.health.failures == 0 for s in cluster._servers)
        replicas[1].code = grpc.StatusCode.UNAVAILABLE
        with pytest.raises(blockread.Unavailable, match="'f'"):
            c.read("f", 0, 1)


def test_not_found_from_a_server_that_listed_the_file(fake_pair):
    """A server answers NOT_FOUND for a file it listed: the servers are listed again (once per
    call) and the others tried; NotFound only once no server has it."""
    replicas, targets = fake_pair
    with blockread.Client(targets, timeout=5) as c:
        assert c.ls()[0].servers == tuple(targets)
        replicas[0].code = grpc.StatusCode.NOT_FOUND  # still listed: a stale list, say
        for _ in range(10):
            assert c.read("f", 0, 2) == b"bb"
        assert c.read_many([("f", i, 1) for i in range(200)]) == [b"b"] * 200
        replicas[0].listed = False  # gone from server 0 for good
        assert c.read_many([("f", i, 1) for i in range(200)]) == [b"b"] * 200
        assert c.ls()[0].servers == (targets[1],)
        replicas[1].code = grpc.StatusCode.NOT_FOUND
        replicas[1].listed = False
        with pytest.raises(blockread.NotFound, match="any of the 2 servers"):
            c.read("f", 0, 1)
        with pytest.raises(blockread.NotFound) as e:
            c.read_many([("f", 0, 1)])
        assert e.value.index == 0


def test_no_server_reachable(free_port):
    import socket
    with socket.socket() as s:  # a second port nothing listens on
        s.bind(("127.0.0.1", 0))
        other = s.getsockname()[1]
    targets = [f"127.0.0.1:{free_port}", f"127.0.0.1:{other}"]
    with blockread.Client(targets, timeout=5) as c:
        with pytest.raises(blockread.Unavailable, match="no server could be listed"):
            c.ls()
        with pytest.raises(blockread.Unavailable, match="2 of 2 could not be asked") as e:
            c.read("f", 0, 1)
        assert "'f'" in e.value.message
        with pytest.raises(blockread.Unavailable) as e:
            c.read_many([("f", 0, 1)] * 3)
        assert e.value.index == 0
        stats = c.stats()
        assert sorted(stats) == sorted(targets)
        assert all(isinstance(v, blockread.Unavailable) for v in stats.values())
        with pytest.raises(blockread.Unavailable):
            c.health(server=targets[1])


def test_one_server_keeps_its_calls(served):
    """One address: the one-server Client, whose stats() and health() answer for it alone."""
    c = blockread.Client([served.target])
    assert c.servers == [served.target] and not c._routed
    assert isinstance(c.stats(server=served.target), blockread.Stats)
    assert c.health(server=served.target) == "SERVING"
    with pytest.raises(ValueError):
        c.stats(server="127.0.0.1:1")
    assert c.stat("tiny.txt").servers == (served.target,)
    c.close()


# ---- Real servers ---------------------------------------------------------------------------


class Images:
    """Device images (regular files of random bytes) in a tmpfs directory when there is one."""

    def __init__(self, root):
        self.root = root
        self.data = {}

    def make(self, name, size, seed):
        data = random.Random(seed).randbytes(size)
        path = self.root / f"{name}.img"
        path.write_bytes(data)
        self.data[name] = data
        return str(path)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root, remove = files_dir(tmp_path_factory)
    images = Images(root)
    images.make("shared", SHARED_SIZE, 1)
    images.make("other", SHARED_SIZE, 2)  # same size as shared, other bytes
    for i in range(3):
        images.make(f"own{i}", OWN_SIZE, 10 + i)
    yield images
    if remove:
        import shutil
        shutil.rmtree(remove)


def start_server(images, i, log_dir, extra=(), port=0, shared="shared"):
    """Server i: `shared` as "shared" and own<i> as "own<i>"; on `port` (0: any free)."""
    devices = f"--device=shared={images.root / (shared + '.img')},own{i}={images.root}/own{i}.img"
    return ServerProcess([devices, f"--listen=127.0.0.1:{port}", *extra],
                         str(log_dir / f"server{i}-{time.monotonic_ns()}.log"))


@pytest.fixture(scope="module")
def trio(images, tmp_path_factory):
    """Three servers, "shared" on all of them, own<i> on server i."""
    log_dir = tmp_path_factory.mktemp("trio")
    servers = [start_server(images, i, log_dir) for i in range(3)]
    yield servers
    for server in servers:
        server.stop()


def reads_by_server(client):
    return {address: reads_served(stats) for address, stats in client.stats().items()}


def test_three_servers_ls_read_and_spread(trio, images, request):
    targets = [s.target for s in trio]
    c = blockread.Client(targets, timeout=10)
    request.addfinalizer(c.close)
    assert c.servers == targets
    listed = {f.name: f for f in c.ls()}
    assert sorted(listed) == ["own0", "own1", "own2", "shared"]
    assert [f.name for f in c.ls("own")] == ["own0", "own1", "own2"]
    assert listed["shared"].servers == tuple(targets)
    assert listed["shared"].size == SHARED_SIZE and listed["shared"].version == ""
    for i in range(3):
        assert listed[f"own{i}"].servers == (targets[i],)
    assert c.stat("shared").servers == tuple(targets)
    assert c.stat("own1").size == OWN_SIZE
    assert c.explain("own2", 0, 4096).file.name == "own2"
    assert c.health() == {t: "SERVING" for t in targets}
    assert isinstance(c.stats(server=targets[1]), blockread.Stats)
    with pytest.raises(ValueError):
        c.stats(server="127.0.0.1:1")

    # read() from a few threads for a second: the choice follows each server's latency and
    # reads outstanding, so a server that answered slowly once is avoided for a moment (its
    # estimate decays with a 0.5 s time constant); over a second all three take a share.
    shared = images.data["shared"]
    before = reads_by_server(c)
    wrong, done = [], []

    def reader(seed):
        rng = random.Random(seed)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            _, offset, length = read = random_reads(rng, "shared", SHARED_SIZE, 1)[0]
            if c.read(*read) != shared[offset:offset + length]:
                wrong.append(read)
            done.append(read)
    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong and len(done) >= 300
    after_read = reads_by_server(c)
    grew = {t: after_read[t] - before[t] for t in targets}
    assert sum(grew.values()) == len(done)
    assert all(n >= len(done) // 10 for n in grew.values()), grew

    # read_many for a second: each call is split once, by the estimates of that moment (a
    # server that has just answered slowly gets a small share of that call); over many calls
    # every server takes its part.
    rng, sent = random.Random(5), 0
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        reads = random_reads(rng, "shared", SHARED_SIZE, 300)
        reads += [(f"own{i}", rng.randrange(0, OWN_SIZE, 4096), 4096) for i in range(3)]
        assert c.read_many(reads) == [images.data[n][o:o + ln] for n, o, ln in reads]
        sent += len(reads)
    after_many = reads_by_server(c)
    grew = {t: after_many[t] - after_read[t] for t in targets}
    assert sum(grew.values()) == sent  # each read sent once
    assert all(n >= sent // 10 for n in grew.values()), grew

    reads = random_reads(rng, "shared", SHARED_SIZE, 1000) + reads
    streamed = list(c.read_iter(iter(reads), depth=64, batch=16))
    assert streamed == [images.data[n][o:o + ln] for n, o, ln in reads]


def test_three_servers_item_errors_keep_their_index(trio, images, request):
    c = blockread.Client([s.target for s in trio], timeout=10)
    request.addfinalizer(c.close)
    ok = [("shared", 0, 4096)] * 50
    with pytest.raises(blockread.OutOfRange) as e:
        c.read_many(ok + [("own1", OWN_SIZE + 4096, 1)] + ok)
    assert e.value.index == 50
    with pytest.raises(blockread.NotFound) as e:
        c.read_many(ok + ok + [("no-such-file", 0, 1)])
    assert e.value.index == 100 and "no-such-file" in e.value.message
    with pytest.raises(blockread.InvalidArgument) as e:
        c.read_many(ok + [("shared", -1, 1)])
    assert e.value.index == 50
    with pytest.raises(blockread.InvalidArgument) as e:
        c.read_many(ok + [("shared", 0)])
    assert e.value.index == 50
    with pytest.raises(blockread.NotFound, match="any of the 3 servers"):
        c.read("no-such-file", 0, 1)
    with pytest.raises(blockread.InvalidArgument):
        c.read("shared", 0, 0)


def test_targets_file_and_dns_name_end_to_end(trio, images, tmp_path, request):
    """@FILE re-read at every resolve: a server added to it gets reads; dns:/// of an address."""
    listed = tmp_path / "servers"
    listed.write_text(f"{trio[0].target}\n{trio[1].target}\n")
    c = blockread.Client(f"@{listed}", resolve_interval=0.3, timeout=10)
    request.addfinalizer(c.close)
    assert c.servers == [trio[0].target, trio[1].target]
    assert c.ls()[0].name == "own0"
    listed.write_text(",".join(s.target for s in trio))
    time.sleep(0.4)
    before = reads_served(c.stats(server=trio[2].target))
    reads = random_reads(random.Random(6), "shared", SHARED_SIZE, 600)
    assert c.read_many(reads) == [images.data["shared"][o:o + n] for _, o, n in reads]
    assert reads_served(c.stats(server=trio[2].target)) - before >= 100

    d = blockread.Client(f"dns:///127.0.0.1:{trio[0].port}")
    request.addfinalizer(d.close)
    assert d.servers == [trio[0].target]
    assert [f.name for f in d.ls()] == ["own0", "shared"]
    assert d.read("own0", 100, 10) == images.data["own0"][100:110]


def test_server_killed_and_restarted(images, tmp_path):
    servers = [start_server(images, i, tmp_path) for i in range(3)]
    targets = [s.target for s in servers]
    victim = servers[1]
    c = blockread.Client(targets, timeout=10)
    try:
        assert len(c.ls()) == 4
        shared = images.data["shared"]
        failures, checked = [], [0]
        stop = threading.Event()

        def reader(seed):
            rng = random.Random(seed)
            while not stop.is_set():
                try:
                    reads = random_reads(rng, "shared", SHARED_SIZE, 200)
                    got = c.read_many(reads)
                    for (_, o, n), data in zip(reads, got):
                        if data != shared[o:o + n]:
                            failures.append(("wrong bytes", o, n))
                    _, o, n = reads[0]
                    if c.read("shared", o, n) != shared[o:o + n]:
                        failures.append(("wrong bytes", o, n))
                    checked[0] += len(reads) + 1
                except blockread.Error as e:
                    failures.append(e)

        threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        victim.process.kill()  # SIGKILL, mid-run
        victim.process.wait()
        time.sleep(2.0)
        stop.set()
        for t in threads:
            t.join()
        assert failures == [], failures[:5]
        assert checked[0] > 2000

        with pytest.raises(blockread.Unavailable) as e:
            c.read("own1", 0, 4096)
        assert "own1" in e.value.message and victim.target in e.value.message
        with pytest.raises(blockread.Unavailable) as e:
            c.read_many([("shared", 0, 1), ("own1", 0, 1)])
        assert e.value.index == 1 and "own1" in e.value.message
        assert isinstance(c.stats()[victim.target], blockread.Unavailable)

        restarted = start_server(images, 1, tmp_path, port=victim.port)
        servers[1] = restarted
        assert restarted.target == victim.target
        started = time.monotonic()
        while True:
            try:
                if c.read("own1", 0, 4096) == images.data["own1"][:4096]:
                    break
            except blockread.Unavailable:
                pass
            assert time.monotonic() - started < 20, "the restarted server got no reads"
            time.sleep(0.1)
        back_after = time.monotonic() - started
        # It takes its share of the replicated file again (a second of reads: its first answers
        # on a new connection are slow, and the latency estimate lets go of them in ~0.5 s).
        before = reads_by_server(c)
        rng, sent, end = random.Random(9), 0, time.monotonic() + 1.0
        while time.monotonic() < end:
            reads = random_reads(rng, "shared", SHARED_SIZE, 200)
            assert c.read_many(reads) == [shared[o:o + n] for _, o, n in reads]
            sent += len(reads)
        after = reads_by_server(c)
        assert after[victim.target] - before[victim.target] >= sent // 20, (sent, before, after)
        print(f"restarted server read again {back_after:.1f} s after its restart")
    finally:
        c.close()  # a server's shutdown waits for open connections
        for server in servers:
            server.stop()


def test_replicas_need_the_same_version(images, tmp_path):
    """Servers 0 and 1 serve image A as "shared" v1, server 2 another image of the same size as
    "shared" v2: the larger group holds the name, server 2 gets none of its reads."""
    servers = [start_server(images, 0, tmp_path, ["--file-version=shared=v1"]),
               start_server(images, 1, tmp_path, ["--file-version=shared=v1"]),
               start_server(images, 2, tmp_path, ["--file-version=shared=v2"], shared="other")]
    targets = [s.target for s in servers]
    c = blockread.Client(targets, timeout=10)
    tie = blockread.Client([targets[2], targets[0]], timeout=10)
    try:
        listed = {f.name: f for f in c.ls()}
        assert listed["shared"].servers == tuple(targets[:2])
        assert listed["shared"].version == "v1"
        assert c.stat("shared").version == "v1"
        before = reads_by_server(c)
        rng = random.Random(11)
        shared = images.data["shared"]
        for read in random_reads(rng, "shared", SHARED_SIZE, 100):
            assert c.read(*read) == shared[read[1]:read[1] + read[2]]
        reads = random_reads(rng, "shared", SHARED_SIZE, 1000)
        assert c.read_many(reads) == [shared[o:o + n] for _, o, n in reads]
        after = reads_by_server(c)
        assert after[targets[2]] == before[targets[2]]
        assert all(after[t] > before[t] for t in targets[:2])
        # One against one: the server listed first holds the name.
        assert {f.name: f.version for f in tie.ls()}["shared"] == "v2"
        assert tie.read("shared", 0, 4096) == images.data["other"][:4096]
    finally:
        c.close()
        tie.close()
        for server in servers:
            server.stop()


FORK_SCRIPT = r"""
import json, os, sys
import blockread
import forked
targets, want = json.loads(sys.argv[1])
c = blockread.Client(targets, timeout=10)
reads = [("own0", 0, 100), ("shared", 5, 5), ("own2", 7, 70)]
assert [d.hex() for d in c.read_many(reads)] == want, "parent"
parent_cluster = c._cluster()
pid = os.fork()
if pid == 0:
    ok = False
    try:
        ok = (c._cluster() is not parent_cluster
              and [d.hex() for d in c.read_many(reads)] == want
              and c.read("own1", 0, 5) == blockread.Client(targets[1]).read("own1", 0, 5))
    finally:
        os._exit(0 if ok else 1)
code = forked.wait_for(pid)
assert code == 0, f"child: {code}"
assert c._cluster() is parent_cluster and [d.hex() for d in c.read_many(reads)] == want
print("fork ok")
"""


def test_cluster_client_after_fork(trio, images):
    """Each process has its own channels and routing state: a Client used in the parent works in
    a forked child. In a fresh interpreter, as test_fork.py runs its scenarios."""
    from test_fork import run_script
    reads = [("own0", 0, 100), ("shared", 5, 5), ("own2", 7, 70)]
    want = [images.data[n][o:o + ln].hex() for n, o, ln in reads]
    result = run_script(FORK_SCRIPT, json.dumps([[s.target for s in trio], want]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fork ok" in result.stdout
