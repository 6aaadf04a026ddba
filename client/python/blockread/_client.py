"""blockread.Client: reads, listings and stats from blockread servers over gRPC.

A Client whose target names one server (one "host:port") talks to it alone, on the code below.
One whose target names several, or a "dns:///" name or an "@FILE" (whose servers may change),
hands every call to a _cluster.Cluster, which routes it to a server holding the file.
"""

import dataclasses
import ipaddress
import os
import threading
import warnings
from typing import (Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Union)

from blockread._fork import enable_fork_support

enable_fork_support()  # this module is imported by the package's functions only (see _fork)

import grpc  # noqa: E402

from blockread import _messages, _wire, errors  # noqa: E402
from blockread._proto.blockread.v1 import blockread_pb2 as pb
from blockread._proto.blockread.v1 import blockread_pb2_grpc as pb_grpc
from blockread._routing import RESOLVE_INTERVAL, BackoffPolicy, TargetSpec

DEFAULT_TARGET = "127.0.0.1:7420"
# A method's `timeout` when not given: the Client's. (None means no deadline.)
_DEFAULT = object()
# The server's default max_read_bytes (storage/engine_config.h). The server does not announce its
# limit (no GetServerInfo, FileInfo has no such field); a client of a server run with
# --max-read-bytes passes that value (Client(max_read_bytes=)) and reads of any length are split
# into pieces of it.
DEFAULT_MAX_READ_BYTES = 1 << 20
# (file, offset, length)
Read = Tuple[str, int, int]
# What read_into fills: anything with a writable, C-contiguous buffer (bytearray, memoryview,
# mmap, a numpy array, a torch tensor's .numpy()).
WritableBuffer = Any

# Channel arguments, the C++ client's (client/blockread_client.cc) and for the same reasons.
_CHANNEL_OPTIONS = [
    # Reads up to max_read_bytes, and stream messages that gather several results.
    ("grpc.max_receive_message_length", 64 << 20),
    # Each Client its own TCP connection, not one shared by every channel with equal arguments.
    ("grpc.use_local_subchannel_pool", 1),
    # A 64 KiB stream window makes every 128 KiB response wait for a WINDOW_UPDATE round trip.
    ("grpc.http2.lookahead_bytes", 8 << 20),
    ("grpc.http2.max_frame_size", 1 << 20),
    # A long stream to a server that vanished without a FIN fails instead of waiting forever.
    # The server accepts pings every 5 s (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS).
    ("grpc.keepalive_time_ms", 30000),
    ("grpc.keepalive_timeout_ms", 10000),
]
# With several servers, one that went away is dialled again on the schedule it is backed off on
# (_routing.BackoffPolicy), not gRPC's (1 s doubling to 2 min), so a restarted server is used
# again within seconds, as the C++ client does. (grpc.min_reconnect_backoff_ms stays gRPC's: it
# is the connect timeout.)
_CLUSTER_CHANNEL_OPTIONS = _CHANNEL_OPTIONS + [
    ("grpc.initial_reconnect_backoff_ms", int(BackoffPolicy.initial * 1000)),
    ("grpc.max_reconnect_backoff_ms", int(BackoffPolicy.maximum * 1000)),
]


@dataclasses.dataclass(frozen=True)
class FileInfo:
    """A served file, as StatFile and ListFiles describe it.

    name: the name reads use. size: bytes. block_size: the alignment a read needs for the simple
    path. extents: how many extents the file has. source: how it is served, "WHOLE_DEVICE",
    "MANIFEST", "FIEMAP" (read from the raw device) or "FILE_ROUTE" (through the file itself).
    devices: the server's names of the devices holding it. version: the content version the
    server declares for it ("" when none); servers that list a name with the same size and
    version hold replicas of it. servers: the addresses of the servers holding it (the replicas,
    in target order; with one server, that server's target).
    """

    name: str
    size: int
    block_size: int
    extents: int
    source: str
    devices: tuple = ()
    version: str = ""
    servers: tuple = ()

    @classmethod
    def from_proto(cls, info, servers=()):
        return cls(name=info.name, size=info.size, block_size=info.block_size,
                   extents=info.extent_count, source=pb.FileSource.Name(info.source),
                   devices=tuple(info.devices), version=info.version, servers=tuple(servers))


