"""A warm worker: imports the heavy third-party modules once, then forks a fresh judge per hidden-test run.

Run as ``python -m grader.sandbox.forkserver PREIMPORT_FILE [COPIES]``. Requests arrive as JSON lines on stdin (the
fields of ``protocol.JudgeRequest``); each is run by a forked child that becomes its own session and runs the judge
(``grader.sandbox.judge.run``). ``COPIES``, a JSON list of ``[request fd, answer fd]`` pairs the grader passed
down, asks for more workers: forked from this one once its preload is done, each serving the requests of its own
pair of pipes as this one serves stdin. Sixteen workers importing the same thousands of modules at once each take
longer than one alone; copies pay the imports once. The server forks its template zygote before it reads any request; per run, the
template forks a fresh zygote, which forks that judge's subjects: no subject descends from a process that read a
request (its secret, deadline, evidence path). Before its preload it also forks a pristine zygote, which makes a
template for each platform a request names, the first time one does (``zygote.spawn_template``). Neither this
server nor any judge imports vLLM: only subjects do, each in a process of its own. The answer is a JSON line with
``returncode`` and ``timed_out``.
"""

from __future__ import annotations

import gc
import inspect
import json
import os
import select
import signal
import socket
import sys
import tempfile
import time

from grader.sandbox import zygote
from grader.sandbox.contain import die_with_parent
from grader.sandbox.protocol import JudgeRequest, SubjectPlatform


# A zygote as its parent holds it: its pid and the control socket to it.
Zygote = tuple[int, socket.socket]


class Templates:
    """The zygotes a warm worker forks per-run zygotes from: its template (after the preload), and one per platform
    a request named, made by the pristine zygote (forked before the preload) with the same preload list."""

    def __init__(self, template: socket.socket, pristine: socket.socket, preload: list[str]) -> None:
        self.template = template
        self.pristine = pristine
        self.preload = preload
        self.on_platform: dict[SubjectPlatform, socket.socket] = {}

    def zygotes(self, request: JudgeRequest) -> tuple[Zygote, dict[str, Zygote]]:
        """A fresh zygote for a run (pid, control), and one on each platform the request names, by name."""
        on_platforms = {}
        for platform in request.platforms:
            if platform not in self.on_platform:
                self.on_platform[platform] = zygote.spawn_template(self.pristine, platform, self.preload)[1]
            on_platforms[platform.name] = zygote.spawn_zygote(self.on_platform[platform])
        return zygote.spawn_zygote(self.template), on_platforms

    def close(self) -> None:
        """In a judge forked from the server: it holds none of them."""
        for sock in [self.template, self.pristine, *self.on_platform.values()]:
            sock.close()


def _run_child(request: JudgeRequest, control, zygote_pid: int, on_platforms: dict[str, Zygote], server: int) -> None:
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

        code = run(request, control, zygote_pid, on_platforms)
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


def serve(stdin, stdout, templates: Templates) -> None:
    signal.signal(signal.SIGTERM, _end_on_sigterm)
    me = os.getpid()
    for line in iter(stdin.readline, ""):
        request = JudgeRequest.from_json(json.loads(line))
        (zygote_pid, control), on_platforms = templates.zygotes(request)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            templates.close()
            _run_child(request, control, zygote_pid, on_platforms, me)
        control.close()
        for _, platform_control in on_platforms.values():
            platform_control.close()
        zygote_pids = [zygote_pid, *(p for p, _ in on_platforms.values())]
        _RUNNING[:] = [pid, *zygote_pids]
        returncode, timed_out = _wait(pid, request.timeout, stdin)
        try:
            os.killpg(pid, signal.SIGKILL)  # whatever the run left behind in its group
        except (ProcessLookupError, PermissionError):
            pass
        for each in zygote_pids:  # the templates' children, not in the judge's group
            try:
                os.kill(each, signal.SIGKILL)
            except ProcessLookupError:
                pass
        stdout.write(json.dumps({"returncode": returncode, "timed_out": timed_out}) + "\n")
        stdout.flush()


def prepare_judges() -> None:
    """Do once here what every judge forked from this worker would do for itself. Called after the template was
    forked, so that no subject has pytest loaded (a candidate could tell from it that it is being tested)."""
    zygote.preimport(["pytest"])
    # A judge's failure reports look up the module of each traceback entry's code (inspect.getmodule), which the
    # first time resolves the real path of every loaded module: thousands here.
    inspect.getmodule(main.__code__)


def main() -> None:
    names = open(sys.argv[1]).read().split() if len(sys.argv) > 1 else []
    copies = [tuple(pair) for pair in json.loads(sys.argv[2])] if len(sys.argv) > 2 else []
    # Forked while only the grader's own modules are loaded (and packaging, for its rubric module): what a platform
    # makes unimportable was never imported there. One for this worker and one for each copy.
    pristines: list[socket.socket] = []
    for _ in range(1 + len(copies)):
        pristines.append(zygote.start(close=tuple(pristines))[0])
    loaded = zygote.preimport(names)
    # What was imported lives as long as the worker: moved out of the collector's sight, it is not traversed by
    # every full collection in the judges and subjects forked from here (pytest alone runs several as it ends),
    # nor are its pages copied into each of them by the collector touching it.
    gc.freeze()
    for number, (requests, answers) in enumerate(copies, start=1):
        if os.fork() == 0:
            become_copy(requests, answers, copies, pristines, number, names, loaded)
    for requests, answers in copies:
        os.close(requests)
        os.close(answers)
    start_serving(sys.stdin, sys.stdout, pristines[0], pristines[1:], names, loaded)


def become_copy(requests: int, answers: int, copies: list, pristines: list[socket.socket], number: int,
                names: list[str], loaded: int) -> None:
    """In a child forked after the preload: serve the requests of its own pipes, with its own pristine zygote, and
    hold nothing of the worker it was forked from or of the other copies (a pipe held open here would keep the
    grader from seeing another worker end)."""
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        for pair in copies:
            for fd in pair:
                if fd not in (requests, answers):
                    os.close(fd)
        others = pristines[:number] + pristines[number + 1:]
        start_serving(os.fdopen(requests, "r"), os.fdopen(answers, "w"), pristines[number], others, names, loaded)
    finally:
        os._exit(0)


def start_serving(stdin, stdout, pristine: socket.socket, others: list[socket.socket], names: list[str],
                  loaded: int) -> None:
    """Fork this worker's template, prepare its judges, say it is ready, and serve."""
    for sock in others:
        sock.close()
    template, _ = zygote.start(close=(pristine,))
    prepare_judges()
    gc.freeze()
    stdout.write(json.dumps({"ready": True, "preimported": loaded, "pid": os.getpid()}) + "\n")
    stdout.flush()
    serve(stdin, stdout, Templates(template, pristine, names))


if __name__ == "__main__":
    main()
