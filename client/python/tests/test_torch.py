"""blockread.torch: DataLoader workers read every sample exactly once, byte for byte.

The scenarios are in torch_scenarios.py. Fork workers (DataLoader's default on Linux) run them
in a fresh interpreter, as a training script would; spawn and forkserver workers run them here.
The two loaders of every sample run with fork; the scenarios about the datasets' own logic run
with forkserver, so the suite starts few fork workers: each start carries grpcio 1.51's small
risk of a failed fork (README "Python client"), which these tests are not about; forked.run
starts a scenario again when that is how a worker died.
"""

import sys

import pytest

pytest.importorskip(
    "torch", reason="torch is not installed (Debian: python3-torch); blockread.torch needs it")

import blockread  # noqa: E402
import forked  # noqa: E402
import torch_scenarios  # noqa: E402
from blockread.torch import BlockReadDataset, BlockReadIterableDataset  # noqa: E402

FORK = ["map_two_workers", "iterable_two_workers"]
OTHERS = sorted(set(torch_scenarios.SCENARIOS) - set(FORK))


@pytest.mark.parametrize("scenario", FORK)
def test_fork_workers(served, scenario):
    result = forked.run([sys.executable, torch_scenarios.__file__, served.target,
                         str(served.tree), scenario, "fork"], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{scenario} ok" in result.stdout


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
@pytest.mark.parametrize("scenario", FORK)
def test_spawned_workers_rebuild_the_client(served, scenario, context):
    """Workers that do not fork this process get the dataset pickled: the Client's settings."""
    torch_scenarios.SCENARIOS[scenario](served.target, served.files, context)


@pytest.mark.parametrize("scenario", OTHERS)
def test_dataset_scenarios(served, scenario):
    """Transform and batches, small pieces, an error in a worker: forkserver workers."""
    torch_scenarios.SCENARIOS[scenario](served.target, served.files, "forkserver")


def test_map_dataset_in_main_process(served):
    samples, want = torch_scenarios.samples_and_bytes(served.files)
    ds = BlockReadDataset(served.target, samples)
    assert len(ds) == len(samples)
    assert [ds[i] for i in range(len(ds))] == want
    ids = BlockReadIterableDataset(served.target, samples)
    assert len(ids) == len(samples)
    assert list(ids) == want


def test_unknown_whole_file_fails_when_the_dataset_is_made(served):
    with pytest.raises(blockread.NotFound):
        BlockReadDataset(served.target, ["no-such-file"])