def _read_credential(value):
    """A PEM given as bytes, or the path of a file holding it."""
    if value is None or isinstance(value, bytes):
        return value
    with open(os.fspath(value), "rb") as f:
        return f.read()


def _is_loopback(target):
    return _is_loopback_host(target.rsplit(":", 1)[0])


def _is_loopback_host(host):
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Connection:
    """One process's channel and stubs. gRPC channels do not survive fork(): a Client keeps one
    of these per pid and makes a new one when it finds itself in a child."""

    def __init__(self, target, credentials, options):
        if credentials is None:
            self.channel = grpc.insecure_channel(target, options=options)
        else:
            self.channel = grpc.secure_channel(target, credentials, options=options)
        self.stub = pb_grpc.BlockReadStub(self.channel)
        self.pid = os.getpid()
        self._health = None
        # The zero-copy reads' calls: the same methods, answers parsed by _wire (memoryviews).
        self.read_block_raw = self.channel.unary_unary(
            "/blockread.v1.BlockRead/ReadBlock",
            request_serializer=pb.ReadBlockRequest.SerializeToString,
            response_deserializer=_wire.parse_read_block)
        self.read_blocks_raw = self.channel.stream_stream(
            "/blockread.v1.BlockRead/ReadBlocks",
            request_serializer=pb.ReadBlocksRequest.SerializeToString,
            response_deserializer=_wire.parse_read_blocks)

    def health_stub(self):
        if self._health is None:
            self._health = _health_modules()[1].HealthStub(self.channel)
        return self._health


def _health_modules():
    """(health_pb2, health_pb2_grpc) for grpc.health.v1, imported on first use.

    A process's protobuf descriptor pool holds one definition of grpc.health.v1: when
    grpcio-health-checking is installed its modules (grpc_health.v1) are used, so an application
    that imports them too still can; otherwise the package's own (blockread._proto.grpc.health.v1).
    """
    try:
        from grpc_health.v1 import health_pb2, health_pb2_grpc
    except ImportError:
        from blockread._proto.grpc.health.v1 import health_pb2, health_pb2_grpc
    return health_pb2, health_pb2_grpc


