"""Every task's base, reference fix and sample candidates get the statuses they were designed for, and every
rubric passes validation (fix unmet on base and met on reference, preserve met on both, conditional met on
reference). Statuses come from ``candidates/<task>/expected.toml``; ``[<name>.gpu]`` applies where GPU evidence ran.
``GRADER_TEST_TASKS=id[,id...]`` limits the run to those tasks (the task author's loop).
``GRADER_TEST_SAMPLES=covering`` grades, per task, the base, the reference and the fewest samples (in file order)
that together show every criterion at every status it is designed to get: the normal run (``make test``) on a
2-core machine; the default, ``all``, grades every sample (``make test-slow``).
``GRADER_TEST_SAMPLE_JOBS`` (default 2) is how many samples grade at once.
"""

from __future__ import annotations

import os
import tomllib
from concurrent.futures import ThreadPoolExecutor

import pytest

from grader.core.records import Candidate, CandidateResult, CriterionResult
from grader.sandbox.launch import start_warm_pool
from grader.core.records import GradingOptions
from grader.core.environment import detect_gpu
from grader.drive.one_candidate import BaseCache, grade_candidate
from grader.core.rubric import REPO_ROOT, all_tasks
from grader.reports.scorecard import failing_claim
from grader.reports.summarize import summary_cap
from grader.taskkit.validate import check_rules
from grader.reports.wording import claim_of, deciding_failure

CANDIDATES = REPO_ROOT / "candidates"
REFERENCES = REPO_ROOT / "reference_impl"
GPU, _ = detect_gpu("auto")


SAMPLE_SETS = ("all", "covering")
SAMPLE_JOBS = int(os.environ.get("GRADER_TEST_SAMPLE_JOBS", "2"))


def covering(expected: dict[str, dict]) -> list[str]:
    """Base, reference, then each sample (in file order) that shows a criterion at a designed status no sample
    chosen before it shows: every (criterion, status) pair the designs hold is graded at least once."""
    chosen, shown = ["base", "reference"], set()
    for name, section in expected.items():
        pairs = {(cid, status) for cid, status in section.items() if cid.startswith("c")}
        if name in ("base", "reference"):
            shown |= pairs
        elif pairs - shown:
            chosen.append(name)
            shown |= pairs
    return [name for name in chosen if name in expected]


def test_covering_set_shows_every_designed_status_of_every_criterion():
    for task in [t for t in all_tasks() if (CANDIDATES / t / "expected.toml").is_file()]:
        expected = tomllib.loads((CANDIDATES / task / "expected.toml").read_text())
        pairs = lambda names: {(c, s) for n in names for c, s in expected[n].items() if c.startswith("c")}
        chosen = covering(expected)
        assert chosen[:2] == ["base", "reference"] and len(set(chosen)) == len(chosen), task
        assert pairs(chosen) == pairs(expected), task


def _samples() -> list[tuple[str, str, str]]:
    """(task, sample name, diff) for every expected section of the chosen set; base is the empty diff."""
    found = []
    chosen = [t for t in os.environ.get("GRADER_TEST_TASKS", "").split(",") if t]
    sample_set = os.environ.get("GRADER_TEST_SAMPLES", "all")
    assert sample_set in SAMPLE_SETS, f"GRADER_TEST_SAMPLES={sample_set!r}: one of {SAMPLE_SETS}"
    # Tasks with designed statuses (a task without them is check-task's to report).
    for task in chosen or [t for t in all_tasks() if (CANDIDATES / t / "expected.toml").is_file()]:
        expected = tomllib.loads((CANDIDATES / task / "expected.toml").read_text())
        for name in (covering(expected) if sample_set == "covering" else expected):
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


def grade_samples() -> dict[tuple[str, str], tuple]:
    """Grade every sample once, SAMPLE_JOBS at a time; key (task, name) -> (its result, its run or None)."""
    tasks, bases = all_tasks(), BaseCache()
    launcher = start_warm_pool(SAMPLE_JOBS, bases.get(tasks[SAMPLES[0][0]]), GPU)
    options = GradingOptions(gpu=GPU, empty_diff_grades_base=True, use_evidence_cache=False)

    def grade(sample):
        task, name, diff = sample
        return (task, name), grade_candidate(Candidate(name, f"{task}/{name}", diff, task=task), bases, options,
                                             launcher)

    try:
        with ThreadPoolExecutor(max_workers=SAMPLE_JOBS) as pool:
            return dict(pool.map(grade, SAMPLES))
    finally:
        launcher.close()


@pytest.fixture(scope="session")
def results() -> dict[tuple[str, str], CandidateResult]:
    """Every sample's result; key (task, name)."""
    graded = grade_samples()
    for (task, name), (result, run) in graded.items():
        assert run is not None, f"{task}/{name} did not run: {result.summary}"
    return {key: result for key, (result, _) in graded.items()}


@pytest.fixture(scope="session")
def graded(results) -> dict[tuple[str, str], dict[str, CriterionResult]]:
    """Key (task, name) -> criterion results."""
    return {key: result.criteria for key, result in results.items()}


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


# Marks of a list or a sentence cut short, and of a sentence with a hole in it.
CUT_MARKS = ("...", "\u2026", "and more", " ,", "( ", " )", "edits 1 in", "  ")


@pytest.mark.slow
@pytest.mark.parametrize("task,name", [(t, n) for t, n, _ in SAMPLES], ids=[f"{t}/{n}" for t, n, _ in SAMPLES])
def test_every_summary_is_whole_sentences_within_its_cap_naming_an_unmet_claim(results, task, name):
    """A summary is whole sentences within its hard cap (``summary_cap``); its verdict sentence is always kept, and
    so is the evidence of the first criterion below met (its claim, as the index names it): what was verified and
    what was not evaluated give way first when the cap is reached."""
    result = results[(task, name)]
    summary = result.summary
    assert summary.endswith(".") and summary[:1].isupper(), summary
    assert not [mark for mark in CUT_MARKS if mark in summary], summary
    assert len(summary.split()) <= summary_cap(result), summary
    assert "Verdict " in summary
    below = [(cid, c) for cid, c in sorted(result.criteria.items())
             if c.status in ("unmet", "partial") and not c.rationale.startswith("anchor ")]
    for cid, criterion in below:
        entry = deciding_failure(criterion.evidence)
        # The index names the same claim for the criterion as the summary does.
        assert entry is None or claim_of(entry) in failing_claim(cid, criterion)
    if below:
        assert any(f"{cid} " in summary for cid, _ in below), summary
