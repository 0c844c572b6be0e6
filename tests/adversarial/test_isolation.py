"""Isolation between candidates and between graders on one machine (``grader.sandbox.contain``, ``channel``,
``leftovers``).

Part 1 tests each mechanism directly with tiny Python children (seconds): uids leased machine-wide, subjects ended
by PID namespace and cgroup (never by uid), a private scratch with size and inode limits, RLIMIT_NOFILE, a deadline
on every send from the judge, memory defaults read from the cgroup, leftovers of dead graders reclaimed.
Part 2 (``slow``) runs real grader processes: two at once on one machine (one grading a reference fix, one a
hostile candidate), a grader SIGKILLed mid-run (nothing of it survives, and the next run reclaims what it left).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from grader.pipeline.apply import hidden_roots, scratch_root
from grader.core import environment
from grader.sandbox import channel, client, contain, leftovers
from grader.sandbox.protocol import SandboxSpec, SubjectSpec
from test_containment import run_child  # noqa: E402  (the same sandboxed child runner)

REPO = Path(__file__).resolve().parents[2]
CAPS = contain.probe()
needs_uid = pytest.mark.skipif(not CAPS.drop_uid, reason=f"no unprivileged uid: {CAPS.drop_uid_reason}")
needs_view = pytest.mark.skipif(not CAPS.private_tmp, reason=f"no private mount view: {CAPS.private_tmp_reason}")
needs_pidns = pytest.mark.skipif(not (CAPS.ipc_pid and CAPS.private_tmp),
                                 reason=f"no PID namespace: {CAPS.ipc_pid_reason}")


@pytest.fixture
def scratch():
    path = Path(tempfile.mkdtemp(prefix="isolation-test-", dir=scratch_root()))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def processes_of_uid(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid and "Z" not in (entry / "stat").read_text().rsplit(")", 1)[1][:3]:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


# ---------------------------------------------------------------------------------------------------------------
# uids leased machine-wide

LEASE_AND_HOLD = """
import sys, time
from pathlib import Path
from grader.sandbox.contain import UidLease
lease = UidLease(Path(sys.argv[1]), range(int(sys.argv[2]), int(sys.argv[3])))
print(lease.uid, flush=True)
time.sleep(600)
"""


def hold_lease_in_another_process(folder: Path, uids: range) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", LEASE_AND_HOLD, str(folder), str(uids.start), str(uids.stop)],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    return proc, int(proc.stdout.readline())


def test_two_processes_never_lease_the_same_uid_and_a_dead_holders_uid_is_free_again(tmp_path):
    uids = range(500_000, 500_002)
    holder, held = hold_lease_in_another_process(tmp_path, uids)
    try:
        mine = contain.UidLease(tmp_path, uids)
        assert mine.uid != held and mine.uid in uids
        with pytest.raises(OSError, match="leased"):
            contain.UidLease(tmp_path, uids)  # both taken: one by the other process, one by this one
        mine.release()
        again = contain.UidLease(tmp_path, uids)
        assert again.uid == mine.uid
    finally:
        holder.kill()
        holder.wait()
    # The holder was SIGKILLed without releasing anything: the kernel dropped its lock with it.
    freed = contain.UidLease(tmp_path, range(held, held + 1))
    assert freed.uid == held
    freed.release()
    again.release()


@needs_uid
def test_sandboxes_of_two_grader_processes_get_different_uids(scratch):
    code = ("import sys; from grader.sandbox import contain; from pathlib import Path; "
            "box = contain.prepare(Path(sys.argv[1])); print(box.spec['uid'], flush=True); sys.stdin.read()")
    others = [subprocess.Popen([sys.executable, "-c", code, str(scratch / f"home-{i}")], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, cwd=REPO) for i in range(3)]
    try:
        theirs = [int(p.stdout.readline()) for p in others]
        mine = [contain.prepare(scratch / f"mine-{i}") for i in range(3)]
        uids = theirs + [box.spec["uid"] for box in mine]
        assert len(set(uids)) == len(uids), uids
        for box in mine:
            box.cleanup()
    finally:
        for proc in others:
            proc.communicate("")


# ---------------------------------------------------------------------------------------------------------------
# ended by namespace and cgroup, never by uid

@needs_uid
def test_cleanup_never_kills_another_sandboxs_process_of_the_same_uid(scratch):
    """The old collision: another grader's subject running as the same uid must survive this sandbox's clean-up."""
    box = contain.prepare(scratch / "home", hidden=hidden_roots())
    uid = box.spec["uid"]
    bystander = subprocess.Popen(["sleep", "120"],
                                 user=uid, group=uid, extra_groups=[], cwd="/")
    try:
        done = run_child(box, "import os; print('pid', os.getpid())")
        assert done.returncode == 0, done.stdout
        box.cleanup()
        assert bystander.poll() is None, "a process of the same uid outside the sandbox was killed"
    finally:
        bystander.kill()
        bystander.wait()


@needs_pidns
def test_a_subject_that_left_its_session_and_disarmed_its_parent_death_signal_is_ended_by_its_namespace(scratch):
    """No cgroup to fall back on: ending the namespace's first process must end the setsid, double-forked
    grandchild too."""
    box = contain.prepare(scratch / "home", hidden=hidden_roots())
    for key in ("cgroup", "memory_cgroup"):
        box.spec.pop(key, None)
    proc = subprocess.Popen(box.argv([sys.executable, "-c", textwrap.dedent("""
        import ctypes, os, sys, time
        ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)        # PR_SET_PDEATHSIG 0: disarm it
        middle = os.fork()
        if middle == 0:
            os.setsid()
            if os.fork() == 0:
                ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)
                time.sleep(300)
            os._exit(0)
        os.waitpid(middle, 0)  # the grandchild exists now, reparented to this namespace's first process
        print("ready", flush=True)
        time.sleep(300)
    """)]), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True, cwd="/")
    try:
        assert proc.stdout.readline().strip() == "ready"
        uid = box.spec.get("uid")
        if uid is not None:
            assert len(processes_of_uid(uid)) >= 2
        contain.end_subject(proc.pid, box.spec)
        proc.wait(timeout=30)
        for _ in range(100):
            if uid is None or not processes_of_uid(uid):
                break
            time.sleep(0.05)
        assert uid is None or not processes_of_uid(uid), "a process of the subject outlived its namespace"
    finally:
        proc.kill()
        proc.wait()
        box.cleanup()


@needs_pidns
def test_a_subject_dies_with_the_process_that_started_it(scratch):
    """SIGKILL the process that started the sandbox: the waiter kills the namespace, nothing survives."""
    box = contain.prepare(scratch / "home", hidden=hidden_roots())
    for key in ("cgroup", "memory_cgroup", "parent"):  # its parent is the starter below, not this process
        box.spec.pop(key, None)
    inner = box.argv([sys.executable, "-c", "import ctypes, time; ctypes.CDLL(None).prctl(1, 0, 0, 0, 0); "
                                            "print('ready', flush=True); time.sleep(300)"])
    starter = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                                "subprocess.Popen(sys.argv[1:]); time.sleep(300)", *inner],
                               stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert starter.stdout.readline().strip() == "ready"
        uid = box.spec.get("uid")
        assert uid is None or processes_of_uid(uid)
        starter.kill()
        starter.wait()
        for _ in range(200):
            if uid is None or not processes_of_uid(uid):
                break
            time.sleep(0.05)
        assert uid is None or not processes_of_uid(uid), "the subject outlived the process that started it"
    finally:
        starter.kill()
        box.cleanup()


# ---------------------------------------------------------------------------------------------------------------
# a private scratch with size and inode limits; RLIMIT_NOFILE

@needs_view
def test_zero_byte_files_exhaust_only_the_subjects_own_scratch(scratch):
    box = contain.prepare(scratch / "home", hidden=hidden_roots())
    done = run_child(box, f"""
        import errno, os
        for place in ("{scratch / 'home'}", "/tmp", "/dev/shm", "/var/tmp"):
            made, why = 0, None
            try:
                for i in range({contain.SCRATCH_INODES + 1000}):
                    open(os.path.join(place, f"f{{i}}"), "w").close()
                    made += 1
            except OSError as exc:
                why = errno.errorcode.get(exc.errno)
            print(place, made, why)
    """)
    lines = dict((line.split()[0], line.split()[1:]) for line in done.stdout.splitlines() if line.startswith("/"))
    assert set(lines) == {str(scratch / "home"), "/tmp", "/dev/shm", "/var/tmp"}, done.stdout
    for place, (made, why) in lines.items():
        assert why == "ENOSPC" and int(made) <= contain.SCRATCH_INODES, (place, done.stdout)
    assert not any((scratch / "home").iterdir()), "the subject's files reached the shared scratch area"


@needs_view
def test_a_big_file_fills_only_the_subjects_own_scratch(scratch):
    box = contain.prepare(scratch / "home", hidden=hidden_roots())
    box.spec["scratch"]["bytes"] = 8 << 20  # the mechanism, with a limit that is cheap to reach
    done = run_child(box, f"""
        import errno, os
        written = 0
        try:
            with open("{scratch / 'home'}/big", "wb") as out:
                for _ in range(64):
                    out.write(b"x" * (1 << 20))
                    out.flush()
                    written += 1
        except OSError as exc:
            print("stopped", errno.errorcode.get(exc.errno), written)
    """)
    assert "stopped ENOSPC" in done.stdout and int(done.stdout.split()[-1]) <= 8, done.stdout
    assert not (scratch / "home" / "big").exists()


def test_open_files_are_limited(scratch):
    box = contain.prepare(scratch / "home", hidden=hidden_roots())
    done = run_child(box, """
        import errno, os, resource
        print("limit", *resource.getrlimit(resource.RLIMIT_NOFILE))
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))
        except (ValueError, OSError):
            print("raise refused")
        held = []
        try:
            for _ in range(1 << 16):
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as exc:
            print("stopped", errno.errorcode.get(exc.errno), len(held))
    """)
    assert f"limit {contain.OPEN_FILES} {contain.OPEN_FILES}" in done.stdout, done.stdout
    assert "raise refused" in done.stdout and "stopped EMFILE" in done.stdout, done.stdout
    assert int(done.stdout.split()[-1]) < contain.OPEN_FILES


# ---------------------------------------------------------------------------------------------------------------
# a deadline on every send

def test_a_send_to_a_side_that_does_not_read_ends_at_its_deadline():
    mine, theirs = socket.socketpair()
    try:
        with pytest.raises(channel.SendTimeout):
            channel.send_frame(mine, {"probe": "x"}, [b"\0" * (16 << 20)], deadline=time.monotonic() + 0.5)
    finally:
        mine.close()
        theirs.close()


def test_a_subject_that_never_reads_is_a_broken_subject_not_a_hung_judge(tmp_path, monkeypatch):
    """A probe whose request the subject never reads fails as SubjectBroken within the probe's time."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    mine, theirs = socket.socketpair()
    monkeypatch.setattr(client.zygote, "spawn", lambda control, spec: (sleeper.pid, mine))
    handle = client.Subject("candidate", SubjectSpec("candidate", None, {}, (), (), str(tmp_path),
                                                     str(tmp_path / "subject.log")), control=None)
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            handle.call("probes.echo", timeout=1, payload="x" * (8 << 20))
        except BaseException as exc:  # noqa: BLE001 - the test looks at which one
            outcome.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(timeout=120)  # the test's safety net: a hung judge would never end
    try:
        assert not worker.is_alive(), "the judge blocked on a subject that does not read"
        assert len(outcome) == 1 and isinstance(outcome[0], client.SubjectBroken), outcome
        assert sleeper.wait(timeout=30) == -signal.SIGKILL  # the broken subject was ended
    finally:
        sleeper.kill()
        theirs.close()