class Client:
    """A connection to a blockread server, or to several.

    target: "host:port" (default 127.0.0.1:7420), or several servers: "a:1,b:2", a list
      ["a:1", "b:2"], "dns:///name:port" (every address the name resolves to, resolved by the
      client, one connection each) or "@FILE" (the targets listed in FILE, one per line or
      comma-separated; read again at every resolve). With one "host:port" the Client talks to that
      server alone. Otherwise each read goes to a server that lists its file (the least loaded of
      two replicas), and on UNAVAILABLE to another one; see README "Python client" and
      blockread/_cluster.py.
    token: a bearer token, sent with every call as `authorization: Bearer <token>`.
    ca, cert, key: PEM bytes or file paths. Any of them turns TLS on: `ca` verifies the server
      (the system's roots when None), `cert` and `key` are the client's certificate for mTLS.
    tls: True for TLS with the system's roots and no client certificate; None (default) means
      "TLS if ca, cert or key is given".
    server_name: the name the server's certificate must carry, when it is not the target's host
      (with several servers, dialled by address, the name their certificates share).
    timeout: seconds allowed for each call (read, stat, ls, ... and a whole read_many); None for
      no deadline. Every method also takes its own `timeout=`.
    depth, batch: read_many's default reads in flight on its stream and reads per stream message.
      gRPC Python's cost is per message, so batches are larger than the C++ client's: 128/32 was
      the best of 64/16, 128/32 and 256/64 at both 4 KiB and 128 KiB (bench/python_vs_cpp.sh);
      depth x read size is the memory a stream may hold.
    max_read_bytes: the server's largest read (its --max-read-bytes); only splitting whole files
      into pieces uses it.
    resolve_interval: with several servers, how often (seconds) the targets are resolved again
      and the servers' file lists read again (also at once when a server is lost).

    Thread-safe: any number of threads may call one Client. Fork-safe: a Client made (and used)
    in a parent works in forked children (DataLoader workers), which make their own channels.
    Picklable: the pickle holds the settings, not the connection.
    """

    def __init__(self, target: Union[str, Sequence[str]] = DEFAULT_TARGET, *,
                 token: Optional[str] = None, ca: Any = None, cert: Any = None, key: Any = None,
                 tls: Optional[bool] = None, server_name: Optional[str] = None,
                 timeout: Optional[float] = 10.0, depth: int = 128, batch: int = 32,
                 max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
                 resolve_interval: float = RESOLVE_INTERVAL) -> None:
        spec = TargetSpec(target)  # TypeError, ValueError for a malformed target
        if spec.fixed is None:
            # Several servers: what names them must resolve now (a missing @FILE, a name that
            # does not resolve raise their blockread.Error here), as the C++ client's Connect.
            spec.resolve()
        if (cert is None) != (key is None):
            raise ValueError("cert and key go together (the client's certificate and its key)")
        if depth < 1 or batch < 1:
            raise ValueError("depth and batch must be at least 1")
        self._settings = dict(target=target, token=token, ca=_read_credential(ca),
                              cert=_read_credential(cert), key=_read_credential(key), tls=tls,
                              server_name=server_name, timeout=timeout, depth=depth, batch=batch,
                              max_read_bytes=max_read_bytes, resolve_interval=resolve_interval)
        self._setup()

    def _setup(self):
        s = self._settings
        self._spec = TargetSpec(s["target"])
        # Routed: calls go through a _cluster.Cluster (several servers, or servers that may change).
        self._routed = self._spec.fixed is None
        self.target = self._spec.text if self._routed else self._spec.fixed
        self.resolve_interval = s.get("resolve_interval", RESOLVE_INTERVAL)
        self.timeout = s["timeout"]
        self.depth = s["depth"]
        self.batch = s["batch"]
        self.max_read_bytes = s["max_read_bytes"]
        tls = s["tls"] if s["tls"] is not None else any(
            s[k] is not None for k in ("ca", "cert", "key"))
        self._credentials = None
        if tls:
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=s["ca"], private_key=s["key"], certificate_chain=s["cert"])
        elif s["token"] is not None:
            remote = ([h for h in self._spec.hosts_named() if not _is_loopback_host(h)]
                      if self._routed else [] if _is_loopback(self.target) else [self.target])
            if remote:
                warnings.warn(f"blockread: the token goes to {', '.join(remote)} in plaintext "
                              "(no TLS)", stacklevel=3)
        self._metadata = (("authorization", f"Bearer {s['token']}"),) if s["token"] else None
        self._options = list(_CHANNEL_OPTIONS)
        self._cluster_options = list(_CLUSTER_CHANNEL_OPTIONS)
        if s["server_name"]:
            self._options.append(("grpc.ssl_target_name_override", s["server_name"]))
            self._cluster_options.append(("grpc.ssl_target_name_override", s["server_name"]))
        self._lock = threading.Lock()
        self._connection = None  # one server: this process's _Connection
        self._cluster_state = None  # several: this process's _cluster.Cluster
        # Connections (and Clusters) inherited from a parent process. gRPC's fork handler has
        # closed their channels in the child; they are kept rather than closed a second time when
        # collected.
        self._inherited = []

    def __getstate__(self):
        return dict(self._settings)

    def __setstate__(self, settings):
        self._settings = settings
        self._setup()

    def __repr__(self):
        return f"blockread.Client({self.target!r})"

    def _per_process(self, attr, make):
        """self.<attr> if this process made it, else a new one from make(): gRPC channels do not
        survive fork(), so a forked child (a DataLoader worker) makes its own. The parent's is
        kept in _inherited, never used or closed by the child."""
        current = getattr(self, attr)
        if current is not None and current.pid == os.getpid():
            return current
        with self._lock:
            current = getattr(self, attr)
            if current is None or current.pid != os.getpid():
                if current is not None:
                    self._inherited.append(current)
                current = make()
                setattr(self, attr, current)
            return current

    def _conn(self):
        return self._per_process(
            "_connection", lambda: _Connection(self.target, self._credentials, self._options))

    def _cluster(self):
        """This process's Cluster (routed Clients only)."""
        def make():
            from blockread._cluster import Cluster  # only Clients of several servers need it
            return Cluster(self._spec, self._connect_to, self._metadata,
                           resolve_interval=self.resolve_interval)
        return self._per_process("_cluster_state", make)

    def _connect_to(self, address):
        """A connection to one of several servers (the Cluster's)."""
        return _Connection(address, self._credentials, self._cluster_options)

    @property
    def servers(self):
        """The addresses of the servers this Client uses now, in target order (with one server,
        [target]; with several, resolved again as described in the class docstring)."""
        return self._cluster().servers() if self._routed else [self.target]

    def _only_server(self, server):
        """Checks a `server=` argument of a one-server Client: None or its target."""
        if server is not None and server != self.target:
            raise ValueError(f"server {server!r}: this client's only server is {self.target}")

    def _unary(self, method, request, timeout):
        try:
            return method(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    def _timeout(self, timeout):
        return self.timeout if timeout is _DEFAULT else timeout

    def close(self) -> None:
        """Closes this process's channels. The Client makes new ones if it is used again."""
        with self._lock:
            connection, self._connection = self._connection, None
            cluster, self._cluster_state = self._cluster_state, None
        if connection is not None and connection.pid == os.getpid():
            connection.channel.close()
        if cluster is not None and cluster.pid == os.getpid():
            cluster.close()

    def __del__(self):
        # With GRPC_ENABLE_FORK_SUPPORT, grpcio keeps every channel in a registry until it is
        # closed, so a channel is never collected on its own; one left to a server that went
        # away makes every later fork()ed child exit with status 64 (gRPC cannot shut down in
        # it). Close ours when the Client goes.
        try:
            connection = self._connection
            if connection is not None and connection.pid == os.getpid():
                connection.channel.close()
            cluster = self._cluster_state
            if cluster is not None and cluster.pid == os.getpid():
                cluster.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown, a half-made Client
            pass

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc):
        self.close()

    # --- Reads ---

    def read(self, file: str, offset: int = 0, length: Optional[int] = None, *,
             timeout: Any = _DEFAULT) -> bytes:
        """`length` bytes of `file` from `offset` (default: to the end of the file): fewer when
        the read runs past the end of the file, none at exactly the end.

        Up to max_read_bytes this is one ReadBlock RPC; a longer read is split into pieces of
        max_read_bytes read over one ReadBlocks stream, and joined into one bytes. length=None
        asks the server the file's size first (StatFile). Raises a blockread.Error subclass
        (NotFound, OutOfRange, ...). With several servers: to one replica of `file`, another on
        UNAVAILABLE."""
        if length is None:
            size = self.stat(file, timeout=timeout).size
            if offset > size:
                raise errors.OutOfRange(f"offset {offset} is beyond the end of {file} "
                                        f"(size {size})")
            length = size - offset
            if length == 0:
                return b""
        if length > self.max_read_bytes:
            # Pieces past the end of the file would fail: clip to its size.
            length = min(length, max(0, self.stat(file, timeout=timeout).size - offset))
            if length == 0:  # offset at the end (or past it: the server says OutOfRange)
                return self.read(file, offset, 1, timeout=timeout)
            return b"".join(self.read_many(_split(file, offset, length, self.max_read_bytes),
                                           timeout=timeout))
        if self._routed:
            return self._cluster().read(file, offset, length, self._timeout(timeout))
        request = pb.ReadBlockRequest(file=file, offset=offset, length=length)
        return self._unary(self._conn().stub.ReadBlock, request,
                           self._timeout(timeout)).data

    def read_into(self, file: str, offset: int, buffer: WritableBuffer, *,
                  timeout: Any = _DEFAULT) -> int:
        """Reads `file` from `offset` into `buffer` (a writable C-contiguous buffer: bytearray,
        memoryview, numpy array, mmap), as many bytes as it holds (fewer at the end of the file)
        and returns how many were read. Reads longer than max_read_bytes go in pieces over one
        stream, each copied into its place as it comes.

        Copies left: gRPC's one bytes per response message (at most max_read_bytes, freed once
        copied), and the copy from it into `buffer`; no bytes of the whole read is made. With
        several servers the pieces are routed as read_many's and copied the same way (their
        messages are parsed by protobuf: one more copy each)."""
        return self.read_many_into([(file, offset, buffer)], timeout=timeout)[0]

    def read_many_into(self, reads: Iterable[Tuple[str, int, WritableBuffer]], *,
                       timeout: Any = _DEFAULT, depth: Optional[int] = None,
                       batch: Optional[int] = None) -> List[int]:
        """read_into for every (file, offset, buffer) of `reads`, over one ReadBlocks stream
        (read_many's depth, batch, routing and errors; `.index` is the position in `reads`).
        Returns the number of bytes read into each buffer (fewer than its size at the end of
        its file)."""
        views: List[memoryview] = []
        pieces: List[Read] = []
        owner: List[Tuple[int, int]] = []  # piece -> (read index, offset in its buffer)
        sizes: dict = {}
        for index, (file, offset, buffer) in enumerate(reads):
            view = memoryview(buffer)
            if view.readonly:
                raise TypeError(f"read_many_into item {index}: the buffer is read-only")
            if not view.c_contiguous:
                raise TypeError(f"read_many_into item {index}: the buffer is not C-contiguous")
            view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
            views.append(view)
            length = view.nbytes
            if length > self.max_read_bytes:
                # Pieces past the end of the file would fail: clip to its size (one StatFile
                # per file of a buffer that takes several pieces).
                if file not in sizes:
                    sizes[file] = self.stat(file, timeout=timeout).size
                length = max(1, min(length, sizes[file] - offset))
            for at in range(0, length, self.max_read_bytes):
                pieces.append((file, offset + at, min(self.max_read_bytes, length - at)))
                owner.append((index, at))
        counts = [0] * len(views)
        if not pieces:
            return counts
        timeout = self._timeout(timeout)
        if self._routed:
            results: Iterable[Tuple[int, Any]] = enumerate(self._cluster().read_many(
                pieces, timeout, depth or self.depth, batch or self.batch))
        else:
            results = self._stream(pieces, timeout, depth, batch, raw=True)
        for piece, data in results:
            index, at = owner[piece]
            n = len(data)
            views[index][at:at + n] = data
            counts[index] = max(counts[index], at + n)
        return counts

    def read_many(self, reads: Iterable[Read], *, timeout: Any = _DEFAULT,
                  depth: Optional[int] = None, batch: Optional[int] = None) -> List[bytes]:
        """The bytes of every (file, offset, length) in `reads`, as a list in request order.

        One ReadBlocks stream, `batch` reads to a message, at most `depth` reads in flight (the
        Client's defaults when None). A read that fails raises its error with `.index` set to its
        position in `reads`; the others are abandoned (the stream is cancelled). A failure of the
        stream itself (server unreachable, deadline) raises with `.index` None. `timeout`: the
        whole call's deadline in seconds (default: the Client's timeout).

        With several servers: the reads are split by chosen server, one stream per server at
        once (`depth` and `batch` are each stream's); a server that fails UNAVAILABLE has its
        unanswered reads sent to other replicas. A read no server can take (a file no server
        lists, or only unreachable ones), and a malformed item, raise before anything is sent.
        """
        reads = list(reads)
        if self._routed:
            return self._cluster().read_many(reads, self._timeout(timeout), depth or self.depth,
                                             batch or self.batch)
        results: List[Any] = [None] * len(reads)
        if not reads:
            return results
        for index, data in self._stream(reads, self._timeout(timeout),
                                        depth, batch):
            results[index] = data
        return results

    def read_iter(self, reads: Iterable[Read], *, depth: Optional[int] = None,
                  batch: Optional[int] = None, timeout: Optional[float] = None
                  ) -> Iterator[bytes]:
        """Yields the bytes of each (file, offset, length) of the iterable `reads`, in order.

        Like read_many, over one stream, but lazy: `reads` may be a generator of any length, and
        at most `depth` reads are in flight or waiting to be yielded, so memory stays bounded.
        `timeout` (default None: none) bounds the whole stream. Stopping the iteration early
        cancels the stream.

        With several servers: read_many's routing, `depth` reads at a time, the next `depth`
        sent while the caller takes these (so at most 2 x depth reads are held).
        """
        if self._routed:
            yield from self._cluster().read_iter(reads, timeout, depth or self.depth,
                                                 batch or self.batch)
            return
        for _, data in self._stream(reads, timeout, depth, batch):
            yield data

    def _stream(self, reads, timeout, depth, batch, raw=False):  # one server
        """Yields (index, bytes) in request order; see read_many. raw: (index, memoryview)."""
        stream = _ReadStream(reads, depth or self.depth, batch or self.batch)
        connection = self._conn()
        method = connection.read_blocks_raw if raw else connection.stub.ReadBlocks
        call = method(stream.requests(), timeout=timeout, metadata=self._metadata)
        try:
            yield from stream.results(call)
        finally:
            stream.stop()
            call.cancel()  # a no-op once the stream has ended

    # --- Files and the server ---

    def stat(self, file: str, *, timeout: Any = _DEFAULT) -> FileInfo:
        """The FileInfo of `file`. Raises NotFound for an unknown name. With several servers, one
        replica answers; `servers` lists them all."""
        if self._routed:
            return self._cluster().stat(file, self._timeout(timeout))
        return FileInfo.from_proto(self._unary(self._conn().stub.StatFile,
                                               pb.StatFileRequest(file=file),
                                               self._timeout(timeout)), servers=(self.target,))

    def ls(self, prefix: str = "", *, page_size: int = 1000,
           timeout: Any = _DEFAULT) -> List[FileInfo]:
        """Every served file whose name starts with `prefix` ("ds/v/" for what a directory
        holds; empty: every file), in name order, as FileInfo (all pages; `timeout` is per page).

        With several servers: every server is listed now, and each name appears once, with the
        servers holding it (`servers`; see FileInfo). A server backed off after failing is not
        asked and keeps what it listed last; one never listed adds nothing. Raises Unavailable
        when no server has ever been listed.
        """
        if self._routed:
            return self._cluster().ls(page_size, self._timeout(timeout), prefix)
        files: List[FileInfo] = []
        token = ""
        while True:
            response = self._unary(self._conn().stub.ListFiles,
                                   pb.ListFilesRequest(page_size=page_size, page_token=token,
                                                       prefix=prefix),
                                   self._timeout(timeout))
            files.extend(FileInfo.from_proto(info, servers=(self.target,))
                         for info in response.files)
            token = response.next_page_token
            if not token:
                return files

    def stats(self, *, server: Optional[str] = None, timeout: Any = _DEFAULT) -> Any:
        """The server's statistics: a blockread.Stats, a frozen dataclass of GetStatsResponse's
        fields (per path, per fallback reason, per device, per worker; enums as names; see
        proto/blockread/v1/blockread.proto and blockread/_messages.py).

        server: the address of one of the Client's servers (`servers`), or None. With several
        servers and server=None: {address: Stats} for every server, asked at once; a
        server that could not be asked maps to its blockread.Error (returned, not raised).
        """
        timeout = self._timeout(timeout)
        if self._routed:
            return self._cluster().each_server(
                lambda c: _messages.to_dataclass(
                    self._unary(c.stub.GetStats, pb.GetStatsRequest(), timeout)), server)
        self._only_server(server)
        return _messages.to_dataclass(
            self._unary(self._conn().stub.GetStats, pb.GetStatsRequest(), timeout))

    def explain(self, file: str, offset: int, length: int, *, timeout: Any = _DEFAULT) -> Any:
        """Which extents the range touches and which path a read of it would take, and why: a
        blockread.Explanation, a frozen dataclass of ExplainResponse's fields (`.path` "SIMPLE"
        or "GENERIC", `.fallback` a FallbackReason name, `.reason`, `.file`, `.extents`).
        With several servers, a replica of `file` answers."""
        if self._routed:
            return _messages.to_dataclass(
                self._cluster().explain(file, offset, length, self._timeout(timeout)))
        return _messages.to_dataclass(self._unary(
            self._conn().stub.Explain, pb.ExplainRequest(file=file, offset=offset, length=length),
            self._timeout(timeout)))

    def health(self, service: str = "", *, server: Optional[str] = None,
               timeout: Any = _DEFAULT) -> Any:
        """The grpc.health.v1 status of `service` ("" = the server) as a name: "SERVING", ...

        server: as for stats(); with several servers and server=None, {address: name, or the
        blockread.Error of a server that could not be asked}.
        """
        health_pb2 = _health_modules()[0]
        request = health_pb2.HealthCheckRequest(service=service)
        timeout = self._timeout(timeout)

        def check(connection):
            response = self._unary(connection.health_stub().Check, request, timeout)
            return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        if self._routed:
            return self._cluster().each_server(check, server)
        self._only_server(server)
        return check(self._conn())


