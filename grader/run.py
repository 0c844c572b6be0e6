"""Run a task's hidden tests against one patched tree in a contained subprocess, and parse their evidence.

The evidence channel is a file the grader creates outside the candidate's tree (see ``grader.pytest_evidence``);
parsing it is kept here, apart from scoring.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from grader.records import RunReport, TestOutcome
from grader.rubric import REPO_ROOT, RUBRICS_DIR, Task

DEFAULT_TIMEOUT_S = 600
LIMITS = {
    # CPU seconds, bytes of address space, bytes per written file.
    resource.RLIMIT_CPU: 1200,
    resource.RLIMIT_AS: 32 << 30,
    resource.RLIMIT_FSIZE: 1 << 30,
}
PASSED_THROUGH_ENV = ("PATH", "LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "NVIDIA_VISIBLE_DEVICES",
                      "CUDA_HOME", "LD_LIBRARY_PATH")


def _apply_limits() -> None:
    for limit, value in LIMITS.items():
        soft, hard = resource.getrlimit(limit)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (cap, hard))


def child_environment(tree: Path, import_root: Path, scratch: Path, evidence: Path, gpu: bool) -> dict[str, str]:
    """A minimal environment: private HOME and caches, the patched vllm first on sys.path, nothing inherited."""
    home = scratch / "home"
    home.mkdir(exist_ok=True)
    env = {k: os.environ[k] for k in PASSED_THROUGH_ENV if k in os.environ}
    env.update({
        "HOME": str(home),
        "TMPDIR": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TRITON_CACHE_DIR": str(home / ".triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(home / ".inductor"),
        "PYTHONPATH": os.pathsep.join([str(import_root), str(REPO_ROOT)]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "GRADER_VLLM_TREE": str(tree),
        "GRADER_EVIDENCE_OUT": str(evidence),
        "GRADER_GPU": "1" if gpu else "0",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    })
    if not gpu:
        # Keeps vLLM from probing a driver while leaving the real Triton importable (for its interpreter).
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def pytest_command(task: Task) -> list[str]:
    return [sys.executable, "-m", "pytest", "-c", str(RUBRICS_DIR / "pytest.ini"), "--rootdir", str(RUBRICS_DIR),
            "-p", "grader.pytest_evidence", str(task.tests_dir)]


def run_hidden_tests(task: Task, tree: Path, import_root: Path, scratch: Path, gpu: bool,
                     timeout: float = DEFAULT_TIMEOUT_S) -> RunReport:
    evidence = scratch / "evidence.jsonl"
    evidence.write_text("")
    env = child_environment(tree, import_root, scratch, evidence, gpu)
    started = time.monotonic()
    proc = subprocess.Popen(pytest_command(task), cwd=RUBRICS_DIR, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=_apply_limits)
    timed_out = False
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
    _kill_group(proc.pid)
    text = log.decode("utf-8", "replace")[-200_000:]
    outcomes, collect_errors = parse_evidence(evidence.read_text(encoding="utf-8", errors="replace"), timed_out)
    env_error = None
    if collect_errors:
        env_error = "hidden tests could not be collected: " + "; ".join(collect_errors)
    elif not outcomes and proc.returncode not in (0, 1):
        env_error = f"pytest exited with status {proc.returncode} before any hidden test ran"
    return RunReport(outcomes, proc.returncode, timed_out, text, time.monotonic() - started, env_error)


def _kill_group(pgid: int) -> None:
    """Stop anything the candidate left running in the test's process group."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _status_of(phases: dict[str, dict]) -> str:
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    if setup and setup["outcome"] == "skipped":
        return "skipped"
    if setup and setup["outcome"] == "failed":
        return "error"
    if call is None:
        return "error"
    if call["outcome"] == "failed" or (teardown and teardown["outcome"] == "failed"):
        return "failed"
    return call["outcome"]


def parse_evidence(text: str, timed_out: bool) -> tuple[list[TestOutcome], list[str]]:
    """Fold the plugin's JSON lines into one outcome per test; a started test with no result hung or crashed."""
    phases: dict[str, dict[str, dict]] = {}
    started: dict[str, dict] = {}
    collect_errors: list[str] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        event = record.get("event")
        if event == "start":
            started[record["nodeid"]] = record
        elif event == "report":
            phases.setdefault(record["nodeid"], {})[record["when"]] = record
        elif event == "collect_error":
            collect_errors.append(f"{record['nodeid']}: {record.get('message', '')[-300:]}")
    outcomes = []
    for nodeid, by_phase in phases.items():
        first = next(iter(by_phase.values()))
        status = _status_of(by_phase)
        message = next((p.get("message", "") for p in by_phase.values() if p.get("message")), "")
        if status == "error" and "call" not in by_phase and not message:
            status, message = _unfinished(timed_out)
        criteria = {c["id"]: c["weight"] for c in first["criteria"]}
        outcomes.append(TestOutcome(nodeid, status, criteria, first.get("kinds", []), first.get("doc", ""),
                                    message, sum(p.get("duration", 0.0) for p in by_phase.values())))
    for nodeid, start in started.items():
        if nodeid not in phases:
            status, message = _unfinished(timed_out)
            criteria = {c["id"]: c["weight"] for c in start["criteria"]}
            outcomes.append(TestOutcome(nodeid, status, criteria, start.get("kinds", []), start.get("doc", ""),
                                        message))
    return outcomes, collect_errors


def _unfinished(timed_out: bool) -> tuple[str, str]:
    if timed_out:
        return "timeout", "the test did not finish before the time limit"
    return "error", "the test process died while this test ran"