# ---------------------------------------------------------------------------------------------------------------
# host memory bounded from outside where no memory cgroup does it

HOLD_MEMORY = """
import sys, time
held = bytearray(int(sys.argv[1]) << 20)
for i in range(0, len(held), 4096):
    held[i] = 1
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def unbounded_box(scratch: Path, memory_bytes: int) -> contain.Sandbox:
    """A sandbox as on a machine without a memory cgroup (the H200 hosts) and without RLIMIT_AS (a GPU subject)."""
    import resource

    box = contain.prepare(scratch / "home", hidden=hidden_roots(), as_bytes=resource.RLIM_INFINITY,
                          memory_bytes=memory_bytes)
    box.spec.pop("memory_cgroup", None)
    return box


def test_a_subject_over_its_host_memory_bound_is_ended_by_the_watch(scratch):
    from grader.sandbox import watchdog

    box = unbounded_box(scratch, 200 << 20)
    proc = subprocess.Popen(box.argv([sys.executable, "-c", HOLD_MEMORY, "600", "300"]), stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True, cwd="/")
    watch = watchdog.watch_for(proc.pid, box.spec, gpu=False)
    try:
        assert watch is not None and watch.host_bytes == 200 << 20
        proc.wait(timeout=120)
        assert proc.returncode != 0 and watch.reason and "over its bound of 200 MiB" in watch.reason, watch.reason
    finally:
        watch.stop()
        box.cleanup(proc.pid)
        proc.kill()
        proc.wait()


def test_a_subject_within_its_host_memory_bound_is_left_alone(scratch):
    from grader.sandbox import watchdog

    box = unbounded_box(scratch, 1 << 30)
    proc = subprocess.Popen(box.argv([sys.executable, "-c", HOLD_MEMORY, "50", "3"]), stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True, cwd="/")
    watch = watchdog.watch_for(proc.pid, box.spec, gpu=False)
    try:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "held" in out and watch.reason is None
    finally:
        watch.stop()
        box.cleanup(proc.pid)


def test_no_watch_where_a_memory_cgroup_bounds_the_subject(scratch):
    from grader.sandbox import watchdog

    assert watchdog.watch_for(1, {"memory_cgroup": "/sys/fs/cgroup/memory/x", "memory_bytes": 1 << 30}, False) is None


def test_the_judge_reports_a_subject_ended_at_its_memory_bound_as_that_probes_failure(scratch, monkeypatch):
    box = unbounded_box(scratch, 200 << 20)
    mine, theirs = socket.socketpair()
    # The stand-in subject holds its end of the channel (as a real one does) and never answers on it.
    proc = subprocess.Popen(box.argv([sys.executable, "-c", HOLD_MEMORY, "600", "300"]), stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True, cwd="/",
                            pass_fds=[theirs.fileno()])
    theirs.close()
    monkeypatch.setattr(client.zygote, "spawn", lambda control, spec: (proc.pid, mine))
    handle = client.Subject("candidate", SubjectSpec("candidate", SandboxSpec.from_json(box.spec), {}, (), (),
                                                     str(scratch), str(scratch / "subject.log")), control=None)
    try:
        # The stand-in subject never answers; only the watch can end the call before the probe's time.
        with pytest.raises(client.SubjectBroken, match="host memory.*over its bound"):
            handle.call("probes.anything", timeout=100)
    finally:
        handle.kill()
        box.cleanup(proc.pid)
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------------------------------------------
# memory defaults from the cgroup

def fake_cgroups(root: Path, v1_limits: dict[str, str], v2_limits: dict[str, str]) -> Path:
    """A /proc/self/cgroup naming v1 memory group /outer/inner and v2 group /a/b, with limit files as given."""
    for rel, value in v1_limits.items():
        (root / "memory" / rel).mkdir(parents=True, exist_ok=True)
        (root / "memory" / rel / "memory.limit_in_bytes").write_text(value + "\n")
    for rel, value in v2_limits.items():
        (root / rel).mkdir(parents=True, exist_ok=True)
        (root / rel / "memory.max").write_text(value + "\n")
    proc = root / "proc-self-cgroup"
    proc.write_text("9:pids:/\n4:memory:/outer/inner\n0::/a/b\n")
    return proc


def test_memory_defaults_read_the_lowest_limit_of_the_cgroup_and_its_parents(tmp_path):
    unlimited_v1 = "9223372036854771712"
    proc = fake_cgroups(tmp_path, {"outer/inner": unlimited_v1, "outer": str(2 << 30)},
                        {"a/b": "max", "a": str(3 << 30)})
    assert environment.cgroup_memory_limit(proc, tmp_path) == 2 << 30
    memory = environment.machine_memory_bytes(proc, tmp_path)
    assert memory == 2 << 30
    assert environment.default_jobs(memory) == 1
    assert environment.memory_per_subject(1, memory) == (2 << 30) * 3 // 4


def test_memory_defaults_use_the_hosts_ram_when_no_cgroup_limit_is_lower(tmp_path):
    proc = fake_cgroups(tmp_path, {"outer/inner": "9223372036854771712"}, {"a/b": "max"})
    assert environment.cgroup_memory_limit(proc, tmp_path) is None
    assert environment.machine_memory_bytes(proc, tmp_path) == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# ---------------------------------------------------------------------------------------------------------------
# leftovers of dead graders

def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_leftovers_of_a_dead_owner_are_reclaimed_and_a_live_owners_are_kept(tmp_path):
    dead, live = dead_pid(), os.getppid()
    (tmp_path / f"grader-int8-kv-rounding-pid{dead}-abc" / "tree").mkdir(parents=True)
    (tmp_path / f"grader-int8-kv-rounding-pid{live}-abc").mkdir()
    (tmp_path / "grader-no-owner-abc").mkdir()
    removed = leftovers.reclaim_folders(tmp_path, ("grader-",))
    assert removed == [tmp_path / f"grader-int8-kv-rounding-pid{dead}-abc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"grader-int8-kv-rounding-pid{live}-abc",
                                                                 "grader-no-owner-abc"])


# ---------------------------------------------------------------------------------------------------------------
# Part 2: real grader processes on one machine.

TASK = "int8-kv-rounding"
REFERENCE = REPO / "reference_impl" / f"{TASK}.diff"
KEY_ONLY = REPO / "candidates" / TASK / "key-only.diff"
HOSTILE = Path(__file__).resolve().parent / "neighbour-hostile.diff"
HANGS_AT_IMPORT = Path(__file__).resolve().parents[1] / "adversarial" / "import-loop.diff"
REJECTED_AT_ONCE = Path(__file__).resolve().parents[1] / "adversarial" / "path-traversal.diff"


def start_grader(out: Path, diffs: list[Path], env: dict | None = None, *extra: str) -> subprocess.Popen:
    log = open(out.with_suffix(".log"), "wb")
    return subprocess.Popen([sys.executable, "grade.py", "grade", "--task", TASK, "--jobs", "1", "--no-cache",
                             "--timeout", "400", "--out", str(out), *extra, *map(str, diffs)],
                            cwd=REPO, env=dict(os.environ, **(env or {})), stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)


def verdicts(out: Path) -> dict[str, tuple[str, dict[str, str]]]:
    import json

    records = json.loads((out / "results.json").read_text())["candidates"]
    return {r["id"]: (r["verdict"], {c: v["status"] for c, v in r["criteria"].items()}) for r in records}


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] not in ("Z", "X"):
                table[int(entry.name)] = (int(fields[1]), fields[19])
    return table


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``: pid -> start time (so a reused pid is not taken for a survivor)."""
    table = process_table()
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, started) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = started
                frontier.append(pid)
    return found


