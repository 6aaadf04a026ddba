"""blockread: reads of files served straight from block devices, from Python.

    import blockread
    c = blockread.Client("127.0.0.1:7420")
    c.read("hello.txt", 0, 4096)                       # bytes (fewer at the end of the file)
    c.read_many([("random-4m", 0, 4096), ...])         # list of bytes, one stream, batched
    c.stat("hello.txt"); c.ls(); c.stats(); c.explain("fragmented", 0, 65536)

Several servers: blockread.Client("a:7420,b:7420"), a list, "dns:///name:7420" or "@FILE".
Each read goes to a server that lists its file (the less loaded of two replicas) and fails over
to another replica on UNAVAILABLE; ls() shows each file's `servers`; stats() and health() answer
per server ({address: answer}, or server= one of them).

Errors are blockread.Error subclasses (NotFound, OutOfRange, ...) with `.code`, a
grpc.StatusCode. PyTorch datasets are in blockread.torch (when torch is installed).
"""

import os
import sys
import warnings

# gRPC Python channels do not survive fork(), and grpcio 1.51 can hang in a child whose parent
# already used a channel unless fork support is on; it is read once, when grpc is imported.
# DataLoader workers fork, so the package turns it on (a value the user set is kept).
if "grpc" in sys.modules and "GRPC_ENABLE_FORK_SUPPORT" not in os.environ:
    warnings.warn("blockread: grpc was imported before blockread, so GRPC_ENABLE_FORK_SUPPORT=1 "
                  "came too late; forked children (DataLoader workers) may hang. Import "
                  "blockread first or set GRPC_ENABLE_FORK_SUPPORT=1 in the environment.",
                  stacklevel=2)
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "1")

from blockread._client import DEFAULT_MAX_READ_BYTES, DEFAULT_TARGET, Client, FileInfo  # noqa: E402
from blockread._proto.blockread.v1 import blockread_pb2 as pb  # noqa: E402
from blockread.errors import (  # noqa: E402
    DataLoss, DeadlineExceeded, Error, FailedPrecondition, InvalidArgument, NotFound, OutOfRange,
    PermissionDenied, ResourceExhausted, Unauthenticated, Unavailable)

__version__ = "0.1.0"

__all__ = [
    "Client", "FileInfo", "pb", "DEFAULT_TARGET", "DEFAULT_MAX_READ_BYTES",
    "Error", "NotFound", "OutOfRange", "InvalidArgument", "PermissionDenied", "Unauthenticated",
    "Unavailable", "DataLoss", "ResourceExhausted", "DeadlineExceeded", "FailedPrecondition",
]
