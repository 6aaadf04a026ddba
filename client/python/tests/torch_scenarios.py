"""DataLoader scenarios, run by test_torch.py in this process or, for fork, in a fresh one.

    /usr/bin/python3 torch_scenarios.py TARGET TREE SCENARIO     (prints "SCENARIO ok")

The fork scenarios run in a fresh interpreter that, like a training script, makes its client,
uses it and then starts the workers. Inside pytest the process has also run the other tests'
servers, failed connections and dozens of channels, which grpcio 1.51's fork handlers do not
always survive (README "Python client"); that is not what these tests are about.
"""

import collections
import hashlib
import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import blockread  # noqa: E402  (before torch and grpc: it sets GRPC_ENABLE_FORK_SUPPORT)
import forked  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from blockread.torch import BlockReadDataset, BlockReadIterableDataset  # noqa: E402

# A worker that gets stuck fails the loader after this long instead of hanging the run.
LOADER_TIMEOUT = 60


def digest(data):
    return hashlib.sha256(data).hexdigest()


def read_tree(tree):
    files = {}
    for root, _, names in os.walk(tree):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, tree)] = f.read()
    return files


def samples_and_bytes(files):
    """Whole files (the 64 small ones, a 3 MiB one read in pieces, an empty one) and ranges."""
    samples = sorted(n for n in files if n.startswith("samples/"))
    samples += ["big.bin", "empty", "odd-size"]
    big = files["big.bin"]
    samples += [("big.bin", off, 4096) for off in range(0, len(big), 100_000)]
    samples += [("odd-size", 1, 1 << 20), ("big.bin", 12345, 2_500_000)]  # to EOF; in pieces
    want = []
    for s in samples:
        if isinstance(s, str):
            want.append(files[s])
        else:
            want.append(files[s[0]][s[1]:s[1] + s[2]])
    return samples, want


class loader:
    """Iterates a DataLoader with two workers. When the loader fails because a worker died, the
    workers' exit codes are in the error, and a death by grpcio's fork handler ends this script
    with forked.GAVE_UP (torch says only "exited unexpectedly")."""

    def __init__(self, ds, context, **kwargs):
        self._loader = DataLoader(ds, num_workers=2, multiprocessing_context=context,
                                  timeout=LOADER_TIMEOUT, **kwargs)
        self.iterator = None

    def __iter__(self):
        self.iterator = iter(self._loader)
        return self

    def __next__(self):
        try:
            return next(self.iterator)
        except RuntimeError as e:
            codes = [w.exitcode for w in getattr(self.iterator, "_workers", ())]
            forked.exit_if_grpc_gave_up(*codes)
            raise RuntimeError(f"{e} (worker exit codes {codes})") from e


def map_two_workers(target, files, context):
    samples, want = samples_and_bytes(files)
    client = blockread.Client(target)
    client.read_many([("tiny.txt", 0, 10)])  # the parent has used its channel before forking
    ds = BlockReadDataset(client, samples)    # ... and lists the files (whole-file sizes)
    assert list(loader(ds, context, batch_size=None)) == want  # every sample, once, in order


def map_transform_and_batches(target, files, context):
    samples, want = samples_and_bytes(files)
    ds = BlockReadDataset(target, samples, transform=digest, max_read_bytes=64 << 10)
    got = [d for batch in loader(ds, context, batch_size=8) for d in batch]
    assert got == [digest(w) for w in want]


def iterable_two_workers(target, files, context):
    samples, want = samples_and_bytes(files)
    ds = BlockReadIterableDataset(target, samples, depth=16, batch=4)
    assert list(ds) == want  # no workers: all of it, in order, in this process first
    got = list(loader(ds, context, batch_size=None))
    assert len(got) == len(want)
    assert collections.Counter(map(digest, got)) == collections.Counter(map(digest, want))
    # Worker k reads samples k, k + 2, ...; the loader alternates between the workers.
    assert got[0::2] == want[0::2] and got[1::2] == want[1::2]


def iterable_small_pieces(target, files, context):
    samples, want = samples_and_bytes(files)
    ds = BlockReadIterableDataset(target, samples, transform=digest,
                                  max_read_bytes=16 << 10, depth=8, batch=3)
    got = list(loader(ds, context, batch_size=None))
    assert sorted(got) == sorted(digest(w) for w in want)


def read_error_reaches_the_loop(target, files, context):
    ds = BlockReadDataset(target, [("tiny.txt", 0, 10), ("gone", 0, 10)])
    batches = loader(ds, context, batch_size=None)
    try:
        list(batches)
    except blockread.NotFound as e:
        assert "gone" in str(e)
    else:
        raise AssertionError("no NotFound")
    finally:
        # The traceback keeps the iterator, its workers and their connections alive.
        batches.iterator._shutdown_workers()


SCENARIOS = {f.__name__: f for f in (map_two_workers, map_transform_and_batches,
                                     iterable_two_workers, iterable_small_pieces,
                                     read_error_reaches_the_loop)}


def main():
    target, tree, scenario, context = sys.argv[1:5]
    SCENARIOS[scenario](target, read_tree(tree), context)
    print(f"{scenario} ok")


if __name__ == "__main__":
    main()
