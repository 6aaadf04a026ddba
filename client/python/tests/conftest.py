"""Fixtures: real blockread-server processes on 127.0.0.1, and the bytes they should serve.

The server binary comes from $BLOCKREAD_SERVER_BINARY (ctest sets it); run by hand, the first
build/*/server/blockread-server of the source tree is used.
"""

import gc
import glob
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from forked import PACKAGE_ROOT  # imports nothing of gRPC

SOURCE_ROOT = os.path.dirname(os.path.dirname(PACKAGE_ROOT))
# The package first, so it sets GRPC_ENABLE_FORK_SUPPORT before anything imports grpc.
if os.environ.get("BLOCKREAD_TEST_INSTALLED") != "1":
    # In place, as with PYTHONPATH=client/python. BLOCKREAD_TEST_INSTALLED=1 tests whatever
    # `import blockread` finds instead (a pip-installed copy).
    sys.path.insert(0, PACKAGE_ROOT)
import blockread  # noqa: E402

blockread.enable_fork_support()  # before the test modules import grpc

import pytest  # noqa: E402

from google.protobuf import text_format  # noqa: E402
from blockread._proto.blockread.v1 import manifest_pb2  # noqa: E402


def server_binary():
    path = os.environ.get("BLOCKREAD_SERVER_BINARY")
    if path:
        if not os.access(path, os.X_OK):
            pytest.fail(f"BLOCKREAD_SERVER_BINARY={path} is not an executable")
        return path
    found = sorted(glob.glob(os.path.join(SOURCE_ROOT, "build", "*", "server", "blockread-server")),
                   key=os.path.getmtime, reverse=True)
    if not found:
        pytest.skip("no blockread-server: build it (cmake --build ... --target blockread-server) "
                    "or set BLOCKREAD_SERVER_BINARY")
    return found[0]


def _die_with_parent():
    """A command prefix that makes the server die with the test run, however that ends.

    setpriv (util-linux) sets PR_SET_PDEATHSIG and execs. Not Popen(preexec_fn=...): that forks
    the test process, whose gRPC at-fork handler (GRPC_ENABLE_FORK_SUPPORT) can end the child
    with status 64 before it execs (see test_fork.py).
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []


class ServerProcess:
    """A blockread-server on 127.0.0.1:<free port>, started with `args`, ready (SERVING), asked
    by a Client made with `client_kwargs` (ca=, cert=, key= for a TLS server)."""

    def __init__(self, args, log_path, **client_kwargs):
        self.log_path = log_path
        argv = _die_with_parent() + [server_binary(), "--listen=127.0.0.1:0",
                                     "--metrics-listen="] + list(args)
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log)
        # "blockread-server: listening on 127.0.0.1:PORT", then "blockread-server: metrics off".
        line = self.process.stdout.readline().decode()
        if "listening on" not in line:
            self.process.kill()
            status = self.process.wait()
            raise RuntimeError(f"server did not start (status {status}): {line!r}; "
                               f"log:\n{self.log()}")
        self.target = line.rsplit(" ", 1)[1].strip()
        self.port = int(self.target.rsplit(":", 1)[1])
        client = blockread.Client(self.target, timeout=2, **client_kwargs)
        deadline = time.monotonic() + 60
        while True:
            try:
                if client.health() == "SERVING":
                    break
            except blockread.Error:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"server not SERVING; log:\n{self.log()}")
            time.sleep(0.02)
        client.close()

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, timeout=20):
        """SIGTERM, then the exit status (-1 if it had to be killed)."""
        # Clients the tests dropped close their connections when collected; the server's
        # shutdown waits about 5 s for connections that stay open.
        gc.collect()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                return -1
        self.process.stdout.close()
        return self.process.returncode


def file_bytes_from_manifest(manifest_path):
    """{name: bytes} of every file in a manifest, read from its device files by Python itself."""
    manifest = text_format.Parse(open(manifest_path).read(), manifest_pb2.Manifest())
    devices = {d.name: d.path for d in manifest.device}
    files = {}
    for f in manifest.file:
        data = bytearray(f.size)
        for e in f.extent:
            end = min(e.logical_offset + e.length, f.size)
            if e.type in (manifest_pb2.MAPPED, manifest_pb2.EXTENT_TYPE_UNSPECIFIED) and e.device:
                with open(devices[e.device], "rb") as dev:
                    dev.seek(e.physical_offset)
                    data[e.logical_offset:end] = dev.read(end - e.logical_offset)
        files[f.name] = bytes(data)
    return files


class Served:
    """A running server and {name: bytes} of what it serves (taken from the filesystem); `tree`,
    the directory served, when it is one."""

    def __init__(self, server, files, tree=None):
        self.server = server
        self.target = server.target
        self.files = files
        self.tree = tree


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """The demo device (no source given): hello.txt, random-4m, sparse, fragmented, large."""
    root = tmp_path_factory.mktemp("demo")
    server = ServerProcess([f"--data-dir={root / 'data'}"], str(root / "server.log"))
    yield Served(server, file_bytes_from_manifest(str(root / "data" / "demo.manifest")))
    assert server.stop() == 0, server.log()


# Sizes chosen for edges: empty, smaller than a block, unaligned, several max reads and a rest.
SERVED_FILE_SIZES = {
    "empty": 0, "tiny.txt": 100, "block": 4096, "odd-size": 123457,
    "dir/nested.bin": 300000, "big.bin": 3 * (1 << 20) + 12345,
}


def files_dir(tmp_path_factory):
    """Where the served files are written: tmpfs (/dev/shm) when there is one.

    On ext4/XFS the server imports files with FIEMAP and opens the filesystem's disk, which a
    container may forbid (EPERM on /dev/vda: the server refuses to start); on tmpfs the files are
    served through the file route, always. Either way the bytes must be the files' bytes; the
    FIEMAP route itself is the C++ tests' (tests/storage, on loop devices).
    BLOCKREAD_TEST_FILES_DIR chooses another parent directory.
    """
    parent = os.environ.get("BLOCKREAD_TEST_FILES_DIR")
    if parent is None and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        parent = "/dev/shm"
    if parent is None:
        return tmp_path_factory.mktemp("files"), None
    path = tempfile.mkdtemp(prefix="blockread-python-test-", dir=parent)
    return pathlib.Path(path), path


@pytest.fixture(scope="session")
def served(tmp_path_factory):
    """Files the test writes, served with --serve-files (see files_dir)."""
    root, remove = files_dir(tmp_path_factory)
    tree = root / "tree"
    rng = random.Random(16)
    files = {}
    for name, size in SERVED_FILE_SIZES.items():
        path = tree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(size)
        path.write_bytes(data)
        files[name] = data
    for i in range(64):  # many small samples for the DataLoader tests
        name = f"samples/{i:03d}"
        path = tree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(rng.randrange(1, 20000))
        path.write_bytes(data)
        files[name] = data
    os.sync()
    server = ServerProcess([f"--serve-files={tree}"], str(root / "server.log"))
    try:
        yield Served(server, files, tree)
        assert server.stop() == 0, server.log()
    finally:
        server.stop()
        if remove:
            shutil.rmtree(remove)


@pytest.fixture()
def client(served):
    with blockread.Client(served.target) as c:
        yield c


@pytest.fixture()
def free_port():
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

