"""Whole files and reads into the caller's buffers: byte-exact, split at max_read_bytes, and
without an intermediate bytes of the read's size (tracemalloc)."""

import tracemalloc

import pytest

import blockread

MIB = 1 << 20


def test_read_of_any_length_is_split_and_joined(served, client):
    big = served.files["big.bin"]  # 3 MiB + 12345: three max reads and a rest
    assert client.read("big.bin") == big
    assert client.read("big.bin", 5) == big[5:]
    assert client.read("big.bin", 100, 2 * MIB + 7) == big[100:100 + 2 * MIB + 7]
    assert client.read("big.bin", 100, 10 * MIB) == big[100:]  # short at the end of the file
    assert client.read("empty") == b""
    assert client.read("big.bin", len(big)) == b""
    with pytest.raises(blockread.OutOfRange):
        client.read("big.bin", len(big) + 1)
    # A smaller max_read_bytes than the server's: more pieces, the same bytes.
    with blockread.Client(served.target, max_read_bytes=64 << 10) as small:
        assert small.read("odd-size") == served.files["odd-size"]


def test_read_into_bytearray_memoryview_numpy(served, client):
    big = served.files["big.bin"]
    buffer = bytearray(len(big))
    assert client.read_into("big.bin", 0, buffer) == len(big)
    assert buffer == big
    view = memoryview(bytearray(1000))
    assert client.read_into("tiny.txt", 0, view[10:]) == 100  # short: the file has 100 bytes
    assert bytes(view[10:110]) == served.files["tiny.txt"]
    numpy = pytest.importorskip("numpy", reason="numpy is not installed (python3-numpy)")
    array = numpy.zeros(300000 // 4, dtype=numpy.uint32)
    assert client.read_into("dir/nested.bin", 0, array) == 300000
    assert array.tobytes() == served.files["dir/nested.bin"]
    with pytest.raises(TypeError):
        client.read_into("tiny.txt", 0, b"read-only")


def test_read_into_a_tensor(served, client):
    torch = pytest.importorskip("torch", reason="torch is not installed (python3-torch)")
    tensor = torch.empty(123457, dtype=torch.uint8)
    assert client.read_into("odd-size", 0, tensor.numpy()) == 123457
    assert bytes(tensor.numpy()) == served.files["odd-size"]


def test_read_many_into(served, client):
    names = [f"samples/{i:03d}" for i in range(20)] + ["big.bin", "odd-size"]
    buffers = [bytearray(len(served.files[n])) for n in names]
    assert client.read_many_into([(n, 0, b) for n, b in zip(names, buffers)]) == [
        len(b) for b in buffers]
    assert [bytes(b) for b in buffers] == [served.files[n] for n in names]
    with pytest.raises(blockread.NotFound) as e:
        client.read_many_into([("tiny.txt", 0, bytearray(1)), ("no-such-file", 0, bytearray(1))])
    assert e.value.index == 1


def test_read_into_makes_no_bytes_of_the_reads_size(served, client):
    """The only allocations of data size are gRPC's messages (one max read each, freed as they
    are copied): a 3 MiB read_into peaks well below 3 MiB, read() above it."""
    size = len(served.files["big.bin"])
    buffer = bytearray(size)
    client.read_into("big.bin", 0, buffer)  # warm: channel, stubs
    tracemalloc.start()
    try:
        client.read_many_into([("big.bin", 0, buffer)], depth=1)  # one piece in flight
        _, into_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        data = client.read("big.bin")
        _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert buffer == served.files["big.bin"] == data
    assert read_peak >= size
    # read() holds the pieces and their joined copy; read_into holds gRPC's messages only (they
    # may all be received before they are copied), never a buffer of the whole read on top.
    assert into_peak < read_peak - size // 2, (into_peak, read_peak, size)
