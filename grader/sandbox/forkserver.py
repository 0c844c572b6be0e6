"""A warm worker: imports the heavy third-party modules once, then forks a fresh judge per hidden-test run.

Run as ``python -m grader.sandbox.forkserver PREIMPORT_FILE``. Requests arrive as JSON lines on stdin (the fields
of ``protocol.JudgeRequest``); each is run by a forked child that becomes its own session and runs the judge
(``grader.sandbox.judge.run``). The server forks its template zygote before it reads any request; per run, the
template forks a fresh zygote, which forks that judge's subjects: no subject descends from a process that read a
request (its secret, deadline, evidence path). Neither this server nor any judge imports vLLM: only subjects do,
each in a process of its own. The answer is a JSON line with ``returncode`` and ``timed_out``.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import sys
import tempfile
import time

from grader.sandbox import zygote
from grader.sandbox.contain import die_with_parent
from grader.sandbox.protocol import JudgeRequest


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


def _run_child(request: JudgeRequest, control, zygote_pid: int, server: int) -> None:
    code = 3
    try:
        die_with_parent(server)
        os.setsid()
        log = os.open(request.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        # Modules imported by the server cached values derived from its own environment; reset those we know of.
        tempfile.tempdir = None
        from grader.sandbox.judge import run

        code = run(request, control, zygote_pid)
    except BaseException:  # noqa: BLE001 - the child reports, never returns into the server loop
        import traceback

        print("forkserver child failed:\n" + traceback.format_exc(), file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait(pid: int, timeout: float, grader) -> tuple[int, bool]:
    """Wait for the judge ``pid``: its exit code, and whether it was killed at ``timeout``. While a judge runs the
    grader sends nothing, so its pipe (``grader``) turning readable means it closed: the grader is gone, and the
    judge is killed and this server exits, rather than running on for no one."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        if time.monotonic() > deadline:
            _kill_group(pid)
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status), True
        if select.select([grader], [], [], 0.02)[0] and not grader.buffer.peek(1):
            _end_running()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_RUNNING: list[int] = []


def _end_on_sigterm(signum, frame) -> None:
    """The grader is stopping: kill the judge being run (its subjects are killed by the grader) and exit."""
    _end_running()


def _end_running() -> None:
    """Kill the judge being run and its zygote (whose subjects die with it), and exit."""
    for pid in _RUNNING:
        try:
            os.killpg(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    os._exit(1)


def serve(stdin, stdout, template) -> None:
    signal.signal(signal.SIGTERM, _end_on_sigterm)
    me = os.getpid()
    for line in iter(stdin.readline, ""):
        request = JudgeRequest.from_json(json.loads(line))
        zygote_pid, control = zygote.spawn_zygote(template)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            template.close()
            _run_child(request, control, zygote_pid, me)
        control.close()
        _RUNNING[:] = [pid, zygote_pid]
        returncode, timed_out = _wait(pid, request.timeout, stdin)
        try:
            os.killpg(pid, signal.SIGKILL)  # whatever the run left behind in its group
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.kill(zygote_pid, signal.SIGKILL)  # the template's child, not in the judge's group
        except ProcessLookupError:
            pass
        stdout.write(json.dumps({"returncode": returncode, "timed_out": timed_out}) + "\n")
        stdout.flush()


def main() -> None:
    names = open(sys.argv[1]).read().split() if len(sys.argv) > 1 else []
    loaded = preimport(names)
    # What was imported lives as long as the worker: moved out of the collector's sight, it is not traversed by
    # every full collection in the judges and subjects forked from here (pytest alone runs several as it ends),
    # nor are its pages copied into each of them by the collector touching it.
    gc.freeze()
    template, _ = zygote.start()
    sys.stdout.write(json.dumps({"ready": True, "preimported": loaded}) + "\n")
    sys.stdout.flush()
    serve(sys.stdin, sys.stdout, template)


if __name__ == "__main__":
    main()