def _split(file: str, offset: int, length: int, piece: int) -> List[Read]:
    """The reads of at most `piece` bytes that make up (file, offset, length)."""
    return [(file, offset + at, min(piece, length - at)) for at in range(0, length, piece)]


class _ReadStream:
    """The bookkeeping of one ReadBlocks stream.

    gRPC's own thread pulls request messages from requests() while the caller's thread consumes
    results(). Item i is sent only once every item before i - depth has been handed to the caller,
    which bounds both the reads in flight and the results waiting for an earlier one.
    """

    def __init__(self, reads, depth, batch, on_sent=None):
        """on_sent(first): called as each request message goes, with its first item's index."""
        self._reads = iter(reads)
        self._on_sent = on_sent
        self._depth = depth
        self._batch = min(batch, depth)
        self._cond = threading.Condition()
        self._released = 0    # items handed to the caller
        self._end = None      # the number of items, once the input is exhausted or failed
        self._stopped = False
        self._input_error = None  # raised to the caller once the items before it are handed

    def stop(self):
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _fail_input(self, index, error):
        with self._cond:
            self._input_error = error
            self._end = index
            self._cond.notify_all()

    def requests(self):
        index = 0
        while True:
            with self._cond:
                # Wait for room for a full batch: depth >= batch, so there always is once the
                # caller has taken everything sent.
                while not self._stopped and self._released + self._depth - index < self._batch:
                    self._cond.wait()
                if self._stopped:
                    return
            request = pb.ReadBlocksRequest()
            failed = False
            for _ in range(self._batch):
                try:
                    item = next(self._reads, None)
                except Exception as e:  # noqa: BLE001 - the caller's iterable failed: theirs
                    self._fail_input(index, e)
                    failed = True
                    break
                if item is None:
                    break
                try:
                    file, offset, length = item
                    request.reads.add(tag=index, file=file, offset=offset, length=length)
                except (TypeError, ValueError) as e:
                    self._fail_input(index, errors.InvalidArgument(
                        f"read {item!r}: {e}; want (file, offset, length)", index=index))
                    failed = True
                    break
                index += 1
            last = failed or len(request.reads) < self._batch
            if last and not failed:
                with self._cond:
                    self._end = index
                    self._cond.notify_all()
            if request.reads:
                if self._on_sent is not None:
                    self._on_sent(index - len(request.reads))
                yield request
            if last:
                return

    def results(self, call, retry_codes=()):
        """Yields (index, bytes) in request order; raises the first failed item's error, except
        that an item failed with a code in `retry_codes` (numbers) is yielded as (index, its
        blockread.Error), for the caller to send elsewhere."""
        pending = {}
        next_index = 0
        try:
            for response in call:
                for result in response.results:
                    if result.code != 0:
                        error = errors.from_code(result.code, result.error_message,
                                                 index=result.tag)
                        if result.code not in retry_codes:
                            raise error
                        pending[result.tag] = error
                        continue
                    pending[result.tag] = result.data
                if next_index in pending:
                    while next_index in pending:
                        yield next_index, pending.pop(next_index)
                        next_index += 1
                    with self._cond:
                        self._released = next_index
                        self._cond.notify_all()
                with self._cond:
                    end, input_error = self._end, self._input_error
                if end is not None and next_index >= end:
                    if input_error is not None:
                        raise input_error
                    # Every read answered: let the server end the stream (it does once it has
                    # seen the half-close), so the call finishes OK rather than cancelled.
                    for _ in call:
                        pass
                    return
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        with self._cond:
            end, input_error = self._end, self._input_error
        if end is not None and next_index >= end:
            if input_error is not None:
                raise input_error
            return
        expected = end if end is not None else "more"
        raise errors.Error(f"the server ended the stream after {next_index} of {expected} reads",
                           code=grpc.StatusCode.INTERNAL)

