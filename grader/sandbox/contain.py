"""Containment of a subject: the process that runs a candidate's (untrusted) code.

Mechanisms, each probed once and used only where this machine allows it (``describe_containment`` says which):

- resource limits (``resource_limits``): RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_CORE, RLIMIT_NOFILE and
  RLIMIT_NPROC;
- a private, unprivileged user: when the grader runs as root, the subject runs as its own uid from
  ``UID_RANGE`` (RLIMIT_NPROC is not enforced for root, and per-candidate uids keep parallel candidates from
  signalling or reading each other); with ``no_new_privs`` so no set-uid program gives root back. A uid is leased
  machine-wide (``UidLease``: a lock file per uid under ``UID_LOCK_DIR``, held for the sandbox's life), so two
  grader processes on one machine never hand out the same uid;
- a pids cgroup and a memory cgroup capping all tasks of one subject, and letting the grader kill every one of
  them, even those that left the process group with ``setsid``;
- a CPU share: a cpu cgroup capping all tasks of one subject at ``SUBJECT_CPUS`` CPUs (v2 ``cpu.max``, v1
  ``cpu.cfs_quota_us``) where this machine delegates one, and always a lower priority (``SUBJECT_NICE``), so a
  subject that forks spinners takes its own share and not its neighbours' (nor its judge's);
- its own network namespace (loopback only: no host socket, abstract unix sockets included), IPC namespace (no
  SysV object or POSIX queue outlives it or reaches another) and PID namespace (it sees only its own processes;
  killing its first process ends every one of them: that, and the cgroups, is how a subject is ended, never by
  uid);
- its own mount namespace with a private view: the shared writable places (/tmp, /var/tmp, /dev/shm, /run) and
  every hidden root (the repository, the grader's caches and scratch area) are covered by empty tmpfs mounts, and
  only what the subject needs is bound back: the interpreter (read-only), the patched tree, its import root and
  the staged probes (read-only). Its home is a tmpfs of its own; it and every writable cover have a size and an
  inode limit (``SCRATCH_BYTES``/``SCRATCH_INODES``), so a subject cannot fill the shared scratch area;
- the parent's death: the waiter outside the PID namespace and the namespace's first process die with the
  process that started them (``die_with_parent``), so nothing of a subject outlives a killed grader.

All of it is applied by ``enter`` in a single-threaded process right before the candidate's code is imported: in
a subject forked by the zygote, or in the tiny launcher (this file run as a script) for tests.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import json
import random
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# Limits for one candidate's test process tree.
CPU_SECONDS = 1200
ADDRESS_SPACE_BYTES = 32 << 30
FILE_SIZE_BYTES = 1 << 30
# Tasks (processes and threads) of one candidate's uid or cgroup: torch and Triton start a few dozen threads.
MAX_TASKS = 512
UID_RANGE = range(420_000, 430_000)
# One lock file per leased uid; machine-wide (not per cache), since two graders with different caches share uids.
# (Named here, not in grader.sandbox.protocol, which lists it: this module also runs as a bare script.)
UID_LOCKS_VARIABLE = "GRADER_UID_LOCKS"
UID_LOCK_DIR = Path(os.environ.get(UID_LOCKS_VARIABLE, "/run/grader-uids"))
# Open files of one subject process: with torch, Triton and every task's vLLM modules imported it holds 4 on CPU
# (scripts/measure_subject_fds.py; its --gpu adds a CUDA context's device files); the rest is room for the
# probes' own files and sockets.
OPEN_FILES = 1024
# Each writable place of a subject (its home, and the covers of /tmp, /var/tmp, /dev/shm, /run) is a tmpfs of its
# own with these limits: a subject that fills one gets ENOSPC itself, and the shared scratch area is untouched.
SCRATCH_BYTES = 512 << 20
SCRATCH_INODES = 16384
COVER_BYTES, COVER_INODES = 64 << 20, 4096
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run")
CGROUP_V1_PIDS = Path("/sys/fs/cgroup/pids")
CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1_MEMORY = Path("/sys/fs/cgroup/memory")
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
# One subject's CPU share: every task it starts together, at most this many CPUs; and its priority below the
# judges' (calibration subjects get the same, so budgets measure what candidates get).
SUBJECT_CPUS = 1
CPU_PERIOD_US = 100_000
SUBJECT_NICE = 5


CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


# ---------------------------------------------------------------------------------------------------------------
# Child side: runs in the launcher (or a forked worker) as root, right before the untrusted command.

def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def resource_limits(cpu_s: int = CPU_SECONDS, as_bytes: int = ADDRESS_SPACE_BYTES,
                    fsize_bytes: int = FILE_SIZE_BYTES, nproc: int | None = MAX_TASKS, nofile: int = OPEN_FILES):
    """A ``preexec_fn`` (or plain call in a forked child) lowering the soft and hard limits of the process.

    Hard limits are lowered too, so the candidate cannot raise them back. RLIMIT_NPROC counts every task
    (thread or process) of the process's real uid and is not enforced for root: it only bites together with
    ``drop_privileges`` (see ``describe_containment``)."""
    wanted = {resource.RLIMIT_CPU: cpu_s, resource.RLIMIT_AS: as_bytes, resource.RLIMIT_FSIZE: fsize_bytes,
              resource.RLIMIT_CORE: 0, resource.RLIMIT_NOFILE: nofile}
    if nproc is not None:
        wanted[resource.RLIMIT_NPROC] = nproc

    def apply() -> None:
        for limit, value in wanted.items():
            soft, hard = resource.getrlimit(limit)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            # The CPU limit's hard value sits a little above the soft one: SIGXCPU first, then SIGKILL.
            hard_cap = cap + 5 if limit == resource.RLIMIT_CPU and hard == resource.RLIM_INFINITY else cap
            resource.setrlimit(limit, (cap, hard_cap))

    return apply


def join_cgroup(*cgroups: str | None) -> None:
    for cgroup in cgroups:
        if cgroup:
            Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))


def _loopback_up() -> None:
    """A fresh network namespace has ``lo`` down; bring it up so in-process servers (gloo, zmq) still work."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        import fcntl
        ifreq = struct.pack("16sH14s", b"lo", 0, b"\0" * 14)
        flags = struct.unpack("16sH14s", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, ifreq))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b"\0" * 14))


