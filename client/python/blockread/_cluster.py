"""A Client's several servers: membership, the file table, and calls routed to replicas.

blockread.Client hands every call to a Cluster when its target may name more than one server
(several addresses, "dns:///name:port", "@FILE"). It behaves as the C++ ClusterClient does
(client/cluster_client.h, README "Many servers"); the rules themselves are in _routing.py.

- Membership. The targets are resolved again every `resolve_interval` seconds (10) and at the
  next call after a server is lost. Each server that is not backed off is then asked for its
  ListFiles (every page); the file table is rebuilt from what each server last listed. A failed
  resolve keeps the servers known.
- read, stat, explain go to one replica of their file (least_loaded_of_two). On UNAVAILABLE the
  call goes to another replica within the caller's timeout; any other error is the answer and
  raised. A server that answered NOT_FOUND for a file it had listed makes the call list every
  server again (once per call) and try the others. A server that could not be reached (its
  channel is not connected after the failure) is backed off and gets no call until its time is
  up. A file that only unreachable servers hold raises Unavailable naming it; a file no server
  lists raises NotFound only when every server answered its ListFiles.
- read_many (a _Scatter) splits its reads by chosen server (spread()) and runs one ReadBlocks
  stream per server at once, each on a thread of its own; a stream that fails UNAVAILABLE hands
  its unanswered reads to the other replicas, as does a read the server answers UNAVAILABLE (its
  device is gone). A read's own error (DATA_LOSS, OUT_OF_RANGE, ...) cancels the other streams
  and is raised with `.index`, its position in the caller's list. read_iter does the same for
  chunks of `depth` reads, one chunk ahead of the caller.
- stats and health ask one server, or every server at once.

Thread-safety: any number of threads may use a Cluster. `_lock` guards the membership, the table
and each _Server's listing and call count; a ServerHealth has its own lock; a _Scatter's state is
guarded by its condition. No lock is held during an RPC. Fork: a Cluster and its channels belong to
the process that made it (gRPC channels do not survive fork()); Client makes a new one in a child.
"""

import collections
import concurrent.futures
import os
import random
import threading
import time

import grpc

from blockread import errors
from blockread._client import FileInfo, _ReadStream
from blockread._proto.blockread.v1 import blockread_pb2 as pb
from blockread._routing import (
    LIST_TIMEOUT, RESOLVE_INTERVAL, BackoffPolicy, ServerHealth, build_replica_table, pick_server,
    spread)

_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
_NOT_FOUND = grpc.StatusCode.NOT_FOUND
# A ReadBlocks item answered with one of these is sent to another replica (see _Scatter).
_ITEM_RETRY_CODES = frozenset(code.value[0] for code in (_UNAVAILABLE, _NOT_FOUND))
_READY = grpc.ChannelConnectivity.READY.value[0]
_LIST_PAGE_SIZE = 1000


class _Server:
    """One server as this process knows it: its address, channel and health, and what it listed."""

    def __init__(self, address, connection, health):
        self.address = address
        self.connection = connection
        self.health = health
        # Guarded by Cluster._lock:
        self.files = []          # FileInfo messages, as last listed
        self.listed = False      # its list was read at least once
        self.list_error = None   # why its last listing failed (None: it did not)
        self.calls = 0           # calls (or streams) on its channel now
        self.retired = False     # the targets no longer name it: closed once its calls end

    def connected(self):
        """Whether its channel is connected (gRPC's READY). A failed call over a live connection
        is the server's answer (a device of it gone); on any other state the server could not be
        reached. grpcio has no public synchronous way to ask: Channel.subscribe starts a polling
        thread per channel, and this call is the one that thread makes."""
        try:
            return self.connection.channel._channel.check_connectivity_state(False) == _READY
        except Exception:  # noqa: BLE001 - another grpcio: count it unreachable, back it off
            return False


