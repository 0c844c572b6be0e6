"""Scoring: pure functions from test outcomes and the apply report to criterion results and a verdict.

A real score, an error and "not evaluated" are three different things: a criterion with no evaluated evidence
has no score at all, and never counts as the candidate's failure. A check whose probe went over its time budget
where a control (the base or the reference) finished the same call has failed (``grader.sandbox.budget``); one
that timed out where no control finished either, or that was skipped, is not evaluated: it counts neither for nor
against the candidate, and the criterion's coverage says how much ran.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from grader.core.records import (ApplyReport, CriterionResult, CriterionStatus, EvidenceEntry, RunReport, RunStatus,
                                 TestOutcome, Verdict)
from grader.core.rubric import Task

# A criterion is met only when every one of its evaluated checks passed (its weighted share is then exactly 1):
# each check is a case the criterion's words name, so a failed case can never read as met, whatever its weight.
# Weights order partial credit only. Unmet at or below a quarter; partial in between.
MET_AT = 1.0
UNMET_AT = 0.25
FULL_AT = MET_AT
EVALUATED = ("passed", "failed", "error")
# The candidate's score orders as its verdict does: every ``fail`` scores below every ``partial``, every
# ``partial`` below ``full``. Within a band the score follows the weighted mean of the criteria's scores.
FAIL_BAND = (0.0, 0.24)
PARTIAL_BAND = (0.25, 0.99)
SCORED_VERDICTS = ("full", "partial", "fail")


def status_for(score: float) -> CriterionStatus:
    if score >= MET_AT:
        return "met"
    if score <= UNMET_AT:
        return "unmet"
    return "partial"


def _evidence_entry(outcome: TestOutcome, weight: float) -> EvidenceEntry:
    # ``ran`` is shown on the scorecard; nothing here or in the verdict reads it.
    return EvidenceEntry(outcome.nodeid, outcome.status, weight, outcome.doc, outcome.kinds,
                         round(outcome.duration, 3), outcome.message[-1500:], outcome.ran, outcome.rerun)


def not_run_reason(check: TestOutcome | EvidenceEntry) -> str:
    """Why a check that was not evaluated did not run: ``timeout``, ``not_run`` (the grader's), ``gpu``, ``skipped``."""
    if check.status in ("timeout", "not_run"):
        return check.status
    return "gpu" if "gpu" in check.kinds else "skipped"


# What tells a check's variants apart: a device among its parameters (``test_x[nan-cpu]``, ``test_x[nan-cuda]``)
# or the word ``interpreted`` in its name (``test_numerics_interpreted`` beside the compiled ``test_numerics``).
VARIANT_DEVICES = frozenset({"cpu", "cuda"})
VARIANT_WORD = "interpreted"


def variant_case(nodeid: str) -> str:
    """The case a variant check stands for: its node id without the device among its parameters and without
    ``interpreted`` in its name, so that ``test_x[scale1-rocm-cpu]`` and ``test_x[scale1-rocm-cuda]`` are one
    case, ``test_x[scale1-cuda-cpu]`` another, and ``test_y_interpreted[c]`` is ``test_y[c]``."""
    head, bracket, params = nodeid.partition("[")
    path, sep, name = head.rpartition("::")
    name = "_".join(word for word in name.split("_") if word != VARIANT_WORD)
    head = f"{path}{sep}{name}"
    if not bracket:
        return head
    kept = [p for p in params.rstrip("]").split("-") if p not in VARIANT_DEVICES]
    return f"{head}[{'-'.join(kept)}]"


def stood_in_for(listed: list[tuple[TestOutcome, float]]) -> set[str]:
    """Variants of a check (marker ``variant``: the CPU-interpreter case and the compiled GPU case) skipped while
    another variant of the same case was evaluated: not missing evidence, so they count nowhere. A skipped variant
    whose own case no variant evaluated (a ROCm case that only the interpreter emulates, in a GPU run that skips
    the interpreter) is missing evidence like any other skip, whatever other cases of the criterion ran."""
    evaluated = {variant_case(o.nodeid) for o, _ in listed if "variant" in o.kinds and o.status in EVALUATED}
    return {o.nodeid for o, _ in listed
            if "variant" in o.kinds and o.status == "skipped" and variant_case(o.nodeid) in evaluated}


def score_from_outcomes(cid: str, title: str, outcomes: list[TestOutcome]) -> CriterionResult:
    """Weighted share of passing evaluated tests; not_evaluated (with the reasons) when none was evaluated."""
    listed = [(o, o.criteria[cid]) for o in outcomes if cid in o.criteria]
    evidence = [_evidence_entry(o, w) for o, w in listed]
    covered = stood_in_for(listed)
    relevant = [(o, w) for o, w in listed if o.nodeid not in covered]
    evaluated = [(o, w) for o, w in relevant if o.status in EVALUATED]
    total = sum(w for _, w in evaluated)
    everything = sum(w for _, w in relevant)
    not_run = dict(Counter(not_run_reason(o) for o, _ in relevant if o.status not in EVALUATED))
    coverage = round(total / everything, 4) if everything > 0 else 0.0
    if not evaluated or total <= 0:
        # A time-out is named first: it is why this run has no evidence, whatever else would not have run here.
        reasons = sorted({o.message for o, _ in relevant if o.status == "timeout" and o.message}) + \
            sorted({o.message for o, _ in relevant if o.status == "skipped" and o.message})
        why = "; ".join(reasons[:3]) if reasons else "no hidden test evidences this criterion"
        return CriterionResult(cid, title, None, "not_evaluated", why, evidence, coverage, not_run)
    passed = sum(w for o, w in evaluated if o.status == "passed")
    score = round(passed / total, 4)
    failing = [o for o, _ in evaluated if o.status != "passed"]
    rationale = f"{_count(passed)} of {_count(total)} weighted checks pass"
    if failing:
        rationale += "; failing: " + ", ".join(_short(o.nodeid) for o in failing[:4])
        if len(failing) > 4:
            rationale += f" and {len(failing) - 4} more"
    if not_run:
        rationale += f"; evaluated on {_count(total)} of {_count(everything)} weighted checks (not run: " + \
            ", ".join(f"{n} {why}" for why, n in sorted(not_run.items())) + ")"
    return CriterionResult(cid, title, score, status_for(score), rationale, evidence, coverage, not_run)


def _count(value: float) -> str:
    return f"{value:g}"


def _short(nodeid: str) -> str:
    return nodeid.rsplit("::", 1)[-1]


def apply_conditions(task: Task, results: dict[str, CriterionResult]) -> dict[str, CriterionResult]:
    """A conditional criterion judges a mechanism the fix introduces: with its anchor unmet there is none."""
    conditioned = dict(results)
    for criterion in task.criteria.values():
        if criterion.kind != "conditional":
            continue
        anchor, own = results[criterion.anchor], results[criterion.id]
        if anchor.status == "not_evaluated":
            conditioned[criterion.id] = replace(
                own, score=None, status="not_evaluated",
                rationale=f"anchor {anchor.id} could not be evaluated ({anchor.rationale})")
        elif anchor.status == "unmet":
            conditioned[criterion.id] = replace(
                own, score=0.0, status="unmet",
                rationale=(f"anchor {anchor.id} ({anchor.title}) is {anchor.status}: the change adds no such "
                           f"mechanism to credit here (own checks: {own.rationale})"))
    return conditioned


def not_evaluated_all(task: Task, reason: str) -> dict[str, CriterionResult]:
    return {c.id: CriterionResult(c.id, c.title, None, "not_evaluated", reason) for c in task.criteria.values()}


def score_criteria(task: Task, run: RunReport) -> dict[str, CriterionResult]:
    results = {c.id: score_from_outcomes(c.id, c.title, run.outcomes) for c in task.criteria.values()}
    if run.environment_error:
        results = {cid: replace(r, rationale=f"{run.environment_error}; {r.rationale}")
                   if r.status == "not_evaluated" else r for cid, r in results.items()}
    return apply_conditions(task, results)


def criteria_mean(task: Task, criteria: dict[str, CriterionResult]) -> float | None:
    """Weighted mean over the criteria that were evaluated."""
    weighted = [(task.criteria[cid].weight, r.score) for cid, r in criteria.items() if r.score is not None]
    total = sum(w for w, _ in weighted)
    return round(sum(w * s for w, s in weighted) / total, 4) if total else None


def overall_score(task: Task, criteria: dict[str, CriterionResult], verdict: Verdict) -> float | None:
    """The candidate's score, ordered as its verdict: ``full`` is 1.0 (every criterion met on every check),
    ``partial`` lies in PARTIAL_BAND and ``fail`` in FAIL_BAND, each by the criteria's weighted mean. Any other
    verdict (an incomplete run, an error, a cut input, no diff, no task) is unscored: None, never a number a
    dashboard or a reward would sum."""
    if verdict not in SCORED_VERDICTS:
        return None
    mean = criteria_mean(task, criteria)
    if verdict == "full":
        return 1.0
    low, high = PARTIAL_BAND if verdict == "partial" else FAIL_BAND
    if mean is None:
        # Nothing was evaluated: a fail that never ran (a diff that did not apply) is the bottom of its band.
        return low if verdict == "fail" else None
    return round(low + (high - low) * mean, 4)


def verdict_for(task: Task, apply: ApplyReport, criteria: dict[str, CriterionResult],
                run_status: RunStatus, cut_input: bool = False) -> Verdict:
    """``full`` needs every criterion evaluated on every one of its checks, all passing, in a complete run; a core
    criterion below UNMET_AT is ``fail``; a run that did not finish (``timed_out``, ``interrupted``) is
    ``incomplete``, unscored whatever its finished checks say; a whole diff with a failed hunk is at best
    ``partial``. A cut preview (``cut_input``) is ``input_truncated`` whatever its graded criteria say: the
    candidate was not seen whole, so it neither passes nor fails (an unsafe diff is still refused: ``fail``)."""
    if apply.status == "empty":
        return "no_diff"
    if run_status in ("environment_error", "grader_error"):
        return "error"
    if apply.status == "rejected":
        return "fail"
    if cut_input:
        return "input_truncated"
    if apply.status == "failed":
        return "fail"
    if run_status in ("timed_out", "interrupted"):
        return "incomplete"
    if any(criteria[cid].score is not None and criteria[cid].score < UNMET_AT for cid in task.core_criteria):
        return "fail"
    if run_status == "complete" and all(r.score is not None and r.score >= FULL_AT and r.coverage >= 1.0
                                        for r in criteria.values()):
        return "full"
    return "partial"