def _closed_ancestor(path: str) -> str | None:
    """The outermost folder above ``path`` that others may not traverse (e.g. /root, mode 0700)."""
    parts = Path(path).parts
    for i in range(2, len(parts) + 1):
        folder = os.path.join(*parts[:i])
        try:
            if not os.stat(folder).st_mode & 0o001:
                return folder
        except OSError:
            return None
    return None


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _view_roots(hidden: list[str], kept: list[str]) -> list[str]:
    """The folders to cover: the shared writable places, the hidden roots, and any closed folder above a kept path
    (pyenv's Python under /root); only the outermost of nested ones."""
    roots = [d for d in (*SHARED_WRITABLE, *hidden) if os.path.isdir(d) and not os.path.islink(d)]
    roots += [c for c in map(_closed_ancestor, kept) if c]
    roots = sorted({os.path.realpath(r) for r in roots}, key=len)
    return [r for i, r in enumerate(roots) if not any(_under(r, q) for q in roots[:i])]


def _private_view(libc, binds: list[list], hidden: list[str], scratch: dict | None = None) -> list[str]:
    """In a fresh mount namespace: cover every root of ``_view_roots`` with an empty tmpfs, then bind back each
    ``[path, "ro"|"rw"]`` of ``binds`` that lies under one (read-only where asked), then mount the subject's own
    home (``scratch``: path, owner, size and inode limits) as a fresh tmpfs. Returns what was done."""
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    kept = {}
    for path, mode in binds:
        if os.path.exists(path):
            kept[os.path.realpath(path)] = mode
            # A path reached through a symlink (a worktree's .venv) is bound at its spelled place too: that is
            # the name sys.path and the tools were given.
            kept.setdefault(os.path.abspath(path), mode)
    done = []
    for root in _view_roots(hidden, list(kept)):
        inside = sorted((p for p in kept if _under(p, root)), key=len)
        held = [(p, kept[p], os.open(p, os.O_PATH)) for p in inside]
        mode = (f"mode={'1777' if root in SHARED_WRITABLE else '0755'},size={COVER_BYTES},"
                f"nr_inodes={COVER_INODES}").encode()
        _check(libc.mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, mode), f"tmpfs on {root}")
        for path, access, fd in held:
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(path, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                open(path, "a").close()
            source = f"/proc/self/fd/{fd}".encode()
            _check(libc.mount(source, path.encode(), None, MS_BIND | MS_REC, None), f"bind back {path}")
            if access == "ro":
                _check(libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                                  None), f"read-only {path}")
            os.close(fd)
        done.append(f"{root} covered" + (f", {len(inside)} path(s) bound back" if inside else ""))
    if scratch:
        done.append(_private_home(libc, scratch))
    return done


