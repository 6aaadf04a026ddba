"""Running the scenarios that fork a process that has used gRPC, and telling grpcio's own give-up
apart from a real failure.

grpcio 1.51's at-fork handler (GRPC_ENABLE_FORK_SUPPORT) ends a forked child with os.EX_USAGE (64)
when gRPC Core has not shut down in the child within about 1.3 s. It logs "Failed to shutdown
gRPC Core after fork()" to a logger grpc silences. On this shared 2-CPU machine under load that
happened to 1 fork in about 300 (README "Python client"), whatever the child would have done: it
is a limit of grpcio, not of blockread. A scenario script that sees a child end that way exits
GAVE_UP, and run() starts it again, RUNS times in all. Every other outcome counts at once: wrong
bytes, a hang, another exit status or a signal.

The scripts import this module: run() puts this directory on their PYTHONPATH.
"""

import os
import signal
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
GRPC_FORK_HANDLER_EXIT = os.EX_USAGE  # what grpcio's handler passes to os._exit in the child
GAVE_UP = 75  # a scenario's exit status: one of its children met GRPC_FORK_HANDLER_EXIT
RUNS = 3


def exit_if_grpc_gave_up(*exit_codes):
    """In a scenario script (or a child that forked): ends this process with GAVE_UP when the
    children that failed (exit codes from os.waitstatus_to_exitcode or Process.exitcode) all
    failed by grpcio's give-up, GRPC_FORK_HANDLER_EXIT, or by GAVE_UP from a child that met it in
    a grandchild. A child that failed otherwise is a real failure: then this returns."""
    failed = [code for code in exit_codes if code]
    if failed and all(code in (GRPC_FORK_HANDLER_EXIT, GAVE_UP) for code in failed):
        print(f"forked.py: a forked child exited {GRPC_FORK_HANDLER_EXIT}: gRPC Core did not "
              f"shut down in it after fork() (grpcio 1.51); exit codes {list(exit_codes)}",
              file=sys.stderr, flush=True)
        os._exit(GAVE_UP)


def wait_for(pid):
    """os.waitpid(pid) as an exit code; GAVE_UP for this process if grpcio ended the child."""
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    exit_if_grpc_gave_up(code)
    return code


def fresh_env(**extra):
    """The environment of a scenario's fresh interpreter: no GRPC_ENABLE_FORK_SUPPORT, so what
    is tested is what the package arranges itself, and the package in place unless the
    installed copy is under test (BLOCKREAD_TEST_INSTALLED=1)."""
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    if os.environ.get("BLOCKREAD_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = PACKAGE_ROOT
    env.update(extra)
    return env


def run_once(argv, timeout, env, cwd):
    """subprocess.run(argv, capture_output=True, text=True, timeout=timeout), except that the
    script runs in its own process group, its output goes to files and, when it has ended, every
    process left in its group is killed. A scenario that ends (GAVE_UP, or a failure) while one
    of its forked children still lives must not hold the test until the timeout: with pipes, the
    straggler's inherited stdout kept communicate() waiting for 600 s."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err, text=True,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if code is None:
        raise subprocess.TimeoutExpired(argv, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


def run(argv, timeout, env=None, cwd=None):
    """run_once(argv) with captured text output, started again while it exits GAVE_UP
    (RUNS runs in all). The result of the last run. env defaults to fresh_env(). This
    directory holds no `blockread`, so a script still imports the copy env chooses."""
    env = dict(fresh_env() if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH")) if p)
    for attempt in range(1, RUNS + 1):
        result = run_once(argv, timeout, env, cwd)
        if result.returncode != GAVE_UP:
            return result
        last_line = (result.stderr.strip().splitlines() or [""])[-1]
        warnings.warn(f"run {attempt} of {RUNS} gave up: {last_line}")
    return result
