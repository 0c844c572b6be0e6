"""Every task's base, reference fix and sample candidates get the statuses they were designed for, and every
rubric passes validation (fix unmet on base and met on reference, preserve met on both, conditional met on
reference). Statuses come from ``candidates/<task>/expected.toml``; ``[<name>.gpu]`` applies where GPU evidence ran.
``GRADER_TEST_TASKS=id[,id...]`` limits the run to those tasks (the task author's loop).
"""

from __future__ import annotations

import os
import tomllib
from concurrent.futures import ThreadPoolExecutor

import pytest

from grader.sandbox.launch import start_warm_pool
from grader.pipeline import BaseCache, GradeOptions, detect_gpu, evaluate
from grader.core.rubric import REPO_ROOT, all_tasks
from grader.score import score_criteria
from grader.validate import check_rules

CANDIDATES = REPO_ROOT / "candidates"
REFERENCES = REPO_ROOT / "reference_impl"
GPU, _ = detect_gpu("auto")


def _samples() -> list[tuple[str, str, str]]:
    """(task, sample name, diff) for every expected section; base is the empty diff."""
    found = []
    chosen = [t for t in os.environ.get("GRADER_TEST_TASKS", "").split(",") if t]
    # Tasks with designed statuses (a task without them is check-task's to report).
    for task in chosen or [t for t in all_tasks() if (CANDIDATES / t / "expected.toml").is_file()]:
        expected = tomllib.loads((CANDIDATES / task / "expected.toml").read_text())
        for name in expected:
            if name == "base":
                diff = ""
            elif name == "reference":
                diff = (REFERENCES / f"{task}.diff").read_text()
            else:
                diff = (CANDIDATES / task / f"{name}.diff").read_text()
            found.append((task, name, diff))
    return found


SAMPLES = _samples()
TASKS = sorted({task for task, _, _ in SAMPLES})


@pytest.fixture(scope="session")
def graded() -> dict[tuple[str, str], dict]:
    """Grade every sample once, two at a time; key (task, name) -> criterion results."""
    tasks, bases = all_tasks(), BaseCache()
    launcher = start_warm_pool(2, bases.get(tasks[SAMPLES[0][0]]), GPU)
    options = GradeOptions(gpu=GPU, launcher=launcher)

    def grade(sample):
        task, name, diff = sample
        apply, run, _ = evaluate(tasks[task], diff, bases, options)
        assert run is not None, f"{task}/{name} did not apply: {apply.message}"
        return (task, name), score_criteria(tasks[task], run)

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            return dict(pool.map(grade, SAMPLES))
    finally:
        launcher.close()


def _designed(task: str, name: str) -> dict[str, str]:
    section = tomllib.loads((CANDIDATES / task / "expected.toml").read_text())[name]
    statuses = {k: v for k, v in section.items() if k.startswith("c")}
    if GPU:
        statuses.update(section.get("gpu", {}))
    return statuses


@pytest.mark.slow
@pytest.mark.parametrize("task,name", [(t, n) for t, n, _ in SAMPLES], ids=[f"{t}/{n}" for t, n, _ in SAMPLES])
def test_sample_gets_designed_statuses(graded, task, name):
    results = graded[(task, name)]
    got = {cid: r.status for cid, r in results.items()}
    want = _designed(task, name)
    assert got == want, {cid: (got[cid], results[cid].rationale) for cid in got if got[cid] != want.get(cid)}


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_rubric_validates(graded, task):
    validation = check_rules(all_tasks()[task], graded[(task, "base")], graded[(task, "reference")])
    assert not validation.problems
    if GPU:
        assert not validation.unevaluated