def _private_home(libc, scratch: dict) -> str:
    """Mount a tmpfs of its own, with a size and an inode limit, on the subject's home (its HOME and TMPDIR): what
    the subject writes there lives in its mount namespace only and is gone with it."""
    home = scratch["path"]
    os.makedirs(home, mode=0o755, exist_ok=True)
    options = (f"mode=0700,uid={scratch['uid']},gid={scratch['uid']},size={scratch['bytes']},"
               f"nr_inodes={scratch['inodes']}").encode()
    _check(libc.mount(b"tmpfs", home.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), f"tmpfs on {home}")
    return f"{home}: private tmpfs ({scratch['bytes']} bytes, {scratch['inodes']} inodes)"


def drop_privileges(uid: int, gid: int | None = None) -> None:
    libc = _libc()
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    os.setgroups([])
    os.setgid(uid if gid is None else gid)
    os.setuid(uid)


def enter(spec: dict) -> None:
    """Apply a ``Sandbox`` spec to the current (single-threaded) process. Raises on any failure: the caller must
    not run the untrusted code then. With a PID namespace the calling process stays outside as a waiter and only
    its child, the namespace's first process, returns from here."""
    parent = os.getppid()
    resource_limits(spec["cpu_s"], spec["as_bytes"], spec["fsize_bytes"], spec.get("nproc"),
                    spec.get("nofile", OPEN_FILES))()
    join_cgroup(spec.get("cgroup"), spec.get("memory_cgroup"), spec.get("cpu_cgroup"))
    os.setpriority(os.PRIO_PROCESS, 0, max(os.getpriority(os.PRIO_PROCESS, 0), spec.get("nice", SUBJECT_NICE)))
    libc = _libc()
    private_view = bool(spec.get("private_tmp"))
    flags = ((CLONE_NEWNET if spec.get("net") else 0) | (CLONE_NEWNS if private_view else 0)
             | (CLONE_NEWIPC if spec.get("ipc") else 0) | (CLONE_NEWPID if spec.get("pid") else 0))
    if flags and os.geteuid() != 0:
        uid, gid = os.geteuid(), os.getegid()
        _check(libc.unshare(CLONE_NEWUSER | flags), "unshare")
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
        Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    elif flags:
        _check(libc.unshare(flags), "unshare")
    if spec.get("net"):
        _loopback_up()
    if private_view:
        _private_view(libc, spec.get("binds", []), spec.get("hidden", []), spec.get("scratch"))
    if spec.get("pid"):
        _become_pid_namespace_init(libc, private_view, parent)
    if spec.get("uid") is not None:
        drop_privileges(spec["uid"])
    # Armed after the uid change, which clears it. The candidate may disarm its own; the waiter's cannot be.
    die_with_parent(None)


