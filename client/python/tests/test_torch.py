"""blockread.torch: DataLoader workers read every sample exactly once, byte for byte."""

import collections
import hashlib

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed (Debian: python3-torch); blockread.torch needs it")
from torch.utils.data import DataLoader  # noqa: E402

import blockread  # noqa: E402
from blockread.torch import BlockReadDataset, BlockReadIterableDataset  # noqa: E402

pytestmark = pytest.mark.usefixtures("fork_ready")

# A worker that gets stuck (grpcio 1.51's fork handlers can deadlock a child, rarely; README
# "Python client") fails the loader after this long instead of hanging the run.
LOADER_TIMEOUT = 120


def digest(data):
    return hashlib.sha256(data).hexdigest()


def samples_and_bytes(served):
    """Whole files (the 64 small ones, a 3 MiB one read in pieces, an empty one) and ranges."""
    samples = sorted(n for n in served.files if n.startswith("samples/"))
    samples += ["big.bin", "empty", "odd-size"]
    big = served.files["big.bin"]
    samples += [("big.bin", off, 4096) for off in range(0, len(big), 100_000)]
    samples += [("odd-size", 1, 1 << 20), ("big.bin", 12345, 2_500_000)]  # to EOF; in pieces
    want = []
    for s in samples:
        if isinstance(s, str):
            want.append(served.files[s])
        else:
            want.append(served.files[s[0]][s[1]:s[1] + s[2]])
    return samples, want


def test_map_dataset_in_main_process(served):
    samples, want = samples_and_bytes(served)
    ds = BlockReadDataset(served.target, samples)
    assert len(ds) == len(samples)
    assert [ds[i] for i in range(len(ds))] == want


def test_map_dataset_dataloader_two_workers(served):
    samples, want = samples_and_bytes(served)
    client = blockread.Client(served.target)
    client.read_many([("tiny.txt", 0, 10)])  # the parent has used the channel before forking
    ds = BlockReadDataset(client, samples)
    loader = DataLoader(ds, num_workers=2, batch_size=None, timeout=LOADER_TIMEOUT)
    got = list(loader)
    assert got == want  # every sample, once, in order


def test_map_dataset_transform_and_batches(served):
    samples, want = samples_and_bytes(served)
    ds = BlockReadDataset(served.target, samples, transform=digest, max_read_bytes=64 << 10)
    loader = DataLoader(ds, num_workers=2, batch_size=8, timeout=LOADER_TIMEOUT)
    got = [d for batch in loader for d in batch]
    assert got == [digest(w) for w in want]


def test_iterable_dataset_two_workers_each_sample_once(served):
    samples, want = samples_and_bytes(served)
    ds = BlockReadIterableDataset(served.target, samples, depth=16, batch=4)
    assert list(ds) == want  # no workers: all of it, in order
    loader = DataLoader(ds, num_workers=2, batch_size=None, timeout=LOADER_TIMEOUT)
    got = list(loader)
    assert len(got) == len(want)
    assert collections.Counter(map(digest, got)) == collections.Counter(map(digest, want))
    # Worker k reads samples k, k + 2, ...; the loader alternates between the workers.
    assert got[0::2] == want[0::2] and got[1::2] == want[1::2]


def test_iterable_dataset_small_pieces(served):
    samples, want = samples_and_bytes(served)
    ds = BlockReadIterableDataset(served.target, samples, transform=digest,
                                  max_read_bytes=16 << 10, depth=8, batch=3)
    got = list(DataLoader(ds, num_workers=2, batch_size=None, timeout=LOADER_TIMEOUT))
    assert sorted(got) == sorted(digest(w) for w in want)


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_spawned_workers_rebuild_the_client(served, context):
    """Workers that do not fork this process get the dataset pickled: the Client's settings."""
    samples, want = samples_and_bytes(served)
    ds = BlockReadDataset(served.target, samples[:20])
    loader = DataLoader(ds, num_workers=2, batch_size=None, multiprocessing_context=context,
                        timeout=LOADER_TIMEOUT)
    assert list(loader) == want[:20]
    ids = BlockReadIterableDataset(served.target, samples[:20])
    got = list(DataLoader(ids, num_workers=2, batch_size=None, multiprocessing_context=context,
                          timeout=LOADER_TIMEOUT))
    assert sorted(got) == sorted(want[:20])


def test_unknown_whole_file_fails_when_the_dataset_is_made(served):
    with pytest.raises(blockread.NotFound):
        BlockReadDataset(served.target, ["no-such-file"])


def test_read_error_reaches_the_loop(served):
    ds = BlockReadDataset(served.target, [("tiny.txt", 0, 10), ("gone", 0, 10)])
    batches = iter(DataLoader(ds, num_workers=2, batch_size=None, timeout=LOADER_TIMEOUT))
    try:
        with pytest.raises(blockread.NotFound, match="gone"):
            list(batches)
    finally:
        # The traceback keeps the iterator, and its workers and their connections, alive.
        batches._shutdown_workers()
