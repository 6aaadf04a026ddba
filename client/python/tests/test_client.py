"""blockread.Client against real blockread-server processes, byte for byte."""

import dataclasses
import pickle
import random

import grpc
import pytest

import blockread


def expect(files, file, offset, length):
    """What the server must return: pread semantics (bytes up to EOF)."""
    return files[file][offset:offset + length]


# --- The demo device, checked against the device image read by Python -----------------------


def test_demo_files_whole(demo):
    c = blockread.Client(demo.target)
    names = [f.name for f in c.ls()]
    assert names == sorted(demo.files)
    assert demo.files["hello.txt"].startswith(b"Hello from blockread!\n")
    for name, data in demo.files.items():
        pieces = [(name, off, 1 << 20) for off in range(0, len(data), 1 << 20)]
        assert b"".join(c.read_many(pieces)) == data, name


def test_demo_reads_every_path(demo):
    """Aligned and unaligned reads, across fragments, holes and EOF, by both calls."""
    c = blockread.Client(demo.target)
    rng = random.Random(1)
    reads = [("hello.txt", 0, 4096), ("hello.txt", 7, 5), ("fragmented", 16384 - 100, 200),
             ("fragmented", 0, 65536), ("sparse", 256 * 1024 - 10, 4096),
             ("sparse", 6 * (1 << 20) - 100, 4096)]
    for _ in range(300):
        name = rng.choice(sorted(demo.files))
        size = len(demo.files[name])
        offset = rng.randrange(size)
        if rng.random() < 0.5:
            offset -= offset % 4096
        reads.append((name, offset, rng.choice([1, 512, 4096, 4097, 65536, 131072, 1 << 20])))
    for read in reads[:60]:
        assert c.read(*read) == expect(demo.files, *read), read
    got = c.read_many(reads)
    assert len(got) == len(reads)
    for read, data in zip(reads, got):
        assert data == expect(demo.files, *read), read


# --- Files written by the test, served with --serve-files --------------------------------------


