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
import re
import sys

if __name__ == "__main__" and os.environ.get("BLOCKREAD_TEST_INSTALLED") != "1":
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


# Every Loader made, so that main() can name their workers' exit codes. Only when this file runs
# as the scenario script (one scenario, then exit): under pytest a Loader must be able to go, and
# its workers with it.
LOADERS = [] if __name__ == "__main__" else None


class Loader:
    """A DataLoader with two workers, whose iterator (and so its workers) stays reachable."""

    def __init__(self, ds, context, **kwargs):
        self._loader = DataLoader(ds, num_workers=2, multiprocessing_context=context,
                                  timeout=LOADER_TIMEOUT, **kwargs)
        self.iterator = None
        if LOADERS is not None:
            LOADERS.append(self)

    def __iter__(self):
        self.iterator = iter(self._loader)
        return self.iterator

    def worker_exit_codes(self):
        """Exit codes of the workers that have ended (torch's error says only "exited
        unexpectedly", or names the code only when its SIGCHLD handler saw the death)."""
        workers = getattr(self.iterator, "_workers", ())
        return [w.exitcode for w in workers if w.exitcode is not None]


def map_two_workers(target, files, context):
    samples, want = samples_and_bytes(files)
    client = blockread.Client(target)
    client.read_many([("tiny.txt", 0, 10)])  # the parent has used its channel before forking
    ds = BlockReadDataset(client, samples)    # ... and lists the files (whole-file sizes)
    assert list(Loader(ds, context, batch_size=None)) == want  # every sample, once, in order


def map_transform_and_batches(target, files, context):
    samples, want = samples_and_bytes(files)
    ds = BlockReadDataset(target, samples, transform=digest, max_read_bytes=64 << 10)
    got = [d for batch in Loader(ds, context, batch_size=8) for d in batch]
    assert got == [digest(w) for w in want]


def iterable_two_workers(target, files, context):
    samples, want = samples_and_bytes(files)
    ds = BlockReadIterableDataset(target, samples, depth=16, batch=4)
    assert list(ds) == want  # no workers: all of it, in order, in this process first
    got = list(Loader(ds, context, batch_size=None))
    assert len(got) == len(want)
    assert collections.Counter(map(digest, got)) == collections.Counter(map(digest, want))
    # Worker k reads samples k, k + 2, ...; the loader alternates between the workers.
    assert got[0::2] == want[0::2] and got[1::2] == want[1::2]


def iterable_small_pieces(target, files, context):
    samples, want = samples_and_bytes(files)
    ds = BlockReadIterableDataset(target, samples, transform=digest,
                                  max_read_bytes=16 << 10, depth=8, batch=3)
    got = list(Loader(ds, context, batch_size=None))
    assert sorted(got) == sorted(digest(w) for w in want)


def read_error_reaches_the_loop(target, files, context):
    ds = BlockReadDataset(target, [("tiny.txt", 0, 10), ("gone", 0, 10)])
    batches = Loader(ds, context, batch_size=None)
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
    try:
        SCENARIOS[scenario](target, read_tree(tree), context)
    except Exception as e:
        codes = [code for loader in LOADERS for code in loader.worker_exit_codes()]
        # A worker that died while the loader was being set up (its iterator never assigned) is
        # named only in torch's message.
        codes += [int(c) for c in re.findall(r"exited unexpectedly with exit code (\d+)", str(e))]
        # A worker that grpcio's fork handler ended: forked.run starts this script again.
        forked.exit_if_grpc_gave_up(*codes)
        e.add_note(f"DataLoader workers' exit codes: {codes}")
        raise
    print(f"{scenario} ok")


if __name__ == "__main__":
    main()
