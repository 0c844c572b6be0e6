"""Containment for the hidden-test subprocess that runs a candidate's (untrusted) code.

Mechanisms, each probed once and used only where this machine allows it (``describe_containment`` says which):

- resource limits (``resource_limits``): RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_CORE and RLIMIT_NPROC;
- a private, unprivileged user: when the grader runs as root, the child runs as its own uid from
  ``UID_RANGE`` (RLIMIT_NPROC is not enforced for root, and per-candidate uids keep parallel candidates from
  signalling or reading each other); with ``no_new_privs`` so no set-uid program gives root back;
- a pids cgroup (v1 ``/sys/fs/cgroup/pids`` or a v2 group with the pids controller) capping all tasks of one
  candidate, threads included, and letting the grader kill every one of them, even those that left the
  process group with ``setsid``;
- a network namespace with only its own loopback (up): nothing outside, not even the host's 127.0.0.1;
- a mount namespace in which the shared writable places (/tmp, /var/tmp, /dev/shm, /run/lock) are private:
  a fresh tmpfs, or a read-only view where something the run needs (the Python installation, the repository)
  lies under it; the candidate's scratch folder is bound back writable.

All of it is set up by a tiny launcher (this file run as a script, standard library only, before the real
command is exec'd), so nothing runs in a ``preexec_fn`` of a threaded parent. The in-process entry ``enter`` is
the same code for a forked worker.

Usage from grader.run (see ``Sandbox``)::

    box = contain.prepare(scratch, timeout=timeout)
    proc = subprocess.Popen(box.argv(pytest_command(task)), ..., start_new_session=True)
    ...
    box.cleanup()   # kills whatever is left (process group, cgroup, uid) and removes the cgroup
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import itertools
import json
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
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
CGROUP_V1_PIDS = Path("/sys/fs/cgroup/pids")
CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1_MEMORY = Path("/sys/fs/cgroup/memory")


def _default_memory_bytes() -> int:
    """Memory (RSS + page cache) of one candidate: 32 GiB, or half the machine's RAM where that is less."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 32 << 30
    return min(32 << 30, total // 2)


MEMORY_BYTES = _default_memory_bytes()

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
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
                    fsize_bytes: int = FILE_SIZE_BYTES, nproc: int | None = MAX_TASKS):
    """A ``preexec_fn`` (or plain call in a forked child) lowering the soft and hard limits of the process.

    Hard limits are lowered too, so the candidate cannot raise them back. RLIMIT_NPROC counts every task
    (thread or process) of the process's real uid and is not enforced for root: it only bites together with
    ``drop_privileges`` (see ``describe_containment``)."""
    wanted = {resource.RLIMIT_CPU: cpu_s, resource.RLIMIT_AS: as_bytes, resource.RLIMIT_FSIZE: fsize_bytes,
              resource.RLIMIT_CORE: 0}
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


def _private_shared_dirs(libc, keep_writable: list[str], needed: list[str]) -> list[str]:
    """In a fresh mount namespace: make each shared writable dir private; bind ``keep_writable`` back."""
    done = []
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    done += _expose_needed(libc, needed)
    for shared in SHARED_WRITABLE:
        if not os.path.isdir(shared) or os.path.islink(shared):
            continue
        inside = [p for p in keep_writable if p == shared or p.startswith(shared.rstrip("/") + "/")]
        # Hold the folders to bind back before they are covered.
        held = [(p, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p in inside]
        needs_view = any(n == shared or n.startswith(shared.rstrip("/") + "/") for n in needed)
        target = shared.encode()
        if needs_view:
            _check(libc.mount(target, target, None, MS_BIND | MS_REC, None), f"bind {shared}")
            _check(libc.mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None),
                   f"read-only {shared}")
            done.append(f"{shared} read-only")
        else:
            _check(libc.mount(b"tmpfs", target, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777,size=2g"),
                   f"tmpfs on {shared}")
            done.append(f"{shared} private tmpfs")
        for path, fd in held:
            if not needs_view:
                os.makedirs(path, mode=0o755, exist_ok=True)
            _check(libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None),
                   f"bind back {path}")
            os.close(fd)
    return done


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


