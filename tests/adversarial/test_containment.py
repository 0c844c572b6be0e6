"""Containment of candidate code.

Part 1 tests each mechanism of ``grader.sandbox.contain`` directly with tiny Python children (no vLLM, seconds).
Part 2 (``slow``) grades the adversarial corpus in ``tests/adversarial/`` through the real pipeline
(``grade_candidate`` on the int8-kv-rounding base) and checks each case's outcome: the run goes on, the affected
criteria are unmet or not evaluated with the reason, and nothing outside the candidate's tree changed.
``tests/adversarial/test_integrity.py`` holds the corpus of attacks on the verdict itself.
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
import tomllib
from pathlib import Path

import pytest

from grader.pipeline.apply import hidden_roots, scratch_root
from grader.sandbox import contain

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parents[1] / "adversarial"
CAPS = contain.probe()

needs_uid = pytest.mark.skipif(not CAPS.drop_uid, reason=f"no unprivileged uid: {CAPS.drop_uid_reason}")
needs_net = pytest.mark.skipif(not CAPS.net, reason=f"no network namespace: {CAPS.net_reason}")


@pytest.fixture
def scratch():
    path = Path(tempfile.mkdtemp(prefix="contain-test-", dir=scratch_root()))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def subject_box(scratch: Path, **limits) -> contain.Sandbox:
    """A subject's sandbox with ``scratch/home`` as its home and what a subject may not see hidden."""
    return contain.prepare(scratch / "home", hidden=hidden_roots(), **limits)


