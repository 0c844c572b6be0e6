"""An interrupt keeps what was finished: a grading that ends after the interrupt came (its tests done, only its
traced re-run cut short) is kept when its result is final, and dropped when it is not (``is_final``), so a resumed
run grades it again. Run on the local backend's pool with a stand-in grading that ends only once the
interrupted run has told its launcher to stop."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from grader.drive import many_candidates
from grader.core.records import Candidate, CandidateResult, GradingOptions
from grader.drive.many_candidates import Interrupted, LocalBackend, QuietObserver

TASK = "int8-kv-rounding"


class StoppingLauncher:
    """The launcher the run tells to stop its judges on an interrupt; the stand-in grading waits for that."""

    def __init__(self) -> None:
        self.stopped = threading.Event()

    def terminate(self) -> None:
        self.stopped.set()

    def close(self) -> None:
        pass


def result_of(candidate: Candidate, run_status: str) -> CandidateResult:
    return CandidateResult(candidate.id, candidate.task, candidate.source, "partial", 0.5, {}, None, "summary",
                           run_status=run_status)


@pytest.mark.parametrize(("late_status", "kept"), [("complete", True), ("interrupted", False)])
def test_a_grading_that_ends_after_the_interrupt_is_kept_only_when_final(monkeypatch, late_status, kept):
    fast, late = (Candidate(f"{TASK}/{name}", f"{name}.diff", "", TASK) for name in ("fast", "late"))
    launcher = StoppingLauncher()

    def grade(candidate, bases, options, launcher_given, evidence):
        if candidate is late:
            assert launcher_given.stopped.wait(timeout=60), "the run never stopped its launcher"
            return result_of(candidate, late_status), None
        return result_of(candidate, "complete"), None

    monkeypatch.setattr(many_candidates, "grade_candidate", grade)
    delivered: list[str] = []

    def deliver(item) -> None:
        delivered.append(item.candidate.id)
        if item.candidate is fast:
            raise Interrupted("SIGINT")  # as the signal handler raises it in the run's thread

    options = replace(GradingOptions(jobs=2), use_evidence_cache=False)
    with pytest.raises(Interrupted):
        LocalBackend().grade_with(launcher, [late, fast], options, QuietObserver(), deliver)
    assert delivered == ([fast.id, late.id] if kept else [fast.id])
