"""Time is judged, not granted: a candidate's probe call is held to a budget drawn from the controls' own time on
the same call (``grader.sandbox.budget``), measured in a calibration run over the reference with every call made
again on the base. Over budget where a control finished is a failed check; a call no control finished either is
an honest time-out (not evaluated). Each case is a real judge (cold) with real subjects over toy trees: a module
``toylib`` whose ``double`` is right on the reference, wrong on the base, and slow where a candidate chooses.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from grader.sandbox.budget import CallTimes
from grader.pipeline.score import score_from_outcomes
from judge_harness import run_judge, tree_with as harness_tree

PROBE = """
def double(x):
    import toylib
    return toylib.double(x)
"""
HIDDEN_TESTS = """
import pytest
from grader.sandbox.client import subject


@pytest.mark.criterion("c1")
def test_two():
    assert subject("candidate").call("toy_probe.double", x=2, timeout=10) == 4


@pytest.mark.criterion("c2")
def test_three():
    assert subject("candidate").call("toy_probe.double", x=3, timeout=10) == 6
"""
RIGHT = "def double(x):\n    return 2 * x\n"
BASE = "def double(x):\n    return 7 if x == 3 else 2 * x\n"
# Sleeps exactly on the call it would fail: before, that call's check was "not evaluated" and the score 1.00.
SLEEPS_WHERE_WRONG = "import time\n\ndef double(x):\n    if x == 3:\n        time.sleep(3600)\n    return 2 * x\n"
HANGS_ON_THREE = SLEEPS_WHERE_WRONG
SPINS_AT_IMPORT = "while True:\n    pass\n"
QUICK = {"GRADER_BUDGET_FACTOR": "3", "GRADER_BUDGET_FLOOR_S": "3", "GRADER_BUDGET_START_FLOOR_S": "2"}


def tree_with(folder: Path, source: str) -> Path:
    return harness_tree(folder, toylib=source)


def judge(tmp_path: Path, name: str, candidate: Path, base: Path, extra_env: dict[str, str]):
    """One judge run of the hidden tests above: the outcomes as grading reads them, by test name."""
    return run_judge(tmp_path / name, candidate, base, HIDDEN_TESTS, {"toy_probe": PROBE}, extra_env)


def calibrate(tmp_path: Path, reference: Path, base: Path) -> Path:
    record = tmp_path / "call-times.json"
    judge(tmp_path, "calibration", reference, base, {"GRADER_CALL_TIMES_OUT": str(record)})
    return record


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADER_CACHE", str(tmp_path / "cache"))


def test_calibration_times_every_call_on_the_reference_and_on_the_base(tmp_path, own_cache):
    record = calibrate(tmp_path, tree_with(tmp_path / "reference", RIGHT), tree_with(tmp_path / "base", BASE))
    times = CallTimes.load(record)
    assert len(times.calls) == 2 and set(times.startup) == {"reference", "base"}
    for seen in times.calls.values():
        assert {c: s is not None for c, s in seen.items()} == {"reference": True, "base": True}
    assert times.budget(next(iter(times.calls)), fresh=False) is not None


def test_sleeping_on_the_calls_it_would_fail_fails_them(tmp_path, own_cache):
    """Before budgets, this candidate's c2 was not evaluated (a time-out) and its score 1.00."""
    record = calibrate(tmp_path, tree_with(tmp_path / "reference", RIGHT), tree_with(tmp_path / "base", BASE))
    seen = judge(tmp_path, "graded", tree_with(tmp_path / "sleeper", SLEEPS_WHERE_WRONG),
                 tmp_path / "base", {"GRADER_CALL_BUDGETS": str(record), **QUICK})
    assert seen["test_two"].status == "passed"
    assert seen["test_three"].status == "failed", seen["test_three"]
    assert seen["test_three"].message.startswith("timeout:") and "budget" in seen["test_three"].message
    c2 = score_from_outcomes("c2", "three", list(seen.values()))
    assert (c2.status, c2.score) == ("unmet", 0.0), c2