def die_with_parent(parent: int | None, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent ends; where ``parent`` (the pid it was started
    by) is given and that parent is already gone, exit now (it died before the signal was armed)."""
    _check(_libc().prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0), "parent-death signal")
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def _become_pid_namespace_init(libc, own_proc: bool, parent: int) -> None:
    """Fork into the new PID namespace; the parent waits there and exits with the child's status. The waiter stays
    root and outside the namespace, where the candidate cannot reach it: when its own parent dies it kills the
    namespace's first process (which ends every process in the namespace), even one that disarmed its own
    parent-death signal."""
    child = os.fork()
    if child:
        def end_namespace(signum, frame) -> None:
            os.kill(child, signal.SIGKILL)
            os._exit(125)

        signal.signal(signal.SIGTERM, end_namespace)
        die_with_parent(parent, signal.SIGTERM)
        for fd in range(3, 1 << 10):
            try:
                os.close(fd)
            except OSError:
                pass
        code = 125
        try:
            _, status = os.waitpid(child, 0)
            code = os.waitstatus_to_exitcode(status) & 0xFF
            if os.WIFSIGNALED(status):  # die of the same signal, so the caller sees what ended the subject
                sig = os.WTERMSIG(status)
                if sig not in (signal.SIGKILL, signal.SIGSTOP):
                    signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)
        finally:
            os._exit(code)
    if own_proc:
        # A /proc of this namespace: the subject sees its own processes, not the host's.
        _check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")


def end_subject(pid: int | None, spec: dict | None) -> None:
    """End a subject started as process ``pid`` (the waiter outside its PID namespace, or the subject itself where
    there is none) and everything it started: the namespace's first process is killed (the kernel then kills every
    process in the namespace), the waiter and its process group, then whatever is left in the spec's cgroups."""
    if pid is not None:
        for target in [*children_of(pid), pid]:
            try:
                os.kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    kill_contained(spec)