def in_own_pid_namespace(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return any(line.startswith("NSpid:") and len(line.split()) > 2 for line in status.splitlines())


def subject_running(grader: int) -> bool:
    """Whether a subject (a process in a PID namespace of its own, below a warm worker or judge) runs."""
    for pid in descendants(grader):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"grader.sandbox.forkserver" in command or b"grader.sandbox.judge" in command:
            return any(map(in_own_pid_namespace, descendants(pid)))
    return False


def survivors(snapshot: dict[int, str]) -> dict[int, str]:
    table = process_table()
    return {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
            for pid, started in snapshot.items() if pid in table and table[pid][1] == started}


@pytest.mark.slow
@needs_pidns
@pytest.mark.parametrize("launcher", ["warm", "cold"])
def test_nothing_of_a_sigkilled_grader_survives_and_the_next_run_reclaims_what_it_left(tmp_path, launcher):
    """Its candidates hang at import, so its judges would run on for minutes if nothing ended them."""
    scratch = Path(tempfile.mkdtemp(prefix="isolation-test-", dir=scratch_root()))
    os.chmod(scratch, 0o755)
    env = {"GRADER_SCRATCH": str(scratch), "TMPDIR": str(scratch)}
    hanging = [tmp_path / "hang-1.diff", tmp_path / "hang-2.diff"]
    for copy in hanging:
        shutil.copyfile(HANGS_AT_IMPORT, copy)
    try:
        # Two candidates: a warm worker serves them; with --cold each has a judge process of its own.
        grader = start_grader(tmp_path / "out", hanging, env, *(["--cold"] if launcher == "cold" else []))
        snapshot: dict[int, str] = {}
        for _ in range(6000):
            if subject_running(grader.pid) or grader.poll() is not None:
                break
            time.sleep(0.1)
        assert grader.poll() is None and subject_running(grader.pid), "no subject ever started"
        snapshot = descendants(grader.pid)
        grader.kill()
        grader.wait()
        left = survivors(snapshot)
        for _ in range(100):
            if not left:
                break
            time.sleep(0.1)
            left = survivors(snapshot)
        assert not left, f"processes of a SIGKILLed grader still run: {left}"

        owner = f"-pid{grader.pid}-"
        owned = [p for p in scratch.iterdir() if owner in p.name]
        groups = [Path(g) / name for g in (CAPS.cgroup, CAPS.memory_cgroup) if g
                  for name in os.listdir(g) if owner in name]
        assert owned, "the killed run left no scratch tree: nothing to reclaim (the test would prove nothing)"
        nxt = start_grader(tmp_path / "next", [REJECTED_AT_ONCE], env)
        assert nxt.wait(timeout=600) in (0, 1, 2)
        assert not [p for p in scratch.iterdir() if owner in p.name], "the next run left the dead run's folders"
        assert not [g for g in groups if g.exists()], "the next run left the dead run's cgroups"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.slow
def test_a_reference_fix_keeps_its_verdict_while_a_hostile_candidate_is_graded_beside_it(tmp_path):
    """Two grader processes on one machine, sharing its scratch area and uid range: one grades the reference
    fix, the other a candidate that signals every process it can, fills its home and the temp places with empty
    files and holds every file descriptor it may."""
    hostile = start_grader(tmp_path / "hostile", [HOSTILE])
    time.sleep(5)  # let the hostile one start first, so its attack runs while the reference is graded
    reference = start_grader(tmp_path / "reference", [REFERENCE])
    try:
        assert reference.wait(timeout=1200) == 0, (tmp_path / "reference.log").read_text()[-3000:]
        assert hostile.wait(timeout=1200) in (0, 1), (tmp_path / "hostile.log").read_text()[-3000:]
    finally:
        for proc in (hostile, reference):
            proc.kill()
    verdict, criteria = verdicts(tmp_path / "reference")[TASK]
    assert verdict == "full" and set(criteria.values()) == {"met"}, (verdict, criteria)
    assert len(verdicts(tmp_path / "hostile")) == 1  # the hostile candidate was graded too (its verdict is its own)
    leaked = [p for p in scratch_root().iterdir() if p.name.startswith("z") and p.name[1:].isdigit()]
    assert not leaked, f"the hostile candidate's files reached the shared scratch area: {leaked[:3]}"


# ---------------------------------------------------------------------------------------------------------------
# Part 3 (``gpu``): the memory watch on a CUDA subject (the H200 hosts have no memory cgroup).

HOLD_ON_GPU = """
import sys, time, torch
torch.zeros(1, device="cuda")
where = sys.argv[1]
if where == "host":      # host memory held by a CUDA process (no RLIMIT_AS on a GPU subject)
    held = torch.ones(int(sys.argv[2]) << 20, dtype=torch.uint8)
else:                    # device memory, past the allocator's own cap (which candidate code can lift)
    torch.cuda.set_per_process_memory_fraction(1.0)
    held = torch.ones(int(sys.argv[2]) << 20, dtype=torch.uint8, device="cuda")
print("held", flush=True)
time.sleep(300)
"""


def cuda_env() -> dict[str, str]:
    from grader.sandbox.protocol import base_environment

    return dict(base_environment(gpu=True, also_pass=("CUDA_VISIBLE_DEVICES",)), HOME="/tmp")


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["host", "device"])
def test_a_cuda_subject_is_ended_at_its_memory_bound(scratch, where):
    from grader.sandbox import watchdog

    pytest.importorskip("torch").cuda.is_available() or pytest.skip("no CUDA device")
    box = unbounded_box(scratch, 4 << 30)
    box.spec["gpu_memory_bytes"] = 4 << 30
    proc = subprocess.Popen(box.argv([sys.executable, "-c", HOLD_ON_GPU, where, str(12 << 10)]),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True, cwd="/", env=cuda_env())
    watch = watchdog.watch_for(proc.pid, box.spec, gpu=True)
    try:
        out, _ = proc.communicate(timeout=300)
        assert watch.reason and f"{'host' if where == 'host' else 'GPU'} memory" in watch.reason, (watch.reason, out)
    finally:
        watch.stop()
        box.cleanup(proc.pid)
        proc.kill()
        proc.wait()