def test_a_call_the_controls_do_not_finish_either_is_an_honest_timeout(tmp_path, own_cache):
    """A slow environment: the reference and the base both hang on the call, so the candidate's hang there says
    nothing about the candidate: not evaluated, and the run is timed out."""
    slow_reference = tree_with(tmp_path / "reference", HANGS_ON_THREE)
    record = calibrate(tmp_path, slow_reference, tree_with(tmp_path / "base", HANGS_ON_THREE))
    assert [s for s in CallTimes.load(record).calls.values() if s == {"reference": None, "base": None}]
    seen = judge(tmp_path, "graded", tree_with(tmp_path / "hangs", HANGS_ON_THREE), tmp_path / "base",
                 {"GRADER_CALL_BUDGETS": str(record), **QUICK})
    assert seen["test_two"].status == "passed"
    assert seen["test_three"].status == "timeout", seen["test_three"]
    c2 = score_from_outcomes("c2", "three", list(seen.values()))
    assert c2.status == "not_evaluated" and c2.not_run == {"timeout": 1}, c2


def test_a_spin_at_import_fails_every_check_when_the_base_imports(tmp_path, own_cache):
    record = calibrate(tmp_path, tree_with(tmp_path / "reference", RIGHT), tree_with(tmp_path / "base", BASE))
    seen = judge(tmp_path, "graded", tree_with(tmp_path / "spinner", SPINS_AT_IMPORT), tmp_path / "base",
                 {"GRADER_CALL_BUDGETS": str(record), **QUICK})
    assert {name: o.status for name, o in seen.items()} == {"test_two": "failed", "test_three": "failed"}, seen
    assert "never got ready" in seen["test_three"].message


def test_without_a_record_a_time_out_stays_not_evaluated(tmp_path, own_cache):
    """No control was measured (run-tests on a task never calibrated here): nothing is known, nothing decided."""
    seen = judge(tmp_path, "graded", tree_with(tmp_path / "sleeper", SLEEPS_WHERE_WRONG),
                 tree_with(tmp_path / "base", BASE), {})
    assert seen["test_three"].status == "timeout", seen["test_three"]


def test_run_tests_counts_outcomes_as_grading_scores_them():
    from grader.taskkit.run_tests import outcome_counts
    from grader.core.records import TestOutcome

    outcomes = [TestOutcome("a", "passed", {}), TestOutcome("b", "failed", {}, message="timeout: over budget"),
                TestOutcome("c", "timeout", {}, message="timeout: no control finished")]
    assert outcome_counts(outcomes) == "1 failed (1 over its time budget), 1 passed, 1 timeout (not evaluated)"


# Answers every call right, a little late: inside each call's floor, so no single call is over its budget.
LATE_BUT_RIGHT = "import time\n\ndef double(x):\n    time.sleep(1.5)\n    return 2 * x\n"
# Answers at once, then sleeps between calls (a thread holds what the next call needs for 1.5 s).
SLEEPS_BETWEEN_CALLS = """
import threading, time

busy = threading.Lock()


def _rest():
    time.sleep(1.5)
    busy.release()


def double(x):
    busy.acquire()
    threading.Thread(target=_rest, daemon=True).start()
    return 2 * x
"""
MANY_CALLS = """
import pytest
from grader.sandbox.client import subject


@pytest.mark.criterion("c1")
@pytest.mark.parametrize("x", range(12))
def test_double(x):
    assert subject("candidate").call("toy_probe.double", x=x, timeout=10) == 2 * x
"""


@pytest.mark.parametrize("candidate", [LATE_BUT_RIGHT, SLEEPS_BETWEEN_CALLS], ids=["late", "between-calls"])
def test_time_burned_inside_each_calls_floor_is_charged_to_the_candidate(tmp_path, own_cache, candidate):
    """Issue 49: late answers inside every call's floor ran the candidate into its own time limit, and the checks
    it had not reached were left out of the score. With the limit charged (the whole budget from the controls'
    times), each check it did not reach fails, ``timeout: ...``, where the controls finished it."""
    reference, base = tree_with(tmp_path / "reference", RIGHT), tree_with(tmp_path / "base", RIGHT)
    record = tmp_path / "call-times.json"
    run_judge(tmp_path / "calibration", reference, base, MANY_CALLS, {"toy_probe": PROBE},
              {"GRADER_CALL_TIMES_OUT": str(record)})
    seen = run_judge(tmp_path / "graded", tree_with(tmp_path / "late", candidate), base, MANY_CALLS,
                     {"toy_probe": PROBE}, {"GRADER_CALL_BUDGETS": str(record), "GRADER_DEADLINE_CHARGED": "1",
                                            **QUICK}, timeout=6)
    statuses = [seen[f"test_double[{x}]"].status for x in range(12)]
    assert "passed" in statuses and "timeout" not in statuses, statuses
    failed = [seen[f"test_double[{x}]"] for x in range(12) if statuses[x] == "failed"]
    assert failed and all(o.message.startswith("timeout:") and "whole time budget" in o.message for o in failed)
    c1 = score_from_outcomes("c1", "doubles", list(seen.values()))
    assert c1.status != "met" and c1.status != "not_evaluated", c1