def children_of(pid: int) -> list[int]:
    """The live child processes of ``pid`` (read from /proc)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def kill_contained(spec: dict | None) -> None:
    """SIGKILL every process in a sandbox spec's cgroups (the subject and anything it started, ``setsid`` or not).
    Never by uid: a uid names no process of this sandbox alone once the lease is gone, and killing by it could
    reach another grader's subject."""
    if not spec:
        return
    for _ in range(50):
        pids = _pids_of(spec) - {os.getpid()}
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    """Not a zombie: a killed subject whose parent is gone waits to be reaped by init, and is no longer running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:][:1] not in ("Z", "X")


def _pids_of(spec: dict) -> set[int]:
    found = set()
    for group in (spec.get("cgroup"), spec.get("memory_cgroup")):
        if group:
            try:
                found |= {int(p) for p in Path(group, "cgroup.procs").read_text().split()}
            except OSError:
                pass
    return {pid for pid in found if _alive(pid)}


def _launcher_main(argv: list[str]) -> None:
    """``python contain.py SPEC_JSON -- CMD...``: contain this process, then exec CMD."""
    spec, sep, command = json.loads(argv[0]), argv[1], argv[2:]
    assert sep == "--" and command
    try:
        die_with_parent(spec.get("parent"))
        enter(spec)
    except Exception as exc:  # never run the untrusted command half-contained
        sys.stderr.write(f"grader containment failed: {exc}\n")
        os._exit(125)
    os.execvpe(command[0], command, os.environ)


# ---------------------------------------------------------------------------------------------------------------
# Parent side: probing, preparing and cleaning up.

@dataclass
class Capabilities:
    is_root: bool
    drop_uid: bool
    drop_uid_reason: str
    net: bool
    net_reason: str
    private_tmp: bool
    private_tmp_reason: str
    cgroup: str | None
    cgroup_reason: str
    nproc_enforced: bool
    ipc_pid: bool = False
    ipc_pid_reason: str = ""
    memory_cgroup: str | None = None
    memory_reason: str = ""
    cpu_cgroup: str | None = None
    cpu_reason: str = ""
    notes: list[str] = field(default_factory=list)


_PROBED: Capabilities | None = None
_PROBE_LOCK = threading.Lock()


def _launcher_argv(spec: dict) -> list[str]:
    return [sys.executable, "-E", "-S", "-s", str(Path(__file__).resolve()), json.dumps(spec), "--"]


def _try(spec: dict, command: list[str]) -> tuple[bool, str]:
    try:
        proc = subprocess.run(_launcher_argv(spec) + command, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return proc.returncode == 0, (proc.stderr or proc.stdout).strip()[-300:]


def _cgroup_parent() -> tuple[Path | None, str]:
    if CGROUP_V1_PIDS.is_dir() and os.access(CGROUP_V1_PIDS, os.W_OK):
        return CGROUP_V1_PIDS, "cgroup v1 pids controller"
    controllers = CGROUP_V2 / "cgroup.controllers"
    if controllers.is_file() and "pids" in controllers.read_text().split():
        try:
            mine = Path("/proc/self/cgroup").read_text().splitlines()
            rel = next(line.split("::", 1)[1] for line in mine if line.startswith("0::"))
        except (OSError, StopIteration):
            return None, "cgroup v2 without a unified entry for this process"
        parent = CGROUP_V2 / rel.lstrip("/")
        if os.access(parent, os.W_OK) and "pids" in (parent / "cgroup.subtree_control").read_text().split():
            return parent, "cgroup v2 pids controller"
        return None, "cgroup v2: the pids controller is not delegated to this process's group"
    return None, "no writable pids cgroup (/sys/fs/cgroup is read-only or has no pids controller)"


def probe(refresh: bool = False) -> Capabilities:
    """What this machine allows, tried for real once per process (a second or so)."""
    global _PROBED
    with _PROBE_LOCK:
        if _PROBED is not None and not refresh:
            return _PROBED
        is_root = os.geteuid() == 0
        base = {"cpu_s": 30, "as_bytes": ADDRESS_SPACE_BYTES, "fsize_bytes": FILE_SIZE_BYTES, "nproc": None}
        trivial = [sys.executable, "-S", "-c", "pass"]
        view = {"private_tmp": True, "binds": [[p, "ro"] for p in interpreter_paths()], "hidden": []}
        net, net_reason = _try({**base, "net": True}, trivial)
        net_reason = "own network namespace, loopback only" if net else f"unavailable: {net_reason}"
        tmp, tmp_reason = _try({**base, **view}, trivial)
        tmp_reason = ("own mount namespace: private /tmp, /var/tmp, /dev/shm, /run and home, each with a size and an "
                      "inode limit; repository, caches and other candidates' trees hidden" if tmp
                      else f"unavailable: {tmp_reason}")
        ipc_pid, ipc_pid_reason = _try({**base, **(view if tmp else {}), "ipc": True, "pid": True}, trivial)
        ipc_pid_reason = ("own IPC and PID namespaces" if ipc_pid else f"unavailable: {ipc_pid_reason}")
        if is_root:
            lease = UidLease()
            try:
                drop, drop_reason = _try({**base, **(view if tmp else {}), "uid": lease.uid}, trivial)
            finally:
                lease.release()
            drop_reason = ("runs as a per-candidate unprivileged uid, leased machine-wide" if drop
                           else f"setuid failed: {drop_reason}")
        else:
            drop, drop_reason = False, f"the grader is not root (uid {os.geteuid()}): the subject keeps this uid"
        parent, cg_reason = _cgroup_parent()
        cgroup = None
        if parent is not None:
            trial = parent / f"grader-probe-{os.getpid()}"
            try:
                trial.mkdir(exist_ok=True)
                (trial / "pids.max").write_text("8")
                trial.rmdir()
                cgroup = str(parent)
            except OSError as exc:
                cg_reason = f"cannot make a pids cgroup under {parent}: {exc}"
        caps = Capabilities(is_root, drop, drop_reason, net, net_reason, tmp, tmp_reason, cgroup, cg_reason,
                            nproc_enforced=drop or not is_root, ipc_pid=ipc_pid, ipc_pid_reason=ipc_pid_reason)
        caps.memory_cgroup, caps.memory_reason = _probe_memory_cgroup()
        caps.cpu_cgroup, caps.cpu_reason = _probe_cpu_cgroup()
        if is_root and not drop:
            caps.notes.append("running as root without a uid to drop to: RLIMIT_NPROC is not enforced")
        _PROBED = caps
        return caps


def _probe_memory_cgroup() -> tuple[str | None, str]:
    """A v1 memory group nested under this process's own (so the machine's own accounting still holds)."""
    try:
        rel = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                   if line.split(":")[1] == "memory")
    except (OSError, StopIteration, IndexError):
        return None, "no memory cgroup (v1) for this process"
    parent = CGROUP_V1_MEMORY / rel.lstrip("/")
    trial = parent / f"grader-probe-{os.getpid()}"
    try:
        trial.mkdir(exist_ok=True)
        (trial / "memory.limit_in_bytes").write_text(str(1 << 30))
        trial.rmdir()
    except OSError as exc:
        return None, f"cannot make a memory cgroup under {parent}: {exc.strerror}"
    return str(parent), "memory cgroup (v1)"


def _probe_cpu_cgroup() -> tuple[str | None, str]:
    """A cpu group for subjects: v2 (``cpu.max``) under this process's own where the cpu controller is delegated,
    else v1 (``cpu.cfs_quota_us``) under its own; None (priority alone) where neither can be made."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None, "no cgroup for this process: CPU share by priority only"
    v1 = next((line.split(":", 2)[2] for line in lines if "cpu" in line.split(":")[1].split(",")), None)
    v2 = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    candidates = []
    if v2 is not None and (CGROUP_V2 / v2.lstrip("/") / "cgroup.controllers").is_file():
        candidates.append((CGROUP_V2 / v2.lstrip("/"), "cpu.max", f"{SUBJECT_CPUS * CPU_PERIOD_US} {CPU_PERIOD_US}",
                           "cpu cgroup (v2 cpu.max)"))
    if v1 is not None:
        candidates.append((CGROUP_V1_CPU / v1.lstrip("/"), "cpu.cfs_quota_us", str(SUBJECT_CPUS * CPU_PERIOD_US),
                           "cpu cgroup (v1 cfs quota)"))
    reason = "no cpu cgroup can be made: CPU share by priority only"
    for parent, limit_file, limit, name in candidates:
        trial = parent / f"grader-probe-cpu-{os.getpid()}"
        try:
            trial.mkdir(exist_ok=True)
            (trial / limit_file).write_text(limit)
            trial.rmdir()
        except OSError as exc:
            reason = f"cannot make a cpu cgroup under {parent}: {exc.strerror}; CPU share by priority only"
            continue
        return str(parent), name
    return None, reason