def _remaining(deadline):
    """Seconds left until `deadline` (a time.monotonic() value; None: no deadline)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _deadline(timeout):
    return None if timeout is None else time.monotonic() + timeout


class Cluster:
    """Every call of a Client with several servers (see the module docstring)."""

    def __init__(self, spec, connect, metadata, resolve_interval=RESOLVE_INTERVAL,
                 backoff=BackoffPolicy()):
        """spec: a _routing.TargetSpec. connect(address): a _client._Connection to it.
        metadata: what every call sends (the token)."""
        self.pid = os.getpid()
        self._spec = spec
        self._connect = connect
        self.metadata = metadata
        self._resolve_interval = resolve_interval
        self._backoff = backoff
        self._rng = random.Random()
        self._refresh_lock = threading.Lock()  # one refresh at a time
        self._lock = threading.Lock()          # guards what follows
        self._servers = []                     # in target order
        self._table = {}                       # name -> _routing.Replicas
        self._retired = []                     # servers dropped with calls still open
        self._next_refresh = 0.0               # time.monotonic(); 0: refresh at the first call

    # ---- Membership and the table ----------------------------------------------------------

    def servers(self):
        """The addresses now known, in target order."""
        self.maybe_refresh()
        with self._lock:
            return [s.address for s in self._servers]

    def maybe_refresh(self, force=False, list_timeout=LIST_TIMEOUT, page_size=_LIST_PAGE_SIZE):
        """Resolves the targets and lists the servers when it is due (or `force`). One thread at
        a time refreshes; unforced callers meanwhile go on with the table they have, forced ones
        wait for the refresh under way and use its table."""
        if not force and time.monotonic() < self._next_refresh:
            return
        if not self._refresh_lock.acquire(blocking=False):
            if force:
                with self._refresh_lock:
                    pass
            return
        try:
            self._refresh(list_timeout, page_size)
        finally:
            self._refresh_lock.release()

    def _refresh(self, list_timeout, page_size):
        now = time.monotonic()
        with self._lock:
            self._next_refresh = now + self._resolve_interval
            known = list(self._servers)
        try:
            addresses = self._spec.resolve()
        except errors.Error:
            if not known:
                raise  # nothing to go on with: the first resolve of this process failed
            addresses = [s.address for s in known]  # keep the servers it has
        by_address = {s.address: s for s in known}
        servers = [by_address.get(a) or _Server(a, self._connect(a),
                                                ServerHealth(self._backoff, self._rng))
                   for a in addresses]
        named = set(addresses)
        gone = [s for s in known if s.address not in named]
        # A backed-off server is not asked; it keeps what it listed.
        asked = [s for s in servers if s.health.available(now)]
        listings = self._list_each(asked, list_timeout, page_size)
        with self._lock:
            for server, (files, error) in zip(asked, listings):
                if error is None:
                    server.files, server.listed, server.list_error = files, True, None
                    server.health.succeeded()
                else:
                    server.list_error = error
                    server.health.failed()
            self._servers = servers
            self._table = build_replica_table(servers, lambda s: s.files)
            for server in gone:
                server.retired = True
            retired = self._retired + gone
            self._retired = [s for s in retired if s.calls > 0]
            idle = [s for s in retired if s.calls == 0]
        for server in idle:
            server.connection.channel.close()

    def _list_each(self, servers, timeout, page_size):
        """[(files, None) or (None, error text)] for each of `servers`, asked at once."""
        if len(servers) <= 1:
            return [self._list(s, timeout, page_size) for s in servers]
        with concurrent.futures.ThreadPoolExecutor(min(len(servers), 16)) as pool:
            return list(pool.map(lambda s: self._list(s, timeout, page_size), servers))

    def _list(self, server, timeout, page_size):
        files, token = [], ""
        try:
            while True:
                response = server.connection.stub.ListFiles(
                    pb.ListFilesRequest(page_size=page_size, page_token=token), timeout=timeout,
                    metadata=self.metadata)
                files.extend(response.files)
                token = response.next_page_token
                if not token:
                    return files, None
        except grpc.RpcError as e:
            return None, str(errors.from_rpc_error(e))

    def lost(self, server):
        """`server` could not be reached: back it off, and resolve again at the next call."""
        server.health.failed()
        with self._lock:
            self._next_refresh = 0.0

    # ---- Choosing a server -------------------------------------------------------------------

    def candidates(self, file, excluded):
        """(replicas of `file` not in `excluded` and not backed off, whether the table has it)."""
        with self._lock:
            replicas = self._table.get(file)
            if replicas is None:
                return [], False
            now = time.monotonic()
            return [s for s in replicas.servers
                    if s not in excluded and s.health.available(now)], True

    def acquire(self, server, reads):
        """`reads` are about to be sent to `server`."""
        server.health.add_outstanding(reads)
        with self._lock:
            server.calls += 1

    def release(self, server, unanswered=0):
        """A call to `server` ended; `unanswered` of its reads are still counted outstanding."""
        if unanswered:
            server.health.add_outstanding(-unanswered)
        with self._lock:
            server.calls -= 1
            close = server.retired and server.calls == 0 and server in self._retired
            if close:
                self._retired.remove(server)
        if close:
            server.connection.channel.close()

    def unroutable(self, file, known, last_error=None, index=None):
        """The error for a read of `file` that no server can take now (see the module docstring).
        `last_error`: the blockread.Error that ruled out the last replica tried, if any."""
        with self._lock:
            replicas = self._table.get(file)
            servers = list(self._servers)
        if known and replicas is not None:
            holders = [s.address for s in replicas.servers]
            why = f"; last error: {last_error}" if last_error else ""
            return errors.Unavailable(
                f"file '{file}': none of the servers holding it ({len(holders)} of "
                f"{len(servers)}: {', '.join(holders)}) could be asked now{why}", index=index)
        unasked = [s for s in servers if not s.listed or s.health.failures > 0]
        if not unasked:
            return errors.NotFound(f"file '{file}' is not served by any of the {len(servers)} "
                                   "servers", index=index)
        reasons = ", ".join(f"{s.address}: {s.list_error}" if s.list_error else s.address
                            for s in unasked)
        return errors.Unavailable(
            f"file '{file}' is not served by any reachable server; {len(unasked)} of "
            f"{len(servers)} could not be asked ({reasons})", index=index)

    # ---- Calls about one file -----------------------------------------------------------------

    def call(self, file, invoke, timeout):
        """invoke(connection, seconds) -> response on replicas of `file` until one answers or
        fails with anything but UNAVAILABLE, or the replicas or `timeout` run out."""
        deadline = _deadline(timeout)
        self.maybe_refresh()
        tried, relisted, last = set(), False, None
        while True:
            candidates, known = self.candidates(file, tried)
            if not candidates:
                if not known and not relisted:  # a file new to the table, or no table yet
                    relisted = True
                    self.maybe_refresh(force=True)
                    continue
                raise self.unroutable(file, known, last)
            server = pick_server(candidates, self._rng)
            self.acquire(server, 1)
            sent = time.monotonic()
            try:
                response = invoke(server.connection, _remaining(deadline))
                error = None
            except grpc.RpcError as e:
                error = errors.from_rpc_error(e)
            finally:
                self.release(server, unanswered=1)
            if error is None:
                answered = time.monotonic()
                server.health.answered(answered - sent, answered)
                server.health.succeeded()
                return response
            tried.add(server)
            if error.code == _NOT_FOUND and not relisted:
                # It listed the file and no longer has it: list them all again, try the others.
                relisted = True
                self.maybe_refresh(force=True)
                continue
            if error.code != _UNAVAILABLE:
                raise error
            if not server.connected():
                self.lost(server)
            last = error
            if deadline is not None and time.monotonic() >= deadline:
                raise error

    def holders(self, file):
        with self._lock:
            replicas = self._table.get(file)
            return tuple(s.address for s in replicas.servers) if replicas else ()

    def read(self, file, offset, length, timeout):
        request = pb.ReadBlockRequest(file=file, offset=offset, length=length)
        return self.call(file, lambda c, t: c.stub.ReadBlock(request, timeout=t,
                                                             metadata=self.metadata),
                         timeout).data

    def stat(self, file, timeout):
        request = pb.StatFileRequest(file=file)
        info = self.call(file, lambda c, t: c.stub.StatFile(request, timeout=t,
                                                            metadata=self.metadata), timeout)
        return FileInfo.from_proto(info, servers=self.holders(file))

    def explain(self, file, offset, length, timeout):
        request = pb.ExplainRequest(file=file, offset=offset, length=length)
        return self.call(file, lambda c, t: c.stub.Explain(request, timeout=t,
                                                           metadata=self.metadata), timeout)

    # ---- Calls about every file or server ----------------------------------------------------

    def ls(self, page_size, timeout, prefix=""):
        """The merged table's names that start with `prefix`, in name order, listed afresh
        (every server, every page)."""
        self.maybe_refresh(force=True, list_timeout=timeout, page_size=page_size)
        with self._lock:
            if not any(s.listed for s in self._servers):
                reasons = ", ".join(f"{s.address}: {s.list_error}" if s.list_error else s.address
                                    for s in self._servers)
                raise errors.Unavailable(f"no server could be listed ({reasons})")
            return [FileInfo.from_proto(r.info, servers=tuple(s.address for s in r.servers))
                    for name, r in sorted(self._table.items()) if name.startswith(prefix)]

    def each_server(self, ask, server):
        """ask(connection) on `server` (an address; its errors raised), or, when None, on every
        server at once: {address: answer, or the blockread.Error it failed with}."""
        self.maybe_refresh()
        with self._lock:
            servers = list(self._servers)
        if server is not None:
            match = [s for s in servers if s.address == server]
            if not match:
                self.maybe_refresh(force=True)
                with self._lock:
                    match = [s for s in self._servers if s.address == server]
            if not match:
                raise ValueError(f"server {server!r} is not one of this client's servers "
                                 f"({', '.join(s.address for s in servers)})")
            return ask(match[0].connection)

        def answer(s):
            try:
                return ask(s.connection)
            except errors.Error as e:
                return e
        with concurrent.futures.ThreadPoolExecutor(max(1, min(len(servers), 16))) as pool:
            return dict(zip([s.address for s in servers], pool.map(answer, servers)))

    # ---- Many reads ---------------------------------------------------------------------------

    def read_many(self, reads, timeout, depth, batch):
        """read_many's list over every server (see _Scatter); `reads` is a list."""
        items, error = _checked(reads, 0, len(reads))
        if error is not None:
            raise error  # before anything is sent: a malformed item is the caller's mistake
        if not items:
            return []
        self.maybe_refresh()
        scatter = _Scatter(self, items, 0, _deadline(timeout), depth, batch)
        return scatter.start().wait()

    def read_iter(self, reads, timeout, depth, batch):
        """read_iter's generator: chunks of `depth` reads, each a _Scatter, the next one sent
        while the caller takes the one before (at most 2 x depth reads held)."""
        deadline = _deadline(timeout)
        reads = iter(reads)
        position = 0
        ahead = collections.deque()  # started chunks, oldest first
        try:
            while True:
                items, end_error = _checked(reads, position, depth)
                if items:
                    self.maybe_refresh()
                    ahead.append(_Scatter(self, items, position, deadline, depth, batch).start())
                    position += len(items)
                exhausted = end_error is not None or len(items) < depth
                while ahead and (len(ahead) > 1 or exhausted):
                    yield from ahead.popleft().wait()
                if exhausted:
                    if end_error is not None:
                        raise end_error
                    return
        finally:
            for scatter in ahead:
                scatter.cancel()

    def close(self):
        with self._lock:
            servers = self._servers + self._retired
            self._servers, self._retired, self._table = [], [], {}
            self._next_refresh = 0.0
        for server in servers:
            server.connection.channel.close()


