"""`pip install --no-build-isolation --no-index ./client/python` into a --system-site-packages
venv, offline, with what Debian ships (python3-venv, python3-pip, python3-setuptools), and the
installed copy works against a real server."""

import os
import shutil
import subprocess
import sys

import pytest

import conftest
import forked

SMOKE = r"""
import os, sys
import blockread
import forked
try:
    import torch
except ImportError:
    pass
else:
    import blockread.torch
assert blockread.__file__.startswith(sys.prefix), blockread.__file__
assert "GRPC_ENABLE_FORK_SUPPORT" not in os.environ
c = blockread.Client(sys.argv[1])
assert os.environ["GRPC_ENABLE_FORK_SUPPORT"] == "1"
assert c.read("tiny.txt", 0, 100).hex() == sys.argv[2]
assert c.read_many([("tiny.txt", 0, 100)] * 3) == [bytes.fromhex(sys.argv[2])] * 3
pid = os.fork()
if pid == 0:
    os._exit(0 if c.read("tiny.txt", 0, 100).hex() == sys.argv[2] else 1)
code = forked.wait_for(pid)
assert code == 0, code
print("installed ok", blockread.__file__)
"""


def test_pip_install_into_a_venv(served, tmp_path):
    if sys.executable != "/usr/bin/python3":
        pytest.skip(f"run with Debian's /usr/bin/python3 (this is {sys.executable})")
    for module, package in (("venv", "python3-venv"), ("ensurepip", "python3-venv"),
                            ("setuptools", "python3-setuptools")):
        probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
        if probe.returncode != 0:
            pytest.skip(f"{package} is not installed (deploy/install-deps.sh installs it)")
    # pip builds in the source directory; build a copy so the tree stays clean.
    source = tmp_path / "python"
    shutil.copytree(conftest.PACKAGE_ROOT, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".pytest_cache", "tests"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "GRPC_ENABLE_FORK_SUPPORT", "PIP_INDEX_URL")}
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation",
                              "--no-index", str(source)], capture_output=True, text=True,
                             env=env)
    assert install.returncode == 0, install.stdout + install.stderr
    want = served.files["tiny.txt"][:100].hex()
    # From another directory, so nothing but the installed copy can be imported.
    result = forked.run([str(venv / "bin" / "python"), "-c", SMOKE, served.target, want],
                        timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"installed ok {venv}" in result.stdout