def _expose_needed(libc, needed: list[str]) -> list[str]:
    """A needed path under a closed folder (pyenv's Python under /root): cover that folder with an empty tmpfs
    and bind only the needed path back, so the unprivileged child can reach it and nothing else there."""
    done = []
    groups: dict[str, list[str]] = {}
    for path in sorted({os.path.realpath(p) for p in needed if os.path.exists(p)}):
        closed = _closed_ancestor(path)
        if closed is not None:
            groups.setdefault(closed, []).append(path)
    for closed, paths in groups.items():
        paths = [p for p in paths if not any(p != q and p.startswith(q + "/") for q in paths)]
        held = [(p, os.open(p, os.O_PATH)) for p in paths]
        _check(libc.mount(b"tmpfs", closed.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=1m"),
               f"tmpfs on {closed}")
        for path, fd in held:
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(path, mode=0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                open(path, "a").close()
            _check(libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None),
                   f"bind back {path}")
            os.close(fd)
        done.append(f"{closed} hidden except {', '.join(paths)}")
    return done


def drop_privileges(uid: int, gid: int | None = None) -> None:
    libc = _libc()
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    os.setgroups([])
    os.setgid(uid if gid is None else gid)
    os.setuid(uid)


def enter(spec: dict) -> None:
    """Apply a ``Sandbox`` spec to the current (single-threaded) process. Raises on any failure: the caller
    must not run the untrusted command then."""
    resource_limits(spec["cpu_s"], spec["as_bytes"], spec["fsize_bytes"], spec.get("nproc"))()
    join_cgroup(spec.get("cgroup"), spec.get("memory_cgroup"))
    libc = _libc()
    flags = (CLONE_NEWNET if spec.get("net") else 0) | (CLONE_NEWNS if spec.get("private_tmp") else 0)
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
    if spec.get("private_tmp"):
        _private_shared_dirs(libc, spec.get("writable", []), spec.get("needed", []))
    if spec.get("uid") is not None:
        drop_privileges(spec["uid"])


def _launcher_main(argv: list[str]) -> None:
    """``python contain.py SPEC_JSON -- CMD...``: contain this process, then exec CMD."""
    spec, sep, command = json.loads(argv[0]), argv[1], argv[2:]
    assert sep == "--" and command
    try:
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
    memory_cgroup: str | None = None
    memory_reason: str = ""
    notes: list[str] = field(default_factory=list)


_PROBED: Capabilities | None = None
_PROBE_LOCK = threading.Lock()
_UIDS = itertools.count()
_UID_LOCK = threading.Lock()


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
        net, net_reason = _try({**base, "net": True}, [sys.executable, "-S", "-c", "pass"])
        net_reason = "own network namespace, loopback only" if net else f"unavailable: {net_reason}"
        tmp, tmp_reason = _try({**base, "private_tmp": True, "needed": _needed_paths(), "writable": []},
                               [sys.executable, "-S", "-c", "pass"])
        tmp_reason = "own mount namespace, private /tmp, /var/tmp, /dev/shm" if tmp else f"unavailable: {tmp_reason}"
        if is_root:
            drop, drop_reason = _try({**base, "uid": UID_RANGE[0], "private_tmp": tmp, "needed": _needed_paths(),
                                      "writable": []}, [sys.executable, "-S", "-c", "pass"])
            drop_reason = "runs as a per-candidate unprivileged uid" if drop else f"setuid failed: {drop_reason}"
        else:
            drop, drop_reason = False, f"the grader is not root (uid {os.geteuid()}): the child keeps this uid"
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
                            nproc_enforced=drop or not is_root)
        caps.memory_cgroup, caps.memory_reason = _probe_memory_cgroup()
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


def _needed_paths() -> list[str]:
    """What the child reads that may live under a shared writable folder (kept as a read-only view)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parents[1]),
             str(Path(__file__).resolve().parents[1])}
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry:
            paths.add(entry)
    return sorted(paths)


def isolation_prefix() -> tuple[list[str], str]:
    """The simplest network isolation, as an argv prefix, with the reason: ``unshare --net`` as root,
    ``unshare -rn`` otherwise, or [] where the OS does not allow it. (``Sandbox.argv`` does more.)"""
    argv = ["unshare", "--net", "--"] if os.geteuid() == 0 else ["unshare", "-rn", "--"]
    try:
        ok = subprocess.run(argv + ["true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"no network isolation: {exc}"
    return (argv, "own network namespace") if ok else ([], "no network isolation: unshare --net is refused here")


def _allocate_uid() -> int:
    with _UID_LOCK:
        return UID_RANGE[(os.getpid() * 7 + next(_UIDS)) % len(UID_RANGE)]


@dataclass
class Sandbox:
    """One candidate's containment: build the command with ``argv``, call ``cleanup`` when the run ends."""

    spec: dict
    caps: Capabilities
    cgroup_path: Path | None = None
    memory_cgroup_path: Path | None = None

    def argv(self, command: list[str]) -> list[str]:
        return _launcher_argv(self.spec) + list(command)

    def enter(self) -> None:
        """For a forked worker: contain the current process (single-threaded, still root) instead of ``argv``."""
        enter(self.spec)

    def pids(self) -> set[int]:
        found = set()
        for group in (self.cgroup_path, self.memory_cgroup_path):
            if group is not None:
                try:
                    found |= {int(p) for p in (group / "cgroup.procs").read_text().split()}
                except OSError:
                    pass
        uid = self.spec.get("uid")
        if uid is not None:
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        if entry.stat().st_uid == uid:
                            found.add(int(entry.name))
                    except OSError:
                        pass
        return found

    def cleanup(self, pgid: int | None = None) -> int:
        """Kill everything the candidate left: its process group, its cgroup, its uid. Returns how many."""
        killed = 0
        if pgid is not None:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for _ in range(50):  # a fork loop may still be spawning: repeat until nothing is left
            pids = self.pids() - {os.getpid()}
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.05)
        for group in (self.cgroup_path, self.memory_cgroup_path):
            for _ in range(100 if group is not None else 0):
                try:
                    group.rmdir()
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                        break
                    time.sleep(0.05)
        return killed

    def describe(self) -> dict:
        return describe_containment(self)


