"""What a candidate's result means to CI, and so the run's exit code. The exit code, its reason on the terminal
and in ``run.exit_reason``, and the JUnit verdict case all read this one rule, so they never disagree.

Exit codes of ``grade`` (the first that applies):

- 2: grading of some candidate broke or met an environment fault (verdict ``error``);
- 1: some candidate graded completely is below ``--fail-under`` (``no_diff`` scores 0; a whole diff applied only
  in part never passes a threshold), or, without ``--fail-under``, has the verdict ``fail``;
- 3: some candidate was not graded completely: its hidden tests timed out, or its input was cut off
  (``input_truncated``);
- 4: the task of some candidate could not be told (``no_task``): pass ``--task``;
- 0: every candidate was graded completely (and, with ``--fail-under``, at or above it).

130 (interrupted) and 2 (the grader could not run as asked) are decided before any candidate's result.
"""

from __future__ import annotations

from typing import Literal

from grader.core.records import CandidateResult

Outcome = Literal["passed", "failed", "skipped", "error"]
# Run states in which a candidate was not graded completely: neither a pass nor a fail.
UNFINISHED = ("timed_out", "interrupted", "input_truncated")
EXIT_BELOW, EXIT_BROKE, EXIT_INCOMPLETE, EXIT_NO_TASK = 1, 2, 3, 4


def unfinished(result: CandidateResult) -> str | None:
    """Why ``result`` is not a complete grading ("timed out", "input cut off", "no task"), or None."""
    if result.verdict == "no_task":
        return "no task"
    if result.verdict == "input_truncated" or result.run_status == "input_truncated":
        return "input cut off"
    state = result.run_status
    return state.replace("_", " ") if state in UNFINISHED else None


def below_threshold(result: CandidateResult, fail_under: float) -> bool:
    """A completely graded result below ``fail_under``: ``no_diff`` scores 0, and a whole diff applied only in
    part never passes."""
    score = 0.0 if result.verdict == "no_diff" else (result.score or 0.0)
    return score < fail_under or result.run_status == "apply_partial"


def ci_outcome(result: CandidateResult, fail_under: float | None) -> Outcome:
    """The verdict as CI reads it: ``error`` where grading broke, ``skipped`` where the candidate was not graded
    completely (or has no diff, without a threshold), ``failed`` below ``--fail-under`` (without one: verdict
    ``fail``), else ``passed``."""
    if result.verdict == "error":
        return "error"
    if unfinished(result):
        return "skipped"
    if fail_under is None:
        return "skipped" if result.verdict == "no_diff" else "failed" if result.verdict == "fail" else "passed"
    return "failed" if below_threshold(result, fail_under) else "passed"


def _ids(results: list[CandidateResult]) -> str:
    return ", ".join(r.id for r in results[:5]) + (f" and {len(results) - 5} more" if len(results) > 5 else "")


def exit_code(results: list[CandidateResult], fail_under: float | None) -> int:
    return int(exit_reason(results, fail_under, None).split(":", 1)[0])


def exit_reason(results: list[CandidateResult], fail_under: float | None, interrupted: str | None) -> str:
    """Why the exit code is what it is, in one sentence that starts with the code."""
    if interrupted:
        return f"130: interrupted by {interrupted} before every candidate was graded"
    broken = [r for r in results if r.verdict == "error"]
    if broken:
        return f"{EXIT_BROKE}: grading broke or met an environment fault for {len(broken)} candidate(s): {_ids(broken)}"
    below = [r for r in results if ci_outcome(r, fail_under) == "failed"]
    cut = [r for r in results if unfinished(r) not in (None, "no task")]
    untold = [r for r in results if unfinished(r) == "no task"]
    # The groups behind the lower codes, named after the one that decided.
    later = [f"{len(group)} {what}" for group, what in ((cut, "not graded completely"), (untold, "with no task"))
             if group]
    if below:
        also = f"; also {', '.join(later)}" if later else ""
        what = f"below --fail-under {fail_under:g}" if fail_under is not None else "with the verdict fail"
        return f"{EXIT_BELOW}: {len(below)} candidate(s) {what}: {_ids(below)}{also}"
    if cut:
        causes = ", ".join(sorted({unfinished(r) for r in cut}))
        also = f"; also {len(untold)} with no task" if untold else ""
        return f"{EXIT_INCOMPLETE}: {len(cut)} candidate(s) not graded completely ({causes}): {_ids(cut)}{also}"
    if untold:
        return (f"{EXIT_NO_TASK}: the task of {len(untold)} candidate(s) could not be told (pass --task): "
                f"{_ids(untold)}")
    if fail_under is None:
        return "0: every candidate was graded completely (no --fail-under threshold)"
    return f"0: every candidate was graded completely, at or above --fail-under {fail_under:g}"
