"""The Python client against the real server's transport security and access rules (issue
"Security"): TLS with a CA, mutual TLS with a client certificate, and tokens with --auth, all
byte-exact against the demo device; refusals as the documented exception classes."""
import hashlib
import subprocess

import grpc
import pytest

import blockread
from conftest import ServerProcess, file_bytes_from_manifest


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate with CN "trainer"."""
    d = tmp_path_factory.mktemp("pki")
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
            "-subj", "/CN=test-ca", cwd=d)
    (d / "server.ext").write_text("subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n")
    (d / "client.ext").write_text("extendedKeyUsage = clientAuth\n")
    for name, cn in (("server", "server"), ("client", "trainer")):
        openssl("req", "-new", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={cn}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "30", "-extfile", f"{name}.ext",
                "-out", f"{name}.pem", cwd=d)
    return d


@pytest.fixture(scope="module")
def secured(tmp_path_factory, pki):
    """A server with mutual TLS and --auth: "trainer" by certificate may read random-*, "reader"
    by token may read hello.txt."""
    root = tmp_path_factory.mktemp("secured")
    token_digest = hashlib.sha256(b"reader-token").hexdigest()
    (root / "access.textproto").write_text(
        'identity { name: "trainer" tls_common_name: "trainer" allow: "random-*" }\n'
        f'identity {{ name: "reader" token_sha256: "{token_digest}" allow: "hello.txt" }}\n')
    server = ServerProcess(
        [f"--data-dir={root / 'data'}", f"--auth={root / 'access.textproto'}",
         f"--tls-cert={pki / 'server.pem'}", f"--tls-key={pki / 'server.key'}",
         f"--tls-client-ca={pki / 'ca.pem'}"],
        str(root / "server.log"),
        ca=pki / "ca.pem", cert=pki / "client.pem", key=pki / "client.key")
    files = file_bytes_from_manifest(str(root / "data" / "demo.manifest"))
    yield server, files
    assert server.stop() == 0, server.log()


def test_mutual_tls_identity_reads_what_it_may(secured, pki):
    server, files = secured
    with blockread.Client(server.target, ca=pki / "ca.pem", cert=pki / "client.pem",
                          key=pki / "client.key") as c:
        assert c.read("random-4m", 4096, 8192) == files["random-4m"][4096:12288]
        assert c.read_many([("random-4m", 0, 4096)] * 3) == [files["random-4m"][:4096]] * 3
        with pytest.raises(blockread.PermissionDenied) as e:
            c.read("hello.txt", 0, 16)
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert [f.name for f in c.ls()] == ["random-4m"]


def test_a_certificate_and_a_token_the_certificate_names_the_identity(secured, pki):
    server, files = secured
    # A certificate and a token: the verified certificate names the identity.
    with blockread.Client(server.target, ca=pki / "ca.pem", cert=pki / "client.pem",
                          key=pki / "client.key", token="reader-token") as c:
        assert c.read("random-4m", 0, 16) == files["random-4m"][:16]


def test_refusals_are_the_documented_exceptions(secured, pki):
    server, _ = secured
    # No client certificate: the handshake fails; the client says the server is unavailable.
    with blockread.Client(server.target, ca=pki / "ca.pem", timeout=5) as c:
        with pytest.raises(blockread.Unavailable):
            c.read("random-4m", 0, 16)
    # Plaintext to a TLS server: unavailable too.
    with blockread.Client(server.target, timeout=5) as c:
        with pytest.raises(blockread.Unavailable):
            c.stat("random-4m")


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    """Plaintext on loopback with --auth: tokens only."""
    root = tmp_path_factory.mktemp("tokens")
    token_digest = hashlib.sha256(b"reader-token").hexdigest()
    (root / "access.textproto").write_text(
        f'identity {{ name: "reader" token_sha256: "{token_digest}" allow: "hello.txt" }}\n')
    server = ServerProcess([f"--data-dir={root / 'data'}", f"--auth={root / 'access.textproto'}"],
                           str(root / "server.log"))
    yield server, file_bytes_from_manifest(str(root / "data" / "demo.manifest"))
    assert server.stop() == 0, server.log()


def test_tokens(token_server):
    server, files = token_server
    with blockread.Client(server.target, token="reader-token") as c:
        assert c.read("hello.txt", 0, 5) == files["hello.txt"][:5]
        with pytest.raises(blockread.NotFound):  # not allowed: as if it did not exist
            c.stat("random-4m")
        with pytest.raises(blockread.PermissionDenied):
            c.read("random-4m", 0, 16)
    for token in (None, "wrong"):
        with blockread.Client(server.target, token=token) as c:
            with pytest.raises(blockread.Unauthenticated) as e:
                c.read("hello.txt", 0, 5)
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