def cpu_limit(caps: Capabilities) -> tuple[str, str]:
    """The file and value that cap one subject's CPU share in ``caps.cpu_cgroup``."""
    if caps.cpu_reason.startswith("cpu cgroup (v2"):
        return "cpu.max", f"{SUBJECT_CPUS * CPU_PERIOD_US} {CPU_PERIOD_US}"
    return "cpu.cfs_quota_us", str(SUBJECT_CPUS * CPU_PERIOD_US)


def interpreter_paths() -> list[str]:
    """The Python installation and environment a subject needs (bound back read-only into its view)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parents[1])}
    # Both spellings: sys.path names the folders as the interpreter was started (a symlinked venv), the
    # sandbox binds what they resolve to.
    return sorted({os.path.realpath(p) for p in paths} | {os.path.abspath(p) for p in paths})


class UidLease:
    """One uid of ``UID_RANGE``, leased machine-wide: an exclusive ``flock`` on its lock file in ``UID_LOCK_DIR``,
    held until ``release``. Locks on separate opens exclude each other within one process too, and the kernel drops
    a lock with its holder, so a killed grader's uids are free again at once."""

    def __init__(self, folder: Path = UID_LOCK_DIR, uids: range = UID_RANGE) -> None:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        start = random.randrange(len(uids))
        for i in range(len(uids)):
            uid = uids[(start + i) % len(uids)]
            fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self.fd = uid, fd
            return
        raise OSError(errno.EAGAIN, f"every uid of {uids.start}-{uids.stop - 1} is leased (lock files in {folder})")

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@dataclass
class Sandbox:
    """One subject's containment, as a spec ``enter`` applies; call ``cleanup`` when the run ends."""

    spec: dict
    caps: Capabilities
    cgroup_path: Path | None = None
    memory_cgroup_path: Path | None = None
    cpu_cgroup_path: Path | None = None
    uid_lease: UidLease | None = None

    def argv(self, command: list[str]) -> list[str]:
        """The launcher command line that contains itself with this spec, then execs ``command`` (for tests)."""
        return _launcher_argv(self.spec) + list(command)

    def pids(self) -> set[int]:
        return _pids_of(self.spec)

    def cleanup(self, pgid: int | None = None) -> None:
        """Kill everything the subject left (``pgid``: the process it was started as, see ``end_subject``), remove
        the cgroups, and give the uid back to the machine's pool."""
        end_subject(pgid, self.spec)
        for group in (self.cgroup_path, self.memory_cgroup_path, self.cpu_cgroup_path):
            for _ in range(100 if group is not None else 0):
                try:
                    group.rmdir()
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                        break
                    time.sleep(0.05)
        if self.uid_lease is not None:
            self.uid_lease.release()


