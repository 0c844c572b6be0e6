"""Summaries: one paragraph per candidate, written from the evidence through the templates in ``templates/``."""

from __future__ import annotations

from collections import Counter

from jinja2 import Environment, PackageLoader, StrictUndefined

from grader.records import ApplyReport, CandidateResult, RunReport

_env = Environment(loader=PackageLoader("grader", "templates"), undefined=StrictUndefined, trim_blocks=True,
                   lstrip_blocks=True, keep_trailing_newline=False, autoescape=False)


def describe_change(apply: ApplyReport | None) -> str:
    """What the diff touches, in words: files by area and change type."""
    if apply is None or not apply.files:
        return "changes nothing the grader could see"
    areas = Counter()
    for f in apply.files:
        area = "test" if f.path.startswith("tests/") else "doc" if f.path.startswith("docs/") else "source"
        areas[area] += 1
    source = sorted({f.path.rsplit("/", 1)[-1] for f in apply.files if not f.path.startswith(("tests/", "docs/"))})
    parts = source[:4] + ([f"{len(source) - 4} more source files"] if len(source) > 4 else [])
    if areas["test"]:
        parts.append(f"{areas['test']} test file{'s' if areas['test'] > 1 else ''}")
    if areas["doc"]:
        parts.append(f"{areas['doc']} doc file{'s' if areas['doc'] > 1 else ''}")
    return "changes " + _join(parts)


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _first_failure(result, cid: str) -> dict | None:
    for entry in result.criteria[cid].evidence:
        if entry["status"] not in ("passed", "skipped"):
            return entry
    return None


def _failure_text(entry: dict | None) -> str:
    if entry is None:
        return ""
    claim = entry.get("claim") or entry["test"].rsplit("::", 1)[-1]
    message = (entry.get("message") or "").strip().splitlines()
    # pytest marks the failure's own lines with "E"; the first of them states what went wrong.
    first = next((line.strip()[1:].strip() for line in message if line.strip().startswith("E ")
                  and line.strip()[1:].strip()), "")
    first = first or (message[-1].strip() if message else "")
    text = f"'{claim}' does not hold ({entry['test'].rsplit('::', 1)[-1]}"
    return text + (f": {first[:160]})" if first else ")")


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
    if status == "apply_partial":
        failed = [f"{f.path} {h.header.split('@@')[1].strip() if '@@' in h.header else ''}".strip()
                  for f in result.apply.files for h in f.hunks if h.status == "failed"]
        return (f"Applied only in part: {len(failed)} hunk{'s' if len(failed) != 1 else ''} failed "
                f"({'; '.join(failed[:3])}), so the patched tree is not the one the author wrote.")
    return ""


def summarize(task, result: CandidateResult, run: RunReport | None) -> str:
    criteria = [result.criteria[c] for c in sorted(result.criteria)]
    template = _env.get_template("summary.txt.j2")
    text = template.render(
        task=task, result=result, apply=result.apply, change=describe_change(result.apply),
        met=[c for c in criteria if c.status == "met"],
        partial=[c for c in criteria if c.status == "partial"],
        unmet=[c for c in criteria if c.status == "unmet"],
        not_evaluated=[c for c in criteria if c.status == "not_evaluated"],
        failure=lambda cid: _failure_text(_first_failure(result, cid)),
        run=run,
    )
    lead = status_sentence(result, run)
    return " ".join((lead + " " + fuzz_sentence(result.apply) + " " + text).split())


def fuzz_sentence(apply: ApplyReport | None) -> str:
    """Hunks that landed only with fuzz (context that did not match), named: the tree may differ from the intent."""
    fuzzed = [f"{f.path} {h.header.split('@@')[1].strip()}" if "@@" in h.header else f.path
              for f in (apply.files if apply else []) for h in f.hunks if h.status == "fuzz"]
    if not fuzzed:
        return ""
    return (f"{len(fuzzed)} hunk{'s' if len(fuzzed) != 1 else ''} landed only with fuzz, on context that did not "
            f"match ({'; '.join(fuzzed[:3])}{'; ...' if len(fuzzed) > 3 else ''}).")
