"""The committed stubs match the protos, and the package does not shadow grpc."""

import os
import shutil
import subprocess
import sys

import pytest

import conftest

GENERATOR = os.path.join(conftest.PACKAGE_ROOT, "generate_stubs.py")
STUBS = os.path.join(conftest.PACKAGE_ROOT, "blockread", "_proto")


def need_tools():
    missing = [t for t in ("protoc", "grpc_python_plugin") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Debian: protobuf-compiler, "
                    "protobuf-compiler-grpc; deploy/install-deps.sh installs them)")


def generator(*args):
    return subprocess.run([sys.executable, GENERATOR, *args], capture_output=True, text=True)


def test_committed_stubs_match_the_protos():
    need_tools()
    result = generator("--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_notices_a_difference(tmp_path):
    need_tools()
    copy = tmp_path / "_proto"
    shutil.copytree(STUBS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert generator("--check", "--stubs-dir", str(copy)).returncode == 0
    stub = copy / "blockread" / "v1" / "blockread_pb2.py"
    stub.write_text(stub.read_text().replace("ReadBlock", "ReadBlok", 1))
    (copy / "grpc" / "health" / "v1" / "health_pb2_grpc.py").unlink()
    result = generator("--check", "--stubs-dir", str(copy))
    assert result.returncode == 1
    assert "blockread/v1/blockread_pb2.py" in result.stderr
    assert "grpc/health/v1/health_pb2_grpc.py" in result.stderr


def test_no_top_level_grpc_package():
    # Only `blockread` is a package at the package root: protoc's grpc/health/v1 output lives in
    # blockread._proto.grpc, and `grpc` stays grpcio's.
    root = conftest.PACKAGE_ROOT
    top = {n for n in os.listdir(root) if os.path.isfile(os.path.join(root, n, "__init__.py"))}
    assert top == {"blockread"}
    assert not os.path.exists(os.path.join(root, "grpc"))
    env = dict(os.environ, PYTHONPATH=conftest.PACKAGE_ROOT)
    script = ("import blockread, grpc, blockread._proto.grpc.health.v1.health_pb2_grpc as h; "
              "print(grpc.__file__); print(h.__name__); print(hasattr(grpc, 'insecure_channel'))")
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, cwd=conftest.PACKAGE_ROOT)
    assert result.returncode == 0, result.stderr
    grpc_file, health_module, real = result.stdout.split()
    assert not grpc_file.startswith(conftest.PACKAGE_ROOT)
    assert health_module == "blockread._proto.grpc.health.v1.health_pb2_grpc"
    assert real == "True"


def test_health_uses_grpcio_health_checking_when_installed(served, tmp_path):
    """With grpcio-health-checking (grpc_health.v1) importable, the client uses its modules, so
    an application that imports them too does not meet a second grpc.health.v1 definition."""
    need_tools()
    # Stand-in for grpcio-health-checking: the same proto, under its module path grpc_health/v1.
    src = tmp_path / "src" / "grpc_health" / "v1"
    src.mkdir(parents=True)
    shutil.copy(os.path.join(conftest.SOURCE_ROOT, "proto", "grpc", "health", "v1",
                             "health.proto"), src)
    out = tmp_path / "site"
    out.mkdir()
    subprocess.run(["protoc", f"-I{tmp_path / 'src'}", f"--python_out={out}", f"--grpc_out={out}",
                    f"--plugin=protoc-gen-grpc={shutil.which('grpc_python_plugin')}",
                    "grpc_health/v1/health.proto"], check=True)
    for d in (out / "grpc_health", out / "grpc_health" / "v1"):
        (d / "__init__.py").touch()
    pythonpath = str(out)
    if os.environ.get("BLOCKREAD_TEST_INSTALLED") != "1":
        pythonpath += os.pathsep + conftest.PACKAGE_ROOT
    script = ("import sys, blockread; c = blockread.Client(sys.argv[1]); print(c.health()); "
              "from grpc_health.v1 import health_pb2; "
              "print('blockread._proto.grpc.health.v1.health_pb2' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", script, served.target], capture_output=True,
                            text=True, env=dict(os.environ, PYTHONPATH=pythonpath))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["SERVING", "False"]
