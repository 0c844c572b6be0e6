"""How a result is said, the same everywhere it is said (the summary, the index, the candidate page, the terminal):
which failing claim stands for a criterion, and how a verdict reads.

Functions of typed results (``CandidateResult``; results.json is read back into them). The verdict value itself is
the scorer's (``grader.pipeline.score.verdict_for``); this only words it: a ``partial`` whose every evaluated criterion is
met, short of ``full`` only because checks did not run, reads "all met where evaluated; 5 GPU checks not run",
never as a bare "partial 1.00".
"""

from __future__ import annotations

from collections import Counter

from grader.core.records import CandidateResult, CriterionResult, EvidenceEntry
from grader.pipeline.score import EVALUATED, not_run_reason

DECIDING = ("failed", "error")
NOT_RUN_WORDS = {"gpu": ("GPU check", "not run"), "timeout": ("check", "timed out"),
                 "not_run": ("check", "not run (the grader's fault)"), "skipped": ("check", "skipped")}


def deciding_failure(evidence: list[EvidenceEntry]) -> EvidenceEntry | None:
    """The evidence entry that stands for a criterion's failure: its first check that failed or errored (a check
    that timed out was not evaluated and decides nothing). The summary, the index and the page all name this one."""
    return next((e for e in evidence if e.status in DECIDING), None)


def claim_of(evidence: EvidenceEntry) -> str:
    """What a check claims, in the rubric's words: its docstring's first line, else its test's name."""
    return (evidence.claim or evidence.test.rsplit("::", 1)[-1]).strip().rstrip(".")


def checks_not_run(criteria: dict[str, CriterionResult]) -> Counter:
    """Distinct checks that did not run, by reason (a check evidencing several criteria counts once); a skipped
    variant whose criterion had another variant evaluated stood in for nothing missing and is not counted."""
    reasons: dict[str, str] = {}
    for criterion in criteria.values():
        evidence = criterion.evidence
        variant_ran = any("variant" in e.kinds and e.status in EVALUATED for e in evidence)
        for e in evidence:
            if e.status in EVALUATED:
                continue
            if variant_ran and "variant" in e.kinds and e.status == "skipped":
                continue
            reasons.setdefault(e.test, not_run_reason(e))
    return Counter(reasons.values())


def not_run_phrase(counts: Counter) -> str:
    """``5 GPU checks not run, 1 check timed out``."""
    parts = []
    for reason in ("gpu", "timeout", "not_run", "skipped"):
        if counts[reason]:
            noun, what = NOT_RUN_WORDS[reason]
            parts.append(f"{counts[reason]} {noun}{'s' if counts[reason] != 1 else ''} {what}")
    return ", ".join(parts)


def all_met_where_evaluated(result: CandidateResult) -> bool:
    """A ``partial`` with no criterion below met: short of full only for what was not evaluated or did not run."""
    statuses = [c.status for c in result.criteria.values()]
    return (result.verdict == "partial" and "met" in statuses
            and all(s in ("met", "not_evaluated") for s in statuses))


def verdict_phrase(result: CandidateResult) -> str:
    """The verdict as a reader should read it: "all met where evaluated; 5 GPU checks not run" for a partial
    short of full only by coverage; otherwise the verdict, with the weighted score where there is one."""
    if all_met_where_evaluated(result):
        criteria = result.criteria
        parts = ["all met where evaluated"]
        unevaluated = sorted(cid for cid, c in criteria.items() if c.status == "not_evaluated")
        missing = not_run_phrase(checks_not_run(criteria))
        if missing:
            parts.append(missing)
        if unevaluated:
            parts.append(f"{', '.join(unevaluated)} not evaluated")
        if len(parts) == 1:  # everything ran: "where evaluated" would say nothing
            parts = ["all met", short_of_full_otherwise(result)]
        return "; ".join(parts)
    score = result.score
    return result.verdict.replace("_", " ") + (f" {score:.2f}" if score is not None else "")


def short_of_full_otherwise(result: CandidateResult) -> str:
    """What else keeps a result whose every criterion is met and ran from full."""
    if result.run_status == "apply_partial":
        return "but the patch applied only in part"
    return "the run did not complete" if result.run_status != "complete" else "not full"


def verdict_line(result: CandidateResult) -> str:
    """The verdict in one line for the terminal and the page: ``fail 0.00``, ``full 1.00``, or
    ``partial (all met where evaluated; 5 GPU checks not run)``."""
    if all_met_where_evaluated(result):
        return f"{result.verdict} ({verdict_phrase(result)})"
    return verdict_phrase(result)
