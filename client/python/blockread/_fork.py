"""The one switch blockread sets in the process: GRPC_ENABLE_FORK_SUPPORT.

gRPC Python channels do not survive fork(), and grpcio 1.51 can hang in a child whose parent
already used a channel unless fork support is on. grpcio reads the variable once, when grpc is
imported. DataLoader workers fork, so the package turns it on, but only from its own functions
(enable_fork_support(), and the first use of blockread's grpc-backed names: Client, AsyncClient,
the error classes, the datasets), never by `import blockread` alone. A value the user set is kept
(GRPC_ENABLE_FORK_SUPPORT=0 turns it off).

This module imports nothing of gRPC.
"""

import os
import sys
import warnings

VARIABLE = "GRPC_ENABLE_FORK_SUPPORT"


def enable_fork_support() -> bool:
    """Sets GRPC_ENABLE_FORK_SUPPORT=1 unless the environment already has a value, before grpc is
    imported. Returns True when fork support is (or will be) on. Warns when grpc was imported
    first without the variable: it comes too late then, and forked children may hang."""
    if VARIABLE in os.environ:
        return os.environ[VARIABLE].lower() in ("1", "true", "yes")
    if "grpc" in sys.modules:
        warnings.warn("blockread: grpc was imported before blockread used it, so "
                      "GRPC_ENABLE_FORK_SUPPORT=1 came too late; forked children (DataLoader "
                      "workers) may hang. Call blockread.enable_fork_support() before importing "
                      "grpc, or set GRPC_ENABLE_FORK_SUPPORT=1 in the environment.",
                      stacklevel=3)
        return False
    os.environ[VARIABLE] = "1"
    return True
