"""Run a task's hidden tests against one patched tree in a contained subprocess, and parse their evidence.

The evidence channel is a file the grader creates outside the candidate's tree (see ``grader.pytest_evidence``);
parsing it is kept here, apart from scoring.
"""

from __future__ import annotations

import json
import os
import re
import resource
import time
from pathlib import Path

from grader import contain
from grader.launch import Launch, base_environment
from grader.records import RunReport, TestOutcome
from grader.rubric import REPO_ROOT, RUBRICS_DIR, Task

DEFAULT_TIMEOUT_S = 600
# Object reprs in assertion output ("<X object at 0x7f...>") differ between identical runs.
OBJECT_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def child_environment(tree: Path, import_root: Path, scratch: Path, evidence: Path, gpu: bool) -> dict[str, str]:
    """A minimal environment: private HOME and caches, the patched vllm first on sys.path, nothing inherited."""
    home = scratch / "home"
    home.mkdir(exist_ok=True)
    env = base_environment(gpu)
    env.update({
        "HOME": str(home),
        "TMPDIR": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TRITON_CACHE_DIR": str(home / ".triton"),
        "TORCHINDUCTOR_CACHE_DIR": str(home / ".inductor"),
        "PYTHONPATH": os.pathsep.join([str(import_root), str(REPO_ROOT)]),
        "GRADER_VLLM_TREE": str(tree),
        "GRADER_EVIDENCE_OUT": str(evidence),
        "GRADER_GPU": "1" if gpu else "0",
        # The sandbox's uid has no passwd entry; getpass (torch's caches use it) asks these first.
        "USER": "grader",
        "LOGNAME": "grader",
    })
    return env


def pytest_args(task: Task) -> list[str]:
    return ["-c", str(RUBRICS_DIR / "pytest.ini"), "--rootdir", str(RUBRICS_DIR), "-p", "grader.pytest_evidence",
            str(task.tests_dir)]


def run_hidden_tests(task: Task, tree: Path, import_root: Path, scratch: Path, gpu: bool, launcher,
                     timeout: float = DEFAULT_TIMEOUT_S, contained: bool = True) -> RunReport:
    evidence = scratch / "evidence.jsonl"
    evidence.write_text("")
    log = scratch / "pytest.log"
    env = child_environment(tree, import_root, scratch, evidence, gpu)
    # CUDA reserves far more address space than it uses: on a GPU run memory is capped by the cgroup alone.
    box = contain.prepare(scratch, writable=[evidence], as_bytes=resource.RLIM_INFINITY if gpu else
                          contain.ADDRESS_SPACE_BYTES) if contained else None
    started = time.monotonic()
    try:
        returncode, timed_out = launcher.run(Launch(pytest_args(task), env, RUBRICS_DIR, log, timeout, box))
    finally:
        if box is not None:
            box.cleanup()
    duration = time.monotonic() - started
    scrub = _path_scrubber(tree, scratch)
    text = scrub(log.read_text(encoding="utf-8", errors="replace")[-200_000:]) if log.exists() else ""
    outcomes, collect_errors = parse_evidence(evidence.read_text(encoding="utf-8", errors="replace"), timed_out)
    for outcome in outcomes:
        outcome.message = scrub(outcome.message)
    env_error = None
    if collect_errors:
        env_error = "hidden tests could not be collected: " + scrub("; ".join(collect_errors))
    elif not outcomes and returncode not in (0, 1) and not timed_out:
        env_error = f"pytest exited with status {returncode} before any hidden test ran"
    return RunReport(outcomes, returncode, timed_out, text, duration, env_error)


def _path_scrubber(tree: Path, scratch: Path):
    """Messages name the per-candidate temporary paths; replace them so identical runs give identical text."""
    pairs = [(str(tree), "<tree>"), (str(scratch), "<scratch>")]

    def scrub(text: str) -> str:
        for raw, placeholder in pairs:
            text = text.replace(raw, placeholder)
        return OBJECT_ADDRESS.sub(" at 0x?", text)

    return scrub


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
    collected: dict[str, dict] = {}
    collect_errors: list[str] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        event = record.get("event")
        if event == "collected":
            collected[record["nodeid"]] = record
        elif event == "start":
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
    for nodeid, start in {**collected, **started}.items():
        if nodeid not in phases:
            status, message = _unfinished(timed_out) if nodeid in started else _never_started(timed_out)
            criteria = {c["id"]: c["weight"] for c in start["criteria"]}
            outcomes.append(TestOutcome(nodeid, status, criteria, start.get("kinds", []), start.get("doc", ""),
                                        message))
    return outcomes, collect_errors


def _never_started(timed_out: bool) -> tuple[str, str]:
    if timed_out:
        return "timeout", "not run: the time limit was reached before this test started"
    return "error", "not run: the test process ended before this test started"


def _unfinished(timed_out: bool) -> tuple[str, str]:
    if timed_out:
        return "timeout", "the test did not finish before the time limit"
    return "error", "the test process died while this test ran"
