"""Summaries: one short paragraph per candidate, written from the evidence (``templates/summary.txt.j2``).

It opens with what happened when grading did not complete, then what the patch does (``grader.describe``, read off
the applied tree), then one sentence per reason for the verdict: the core criterion that failed with its first
failing claim, what else is not met, what conditional criteria lost to their anchor (one sentence per anchor),
what was not evaluated and why, and what is met only on part of its checks. The detail lives on the page.
"""

from __future__ import annotations

import re
from collections import defaultdict

from jinja2 import Environment, PackageLoader, StrictUndefined

from grader.core.records import ApplyReport, CandidateResult, CriterionResult, RunReport

_env = Environment(loader=PackageLoader("grader", "templates"), undefined=StrictUndefined, trim_blocks=True,
                   lstrip_blocks=True, keep_trailing_newline=False, autoescape=False)
ASSERTION_CAP = 220
# pytest's own prefixes of an assertion message, not part of the claim.
NOISE = re.compile(r"^(?:AssertionError|assert|grader\.sandbox\.client\.\w+|E)\s*:?\s*")


def describe_files(apply: ApplyReport | None) -> str:
    """What the diff touches, when nothing finer could be read from the tree: files by area."""
    if apply is None or not apply.files:
        return "changes nothing the grader could see"
    source = sorted({f.path.rsplit("/", 1)[-1] for f in apply.files if not f.path.startswith(("tests/", "docs/"))})
    tests = sum(f.path.startswith("tests/") for f in apply.files)
    parts = [f"`{name}`" for name in source[:4]] + ([f"{len(source) - 4} more files"] if len(source) > 4 else [])
    if tests:
        parts.append(f"{tests} test file{'s' if tests > 1 else ''}")
    return "changes " + _join(parts)


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _first_failure(criterion: CriterionResult) -> dict | None:
    return next((e for e in criterion.evidence if e["status"] in ("failed", "error")), None)


def quote_assertion(message: str) -> str:
    """The first line that states what went wrong, whole up to a sentence end (or the cap, at a word)."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    marked = [line[1:].strip() for line in lines if line.startswith("E ")]
    first = next((NOISE.sub("", m) for m in marked if NOISE.sub("", m)), lines[-1] if lines else "")
    first = NOISE.sub("", first).strip()
    if len(first) <= ASSERTION_CAP:
        return first
    cut = first[:ASSERTION_CAP]
    end = max(cut.rfind(". "), cut.rfind("; "))
    return cut[:end + 1] if end > 15 else cut.rsplit(" ", 1)[0] + " ..."


# An exception's own line in a traceback: ``AttributeError: ...``, ``pkg.mod.ProbeRaised: ...``.
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Raised)\b:?")
TRACEBACK_START = "Traceback (most recent call last)"


def assertion_line(message: str) -> str:
    """What a failure says, in one line: the summary's quote of its assertion, unless that quote is only a
    traceback's opening or a line of carets; then the last exception a traceback in it raised."""
    said = quote_assertion(message)
    if re.search(r"[A-Za-z]", said) and TRACEBACK_START not in said:
        return said
    lines = [line.strip().removeprefix("E").strip() for line in message.splitlines()]
    raised = [line for line in lines if EXCEPTION_LINE.match(line) and TRACEBACK_START not in line]
    # Inside a quoted list of problems the traceback's quotes arrive with a backslash; the line reads without.
    return raised[-1].replace("\\'", "'")[:ASSERTION_CAP] if raised else said


def failure_sentence(criterion: CriterionResult) -> str:
    entry = _first_failure(criterion)
    if entry is None:
        return criterion.rationale
    claim = (entry.get("claim") or entry["test"].rsplit("::", 1)[-1]).rstrip(".")
    said = assertion_line(entry.get("message") or "")
    return f"\"{claim}\" does not hold" + (f" ({said.rstrip('.')})" if said else "")


def status_sentence(result: CandidateResult, run: RunReport | None) -> str:
    """The first sentence when grading did not complete: what happened, before anything about the patch."""
    status = result.run_status
    if status == "timed_out":
        unfinished = sum(o.status == "timeout" for o in run.outcomes) if run else 0
        total = len(run.outcomes) if run else 0
        return (f"Timed out: the time limit was reached with {unfinished} of {total} checks unfinished; those "
                "count neither for nor against the patch, and this result is not cached.") if total else \
            "Timed out before any hidden test ran; this result is not cached."
    if status == "environment_error":
        return f"Not graded, because of the grading environment, not the patch: {result.error}."
    if status == "input_truncated":
        graded = [c.id for c in result.criteria.values() if c.status != "not_evaluated"]
        if not graded:
            return ("The input was cut off: this preview does not show the whole change, so nothing was graded; "
                    "this is neither a pass nor a fail.")
        return ("The input was cut off, after every file the criteria read: they are graded on what it shows, and "
                "the verdict is input_truncated, neither a pass nor a fail.")
    if status == "grader_error":
        return f"Not graded, because the grader failed, not the patch: {result.error}; a rerun grades it again."
    if status == "apply_partial":
        return partial_apply_sentence(result.apply)
    return ""


