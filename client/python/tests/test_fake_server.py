"""Every status code and the client's side of TLS, against a small gRPC server written here.

DATA_LOSS, RESOURCE_EXHAUSTED and FAILED_PRECONDITION need device faults to appear from the real
server (test_security.py covers its TLS, tokens, PERMISSION_DENIED and UNAUTHENTICATED). This server speaks the same generated BlockRead service (a real gRPC server, real TLS
handshakes over 127.0.0.1) and answers each status code on demand, so the client's side is
tested now: the mapping of every code to its exception, `authorization: Bearer` metadata on
every call, TLS with a CA, mTLS with a client certificate, and the target name override.
"""

import concurrent.futures
import shutil
import subprocess
import warnings

import grpc
import pytest

import blockread
from blockread._proto.blockread.v1 import blockread_pb2 as pb
from blockread._proto.blockread.v1 import blockread_pb2_grpc as pb_grpc

# A file named "code:NAME" fails with that status code.
CODE_PREFIX = "code:"


class FakeBlockRead(pb_grpc.BlockReadServicer):
    def __init__(self, token=None):
        self.token = token
        self.seen = []  # (method, metadata dict, peer identity)

    def _enter(self, method, context):
        metadata = dict(context.invocation_metadata())
        identity = context.peer_identities()
        self.seen.append((method, metadata, identity))
        if self.token is not None and metadata.get("authorization") != f"Bearer {self.token}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "fake: no valid bearer token")

    @staticmethod
    def _code(file):
        if file.startswith(CODE_PREFIX):
            return grpc.StatusCode[file[len(CODE_PREFIX):]]
        return None

    def ReadBlock(self, request, context):
        self._enter("ReadBlock", context)
        code = self._code(request.file)
        if code is not None:
            context.abort(code, f"fake {code.name} for {request.file}")
        return pb.ReadBlockResponse(data=b"x" * request.length)

    def ReadBlocks(self, request_iterator, context):
        self._enter("ReadBlocks", context)
        for request in request_iterator:
            response = pb.ReadBlocksResponse()
            for item in request.reads:
                code = self._code(item.file)
                if code is not None:
                    response.results.add(tag=item.tag, code=code.value[0],
                                         error_message=f"fake {code.name} for {item.file}")
                else:
                    response.results.add(tag=item.tag, data=b"y" * item.length)
            yield response

    def StatFile(self, request, context):
        self._enter("StatFile", context)
        code = self._code(request.file)
        if code is not None:
            context.abort(code, f"fake {code.name} for {request.file}")
        return pb.FileInfo(name=request.file, size=1, block_size=512, extent_count=1,
                           source=pb.FIEMAP)

    def ListFiles(self, request, context):
        self._enter("ListFiles", context)
        return pb.ListFilesResponse(files=[pb.FileInfo(name="a", size=1)])


def start(servicer, credentials=None):
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_BlockReadServicer_to_server(servicer, server)
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, port


@pytest.fixture(scope="module")
def fake():
    servicer = FakeBlockRead()
    server, port = start(servicer)
    servicer.target = f"127.0.0.1:{port}"
    yield servicer
    server.stop(None)


ERRORS = [(blockread.NotFound, "NOT_FOUND"), (blockread.OutOfRange, "OUT_OF_RANGE"),
          (blockread.InvalidArgument, "INVALID_ARGUMENT"),
          (blockread.PermissionDenied, "PERMISSION_DENIED"),
          (blockread.Unauthenticated, "UNAUTHENTICATED"), (blockread.Unavailable, "UNAVAILABLE"),
          (blockread.DataLoss, "DATA_LOSS"), (blockread.ResourceExhausted, "RESOURCE_EXHAUSTED"),
          (blockread.DeadlineExceeded, "DEADLINE_EXCEEDED"),
          (blockread.FailedPrecondition, "FAILED_PRECONDITION"),
          # Codes without a class of their own are a plain blockread.Error with the code.
          (blockread.Error, "INTERNAL"), (blockread.Error, "ABORTED")]


@pytest.mark.parametrize("cls,name", ERRORS)
def test_every_code_has_its_exception(fake, cls, name):
    code = grpc.StatusCode[name]
    file = CODE_PREFIX + name
    with blockread.Client(fake.target) as c:
        for call in (lambda: c.read(file, 0, 1), lambda: c.stat(file)):
            with pytest.raises(blockread.Error) as e:
                call()
            assert type(e.value) is cls
            assert e.value.code == code
            assert e.value.message == f"fake {name} for {file}"
            assert e.value.index is None
            assert not isinstance(e.value, grpc.RpcError)
        with pytest.raises(blockread.Error) as e:
            c.read_many([("ok", 0, 3)] * 3 + [(file, 0, 1)])
        assert type(e.value) is cls
        assert e.value.code == code
        assert e.value.index == 3
        assert c.read_many([("ok", 0, 3)] * 3) == [b"yyy"] * 3  # the client carries on