def prepare(home: Path, visible: list[Path] = (), hidden: list[Path] = (), writable: list[Path] = (),
            lend: list[Path] | None = None, cpu_s: int = CPU_SECONDS,
            as_bytes: int = ADDRESS_SPACE_BYTES, fsize_bytes: int = FILE_SIZE_BYTES,
            max_tasks: int = MAX_TASKS, memory_bytes: int | None = None, net: bool = True,
            private_tmp: bool = True, drop_uid: bool = True) -> Sandbox:
    """One subject's containment. ``home`` becomes the subject's own (writable) folder; ``visible`` paths are
    bound back read-only into its view, ``writable`` ones (a tree lent to a tool) writable; every ``hidden`` root
    is covered. Where a uid is dropped to, ``home`` and ``writable`` (or, when given, only the ``lend`` paths in
    them: the files a tool may change and the folders it may write in) are chowned to it (``give_back`` returns
    them) and each visible path made readable; everything else stays root's."""
    caps = probe()
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    view = private_tmp and caps.private_tmp
    binds = ([[p, "ro"] for p in interpreter_paths()] + [[str(v), "ro"] for v in visible]
             + [[str(w), "rw"] for w in writable] + [[str(home), "rw"]])
    spec: dict = {"memory_bytes": memory_bytes or default_memory_bytes(), "cpu_s": cpu_s, "as_bytes": as_bytes,
                  "fsize_bytes": fsize_bytes, "nofile": OPEN_FILES, "nproc": None, "net": net and caps.net,
                  "private_tmp": view, "ipc": caps.ipc_pid, "pid": caps.ipc_pid and view, "binds": binds,
                  "hidden": sorted({str(Path(h)) for h in hidden}), "parent": os.getpid()}
    lease = None
    if drop_uid and caps.drop_uid:
        lease = UidLease()
        uid = lease.uid
        spec["uid"] = uid
        spec["nproc"] = max_tasks
        for path in [home, *(writable if lend is None else [])]:
            _chown_tree(Path(path), uid)
        for path in lend or []:
            os.chown(path, uid, uid, follow_symlinks=False)
        for path in [home, *visible, *writable]:
            _open_to_others(Path(path))
    elif not caps.is_root:
        spec["nproc"] = max_tasks
    if view:
        # The home is bound back only where no tmpfs can be had for it; normally it is a private one.
        binds.remove([str(home), "rw"])
        spec["scratch"] = {"path": str(home.resolve()), "uid": spec.get("uid", 0),  # 0: itself, in a user ns
                           "bytes": SCRATCH_BYTES, "inodes": SCRATCH_INODES}
    box = Sandbox(spec, caps, uid_lease=lease)
    name = f"grader-pid{os.getpid()}-{home.parent.name}-{home.name}"  # see leftovers.reclaim
    if caps.cgroup:
        box.cgroup_path = _new_cgroup(Path(caps.cgroup) / name, "pids.max", max_tasks)
        if box.cgroup_path is not None:
            spec["cgroup"] = str(box.cgroup_path)
    if caps.memory_cgroup:
        box.memory_cgroup_path = _new_cgroup(Path(caps.memory_cgroup) / name, "memory.limit_in_bytes",
                                             spec["memory_bytes"])
        if box.memory_cgroup_path is not None:
            spec["memory_cgroup"] = str(box.memory_cgroup_path)
    if caps.cpu_cgroup:
        box.cpu_cgroup_path = _new_cgroup(Path(caps.cpu_cgroup) / name, *cpu_limit(caps))
        if box.cpu_cgroup_path is not None:
            spec["cpu_cgroup"] = str(box.cpu_cgroup_path)
    return box