def _hunk_names(apply: ApplyReport, status: str) -> list[str]:
    return [f"{f.path} {h.header.split('@@')[1].strip() if '@@' in h.header else ''}".strip()
            for f in apply.files for h in f.hunks if h.status == status]


def partial_apply_sentence(apply: ApplyReport) -> str:
    """Why a whole diff's tree is not the one git builds from it: hunks that failed, ended early, binary files."""
    parts = []
    for status, said in (("failed", "failed"), ("truncated", "end early (the diff is corrupt there)")):
        named = _hunk_names(apply, status)
        if named:
            parts.append(f"{len(named)} hunk{'s' if len(named) != 1 else ''} {said} ({'; '.join(named[:3])})")
    if apply.binary:
        parts.append(f"binary changes were not applied ({', '.join(apply.binary[:3])})")
    return f"Applied only in part: {_join(parts)}, so the patched tree is not the one git builds from the diff."


def fuzz_sentence(apply: ApplyReport | None) -> str:
    """Hunks that landed only with fuzz (context that did not match), named: the tree may differ from the intent."""
    fuzzed = [f"{f.path} {h.header.split('@@')[1].strip()}" if "@@" in h.header else f.path
              for f in (apply.files if apply else []) for h in f.hunks if h.status == "fuzz"]
    if not fuzzed:
        return ""
    return (f"{len(fuzzed)} hunk{'s' if len(fuzzed) != 1 else ''} landed only with fuzz, on context that did not "
            f"match ({'; '.join(fuzzed[:3])}{'; ...' if len(fuzzed) > 3 else ''}).")


def _named(criteria: list[CriterionResult]) -> str:
    return _join([f"{c.id} ({c.title})" for c in criteria])


def reason_sentences(task, result: CandidateResult) -> list[str]:
    """One sentence per reason for the verdict, repeated reasons merged."""
    criteria = [result.criteria[c] for c in sorted(result.criteria)]
    core = set(task.core_criteria) if task else set()
    anchored: dict[str, list[CriterionResult]] = defaultdict(list)
    failing, not_evaluated, thin = [], defaultdict(list), []
    for c in criteria:
        if c.status == "unmet" and c.rationale.startswith("anchor "):
            anchored[c.rationale.split()[1]].append(c)
        elif c.status in ("unmet", "partial"):
            failing.append(c)
        elif c.status == "not_evaluated":
            not_evaluated[c.rationale.split(";")[0]].append(c)
        elif c.not_run:
            thin.append(c)
    sentences = []
    failing.sort(key=lambda c: (c.id not in core, c.status != "unmet", c.id))
    if failing:
        first = failing[0]
        kind = "Core criterion " if first.id in core else ""
        state = "is not met" if first.status == "unmet" else f"is only partly met ({first.score:.2f})"
        sentences.append(f"{kind}{first.id} ({first.title}) {state}: {failure_sentence(first)}.")
    rest = failing[1:]
    if rest:
        sentences.append(_join([f"{c.id} ({c.title}, {c.score:.2f})" for c in rest]) + " "
                         + ("are" if len(rest) > 1 else "is") + " also below met.")
    for anchor, dependants in anchored.items():
        sentences.append(f"{_join([c.id for c in dependants])} get{'s' if len(dependants) == 1 else ''} no credit "
                         f"while their anchor {anchor} is unmet.")
    for why, group in not_evaluated.items():
        sentences.append(f"Not evaluated here: {_join([c.id for c in group])} ({why.rstrip('.')}).")
    for c in thin[:2]:
        runs = ", ".join(f"{n} {kind} check{'s' if n != 1 else ''}" for kind, n in sorted(c.not_run.items()))
        sentences.append(f"{c.id} is met on {c.coverage:.0%} of its weighted checks ({runs} not run).")
    if result.verdict == "partial" and not failing and not anchored and not not_evaluated:
        why = "the run did not complete" if result.run_status != "complete" else \
            "some checks did not run here" if thin else "a criterion is below 0.9"
        sentences.append(f"Every criterion is met, but not full: {why}.")
    return sentences


def summarize(task, result: CandidateResult, run: RunReport | None, change: str = "") -> str:
    text = _env.get_template("summary.txt.j2").render(
        result=result, apply=result.apply, task=task, change=change or describe_files(result.apply),
        lead=status_sentence(result, run), fuzz=fuzz_sentence(result.apply),
        reasons=reason_sentences(task, result) if result.verdict not in ("no_diff",) else [],
    )
    return " ".join(text.split())
