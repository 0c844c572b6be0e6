"""Per-task controls: before a task's candidates are graded, its reference fix is graded on this machine and its
criteria must get their designed statuses (``candidates/<task>/expected.toml``, ``[reference]`` and, with GPU
evidence, ``[reference.gpu]``). A control that does not hold means the environment cannot grade the task (a
damaged base, a package missing from the interpreter, a cache the sandbox cannot see): every candidate of the task
is then ``environment_error`` naming the control, never graded against the broken environment.

Cost: one grading of the reference fix per task, only when what it depends on changed (the task's fingerprint,
its base, the installed distributions, the GPU and containment switches, the grader's version): a pass is kept in
the cache folder (``controls/``), a failure only for this run. The control runs without the evidence cache, so
that evidence recorded while the environment was sick cannot pass it.
"""

from __future__ import annotations

import hashlib
import threading
import tomllib
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from grader import __version__
from grader.core.environment import environment_fingerprint
from grader.core.paths import cache_dir, cache_lock, secret_digest
from grader.core.records import DEFAULT_TIMEOUT_S, Candidate, GradingOptions
from grader.core.rubric import REPO_ROOT, Task, rubric_fingerprint

if TYPE_CHECKING:  # the grading itself is handed in (``grade``): this module sits below the pipeline
    from grader.drive.one_candidate import BaseCache

REFERENCE_DIR = REPO_ROOT / "reference_impl"
CANDIDATES_DIR = REPO_ROOT / "candidates"


def designed_reference(task: Task, gpu: bool) -> dict[str, str]:
    """The statuses the reference fix is designed to get here; empty where none are recorded."""
    try:
        expected = tomllib.loads((CANDIDATES_DIR / task.id / "expected.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    section = expected.get("reference", {})
    statuses = {k: v for k, v in section.items() if k in task.criteria and isinstance(v, str)}
    if gpu and isinstance(section.get("gpu"), dict):
        statuses.update({k: v for k, v in section["gpu"].items() if k in task.criteria})
    return statuses


class Controls:
    """Each task's control, run at most once per run (the first candidate of the task waits for it)."""

    def __init__(self, bases: BaseCache, options: GradingOptions, grade: Callable) -> None:
        """``grade(candidate, bases, options)``: ``grader.drive.one_candidate.grade_candidate`` with the run's launcher."""
        self.bases = bases
        self.grade = grade
        # No evidence cache: the control must run the hidden tests on this machine as it is now; and the default
        # time limit at least, since a --timeout chosen for candidates says nothing of the environment.
        self.options = replace(options, use_evidence_cache=False, keep_trees=False,
                               timeout=max(options.timeout, DEFAULT_TIMEOUT_S))
        self.found: dict[str, str | None] = {}
        self.locks: dict[str, threading.Lock] = {}
        self.lock = threading.Lock()

    def problem(self, task: Task) -> str | None:
        """Why ``task`` cannot be graded here, or None when its control holds (or it has none)."""
        with self.lock:
            lock = self.locks.setdefault(task.id, threading.Lock())
        with lock:
            if task.id not in self.found:
                self.found[task.id] = self.run(task)
            return self.found[task.id]

    def key(self, task: Task, reference: str, designed: dict[str, str]) -> str:
        base = self.bases.get(task)
        parts = [__version__, task.id, rubric_fingerprint(task), base.key, base.commit, environment_fingerprint(),
                 str(self.options.gpu), str(self.options.contained), secret_digest(), reference,
                 repr(sorted(designed.items()))]
        return hashlib.sha256("\0".join(parts).encode("utf-8", "replace")).hexdigest()[:24]

    def run(self, task: Task) -> str | None:
        reference = REFERENCE_DIR / f"{task.id}.diff"
        designed = designed_reference(task, self.options.gpu)
        if not reference.is_file() or not designed:
            return None
        diff = reference.read_text(encoding="utf-8", errors="replace")
        key = self.key(task, diff, designed)
        # One grader at a time runs a task's control on this machine (Ray actors, two runs): the others wait for
        # its pass and find it.
        with cache_lock(f"control-{key}"):
            passed = cache_dir() / "controls" / key
            if passed.is_file():
                return None
            problem = self.graded_problem(task, Candidate(f"{task.id}/(control)", str(reference), diff, task.id),
                                          designed)
            if problem is None:
                try:
                    passed.parent.mkdir(parents=True, exist_ok=True)
                    passed.touch()
                except OSError:
                    pass  # a read-only or full cache: the control runs again next time, nothing else changes
            return problem

    def graded_problem(self, task: Task, control: Candidate, designed: dict[str, str]) -> str | None:
        """Why the reference fix, graded here now, does not get its designed statuses; None when it does."""
        result, _ = self.grade(control, self.bases, self.options)
        if result.run_status not in ("complete", "apply_partial") or result.verdict == "error":
            return (f"the control of {task.id} (its reference fix, graded here first) did not complete "
                    f"({result.run_status}): {result.error or result.summary}")
        got = {cid: r.status for cid, r in result.criteria.items()}
        wrong = [cid for cid, want in designed.items() if got.get(cid) != want]
        if wrong:
            first = result.criteria[wrong[0]].rationale
            return (f"the control of {task.id} failed: its reference fix grades "
                    + ", ".join(f"{cid} {got.get(cid)} (designed {designed[cid]})" for cid in wrong)
                    + f" on this machine, so the environment cannot grade this task ({wrong[0]}: {first[:300]})")
        return None
