"""Fork safety: a Client used in the parent works in forked children (DataLoader workers fork).

Each scenario runs in a fresh interpreter whose environment has no GRPC_ENABLE_FORK_SUPPORT, so
what is tested is what the package arranges itself.
"""

import hashlib
import json
import sys

import forked

CHILD_SCRIPT = r"""
import hashlib, json, multiprocessing, os, signal, sys
import blockread
import forked
assert "GRPC_ENABLE_FORK_SUPPORT" not in os.environ, "import alone must not set it"
target, reads, digests = json.loads(sys.argv[1])
reads = [tuple(r) for r in reads]
client = blockread.Client(target)
import grpc  # after blockread's first use, as an application would

assert os.environ.get("GRPC_ENABLE_FORK_SUPPORT") == "1", "the package did not set it"

def check(client):
    got = [client.read(*r) for r in reads[:5]] + client.read_many(reads)
    want = digests[:5] + digests
    return [hashlib.sha256(g).hexdigest() for g in got] == want

# The parent uses the client first, unary calls and a stream, and keeps its channel open.
assert check(client), "parent"
parent_connection = client._conn()

def child(depth):
    signal.alarm(60)  # a hang fails the test instead of stalling it
    if not check(client):
        os._exit(1)
    if client._conn() is parent_connection:
        os._exit(2)   # it must have made its own channel
    if depth > 0:     # a child that forks again, after using the client itself
        pid = os.fork()
        if pid == 0:
            child(depth - 1)
        if forked.wait_for(pid) != 0:
            os._exit(3)
    os._exit(0)

pids = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        child(depth=1 if i == 0 else 0)
    pids.append(pid)
codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
forked.exit_if_grpc_gave_up(*codes)
assert codes == [0, 0], codes

# The parent's client still works after its children made their own channels.
assert check(client), "parent after fork"
assert client._conn() is parent_connection

# multiprocessing with fork: the Client is inherited, not pickled.
def work(i):
    r = reads[i]
    return hashlib.sha256(client.read(*r)).hexdigest() == digests[i]

with multiprocessing.get_context("fork").Pool(2) as pool:
    assert all(pool.map(work, range(len(reads)))), "pool"
# multiprocessing with spawn: the Client is pickled (its settings) and reconnects.
with multiprocessing.get_context("spawn").Pool(1) as pool:
    listed = pool.map(blockread.Client.ls, [client])
assert listed == [client.ls()], "spawn"
print("fork ok")
"""


def run_script(script, *args, env_extra=None):
    """`python -c script args` in a fresh interpreter (forked.run: again if grpcio's fork
    handler ended one of its children)."""
    return forked.run([sys.executable, "-c", script, *args], timeout=300,
                      env=forked.fresh_env(**(env_extra or {})))


def test_client_used_before_fork_works_in_children(served):
    reads = [("big.bin", 0, 4096), ("big.bin", 12345, 70000), ("odd-size", 100, 1 << 20),
             ("samples/001", 0, 100), ("tiny.txt", 0, 100)] * 4
    digests = [hashlib.sha256(conftest_expect(served, r)).hexdigest() for r in reads]
    result = run_script(CHILD_SCRIPT, json.dumps([served.target, reads, digests]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fork ok" in result.stdout


def conftest_expect(served, read):
    file, offset, length = read
    return served.files[file][offset:offset + length]


def test_package_turns_fork_support_on_before_grpc():
    # Importing the package sets nothing and imports no gRPC; its first use does, before grpc.
    result = run_script("import os, sys, blockread; "
                        "print(os.environ.get('GRPC_ENABLE_FORK_SUPPORT'), 'grpc' in sys.modules); "
                        "blockread.Client; import grpc._cython.cygrpc as c; "
                        "print(os.environ['GRPC_ENABLE_FORK_SUPPORT'], c.is_fork_support_enabled())")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "False", "1", "True"]
    # The explicit switch, and a value the user chose is kept.
    result = run_script("import os, blockread; print(blockread.enable_fork_support(), "
                        "os.environ['GRPC_ENABLE_FORK_SUPPORT'])")
    assert result.stdout.split() == ["True", "1"]
    result = run_script("import os, blockread; blockread.Client; "
                        "print(os.environ['GRPC_ENABLE_FORK_SUPPORT'])",
                        env_extra={"GRPC_ENABLE_FORK_SUPPORT": "0"})
    assert result.stdout.split() == ["0"]


def test_grpc_imported_first_warns():
    result = run_script("import warnings; warnings.simplefilter('always'); "
                        "import grpc, blockread; blockread.Client")
    assert result.returncode == 0, result.stderr
    assert "GRPC_ENABLE_FORK_SUPPORT=1 came too late" in result.stderr


FRESH_CHILD_SCRIPT = r"""
import os, sys
import blockread
import forked
target, want = sys.argv[1], sys.argv[2].encode()
client = blockread.Client(target)  # made, never used, before the fork
pid = os.fork()
if pid == 0:
    ok = False
    try:
        ok = client.read("tiny.txt", 0, len(want)) == want
    finally:
        os._exit(0 if ok else 1)
code = forked.wait_for(pid)
assert code == 0, code
assert client.read("tiny.txt", 0, len(want)) == want
print("fresh ok")
"""


def test_client_made_before_fork_first_used_in_child(served):
    want = served.files["tiny.txt"][:20].hex()
    result = run_script(FRESH_CHILD_SCRIPT.replace(
        "sys.argv[2].encode()", "bytes.fromhex(sys.argv[2])"), served.target, want)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fresh ok" in result.stdout
