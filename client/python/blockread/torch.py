"""PyTorch datasets that read their samples from a blockread server.

    from blockread.torch import BlockReadDataset, BlockReadIterableDataset
    ds = BlockReadDataset("127.0.0.1:7420", [("train.bin", 0, 4096), "labels.bin"])
    loader = torch.utils.data.DataLoader(ds, num_workers=4, batch_size=None)

A sample is a (file, offset, length) tuple, or a file name meaning the whole file (its size is
taken when the dataset is made, and it is read in pieces of at most the server's max_read_bytes,
`max_read_bytes=` of the Client). An item is the sample's bytes, or transform(bytes).

The datasets hold a blockread.Client, which makes its own channels in each DataLoader worker
(fork) or is rebuilt from its settings (spawn), so nothing needs a worker_init_fn.

This module needs torch; importing it without torch raises ImportError.
"""

import torch.utils.data

import blockread


def _client(target, client_kwargs):
    if isinstance(target, blockread.Client):
        if client_kwargs:
            raise TypeError("client options go to the Client, not with a Client")
        return target
    return blockread.Client(target, **client_kwargs)


def _resolve(client, samples):
    """Samples as (file, offset, length) tuples: whole files sized, and ranges that would be
    split into pieces clipped to the end of the file (a read past EOF returns the bytes up to
    EOF; its pieces past EOF would fail). Sizes come from one listing, taken now."""
    sizes = None

    def size_of(name):
        nonlocal sizes
        if sizes is None:
            sizes = {info.name: info.size for info in client.ls()}
        size = sizes.get(name)
        return size if size is not None else client.stat(name).size  # NotFound names it

    out = []
    for sample in samples:
        if isinstance(sample, str):
            out.append((sample, 0, size_of(sample)))
            continue
        file, offset, length = sample
        offset, length = int(offset), int(length)
        if length > client.max_read_bytes:
            size = size_of(file)
            if offset <= size:
                length = min(length, size - offset)
        out.append((file, offset, length))
    return out


def _pieces(sample, max_read_bytes):
    """The reads that make up `sample`: one, or several of at most max_read_bytes."""
    file, offset, length = sample
    if length <= max_read_bytes:
        return [sample]
    return [(file, offset + at, min(max_read_bytes, length - at))
            for at in range(0, length, max_read_bytes)]


class BlockReadDataset(torch.utils.data.Dataset):
    """A map-style dataset: item i is the bytes of samples[i] (or transform of them).

    target: what blockread.Client takes ("host:port", several servers, "dns:///name:port",
    "@FILE") or a blockread.Client. samples: (file, offset, length) tuples or whole
    file names. client_kwargs: blockread.Client's options (token=, ca=, timeout=, ...).
    Each item is one ReadBlock, or one read_many stream for a sample larger than max_read_bytes.
    An empty whole file reads as b"".
    """

    def __init__(self, target, samples, transform=None, **client_kwargs):
        self.client = _client(target, client_kwargs)
        self.samples = _resolve(self.client, samples)
        self.transform = transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        sample = self.samples[index]
        pieces = _pieces(sample, self.client.max_read_bytes)
        if sample[2] == 0:
            data = b""
        elif len(pieces) == 1:
            data = self.client.read(*sample)
        else:
            data = b"".join(self.client.read_many(pieces))
        return self.transform(data) if self.transform is not None else data


class BlockReadIterableDataset(torch.utils.data.IterableDataset):
    """An iterable dataset: the bytes of each sample (or transform of them), in sample order.

    Each DataLoader worker takes every num_workers-th sample (worker k: samples k, k + n, ...),
    so the workers together read every sample exactly once, and reads them over one ReadBlocks
    stream with `depth` reads in flight, `batch` to a message (the Client's depth= and batch=).
    Without workers the whole list is read in the main process.
    """

    def __init__(self, target, samples, transform=None, **client_kwargs):
        self.client = _client(target, client_kwargs)
        self.samples = _resolve(self.client, samples)
        self.transform = transform

    def __len__(self):
        return len(self.samples)

    def _shard(self):
        info = torch.utils.data.get_worker_info()
        if info is None:
            return self.samples
        return self.samples[info.id::info.num_workers]

    def __iter__(self):
        shard = self._shard()
        limit = self.client.max_read_bytes
        # One flat stream of pieces; a sample's pieces are consecutive, so they are joined again
        # in order as they come back.
        counts = [len(_pieces(s, limit)) if s[2] > 0 else 0 for s in shard]
        reads = (piece for s in shard if s[2] > 0 for piece in _pieces(s, limit))
        stream = self.client.read_iter(reads)
        for count in counts:
            if count == 1:
                data = next(stream)
            else:
                data = b"".join(next(stream) for _ in range(count))
            yield self.transform(data) if self.transform is not None else data