def test_token_reaches_the_server_on_every_call(fake):
    with blockread.Client(fake.target, token="s3cret") as c:
        fake.seen.clear()
        c.read("ok", 0, 1)
        c.read_many([("ok", 0, 1)])
        c.stat("ok")
        c.ls()
        assert [m for m, _, _ in fake.seen] == ["ReadBlock", "ReadBlocks", "StatFile",
                                                "ListFiles"]
        assert all(md.get("authorization") == "Bearer s3cret" for _, md, _ in fake.seen)
    with blockread.Client(fake.target) as c:
        fake.seen.clear()
        c.read("ok", 0, 1)
        assert "authorization" not in fake.seen[0][1]


def test_wrong_token_is_unauthenticated():
    servicer = FakeBlockRead(token="right")
    server, port = start(servicer)
    try:
        with blockread.Client(f"127.0.0.1:{port}", token="wrong") as c:
            with pytest.raises(blockread.Unauthenticated):
                c.read("ok", 0, 1)
            with pytest.raises(blockread.Unauthenticated) as e:
                c.read_many([("ok", 0, 1)])
            assert e.value.index is None  # the stream's own status, not an item's
        with blockread.Client(f"127.0.0.1:{port}", token="right") as c:
            assert c.read("ok", 0, 2) == b"xx"
    finally:
        server.stop(None)


def test_token_in_plaintext_to_another_host_warns():
    with pytest.warns(UserWarning, match="plaintext"):
        blockread.Client("192.0.2.1:7420", token="t")  # no connection is made here
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        blockread.Client("127.0.0.1:7420", token="t")
        blockread.Client("localhost:7420", token="t")


# --- TLS ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1/localhost/blockread.test, a client certificate,
    and a second CA that signed nothing here."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl (Debian package openssl) is needed to make test certificates")
    d = tmp_path_factory.mktemp("pki")

    def run(*args):
        subprocess.run([openssl, *args], cwd=d, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            f"/CN=blockread test {ca}", "-keyout", f"{ca}.key", "-out", f"{ca}.pem")
    for name, san in (("server", "IP:127.0.0.1,DNS:localhost,DNS:blockread.test"),
                      ("client", "DNS:trainer-7")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout",
            f"{name}.key", "-out", f"{name}.csr")
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem")
    return d


def tls_server(pki, require_client_auth):
    credentials = grpc.ssl_server_credentials(
        [((pki / "server.key").read_bytes(), (pki / "server.pem").read_bytes())],
        root_certificates=(pki / "ca.pem").read_bytes(),
        require_client_auth=require_client_auth)
    servicer = FakeBlockRead()
    server, port = start(servicer, credentials)
    return servicer, server, port


def test_tls_with_a_ca(pki):
    servicer, server, port = tls_server(pki, require_client_auth=False)
    try:
        with blockread.Client(f"127.0.0.1:{port}", ca=pki / "ca.pem", token="t") as c:
            assert c.read("ok", 0, 3) == b"xxx"
            assert c.read_many([("ok", 0, 2)]) == [b"yy"]
        assert servicer.seen[0][1]["authorization"] == "Bearer t"
        # The name override: the certificate names blockread.test, which the target does not.
        with blockread.Client(f"127.0.0.1:{port}", ca=(pki / "ca.pem").read_bytes(),
                              server_name="blockread.test") as c:
            assert c.read("ok", 0, 1) == b"x"
        # Plaintext to a TLS server, and a CA that did not sign the server: no connection.
        for kwargs in ({}, {"ca": pki / "other-ca.pem"}):
            with blockread.Client(f"127.0.0.1:{port}", timeout=5, **kwargs) as c:
                with pytest.raises(blockread.Unavailable):
                    c.read("ok", 0, 1)
    finally:
        server.stop(None)


def test_mtls_client_certificate(pki):
    servicer, server, port = tls_server(pki, require_client_auth=True)
    try:
        with blockread.Client(f"127.0.0.1:{port}", ca=pki / "ca.pem", cert=pki / "client.pem",
                              key=pki / "client.key") as c:
            assert c.read("ok", 0, 3) == b"xxx"
        identities = servicer.seen[0][2]
        assert identities is not None and b"trainer-7" in identities
        with blockread.Client(f"127.0.0.1:{port}", ca=pki / "ca.pem", timeout=5) as c:
            with pytest.raises(blockread.Unavailable):
                c.read("ok", 0, 1)
    finally:
        server.stop(None)