def test_the_same_limit_uncharged_stays_an_honest_time_out(tmp_path, own_cache):
    """An operator's cut (``--timeout`` below the controls' budget) is not the candidate's: not evaluated."""
    reference, base = tree_with(tmp_path / "reference", RIGHT), tree_with(tmp_path / "base", RIGHT)
    record = tmp_path / "call-times.json"
    run_judge(tmp_path / "calibration", reference, base, MANY_CALLS, {"toy_probe": PROBE},
              {"GRADER_CALL_TIMES_OUT": str(record)})
    seen = run_judge(tmp_path / "graded", tree_with(tmp_path / "late", LATE_BUT_RIGHT), base, MANY_CALLS,
                     {"toy_probe": PROBE}, {"GRADER_CALL_BUDGETS": str(record), **QUICK}, timeout=6)
    assert "timeout" in {o.status for o in seen.values()}
    assert not [o for o in seen.values() if o.status == "failed"], seen


def test_checks_left_unreached_by_a_charged_run_fail_where_the_controls_finished_them(tmp_path):
    from grader.core.records import RunReport, TestOutcome
    from grader.pipeline.run import candidate_time, charge_unreached

    times = CallTimes()
    times.note_run(10.0, ["t::a", "t::b"])
    record = tmp_path / "times.json"
    times.save(record)
    limit, charged = candidate_time(10_000, record)
    assert charged and limit == times.whole_budget()
    assert candidate_time(1, record) == (1, False)  # the operator's cut: not charged
    run = RunReport([TestOutcome("t::a", "passed", {}), TestOutcome("t::b", "timeout", {}, message="not run"),
                     TestOutcome("t::c", "timeout", {})], None, True, "", 1.0)
    charged_run = charge_unreached(run, record, limit)
    assert [o.status for o in charged_run.outcomes] == ["passed", "failed", "timeout"]
    assert charged_run.outcomes[1].message.startswith("timeout:") and charged_run.timed_out  # c: nobody finished
    whole = charge_unreached(replace(run, outcomes=run.outcomes[:2]), record, limit)
    assert not whole.timed_out and whole.outcomes[1].status == "failed"


def test_the_deadline_is_a_duration_on_the_monotonic_clock(monkeypatch):
    """A step of the wall clock (NTP, a resumed VM) never turns into time-outs."""
    import time as clock

    from grader.sandbox import client

    monkeypatch.setenv("GRADER_DEADLINE", "100")
    before = client.deadline_left()
    monkeypatch.setattr(clock, "time", lambda: 1e12)  # the wall clock jumps far ahead
    assert abs(client.deadline_left() - before) < 5
    monkeypatch.setenv("GRADER_JUDGE_STARTED", repr(clock.monotonic() - 60))  # the judge started a minute ago
    assert 35 < client.deadline_left() <= 40


def test_evidence_with_a_check_failed_on_time_is_not_cached(tmp_path):
    from grader.core.records import RunReport, TestOutcome
    from grader.drive.evidence_cache import EvidenceCache

    cache = EvidenceCache(tmp_path / "evidence")
    on_time = RunReport([TestOutcome("t::a", "failed", {}, message="timeout: over its budget")], 0, False, "", 1.0)
    plain = RunReport([TestOutcome("t::a", "failed", {}, message="assert 7 == 6")], 0, False, "", 1.0)
    cache.save("k1", on_time)
    cache.save("k2", plain)
    assert cache.load("k1") is None and cache.load("k2") is not None
