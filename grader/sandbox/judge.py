"""The judge process: runs pytest over a task's hidden tests; every assertion and every verdict is decided here.

It never imports a candidate's code: vLLM is refused at import, and the candidate's tree is reached only through
subjects (``grader.sandbox.client``) or read as text by static checks. Its subjects come from a zygote that never
held the request (see ``grader.sandbox.zygote``): a cold judge forks it first, then reads the request.

Run as ``python -m grader.sandbox.judge`` with the request as JSON on stdin (cold; its argv and starting
environment name nothing of the run), or called in a forked warm worker (``run``) with a zygote from its template.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from grader.sandbox import protocol, zygote
from grader.sandbox.contain import die_with_parent
from grader.sandbox.protocol import JudgeRequest, SubjectPlatform


class RefuseVllm:
    """A meta-path finder: importing vLLM in the judge is a bug in a hidden test, and fails loudly."""

    def find_spec(self, name, path=None, target=None):
        if name == "vllm" or name.startswith("vllm."):
            raise ImportError(f"the judge never imports {name}: call a probe in the subject instead")
        return None


def run(request: JudgeRequest, control: socket.socket, zygote_pid: int,
        on_platforms: dict[str, tuple[int, socket.socket]] | None = None) -> int:
    """Take the request's environment and path, run pytest with ``control`` as the zygote's socket and
    ``on_platforms`` (name -> pid, socket) as the zygotes of the task's platforms; pytest's exit code. The zygotes
    are killed at the end."""
    on_platforms = on_platforms or {}
    try:
        os.environ.clear()
        os.environ.update(request.env)
        os.environ[protocol.JUDGE_STARTED] = repr(time.monotonic())
        keep_compiled_modules(request.env.get(protocol.JUDGE_PYCACHE))
        os.environ[protocol.ZYGOTE_FD] = str(control.fileno())
        os.environ[protocol.PLATFORM_ZYGOTES] = json.dumps({name: sock.fileno()
                                                            for name, (_, sock) in on_platforms.items()})
        sys.path[:0] = request.sys_path
        os.chdir(request.cwd)
        sys.meta_path.insert(0, RefuseVllm())
        sys.argv = ["pytest", *request.argv]
        import pytest

        return int(pytest.main(request.argv))
    finally:
        _end_subjects()
        for pid in [zygote_pid, *(p for p, _ in on_platforms.values())]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def keep_compiled_modules(folder: str | None) -> None:
    """Let the judge keep the modules it compiles (pytest's assertion-rewritten hidden tests among them) in
    ``folder``, so that each run does not rewrite and compile them again. The judge imports only the project's own
    code, and the folder is under the cache, which no subject can see; the zygote, forked before this, keeps its
    subjects from writing compiled modules anywhere."""
    if folder:
        sys.dont_write_bytecode = False
        sys.pycache_prefix = folder


def _end_subjects() -> None:
    client = sys.modules.get("grader.sandbox.client")
    if client is not None:
        client.end_all()


def main() -> None:
    # Started by a grader thread that waits for it (its pid in argv): the judge, and through it its zygote and
    # subjects, die with it.
    if len(sys.argv) > 1:
        die_with_parent(int(sys.argv[1]))
    control, zygote_pid = zygote.start()
    # The task's platforms come in argv (they are the rubric's, nothing of the run): their zygotes too are forked
    # before the request is read.
    on_platforms = {}
    for platform in (SubjectPlatform.from_json(p) for p in json.loads(sys.argv[2] if len(sys.argv) > 2 else "[]")):
        held = (control, *(sock for _, sock in on_platforms.values()))
        platform_control, pid = zygote.start(platform, close=held)
        on_platforms[platform.name] = (pid, platform_control)
    code = 3
    try:
        code = run(JudgeRequest.from_json(json.load(sys.stdin)), control, zygote_pid, on_platforms)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main()