def prepare(scratch: Path, writable: list[Path] | None = None, cpu_s: int = CPU_SECONDS,
            as_bytes: int = ADDRESS_SPACE_BYTES, fsize_bytes: int = FILE_SIZE_BYTES,
            max_tasks: int = MAX_TASKS, memory_bytes: int = MEMORY_BYTES, net: bool = True, private_tmp: bool = True,
            drop_uid: bool = True) -> Sandbox:
    """Set up one candidate's containment around ``scratch`` (the folder holding its tree, HOME, evidence).

    When a uid is dropped to: ``scratch`` and the tree become traversable/readable by it, and ``scratch/home``
    plus every file or folder directly in ``scratch`` named in ``writable`` (the evidence file) become its own.
    Everything else stays root's: the tree itself is read-only to the candidate."""
    caps = probe()
    scratch = Path(scratch)
    spec: dict = {"memory_bytes": memory_bytes, "cpu_s": cpu_s, "as_bytes": as_bytes, "fsize_bytes": fsize_bytes, "nproc": None,
                  "net": net and caps.net, "private_tmp": private_tmp and caps.private_tmp,
                  "writable": [str(scratch)], "needed": _needed_paths()}
    if drop_uid and caps.drop_uid:
        # The uid probe ran with the private mounts (they expose a Python under a closed /root): keep them.
        spec["private_tmp"] = caps.private_tmp
        uid = _allocate_uid()
        spec["uid"] = uid
        spec["nproc"] = max_tasks
        os.chmod(scratch, 0o711)
        home = scratch / "home"
        home.mkdir(exist_ok=True)
        for path in [home, *(writable or [])]:
            _chown_tree(Path(path), uid)
        for child in scratch.iterdir():
            if child.is_dir() and child.name.startswith("tree-"):
                os.chmod(child, 0o755)
    elif not caps.is_root:
        spec["nproc"] = max_tasks
    box = Sandbox(spec, caps)
    name = f"grader-{os.getpid()}-{scratch.name}"
    if caps.cgroup:
        box.cgroup_path = _new_cgroup(Path(caps.cgroup) / name, "pids.max", max_tasks)
        if box.cgroup_path is not None:
            spec["cgroup"] = str(box.cgroup_path)
    if caps.memory_cgroup:
        box.memory_cgroup_path = _new_cgroup(Path(caps.memory_cgroup) / name, "memory.limit_in_bytes", memory_bytes)
        if box.memory_cgroup_path is not None:
            spec["memory_cgroup"] = str(box.memory_cgroup_path)
    return box


def _new_cgroup(group: Path, limit_file: str, limit: int) -> Path | None:
    """Create one candidate's cgroup with its limit; None where this machine refuses (containment goes on without)."""
    try:
        group.mkdir()
        (group / limit_file).write_text(str(limit))
    except OSError:
        return None
    return group


def _chown_tree(path: Path, uid: int) -> None:
    os.chown(path, uid, uid, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for sub in path.rglob("*"):
            os.chown(sub, uid, uid, follow_symlinks=False)


def describe_containment(box: Sandbox | None = None) -> dict:
    """Plain facts on what contains a candidate's run, for run info and reports."""
    caps = box.caps if box is not None else probe()
    spec = box.spec if box is not None else {}
    limits = {"cpu_s": spec.get("cpu_s", CPU_SECONDS), "address_space_bytes": spec.get("as_bytes", ADDRESS_SPACE_BYTES),
              "file_size_bytes": spec.get("fsize_bytes", FILE_SIZE_BYTES)}
    return {
        "limits": limits,
        "user": caps.drop_uid_reason,
        "tasks": (f"at most {MAX_TASKS} tasks (RLIMIT_NPROC of its own uid)" if caps.nproc_enforced
                  else "RLIMIT_NPROC not enforced (root)")
                 + (f"; pids cgroup (max {MAX_TASKS})" if caps.cgroup else f"; {caps.cgroup_reason}"),
        "memory": (f"{caps.memory_reason}, at most {spec.get('memory_bytes', MEMORY_BYTES)} bytes"
                   if caps.memory_cgroup else caps.memory_reason),
        "network": caps.net_reason,
        "filesystem": caps.private_tmp_reason + ("; tree and repository read-only to the candidate"
                                                 if caps.drop_uid else "; no write protection (same uid)"),
        "notes": list(caps.notes),
    }


def summary_line(box: Sandbox | None = None) -> str:
    d = describe_containment(box)
    return "; ".join([d["user"], d["tasks"], d["memory"], d["network"], d["filesystem"]])


def run_contained(command: list[str], env: dict[str, str], cwd: Path, log: Path, timeout: float,
                  box: Sandbox) -> tuple[int | None, bool]:
    """What ``ColdLauncher.run`` does, inside ``box``: (returncode, timed_out); everything left is killed."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(box.argv(command), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            return None, True
        finally:
            box.cleanup(proc.pid)
            proc.wait()


if __name__ == "__main__":
    _launcher_main(sys.argv[1:])