def _checked(reads, first_position, count):
    """Up to `count` (file, offset, length) items taken from the iterator or list `reads`, and
    the error that ends them (None when none did): the caller's iterable failing (its own
    exception), or a malformed item (InvalidArgument with `.index`, counting from
    `first_position`). Range and type errors of offset and length are found when the request
    message is built, in _ReadStream."""
    items = []
    source = iter(reads)
    for k in range(count):
        try:
            item = next(source)
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001 - the caller's iterable failed: theirs to see
            return items, e
        try:
            file, offset, length = item
            if not isinstance(file, str):
                raise TypeError(f"file {file!r} is not a str")
        except (TypeError, ValueError) as e:
            return items, errors.InvalidArgument(
                f"read {item!r}: {e}; want (file, offset, length)", index=first_position + k)
        items.append((file, offset, length))
    return items, None


class _Scatter:
    """One read_many (or one read_iter chunk) over several servers.

    start() groups the reads by chosen server and hands each group to a thread that runs one
    ReadBlocks stream (a _ReadStream) to its server. A stream that fails UNAVAILABLE, and a read
    answered UNAVAILABLE or NOT_FOUND, go back to _dispatch for the other replicas (NOT_FOUND:
    once per read, after listing the servers again once per call); the thread that saw the
    failure does it. wait() returns the bytes in request order once every read is answered, or
    raises the first error that is the call's answer (cancelling the streams still open).
    `self._cond` guards the state below it; results[i] is written by one thread only.
    """

    def __init__(self, cluster, items, base, deadline, depth, batch):
        self._cluster = cluster
        self._items = items
        self._base = base              # position of items[0] in the caller's reads (for .index)
        self._deadline = deadline
        self._depth, self._batch = depth, batch
        self._rng = random.Random()
        self.results = [None] * len(items)
        self._cond = threading.Condition()
        self._running = 0              # stream threads not finished
        self._error = None             # the call's answer, once one failed
        self._calls = set()            # open streams, cancelled on an error
        self._failed_on = {}           # item -> servers it failed on (not tried again)
        self._not_found = set()        # items answered NOT_FOUND once already
        self._relisted = False

    def start(self):
        self._dispatch(range(len(self._items)))
        return self

    def wait(self):
        with self._cond:
            while self._running and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise self._error
        return self.results

    def cancel(self):
        self._fail(errors.Error("read_iter stopped", code=grpc.StatusCode.CANCELLED))

    def _fail(self, error):
        with self._cond:
            if self._error is not None:
                return
            self._error = error
            calls = list(self._calls)
            self._cond.notify_all()
        for call in calls:
            call.cancel()

    def _relist_once(self):
        with self._cond:
            if self._relisted:
                return False
            self._relisted = True
        self._cluster.maybe_refresh(force=True)
        return True

    def _dispatch(self, indexes, last_error=None):
        """Sends the reads `indexes` to servers: a stream thread per server chosen."""
        by_route = {}  # (file, servers ruled out) -> items
        with self._cond:
            for i in indexes:
                key = (self._items[i][0], frozenset(self._failed_on.get(i, ())))
                by_route.setdefault(key, []).append(i)
        shares = {}  # server -> items, in request order
        for (file, excluded), wanted in by_route.items():
            candidates, known = self._cluster.candidates(file, excluded)
            if not candidates and not known and self._relist_once():
                candidates, known = self._cluster.candidates(file, excluded)
            if not candidates:
                self._fail(self._cluster.unroutable(file, known, last_error,
                                                    index=self._base + wanted[0]))
                return
            for i, server in zip(wanted, spread(len(wanted), candidates, self._rng)):
                shares.setdefault(server, []).append(i)
        for server, share in shares.items():
            share.sort()
            with self._cond:
                if self._error is not None:
                    return
                self._running += 1
            self._cluster.acquire(server, len(share))
            threading.Thread(target=self._stream, args=(server, share), daemon=True,
                             name=f"blockread read_many {server.address}").start()

    def _stream(self, server, share):
        """A stream thread: reads `share` from `server`, then sends what failed over elsewhere."""
        try:
            retry = self._read_share(server, share)
            if retry:
                self._retry(server, retry)
        except Exception as e:  # noqa: BLE001 - e.g. the Client closed meanwhile: the caller's
            self._fail(e)
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    def _read_share(self, server, share):
        """One ReadBlocks stream of `share` to `server`. Returns [(item, error)] to send to
        another replica; an error that is the call's answer goes to _fail."""
        retry = []     # (item, error)
        answered = 0   # share[:answered] are answered (or in `retry`)
        sent_at = {}   # first item of each request message (in share) -> when it was sent
        stream = _ReadStream([self._items[i] for i in share], self._depth, self._batch,
                             on_sent=lambda first: sent_at.__setitem__(first, time.monotonic()))
        call = None
        try:
            call = server.connection.stub.ReadBlocks(
                stream.requests(), timeout=_remaining(self._deadline),
                metadata=self._cluster.metadata)
            with self._cond:
                if self._error is not None:
                    return []
                self._calls.add(call)
            for local, outcome in stream.results(call, retry_codes=_ITEM_RETRY_CODES):
                answered = local + 1
                server.health.add_outstanding(-1)
                if isinstance(outcome, errors.Error):
                    retry.append((share[local], outcome))
                    continue
                self.results[share[local]] = outcome
                sent = sent_at.pop(local, None)
                if sent is not None:  # a latency sample per request message
                    server.health.answered(time.monotonic() - sent)
            server.health.succeeded()
        except errors.Error as e:
            if e.index is not None:  # a read's own error (or a malformed one): the answer
                e.index = self._base + share[e.index]
                self._fail(e)
            elif e.code == _UNAVAILABLE:
                if not server.connected():
                    self._cluster.lost(server)
                retry += [(i, e) for i in share[answered:]]
            else:
                self._fail(e)  # DEADLINE_EXCEEDED, a stream cut short, ...
        finally:
            stream.stop()
            if call is not None:
                call.cancel()  # a no-op once the stream has ended
                with self._cond:
                    self._calls.discard(call)
            self._cluster.release(server, unanswered=len(share) - answered)
        return retry

    def _retry(self, server, retry):
        """Sends reads that `server` failed to the other replicas of their files."""
        with self._cond:
            if self._error is not None:
                return
            for i, _ in retry:
                self._failed_on.setdefault(i, set()).add(server)
            not_found = [i for i, e in retry if e.code == _NOT_FOUND]
            twice = [i for i in not_found if i in self._not_found]
            self._not_found.update(not_found)
        if twice:  # NOT_FOUND from a second server too: the answer
            error = dict(retry)[twice[0]]
            self._fail(errors.NotFound(error.message, index=self._base + twice[0]))
            return
        if not_found:
            self._relist_once()
        last = retry[-1][1]
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self._fail(errors.from_code(last.code, last.message))
            return
        self._dispatch([i for i, _ in retry], last_error=last)