def run_child(box: contain.Sandbox, code: str, outer_timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``code`` inside ``box``; the outer timeout is the test's own safety net, then everything is killed."""
    proc = subprocess.Popen(box.argv([sys.executable, "-c", textwrap.dedent(code)]), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, text=True,
                            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd="/")
    try:
        out, _ = proc.communicate(timeout=outer_timeout)
    finally:
        box.cleanup(proc.pid)
        if proc.returncode is None:
            proc.kill()
            out, _ = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def test_describe_says_what_is_in_effect():
    described = contain.describe_containment()
    assert set(described) >= {"limits", "user", "tasks", "memory", "network", "filesystem"}
    assert contain.summary_line()


def test_infinite_loop_is_stopped_by_the_cpu_limit(scratch):
    box = subject_box(scratch, cpu_s=1)
    started = time.monotonic()
    done = run_child(box, "while True: pass", outer_timeout=60)
    assert done.returncode in (-signal.SIGXCPU, -signal.SIGKILL), done.stdout
    assert time.monotonic() - started < 30


def test_memory_hog_gets_memory_error(scratch):
    box = subject_box(scratch, as_bytes=1 << 30)
    done = run_child(box, """
        try:
            hog = bytearray(2 << 30)
        except MemoryError:
            print("MemoryError")
    """)
    assert "MemoryError" in done.stdout, done.stdout


@needs_uid
def test_bounded_fork_loop_is_stopped_and_cleaned_up(scratch):
    box = subject_box(scratch, max_tasks=32)
    done = run_child(box, """
        import os, time
        made = 0
        for _ in range(300):          # bounded: never more than 300 children, each exits by itself
            try:
                pid = os.fork()
            except OSError as exc:
                print("refused", exc.errno)
                break
            if pid == 0:
                null = os.open(os.devnull, os.O_WRONLY)  # let the test's pipe close when the parent ends
                os.dup2(null, 1)
                os.dup2(null, 2)
                time.sleep(30)
                os._exit(0)
            made += 1
        print("made", made)
        os.setsid()                   # try to leave the process group the grader kills
        time.sleep(1)
    """, outer_timeout=90)
    made = int(done.stdout.split("made ")[1].split()[0])
    assert "refused" in done.stdout and made < 32, done.stdout
    assert not box.pids(), "children survived cleanup"


@needs_uid
def test_child_runs_as_an_unprivileged_uid_with_no_way_back(scratch):
    box = subject_box(scratch)
    done = run_child(box, """
        import os
        print("uid", os.getuid(), os.geteuid())
        try:
            os.setuid(0)
        except PermissionError:
            print("setuid refused")
    """)
    assert f"uid {box.spec['uid']} {box.spec['uid']}" in done.stdout and "setuid refused" in done.stdout


@needs_net
def test_network_connect_to_a_host_loopback_listener_fails(scratch):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    accepted = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                accepted.append(conn.recv(100))
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    code = f"""
        import socket
        try:
            s = socket.create_connection(("127.0.0.1", {port}), timeout=3)
            s.sendall(b"escaped")
            s.close()
            print("connected")
        except OSError as exc:
            print("refused", exc)
    """
    try:
        done = run_child(subject_box(scratch), code)
        assert "refused" in done.stdout, done.stdout
        assert accepted == []
        # The same child without a network namespace does reach the listener: the check above can fail.
        control = run_child(subject_box(scratch, net=False), code)
        assert "connected" in control.stdout
        deadline = time.monotonic() + 5
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert accepted == [b"escaped"]
    finally:
        stop.set()
        thread.join(timeout=2)
        listener.close()


@needs_uid
def test_writes_outside_the_scratch_area_are_prevented(scratch):
    marker = f"grader-pwned-{os.getpid()}"
    targets = [REPO / marker, REPO / "grader" / marker, Path("/tmp") / marker, Path("/var/tmp") / marker,
               Path("/dev/shm") / marker, Path(tempfile.gettempdir()) / marker]
    box = subject_box(scratch)
    code = f"""
        import os
        for path in {[str(t) for t in targets]!r} + [os.path.join({str(scratch / "home")!r}, "ok")]:
            try:
                with open(path, "w") as f:
                    f.write("x")
                print("wrote", path)
            except OSError as exc:
                print("refused", path, exc.errno)
    """
    try:
        done = run_child(box, code)
        assert f"wrote {scratch / 'home' / 'ok'}" in done.stdout, done.stdout
        for target in targets:
            assert not target.exists(), f"{target} was written: {done.stdout}"
    finally:
        for target in targets:
            target.unlink(missing_ok=True)


needs_view = pytest.mark.skipif(not CAPS.private_tmp, reason=f"no mount namespace: {CAPS.private_tmp_reason}")
needs_pid = pytest.mark.skipif(not (CAPS.ipc_pid and CAPS.private_tmp), reason=CAPS.ipc_pid_reason)


@needs_view
def test_subject_sees_neither_the_repository_nor_the_caches_nor_other_candidates(scratch):
    other = Path(tempfile.mkdtemp(prefix="grader-other-", dir=scratch_root()))
    (other / "secret").write_text("another candidate's tree")
    box = subject_box(scratch)
    code = f"""
        import os
        for path in [{str(REPO / "reference_impl")!r}, {str(REPO / "rubrics")!r}, {str(REPO / "candidates")!r},
                     {str(contain_cache())!r}, {str(other / "secret")!r}]:
            seen = (bool(os.listdir(path)) if os.path.isdir(path) else True) if os.path.exists(path) else False
            print(path, "visible" if seen else "hidden")
    """
    try:
        done = run_child(box, code)
    finally:
        shutil.rmtree(other, ignore_errors=True)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 5 and all(line.endswith("hidden") for line in lines), done.stdout


def contain_cache() -> Path:
    from grader.pipeline.checkout import cache_dir

    return cache_dir()


@needs_pid
def test_subject_has_its_own_pid_and_ipc_namespaces(scratch):
    box = subject_box(scratch)
    done = run_child(box, """
        import ctypes, os
        print("pid", os.getpid(), "procs", len([p for p in os.listdir("/proc") if p.isdigit()]))
        libc = ctypes.CDLL(None, use_errno=True)
        print("queue", libc.msgget(0x47524432, 0o1666))
    """)
    assert done.stdout.split()[:4] == ["pid", "1", "procs", "1"], done.stdout
    assert ctypes_queue_absent(0x47524432), "a message queue made in the sandbox is visible on the host"


def ctypes_queue_absent(key: int) -> bool:
    import ctypes

    return ctypes.CDLL(None, use_errno=True).msgget(key, 0) < 0


@needs_view
def test_subject_gets_private_run_and_tmp(scratch):
    if not os.access("/run", os.W_OK):
        pytest.skip("/run is not writable here")
    Path("/run/grader-contain-test").write_text("host")
    try:
        done = run_child(subject_box(scratch), """
            import os
            print(sorted(os.listdir("/run")), os.path.exists("/tmp/.X11-unix"))
        """)
    finally:
        Path("/run/grader-contain-test").unlink(missing_ok=True)
    assert "grader-contain-test" not in done.stdout, done.stdout


# ---------------------------------------------------------------------------------------------------------------
# Part 2: the adversarial corpus through the real pipeline.

TASK = "int8-kv-rounding"
PORT = 47123  # the port tests/adversarial/escape.diff tries to reach on 127.0.0.1
PWNED = ["/tmp/grader-pwned-adversarial", "/dev/shm/grader-pwned-adversarial", "/var/tmp/grader-pwned-adversarial",
         str(REPO / "grader-pwned-adversarial")]
# The escape attempts ride on the key-only sample: contained, they grade as it does (its expected statuses).
KEY_ONLY = {criterion: status for criterion, status in tomllib.loads(
    (REPO / "candidates" / TASK / "expected.toml").read_text())["key-only"].items() if criterion.startswith("c")}
# How long one int8-kv-rounding hidden-test run may take here (about 30 s on two shared cores), and the
# shorter limit for the case that hangs.
TIMEOUT, LOOP_TIMEOUT = 240, 20
# Past the first call's budget (floor plus factor times the controls' time on it, start-up included) on a busy machine.
BUDGETED_LOOP_TIMEOUT = 600


def _diff(name: str) -> str:
    return (CORPUS / name).read_text()


@pytest.fixture(scope="module")
def graded():
    """Grade every corpus case once (sequentially), with a listener on the port the escape case tries."""
    from grader.core.records import GradingOptions
    from grader.drive.one_candidate import BaseCache, grade_candidate
    from grader.core.records import Candidate

    for path in PWNED:
        Path(path).unlink(missing_ok=True)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", PORT))
    except OSError:
        pytest.skip(f"port {PORT} is taken on this machine")
    listener.listen(8)
    listener.settimeout(0.2)
    accepted: list[bytes] = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                accepted.append(conn.recv(100) or b"<connected>")
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    bases = BaseCache()
    results = {}
    try:
        # The import loop twice: under a run limit shorter than its first call's budget (the limit, not the
        # candidate, ends the run: honest time-out) and under the usual limit (its budget runs out first: fail).
        cases = [(p.name.removesuffix(".diff"), p.name, BUDGETED_LOOP_TIMEOUT if p.name == "import-loop.diff"
                  else TIMEOUT) for p in sorted(CORPUS.glob("*.diff"))]
        cases.append(("import-loop-cut-by-the-limit", "import-loop.diff", LOOP_TIMEOUT))
        for label, name, timeout in cases:
            candidate = Candidate(label, str(CORPUS / name), _diff(name), TASK)
            started = time.monotonic()
            options = GradingOptions(gpu=False, timeout=timeout, use_evidence_cache=False)
            results[label] = (grade_candidate(candidate, bases, options)[0],
                              time.monotonic() - started)
    finally:
        stop.set()
        thread.join(timeout=2)
        listener.close()
    results["_accepted"] = accepted
    results["_pwned"] = [p for p in PWNED if Path(p).exists()]
    for path in PWNED:
        Path(path).unlink(missing_ok=True)
    return results


def _statuses(result) -> dict[str, str]:
    return {cid: c.status for cid, c in result.criteria.items()}


@pytest.mark.slow
def test_import_time_infinite_loop_cut_by_the_run_limit_is_an_honest_timeout(graded):
    """The run's limit ends before the first call's budget (drawn from the controls' time on it): the limit, not
    the candidate, decided, so its checks are not evaluated (never failed, never passed), the verdict is never
    full, and the summary says it timed out."""
    result, seconds = graded["import-loop-cut-by-the-limit"]
    assert seconds < LOOP_TIMEOUT + 60
    every = [e for c in result.criteria.values() for e in c.evidence]
    assert any(e.status == "timeout" for e in every)
    assert result.run_status == "timed_out" and result.summary.startswith("Timed out"), result.summary
    assert not any(c.status in ("unmet", "partial") for c in result.criteria.values()), result.summary
    for criterion in result.criteria.values():
        # Only a static check (it reads the source, nothing hung there) can still decide a criterion.
        if not any("static" in e.kinds and e.status == "passed" for e in criterion.evidence):
            assert criterion.status == "not_evaluated", (criterion.id, result.summary)
    assert result.verdict == "incomplete" and result.score is None


@pytest.mark.slow
def test_import_time_infinite_loop_fails_its_checks_where_the_controls_import(graded):
    """Under the usual limit the candidate's subject never gets ready within its first call's budget, while the
    reference and the base answered that call: every check that calls it fails (before budgets: ``partial``)."""
    result, _ = graded["import-loop"]
    assert result.verdict == "fail" and result.run_status == "complete", result.summary
    messages = [e.message for c in result.criteria.values() for e in c.evidence]
    assert any("never got ready" in m for m in messages), messages[:3]
    assert not any(c.status == "not_evaluated" for c in result.criteria.values()), result.summary


@pytest.mark.slow
def test_memory_hog_fails_its_criteria_with_memory_error(graded):
    result, _ = graded["memory-hog"]
    assert result.verdict == "fail"
    assert any("MemoryError" in e.message for c in result.criteria.values() for e in c.evidence)


@pytest.mark.slow
def test_escape_attempts_are_contained_and_the_run_goes_on(graded):
    """escape.diff is key-only's fix plus, at import, a bounded fork loop, a connect to 127.0.0.1:47123 and
    writes to /tmp, /dev/shm, /var/tmp and the repository; the module raises if any of them worked."""
    result, _ = graded["escape"]
    assert graded["_accepted"] == [], "the candidate reached a host loopback listener"
    assert graded["_pwned"] == [], f"the candidate wrote outside its tree: {graded['_pwned']}"
    assert _statuses(result) == KEY_ONLY, result.summary  # so the fork loop was refused too


@pytest.mark.slow
def test_self_executing_files_are_dropped_and_vllm_test_edits_change_nothing(graded):
    """sitecustomize.py, usercustomize.py, conftest.py (calling os._exit(0)), vllm/conftest.py,
    vllm/sitecustomize.py and a .pth are dropped; edits to vLLM's own tests/ apply and change nothing."""
    result, _ = graded["self-executing"]
    assert sorted(result.apply.neutralized) == sorted(["sitecustomize.py", "usercustomize.py", "conftest.py",
                                                       "vllm/conftest.py", "vllm/sitecustomize.py",
                                                       "zz-grader.pth"])
    assert any(f.path.startswith("tests/") for f in result.apply.files)
    assert _statuses(result) == KEY_ONLY, result.summary


@pytest.mark.slow
def test_path_traversal_is_rejected_before_anything_runs(graded):
    result, _ = graded["path-traversal"]
    assert result.apply.status == "rejected" and "outside the tree" in result.apply.message
    assert result.verdict == "fail"
    assert all(c.status == "not_evaluated" for c in result.criteria.values())


@pytest.mark.slow
def test_in_process_report_forgery_is_not_graded_full(graded):
    """pytest-forgery.diff leaves the base's truncation (c1, c3, c5 fail there) and makes vllm/__init__.py turn
    every failed pytest report into a pass. Its code runs in the subject, where there is no pytest to forge."""
    result, _ = graded["pytest-forgery"]
    assert result.verdict == "fail", result.summary
    assert {c: r.status for c, r in result.criteria.items() if c in ("c1", "c3", "c5")} == \
        {"c1": "unmet", "c3": "unmet", "c5": "unmet"}, result.summary
