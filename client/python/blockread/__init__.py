"""blockread: reads of files served straight from block devices, from Python.

    import blockread
    c = blockread.Client("127.0.0.1:7420")
    c.read("hello.txt")                                # the whole file, as bytes
    c.read("hello.txt", 0, 4096)                       # bytes (fewer at the end of the file)
    c.read_into("hello.txt", 0, buffer)                # into a bytearray/memoryview/numpy array
    c.read_many([("random-4m", 0, 4096), ...])         # list of bytes, one stream, batched
    c.stat("hello.txt"); c.ls(); c.stats(); c.explain("fragmented", 0, 65536)

Several servers: blockread.Client("a:7420,b:7420"), a list, "dns:///name:7420" or "@FILE".
Each read goes to a server that lists its file (the less loaded of two replicas) and fails over
to another replica on UNAVAILABLE; ls() shows each file's `servers`; stats() and health() answer
per server ({address: answer}, or server= one of them).

Errors are blockread.Error subclasses (NotFound, OutOfRange, ...) with `.code`, a
grpc.StatusCode; those with a builtin meaning subclass it too (NotFound is a FileNotFoundError).
PyTorch datasets are in blockread.torch (when torch is installed).

Fork support: gRPC needs GRPC_ENABLE_FORK_SUPPORT=1 before grpc is imported for forked children
(DataLoader workers) to be safe. `import blockread` alone sets nothing and imports no gRPC; the
first use of a name below that needs gRPC (Client, the errors, pb, ...) or an explicit
blockread.enable_fork_support() sets it, unless the environment already has a value.
"""

import importlib
from typing import TYPE_CHECKING, Any

from blockread._fork import enable_fork_support

# The one version: the top-level CMakeLists.txt's project(VERSION) (tests/test_version.py).
__version__ = "0.3.0"

# name -> the module that defines it; imported on first use, after enable_fork_support().
_LAZY = {
    "Client": "blockread._client", "FileInfo": "blockread._client",
    "DEFAULT_TARGET": "blockread._client", "DEFAULT_MAX_READ_BYTES": "blockread._client",
    "Stats": "blockread._messages", "Explanation": "blockread._messages",
}
_ERRORS = ["Error", "NotFound", "OutOfRange", "InvalidArgument", "PermissionDenied",
           "Unauthenticated", "Unavailable", "DataLoss", "ResourceExhausted", "DeadlineExceeded",
           "FailedPrecondition"]
_LAZY.update({name: "blockread.errors" for name in _ERRORS})

if TYPE_CHECKING:
    from blockread._client import (DEFAULT_MAX_READ_BYTES, DEFAULT_TARGET, Client,  # noqa: F401
                                   FileInfo)
    from blockread._messages import Explanation, Stats  # noqa: F401
    from blockread._proto.blockread.v1 import blockread_pb2 as pb  # noqa: F401
    from blockread.errors import (DataLoss, DeadlineExceeded, Error,  # noqa: F401
                                  FailedPrecondition, InvalidArgument, NotFound, OutOfRange,
                                  PermissionDenied, ResourceExhausted, Unauthenticated,
                                  Unavailable)


def __getattr__(name: str) -> Any:
    if name == "pb":
        enable_fork_support()
        value: Any = importlib.import_module("blockread._proto.blockread.v1.blockread_pb2")
    elif name in _LAZY:
        enable_fork_support()
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'blockread' has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = ["enable_fork_support", "pb", "__version__"] + sorted(_LAZY)
