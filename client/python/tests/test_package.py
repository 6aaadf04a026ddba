"""The package as a package: one version with CMake, type hints that mypy accepts, py.typed."""

import os
import re
import subprocess
import sys

import pytest

import blockread
import conftest


def test_version_is_cmakes():
    with open(os.path.join(conftest.SOURCE_ROOT, "CMakeLists.txt")) as f:
        match = re.search(r"project\(\s*blockread\s+VERSION\s+([0-9.]+)", f.read())
    assert match, "no project(blockread VERSION ...) in CMakeLists.txt"
    assert blockread.__version__ == match.group(1), (
        "blockread/__init__.py's __version__ and CMakeLists.txt's project(VERSION) differ")
    with open(os.path.join(conftest.PACKAGE_ROOT, "pyproject.toml")) as f:
        assert 'version = {attr = "blockread.__version__"}' in f.read()


def test_py_typed_is_shipped():
    assert os.path.exists(os.path.join(conftest.PACKAGE_ROOT, "blockread", "py.typed"))


def test_mypy_passes_on_the_package():
    probe = subprocess.run([sys.executable, "-c", "import mypy"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("mypy is not installed (Debian: python3-mypy; deploy/install-deps.sh)")
    # pyproject.toml's [tool.mypy] leaves out the generated stubs (protoc's, untyped). The cache
    # sits in the source tree's build/ (ignored by git): a cold run takes ~30 s on 2 busy CPUs,
    # a warm one ~2 s.
    cache = os.environ.get("BLOCKREAD_MYPY_CACHE",
                           os.path.join(conftest.SOURCE_ROOT, "build", "mypy-cache"))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--cache-dir", cache, "blockread"],
        capture_output=True, text=True, cwd=conftest.PACKAGE_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
