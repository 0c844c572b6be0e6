"""Faults of the run are the grader's state, never the candidate's verdict: through the real CLI, with real signals.

A judge killed mid-tests (SIGKILL), a warm worker killed under its judge, a judge killed by a memory bound: each
ends that candidate's run ``grader_error`` or ``environment_error`` naming the cause, with exit code 2; nothing of
it is stored, and a rerun grades the candidate again (and gets the truth). The reference fix of int8-kv-rounding
(the fastest hidden suite) is the candidate; its truth is ``full``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.core.paths import cache_dir

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TASK = "int8-kv-rounding"
REFERENCE = REPO / "reference_impl" / f"{TASK}.diff"
SAMPLE = REPO / "candidates" / TASK / "key-only.diff"


def private_cache(root: Path) -> Path:
    """The shared cache's bases and sdists, with evidence of its own: nothing earlier runs stored may answer."""
    private = root / "cache"
    private.mkdir()
    for entry in cache_dir().iterdir() if cache_dir().is_dir() else []:
        if entry.name != "evidence":
            os.symlink(entry, private / entry.name)
    return private


def grade(paths: list[Path], out: Path, cache: Path, scratch: Path, *extra: str, preexec=None,
          control: bool = False) -> subprocess.Popen:
    """``grade.py`` on ``paths``; without each task's control unless ``control`` (the faults injected here
    must meet the candidate's grading, not its task's control)."""
    scratch.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", GRADER_CACHE=str(cache), GRADER_SCRATCH=str(scratch))
    return subprocess.Popen([sys.executable, str(REPO / "grade.py"), *map(str, paths), "--out", str(out),
                             "--jobs", "1", "--gpu", "off", "--timeout", "300", *extra,
                             *([] if control else ["--no-control"])],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=preexec)


def finish(proc: subprocess.Popen, timeout: float = 600) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        end_group(proc.pid)
    return out