def test_read_byte_exact(served, client):
    for name, data in served.files.items():
        if not data:
            continue
        for offset, length in [(0, 1), (0, 4096), (1, 4095), (len(data) - 1, 1),
                               (len(data) // 2, 4096), (0, min(len(data), 1 << 20))]:
            assert client.read(name, offset, length) == data[offset:offset + length]


def test_read_past_eof_returns_up_to_eof(served, client):
    data = served.files["odd-size"]
    assert client.read("odd-size", len(data) - 10, 4096) == data[-10:]
    assert client.read("tiny.txt", 0, 1 << 20) == served.files["tiny.txt"]
    assert client.read("odd-size", len(data), 4096) == b""  # at EOF: no bytes
    assert client.read_many([("odd-size", len(data) - 3, 100), ("odd-size", len(data), 1)]) == [
        data[-3:], b""]


def test_read_many_byte_exact_in_request_order(served, client):
    rng = random.Random(2)
    names = [n for n, d in served.files.items() if d]
    reads = []
    for _ in range(5000):
        name = rng.choice(names)
        size = len(served.files[name])
        reads.append((name, rng.randrange(size), rng.choice([1, 100, 4096, 8192, 65536])))
    reads += reads[:10]  # the same read twice in one call
    got = client.read_many(reads)
    assert [len(g) for g in got] == [len(expect(served.files, *r)) for r in reads]
    assert got == [expect(served.files, *r) for r in reads]


@pytest.mark.parametrize("depth,batch", [(1, 1), (3, 2), (5, 16), (64, 16), (256, 64)])
def test_read_many_depth_and_batch(served, client, depth, batch):
    data = served.files["big.bin"]
    reads = [("big.bin", off, 4096) for off in range(0, len(data), 4096 * 7)]
    assert client.read_many(reads, depth=depth, batch=batch) == [
        data[o:o + 4096] for _, o, _ in reads]


def test_read_many_large_reads(served, client):
    data = served.files["big.bin"]
    reads = [("big.bin", off, 1 << 20) for off in range(0, len(data), 1 << 20)] * 3
    assert client.read_many(reads) == [data[o:o + (1 << 20)] for _, o, _ in reads]


def test_read_many_empty(client):
    assert client.read_many([]) == []


def test_read_iter_lazy_and_early_stop(served, client):
    data = served.files["big.bin"]

    def endless():
        offset = 0
        while True:
            yield ("big.bin", offset % len(data), 512)
            offset += 512

    stream = client.read_iter(endless(), depth=8, batch=4)
    for i in range(1000):
        offset = (i * 512) % len(data)
        assert next(stream) == data[offset:offset + 512]
    stream.close()  # cancels the stream
    assert list(client.read_iter(iter([]))) == []
    assert client.read("tiny.txt", 0, 10) == served.files["tiny.txt"][:10]  # channel still fine


def test_read_iter_passes_on_the_callers_error(served, client):
    def five_then_fail():
        for i in range(5):
            yield ("tiny.txt", i, 1)
        raise RuntimeError("the caller's generator broke")

    got = []
    with pytest.raises(RuntimeError, match="generator broke"):
        for data in client.read_iter(five_then_fail(), batch=2):
            got.append(data)
    assert got == [served.files["tiny.txt"][i:i + 1] for i in range(5)]


def test_stat_and_ls(served, client):
    infos = client.ls()
    assert [i.name for i in infos] == sorted(served.files)
    for info in infos:
        assert isinstance(info, blockread.FileInfo)
        assert info.size == len(served.files[info.name])
        assert info.source in ("FIEMAP", "FILE_ROUTE")
        assert info.block_size >= 512
    info = client.stat("big.bin")
    assert info == next(i for i in infos if i.name == "big.bin")
    assert info.extents >= 1


def test_ls_pages(served, client):
    assert client.ls(page_size=7) == client.ls()


def test_ls_by_prefix(served, client):
    everything = client.ls()
    for prefix in ("b", "big", "tiny.txt", "no-such-prefix", ""):
        expected = [i for i in everything if i.name.startswith(prefix)]
        assert client.ls(prefix) == expected
        assert client.ls(prefix, page_size=1) == expected


def test_stats_and_explain(served, client):
    client.read("block", 0, 4096)
    stats = client.stats()
    assert isinstance(stats, blockread.Stats) and dataclasses.is_dataclass(stats)
    assert sum(p.reads for p in stats.paths) >= 1
    assert stats.version
    explained = client.explain("big.bin", 0, 65536)
    assert isinstance(explained, blockread.Explanation) and dataclasses.is_dataclass(explained)
    assert explained.file.name == "big.bin"
    assert explained.path in ("SIMPLE", "GENERIC")
    assert pickle.loads(pickle.dumps(explained)) == explained
    assert explained.reason
    assert client.health() == "SERVING"


def test_client_pickles_settings_not_connections(served):
    c = blockread.Client(served.target, token="t", timeout=3, depth=7, batch=3)
    c.read("tiny.txt", 0, 1)
    copy = pickle.loads(pickle.dumps(c))
    assert (copy.target, copy.timeout, copy.depth, copy.batch) == (served.target, 3, 7, 3)
    assert copy.read("tiny.txt", 0, 100) == served.files["tiny.txt"]


def test_client_argument_errors():
    with pytest.raises(ValueError):
        blockread.Client("127.0.0.1:1", cert=b"x")
    with pytest.raises(TypeError):  # a list of addresses is a target (several servers, issue 15)
        blockread.Client(7420)
    with pytest.raises(TypeError):
        blockread.Client(["a:1", 7420])
    with pytest.raises(ValueError):
        blockread.Client("127.0.0.1:1", depth=0)


# --- Errors from the real server ------------------------------------------------------------------


def check(error, cls, code):
    assert type(error) is cls
    assert isinstance(error, blockread.Error)
    assert not isinstance(error, grpc.RpcError)
    assert error.code == code
    assert error.message
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.code, copy.message, copy.index) == (
        cls, error.code, error.message, error.index)


def test_not_found(client):
    with pytest.raises(blockread.NotFound) as e:
        client.read("no-such-file", 0, 4096)
    check(e.value, blockread.NotFound, grpc.StatusCode.NOT_FOUND)
    assert "no-such-file" in e.value.message
    assert e.value.index is None
    assert isinstance(e.value, FileNotFoundError)
    with pytest.raises(FileNotFoundError):  # as code written for local files catches it
        client.read("no-such-file")
    with pytest.raises(blockread.NotFound):
        client.stat("no-such-file")
    with pytest.raises(blockread.NotFound):
        client.explain("no-such-file", 0, 1)
    with pytest.raises(blockread.NotFound) as e:
        client.read_many([("tiny.txt", 0, 1)] * 5 + [("no-such-file", 0, 1)] + [("tiny.txt", 0, 1)])
    check(e.value, blockread.NotFound, grpc.StatusCode.NOT_FOUND)
    assert e.value.index == 5
    assert "item 5" in str(e.value)


def test_out_of_range(served, client):
    size = len(served.files["odd-size"])
    with pytest.raises(blockread.OutOfRange) as e:
        client.read("odd-size", size + 1, 1)
    check(e.value, blockread.OutOfRange, grpc.StatusCode.OUT_OF_RANGE)
    with pytest.raises(blockread.OutOfRange) as e:
        client.read_many([("odd-size", 0, 1), ("odd-size", size + 4096, 4096)])
    assert e.value.index == 1


def test_invalid_argument(served, client):
    with pytest.raises(blockread.InvalidArgument) as e:
        client.read("big.bin", 0, 0)
    check(e.value, blockread.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT)
    # read() splits a long read (test_read_into.py); read_many sends each item as it is.
    with pytest.raises(blockread.InvalidArgument) as e:
        client.read_many([("big.bin", 0, (1 << 20) + 1)])
    assert "max_read_bytes" in e.value.message
    assert isinstance(e.value, ValueError)
    with pytest.raises(blockread.InvalidArgument) as e:
        client.read_many([("big.bin", 0, 1), ("big.bin", 0, 1), ("big.bin", 0, 0)])
    assert e.value.index == 2
    # A malformed item is reported the same way, by the client, with its index.
    with pytest.raises(blockread.InvalidArgument) as e:
        client.read_many([("big.bin", 0, 1), ("big.bin", 0)])
    assert e.value.index == 1
    with pytest.raises(blockread.InvalidArgument) as e:
        client.read_many([("big.bin", 0, 1)] * 100 + [("big.bin", -1, 1)])
    assert e.value.index == 100


def test_unavailable_unreachable(free_port):
    c = blockread.Client(f"127.0.0.1:{free_port}", timeout=5)
    for call in (lambda: c.read("f", 0, 1), lambda: c.read_many([("f", 0, 1)]), c.ls, c.stats,
                 lambda: c.stat("f"), lambda: list(c.read_iter([("f", 0, 1)]))):
        with pytest.raises(blockread.Unavailable) as e:
            call()
        check(e.value, blockread.Unavailable, grpc.StatusCode.UNAVAILABLE)
        assert e.value.index is None


def test_unavailable_when_the_server_stops(tmp_path):
    from conftest import ServerProcess
    server = ServerProcess([f"--data-dir={tmp_path / 'data'}"], str(tmp_path / "log"))
    c = blockread.Client(server.target, timeout=5)
    assert c.read("hello.txt", 0, 5) == b"Hello"
    assert server.stop() == 0
    with pytest.raises(blockread.Unavailable):
        c.read("hello.txt", 0, 5)
    with pytest.raises(blockread.Unavailable):
        c.read_many([("hello.txt", 0, 5)])


def test_deadline_exceeded(served, client):
    reads = [("big.bin", 0, 1 << 20)] * 200  # 200 MiB: never within a few milliseconds
    with pytest.raises(blockread.DeadlineExceeded) as e:
        client.read_many(reads, timeout=0.001)
    check(e.value, blockread.DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert e.value.index is None
    # A deadline already passed (a second ago) fails at once, before the request is sent. Not
    # timeout=0: gRPC rounds a deadline up to the millisecond, so the server gets
    # "grpc-timeout: 1m" or so and may answer a 1 MiB read within it, and then the call succeeds
    # (it did in about 7% of tries over loopback, with or without zero-copy responses).
    with pytest.raises(blockread.DeadlineExceeded) as e:
        client.read("big.bin", 0, 1 << 20, timeout=-1)
    check(e.value, blockread.DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED)
    # The client is fine afterwards.
    assert client.read("tiny.txt", 0, 5) == served.files["tiny.txt"][:5]
