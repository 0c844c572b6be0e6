"""The zygote: forked before anything of a judge run is read, it forks one sandboxed subject per request.

Forking from the judge itself would hand each subject a copy of the judge's memory (expectations, the secret
seed, the request with its deadline and evidence path, pytest's state). A zygote is forked from a process that
never held any of it: a cold judge forks its zygote before it reads its request (which comes on stdin, never in
its argv or environment); a warm worker forks one clean zygote, the template, before it reads any request, and
asks the template for a fresh zygote per judge (``spawn_zygote``). Subjects inherit only the third-party modules
already imported (torch, Triton, ... on a warm worker). A zygote answers each spawn request with the child's
process id and, passed as a file descriptor, the caller's end of a fresh socket pair.

A task's checks may need subjects on another platform than the machine's (``SubjectPlatform``: Triton
unimportable, say). Their zygotes are prepared for it before anything but the grader is imported: a cold judge forks
one per platform before it reads its request; a warm worker keeps a pristine zygote, forked before its preload,
and asks it for a template per platform the first time a request names one (``spawn_template``). That template
makes the platform's modules unimportable, then preloads the worker's list less them, and forks the per-run
zygotes of that platform.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import socket
import sys
import tempfile

# Imported here, while the repository is still visible: a subject's view hides it.
from grader.sandbox import contain, subject
from grader.sandbox.protocol import SubjectPlatform, SubjectSpec, gpu_asked

SPAWN_MESSAGE_CAP = 1 << 20

# The platform this process was prepared for (``enter_platform``); None: the machine's own.
_PLATFORM: SubjectPlatform | None = None


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


def unimportable_on(platform: SubjectPlatform, name: str) -> bool:
    """Whether the module ``name`` is one ``platform`` makes unimportable (or a submodule of one)."""
    return any(name == m or name.startswith(m + ".") for m in platform.unimportable)


def enter_platform(platform: SubjectPlatform) -> None:
    """Make this process (and what it forks) ``platform``: its modules unimportable, its variables set. Done before
    the process imports anything beyond the grader's own modules, so nothing it made unimportable was loaded here
    (unless a platform names what the grader itself imports)."""
    global _PLATFORM
    for name in [n for n in sys.modules if unimportable_on(platform, n)]:
        sys.modules[name] = None
    for name in platform.unimportable:
        sys.modules[name] = None  # importing it, or anything under it, raises ImportError
    platform_environment(os.environ, platform)
    _PLATFORM = platform


def platform_environment(env, platform: SubjectPlatform | None) -> None:
    """Set and remove in ``env`` the variables ``platform`` names (nothing for the machine's own)."""
    if platform is None:
        return
    env.update(dict(platform.env))
    for name in platform.unset:
        env.pop(name, None)


def start(platform: SubjectPlatform | None = None, close: tuple[socket.socket, ...] = ()) -> tuple[socket.socket, int]:
    """Fork a zygote (on ``platform``, when given); returns the judge's control socket and the zygote's pid.
    ``close``: the caller's sockets to its other zygotes, which this one must not hold."""
    judge_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    caller = os.getpid()
    pid = os.fork()
    if pid == 0:
        judge_end.close()
        for other in close:
            other.close()
        try:
            # The caller's stdin may be where its request arrives later, and its stdout a pipe that must see EOF
            # when the caller ends: the zygote keeps neither.
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.dup2(devnull, 1)
            contain.die_with_parent(caller)
            if platform is not None:
                enter_platform(platform)
            _serve(zygote_end)
        finally:
            os._exit(0)
    zygote_end.close()
    return judge_end, pid


def spawn_zygote(template: socket.socket) -> tuple[int, socket.socket]:
    """Ask a zygote (the warm worker's template) for a fresh zygote of its own: (its pid, its control socket)."""
    return _spawn(template, {"zygote": True})


def spawn_template(pristine: socket.socket, platform: SubjectPlatform, preload: list[str]) -> tuple[int, socket.socket]:
    """Ask a pristine zygote (forked before any preload) for a template on ``platform``: it enters the platform,
    preloads ``preload`` less what the platform makes unimportable, and then serves ``spawn_zygote``."""
    return _spawn(pristine, {"zygote": True, "platform": platform.to_json(), "preload": list(preload)})


def spawn(control: socket.socket, spec: SubjectSpec) -> tuple[int, socket.socket]:
    """Ask the zygote for a subject built from ``spec``: (its pid, the judge's end of its channel)."""
    return _spawn(control, spec.to_json())


def _spawn(control: socket.socket, message: dict) -> tuple[int, socket.socket]:
    data = json.dumps(message).encode()
    control.sendall(len(data).to_bytes(4, "big") + data)
    message, fds, _flags, _addr = socket.recv_fds(control, 4096, 1)
    if not message or not fds:
        raise OSError("the zygote did not answer a spawn request")
    return json.loads(message)["pid"], socket.socket(fileno=fds[0])


def _serve(control: socket.socket) -> None:
    # Subjects are reaped by the kernel: the zygote never waits on them, the judge ends them by pid namespace and
    # cgroup (``contain.end_subject``).
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    me = os.getpid()
    while True:
        head = _read(control, 4)
        if head is None:
            return
        size = int.from_bytes(head, "big")
        body = _read(control, size) if size <= SPAWN_MESSAGE_CAP else None
        if body is None:
            return
        message = json.loads(body)
        judge_side, subject_side = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            control.close()
            judge_side.close()
            if message.get("zygote") is True:
                contain.die_with_parent(me)
                if message.get("platform") is not None:
                    _prepare_template(SubjectPlatform.from_json(message["platform"]), message.get("preload", []))
                _serve_fresh(subject_side)
            _become_subject(message, subject_side, me)
        subject_side.close()
        socket.send_fds(control, [json.dumps({"pid": pid}).encode()], [judge_side.fileno()])
        judge_side.close()


def _prepare_template(platform: SubjectPlatform, preload: list[str]) -> None:
    enter_platform(platform)
    preimport([name for name in preload if not unimportable_on(platform, name)])
    # As the warm worker does with its own preload: kept out of the collector's sight for every descendant.
    gc.freeze()


def _serve_fresh(control: socket.socket) -> None:
    try:
        _serve(control)
    finally:
        os._exit(0)


def _read(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


CHANNEL_FD = 3


PRIVATE_LOG = "subject.log"


def private_log(box: dict | None) -> str | None:
    """Where a contained subject's log lives: in its own home, a tmpfs with a size and an inode limit mounted
    after containment (``contain._private_home``); None where it has none."""
    scratch = (box or {}).get("scratch")
    return os.path.join(scratch["path"], PRIVATE_LOG) if scratch else None


def move_log_inside(spec: SubjectSpec) -> None:
    """Point stdout and stderr at the subject's private log, now that it is contained: everything it writes, its
    log included, lands in its own bounded space; the log in the shared scratch area (opened before, for start-up
    failures) is closed, so a flood of output cannot fill the space its neighbours share."""
    path = private_log(spec.box.to_json())
    if path is None:
        return
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def _become_subject(message: dict, channel: socket.socket, zygote: int) -> None:
    """In the forked child: own session, only the channel and the log open, contained, then serve probes."""
    code = 0
    try:
        spec = SubjectSpec.from_json(message)
        contain.die_with_parent(zygote)
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        log = os.open(spec.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(channel.fileno(), CHANNEL_FD)
        os.closerange(CHANNEL_FD + 1, 1 << 16)
        sock = socket.socket(fileno=CHANNEL_FD)
        # Only the interpreter's own folders stay on the path, behind the patched tree and the probes; resolved
        # before the view hides the folders a symlinked environment is reached through (a worktree's .venv).
        resolved = [os.path.realpath(p) for p in sys.path if p]
        keep = [p for p in dict.fromkeys(resolved) if p.startswith(spec.interpreter_paths)]
        if spec.box is not None:
            contain.enter(spec.box.to_json())
            move_log_inside(spec)
        os.environ.clear()
        os.environ.update(spec.env)
        platform_environment(os.environ, _PLATFORM)
        tempfile.tempdir = None
        os.chdir(spec.cwd)
        sys.path[:] = [*spec.sys_path, *keep]
        if spec.box is not None and gpu_asked(spec.env):
            subject.bound_gpu_allocator(spec.box.gpu_memory_bytes)
        subject.serve(sock, spec.added_lines)
    except BaseException as exc:  # noqa: BLE001 - the subject never returns into the zygote's loop
        try:
            os.write(2, f"subject failed to start: {type(exc).__name__}: {exc}\n".encode())
        except OSError:
            pass
        code = 125
    finally:
        os._exit(code)
