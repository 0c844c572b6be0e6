"""A warm worker: imports the heavy third-party modules once, then forks a fresh child per hidden-test run.

Run as ``python -m grader.forkserver PREIMPORT_FILE``. Requests arrive as JSON lines on stdin
(``argv``, ``env``, ``cwd``, ``log``, ``timeout``); each is run by a forked child that takes the request's
environment and ``sys.path``, becomes its own process group and session, and calls ``pytest.main``. Only the
child ever imports vLLM, so every candidate's code is imported fresh, in a process of its own. The answer is a
JSON line with ``returncode`` and ``timed_out``.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import tempfile
import time


def preimport(names: list[str]) -> int:
    """Import what vLLM would import from third parties; failures only mean a colder child."""
    loaded = 0
    for name in names:
        try:
            importlib.import_module(name)
            loaded += 1
        except BaseException:  # noqa: BLE001 - any import side effect is tolerated here
            continue
    return loaded


def _become_child(request: dict) -> None:
    os.setsid()
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    if request.get("contain"):
        from grader.contain import enter

        enter(request["contain"])
    os.environ.clear()
    os.environ.update(request["env"])
    # Modules imported by the server cached values derived from its own environment; reset those we know of.
    tempfile.tempdir = None
    os.chdir(request["cwd"])
    front = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = front
    sys.argv = ["pytest", *request["argv"]]


def _run_child(request: dict) -> None:
    code = 3
    try:
        _become_child(request)
        import pytest

        code = int(pytest.main(request["argv"]))
    except BaseException:  # noqa: BLE001 - the child reports, never returns into the server loop
        import traceback

        print("forkserver child failed:\n" + traceback.format_exc(), file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait(pid: int, timeout: float) -> tuple[int, bool]:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status), True
        time.sleep(0.02)


def serve(stdin, stdout) -> None:
    for line in stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_child(request)
        returncode, timed_out = _wait(pid, float(request["timeout"]))
        try:
            os.killpg(pid, signal.SIGKILL)  # whatever the run left behind in its group
        except (ProcessLookupError, PermissionError):
            pass
        stdout.write(json.dumps({"returncode": returncode, "timed_out": timed_out}) + "\n")
        stdout.flush()


def main() -> None:
    names = open(sys.argv[1]).read().split() if len(sys.argv) > 1 else []
    loaded = preimport(names)
    sys.stdout.write(json.dumps({"ready": True, "preimported": loaded}) + "\n")
    sys.stdout.flush()
    serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