def end_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def processes() -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
    return found


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def cold_judge(grader: int) -> int:
    """The judge process the grader started (not the zygote or subjects forked from it)."""
    (judge,) = [pid for pid, cmd in processes().items() if "grader.sandbox.judge" in cmd and parent_of(pid) == grader]
    return judge


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def wait_for_tests_running(scratch: Path, proc: subprocess.Popen, deadline_s: float = 300) -> Path:
    """The evidence file of a judge that has started a hidden test."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended before the fault was injected:\n{proc.stdout.read()}"
        for evidence in scratch.glob("grader-*/judge/evidence.jsonl"):
            try:
                if '"event": "start"' in evidence.read_text():
                    return evidence
            except OSError:
                continue
        time.sleep(0.1)
    raise AssertionError("no hidden test started in time")


def only_result(out: Path) -> dict:
    document = json.loads((out / "results.json").read_text())
    (result,) = document["candidates"]
    return result


def assert_regraded_to_truth(out: Path, cache: Path, scratch: Path) -> None:
    """Nothing of the faulty run was stored: the rerun grades the candidate (not ``(cached)``), to the truth."""
    rerun = grade([REFERENCE], out, cache, scratch)
    log = finish(rerun)
    assert rerun.returncode == 0, log
    assert "(cached)" not in log, log
    result = only_result(out)
    assert (result["verdict"], result["run_status"]) == ("full", "complete"), log


def test_judge_killed_mid_tests_is_a_grader_error_not_stored(tmp_path):
    cache, out, scratch = private_cache(tmp_path), tmp_path / "out", tmp_path / "scratch"
    proc = grade([REFERENCE], out, cache, scratch, "--cold")
    try:
        evidence = wait_for_tests_running(scratch, proc)
        judge = cold_judge(proc.pid)
        os.kill(judge, signal.SIGKILL)
        log = finish(proc)
    finally:
        end_group(proc.pid)
    assert proc.returncode == 2, log
    result = only_result(out)
    assert (result["verdict"], result["run_status"]) == ("error", "grader_error"), log
    assert "SIGKILL" in result["error"], result["error"]
    statuses = {e["status"] for c in result["criteria"].values() for e in c["evidence"]}
    assert "failed" not in statuses and all(c["score"] is None for c in result["criteria"].values())
    assert not list((out / "store").glob("*.json"))
    assert not list((cache / "evidence").glob("*.json")) if (cache / "evidence").is_dir() else True
    assert_regraded_to_truth(out, cache, scratch)


def test_warm_worker_killed_under_its_judge_is_a_grader_error(tmp_path):
    cache, out, scratch = private_cache(tmp_path), tmp_path / "out", tmp_path / "scratch"
    proc = grade([REFERENCE, SAMPLE], out, cache, scratch)
    orphans: list[int] = []
    try:
        wait_for_tests_running(scratch, proc)
        (worker,) = [pid for pid, cmd in processes().items() if "grader.sandbox.forkserver" in cmd
                     and parent_of(pid) == proc.pid]
        orphans = children(worker)
        os.kill(worker, signal.SIGKILL)
        log = finish(proc)
    finally:
        end_group(proc.pid)
        for pid in orphans:
            end_group(pid)
    assert proc.returncode == 2, log
    results = {r["id"]: r for r in json.loads((out / "results.json").read_text())["candidates"]}
    lost = [r for r in results.values() if r["run_status"] == "grader_error"]
    assert len(lost) == 1 and lost[0]["verdict"] == "error", log
    assert "warm worker" in lost[0]["error"] and "SIGKILL" in lost[0]["error"], lost[0]["error"]
    # The other candidate got a new worker and its own verdict.
    (other,) = [r for r in results.values() if r is not lost[0]]
    assert other["run_status"] == "complete", log
    stored = {p.name for p in (out / "store").glob("*.json")}
    assert len(stored) == 1, stored


def memory_cgroup_parent() -> Path | None:
    try:
        rel = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                   if "memory" in line.split(":")[1].split(","))
    except (OSError, StopIteration, IndexError):
        return None
    parent = Path("/sys/fs/cgroup/memory") / rel.lstrip("/")
    return parent if os.access(parent / "cgroup.procs", os.W_OK) else None


def test_judge_killed_by_a_memory_bound_is_an_environment_error(tmp_path):
    parent = memory_cgroup_parent()
    if parent is None:
        pytest.skip("no writable cgroup v1 memory controller here to bound the grader's memory")
    group = parent / f"grader-oom-test-{os.getpid()}"
    group.mkdir()
    cache, out, scratch = private_cache(tmp_path), tmp_path / "out", tmp_path / "scratch"

    def join_group() -> None:
        (group / "cgroup.procs").write_text(str(os.getpid()))

    proc = grade([REFERENCE], out, cache, scratch, "--cold", preexec=join_group)
    try:
        evidence = wait_for_tests_running(scratch, proc)
        judge = cold_judge(proc.pid)
        # The judge is the OOM killer's choice, and the group's memory is then held at what it uses now.
        Path(f"/proc/{judge}/oom_score_adj").write_text("1000")
        usage = int((group / "memory.usage_in_bytes").read_text())
        (group / "memory.limit_in_bytes").write_text(str(usage + (8 << 20)))
        deadline = time.monotonic() + 120
        while Path(f"/proc/{judge}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (group / "memory.limit_in_bytes").write_text("-1")
        log = finish(proc)
    finally:
        end_group(proc.pid)
        try:
            (group / "memory.limit_in_bytes").write_text("-1")
        except OSError:
            pass
    for _ in range(50):
        try:
            group.rmdir()
            break
        except OSError:
            time.sleep(0.1)
    assert proc.returncode == 2, log
    result = only_result(out)
    assert (result["verdict"], result["run_status"]) == ("error", "environment_error"), log
    assert "out of memory" in result["error"] and "SIGKILL" in result["error"], result["error"]
    assert not list((out / "store").glob("*.json"))


def cache_with_bases_elsewhere(root: Path) -> Path:
    """A cache of its own whose ``bases/`` is a symlink to a folder elsewhere (sdists shared)."""
    cache = root / "cache"
    cache.mkdir()
    os.symlink(cache_dir() / "sdists", cache / "sdists")
    (root / "elsewhere").mkdir()
    os.symlink(root / "elsewhere", cache / "bases")
    return cache


def test_damaged_base_is_rebuilt_and_a_symlinked_bases_folder_grades_true(tmp_path):
    cache, out, scratch = cache_with_bases_elsewhere(tmp_path), tmp_path / "out", tmp_path / "scratch"
    env = dict(os.environ, GRADER_CACHE=str(cache))
    built = subprocess.run([sys.executable, str(REPO / "grade.py"), "bases", "--task", TASK], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    # One file of the built base deleted, its stamp left intact: the next use finds the base not whole.
    damaged = tmp_path / "elsewhere" / TASK / "vllm" / "__init__.py"
    damaged.unlink()
    proc = grade([REFERENCE], out, cache, scratch, "--no-cache")
    log = finish(proc)
    assert proc.returncode == 0, log
    assert damaged.is_file()
    result = only_result(out)
    assert (result["verdict"], result["run_status"]) == ("full", "complete"), log
    # A change the manifest cannot see (same size, time and inode) is found by the full check of --verify, and
    # the next use rebuilds the base.
    whole = damaged.read_bytes()
    before = os.stat(damaged)
    with open(damaged, "r+b") as handle:
        handle.write(b"#" * min(8, len(whole)))
    os.utime(damaged, ns=(before.st_atime_ns, before.st_mtime_ns))
    command = [sys.executable, str(REPO / "grade.py"), "bases", "--task", TASK]
    verify = subprocess.run([*command, "--verify"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert verify.returncode == 1 and "the tree differs from its build" in verify.stdout, verify.stdout
    rebuilt = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert damaged.read_bytes() == whole


def interrupt_when_running(signals: list[signal.Signals], tmp_path: Path, wait_for_staging: bool = False):
    """Start grading the reference and a sample, send ``signals`` (50 ms apart) once a hidden test runs (or,
    with ``wait_for_staging``, once a base build has begun in a cache of its own); the process, its output, and
    how long it took to exit after the first signal."""
    if wait_for_staging:
        cache = cache_with_bases_elsewhere(tmp_path)
    else:
        cache = private_cache(tmp_path)
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    proc = grade([REFERENCE, SAMPLE], out, cache, scratch, "--no-cache")
    try:
        if wait_for_staging:
            deadline = time.monotonic() + 300
            while not list((tmp_path / "elsewhere").glob(f".{TASK}-*")):
                assert proc.poll() is None and time.monotonic() < deadline, "no base build began"
                time.sleep(0.05)
            time.sleep(1)
        else:
            wait_for_tests_running(scratch, proc)
        sent = time.monotonic()
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.05)
        try:
            proc.wait(timeout=10)  # docker's grace period before it kills
        except subprocess.TimeoutExpired:
            pass
        exited_in_time = proc.poll() is not None
        log = finish(proc)
    finally:
        end_group(proc.pid)
    return proc, log, exited_in_time, out


def assert_interrupted_with_reports(proc, log: str, out: Path, name: str) -> None:
    assert proc.returncode == 130, log
    assert "Traceback" not in log, log
    document = json.loads((out / "results.json").read_text())
    assert document["run"]["incomplete"]["reason"] == f"interrupted by {name}", document["run"]
    assert (out / "index.html").is_file()
    assert not list(out.glob(".*.json.*")), "temporary files left in --out"


def test_sigint_held_down_writes_the_reports(tmp_path):
    proc, log, in_time, out = interrupt_when_running([signal.SIGINT] * 20, tmp_path)
    assert in_time, log
    assert_interrupted_with_reports(proc, log, out, "SIGINT")


def test_sighup_writes_the_reports(tmp_path):
    proc, log, in_time, out = interrupt_when_running([signal.SIGHUP], tmp_path)
    assert in_time, log
    assert_interrupted_with_reports(proc, log, out, "SIGHUP")


def test_sigterm_during_a_base_build_exits_within_the_grace_period(tmp_path):
    proc, log, in_time, out = interrupt_when_running([signal.SIGTERM], tmp_path, wait_for_staging=True)
    assert in_time, f"still running 10 s after SIGTERM:\n{log}"
    assert_interrupted_with_reports(proc, log, out, "SIGTERM")


def test_a_sick_environment_fails_the_tasks_control_and_grades_nothing(tmp_path):
    cache, out, scratch = cache_with_bases_elsewhere(tmp_path), tmp_path / "out", tmp_path / "scratch"
    # A first run (no control) builds the base and passes the task's import check of the environment.
    first = grade([SAMPLE], tmp_path / "first", cache, scratch, "--no-cache")
    log = finish(first)
    assert first.returncode == 0, log
    # Then the base is damaged where neither its manifest (same size, time and inode) nor its blobs look:
    # vLLM's package now fails at import.
    damaged = tmp_path / "elsewhere" / TASK / "vllm" / "__init__.py"
    before = os.stat(damaged)
    first_line = damaged.read_bytes().split(b"\n", 1)[0]
    sick = b"raise ImportError('sick')".ljust(len(first_line), b" ")
    assert len(sick) == len(first_line)
    with open(damaged, "r+b") as handle:
        handle.write(sick)
    os.utime(damaged, ns=(before.st_atime_ns, before.st_mtime_ns))
    proc = grade([REFERENCE, SAMPLE], out, cache, scratch, control=True)
    log = finish(proc)
    assert proc.returncode == 2, log
    results = json.loads((out / "results.json").read_text())["candidates"]
    assert {(r["verdict"], r["run_status"]) for r in results} == {("error", "environment_error")}, log
    assert all(f"the control of {TASK} failed" in r["error"] for r in results), [r["error"] for r in results]
    assert not list((out / "store").glob("*.json"))