def default_memory_bytes() -> int:
    """A subject's memory limit where the caller gives none (``grader.core.environment``, imported here and not at
    the top: this module also runs as a bare script that cannot import the grader)."""
    from grader.core.environment import default_memory_bytes as machine_default

    return machine_default()


def _open_to_others(path: Path) -> None:
    """Let another uid reach ``path``: traversable parents up to the scratch area, readable folders."""
    for parent in path.parents:
        if parent == parent.parent or str(parent) in ("/tmp", "/dev/shm", "/var/tmp"):
            break
        mode = parent.stat().st_mode
        if not mode & 0o001:
            os.chmod(parent, (mode & 0o7777) | 0o011)
    if path.is_dir() and not path.is_symlink():
        os.chmod(path, (path.stat().st_mode & 0o7777) | 0o055)


def _new_cgroup(group: Path, limit_file: str, limit: int) -> Path | None:
    """Create one subject's cgroup with its limit; None where this machine refuses (containment goes on without)."""
    try:
        group.mkdir()
        (group / limit_file).write_text(str(limit))
    except OSError:
        return None
    return group


def give_back(path: Path, lent: list[Path] | None = None) -> None:
    """Return what was lent to a sandbox's uid (the whole folder, or the ``lent`` paths and whatever it created in
    them) to this process's user, so that uid can no longer write it; no set-id bits survive."""
    me = os.geteuid()
    roots = [Path(path)] if lent is None else [Path(p) for p in lent]
    for root in roots:
        if not os.path.lexists(root):  # a lent file the tool removed or renamed away
            continue
        for sub in [root, *(root.rglob("*") if root.is_dir() and not root.is_symlink() else [])]:
            info = os.lstat(sub)
            if lent is not None and sub != root and info.st_uid == me:
                continue
            os.chown(sub, me, os.getegid(), follow_symlinks=False)
            if not sub.is_symlink():
                os.chmod(sub, info.st_mode & 0o777)


def _chown_tree(path: Path, uid: int, gid: int | None = None) -> None:
    gid = uid if gid is None else gid
    os.chown(path, uid, gid, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for sub in path.rglob("*"):
            os.chown(sub, uid, gid, follow_symlinks=False)


def describe_containment(box: Sandbox | None = None) -> dict:
    """Plain facts on what contains a subject, for run info and reports."""
    caps = box.caps if box is not None else probe()
    spec = box.spec if box is not None else {}
    limits = {"cpu_s": spec.get("cpu_s", CPU_SECONDS), "address_space_bytes": spec.get("as_bytes", ADDRESS_SPACE_BYTES),
              "file_size_bytes": spec.get("fsize_bytes", FILE_SIZE_BYTES),
              "open_files": spec.get("nofile", OPEN_FILES)}
    return {
        "limits": limits,
        "process": "the candidate's code runs only in a subject process; pytest and every assertion run in a "
                   "judge process that never imports it",
        "user": caps.drop_uid_reason,
        "tasks": (f"at most {MAX_TASKS} tasks (RLIMIT_NPROC of its own uid)" if caps.nproc_enforced
                  else "RLIMIT_NPROC not enforced (root)")
                 + (f"; pids cgroup (max {MAX_TASKS})" if caps.cgroup else f"; {caps.cgroup_reason}"),
        "memory": (f"{caps.memory_reason}, at most {spec.get('memory_bytes') or default_memory_bytes()} bytes"
                   if caps.memory_cgroup else f"{caps.memory_reason}; host memory bounded by the judge's watch"),
        "network": caps.net_reason,
        "namespaces": caps.ipc_pid_reason,
        "filesystem": caps.private_tmp_reason + ("; tree read-only to the candidate"
                                                 if caps.drop_uid else "; no write protection (same uid)"),
        "notes": list(caps.notes),
    }


def summary_line(box: Sandbox | None = None) -> str:
    d = describe_containment(box)
    return "; ".join([d["process"], d["user"], d["tasks"], d["memory"], d["network"], d["namespaces"],
                      d["filesystem"]])


if __name__ == "__main__":
    _launcher_main(sys.argv[1:])
