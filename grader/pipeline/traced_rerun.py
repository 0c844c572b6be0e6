"""Which of the patch's added lines ran in each failing check: a second run, traced, of only the checks that the
first run failed.

The first run is never traced: it alone decides every status, score and verdict, and passing checks pay nothing
for tracing. Its failing and erroring checks (their pytest node ids) then run again in a judge and subjects set up
exactly as the first run's were (``grader.pipeline.run.run_hidden_tests``: the same sandbox, the same call budgets), with
the candidate's subject tracing the patch's added lines. From that re-run only one thing is kept, each check's
``ran``, and only where the re-run reproduced the check's outcome (the same status, an over-budget failure again
over budget): a flaky check, or a candidate that behaves otherwise under a tracer, gets a note that its re-run did
not reproduce, never another status. A re-run that times out, is interrupted or whose judge fails is no failure of
the candidate: the checks it did not finish get a note saying so, and the first run's evidence stands.

Checks that time out in the first run (no control finished either) are not re-run: they would cost their whole
time limit again. A diff that changes no file a subject can trace (no Python file of vLLM) is not re-run either:
none of its lines can have run, and each failing check says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from grader.core.records import RunReport, TestOutcome

# The first run's outcomes that are re-run traced: checks that ran and failed (an assertion, a fixture's error).
RERUN_STATUSES = ("failed", "error")
# A check's outcome when it did not finish: it timed out with no control finishing either, or the grader never ran it.
UNFINISHED_STATUSES = ("timeout", "not_run")
# How the evidence plugin marks a check failed for going over its call budget (``grader.pipeline.pytest_evidence``).
OVER_BUDGET_PREFIX = "timeout:"


def ended_whole(run: RunReport) -> bool:
    """Whether a judge's run ended as it should: within its time limit, with no environment or grader fault."""
    return not (run.timed_out or run.environment_error or run.grader_error)


def checks_to_trace(run: RunReport) -> list[str]:
    """The node ids of ``run``'s checks that a traced re-run runs; none where the run itself is not a verdict's
    evidence (timed out, the environment's or the grader's fault)."""
    if not ended_whole(run):
        return []
    return [o.nodeid for o in run.outcomes if o.status in RERUN_STATUSES]


def rerun_finished(rerun: RunReport) -> bool:
    """Whether the re-run ended whole with every check finished."""
    return ended_whole(rerun) and all(o.status not in UNFINISHED_STATUSES for o in rerun.outcomes)


def reproduced(first: TestOutcome, again: TestOutcome) -> bool:
    return again.status == first.status and \
        first.message.startswith(OVER_BUDGET_PREFIX) == again.message.startswith(OVER_BUDGET_PREFIX)


def rerun_note(again: TestOutcome | None) -> str:
    """Why a re-run check has no ``ran``: its re-run did not finish, or finished otherwise than the first run."""
    if again is None or again.status in UNFINISHED_STATUSES or again.ran is None:
        return ("re-run did not finish: the traced re-run ended before this check did, so which lines ran in it "
                "is not known")
    return (f"re-run did not reproduce: the traced re-run of this check {again.status}, so the lines it ran are "
            "not shown (the status above is the first run's)")


def with_lines_ran(first: RunReport, rerun: RunReport | None) -> RunReport:
    """``first`` with each re-run check's ``ran`` from ``rerun``, or a note where it has none; every other field
    is the first run's. ``rerun`` None: nothing could be traced, so no added line ran in any failing check."""
    chosen = set(checks_to_trace(first))
    again = {o.nodeid: o for o in rerun.outcomes} if rerun is not None else {}
    outcomes = []
    for outcome in first.outcomes:
        if outcome.nodeid not in chosen:
            outcomes.append(outcome)
        elif rerun is None:
            outcomes.append(replace(outcome, ran={}))
        elif (match := again.get(outcome.nodeid)) is not None and match.ran is not None and \
                reproduced(outcome, match):
            outcomes.append(replace(outcome, ran=match.ran))
        else:
            outcomes.append(replace(outcome, rerun=rerun_note(match)))
    return replace(first, outcomes=outcomes)


def trace_failing_checks(first: RunReport, traceable: bool,
                         run_traced: Callable[[list[str]], RunReport]) -> tuple[RunReport, RunReport | None]:
    """``first`` with the lines that ran in its failing checks, and the traced re-run it took them from (None
    where none was needed). ``traceable``: whether the diff changes a file a subject can trace;
    ``run_traced(node_ids)`` runs those checks traced."""
    chosen = checks_to_trace(first)
    if not chosen:
        return first, None
    if not traceable:
        return with_lines_ran(first, None), None
    rerun = run_traced(chosen)
    return with_lines_ran(first, rerun), rerun
