"""Whether two grading outputs say the same thing, but for the circumstances of their runs: results.json without
the fields that differ between identical gradings (``grader.reports.report.comparable``), junit.xml without its
times, and every other file (pages, styles) character for character once the run's times are masked: the index's start time
and wall seconds, and every duration a message states (``budget (30.1 s)``, ``answered it in 0.01 s``: time
budgets come from the controls' own timed calls). With ``--across-revisions`` the grader's revision and its engine
digest (``rubric.engine``, a digest of the engine's modules) are masked too. For a refactor that must change
nothing a reader sees: grade the same candidates before and after, then

    .venv/bin/python scripts/same_outputs.py OUT_BEFORE OUT_AFTER --across-revisions

Exit 0 when they agree; otherwise 1, with each difference on a line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.reports.report import comparable, differences, parting  # noqa: E402

# What a run says of its own times: when it started, and every duration (the index's wall seconds, the budgets
# and control times in messages).
STARTED = (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"), "<started>")
DURATION = (re.compile(r"(?<![\w.])\d+(?:\.\d+)? s\b"), "<t> s")
RUN_TIMES = [STARTED, DURATION]
REVISION = (re.compile(r"(grader [\w.+-]+ )\([^()<>]*\)"), r"\1(<revision>)")
JUNIT_TIMES = re.compile(r'\s(time|timestamp|hostname)="[^"]*"')
# The store and the lock are the run's working state, not what it reports.
WORKING_STATE = ("store", ".grader.lock")


def masked_page(text: str, across_revisions: bool) -> str:
    for pattern, replacement in RUN_TIMES + ([REVISION] if across_revisions else []):
        text = pattern.sub(replacement, text)
    return text


def without_durations(value):
    """``value`` (JSON) with every duration a string states masked."""
    if isinstance(value, dict):
        return {k: without_durations(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_durations(v) for v in value]
    return DURATION[0].sub(DURATION[1], value) if isinstance(value, str) else value


def results_differences(a: Path, b: Path, across_revisions: bool) -> list[str]:
    docs = [without_durations(comparable(json.loads(p.read_text(encoding="utf-8")))) for p in (a, b)]
    if across_revisions:
        for doc in docs:
            doc.get("run", {}).pop("grader", None)
            for result in doc.get("candidates", []):
                (result.get("rubric") or {}).pop("engine", None)
    return [f"results.json{d}" for d in differences(*docs)]


def reported_files(out: Path) -> set[str]:
    return {str(p.relative_to(out)) for p in out.rglob("*")
            if p.is_file() and p.relative_to(out).parts[0] not in WORKING_STATE}


def output_differences(a: Path, b: Path, across_revisions: bool = False) -> list[str]:
    """Each way in which the outputs ``a`` and ``b`` differ beyond their runs' circumstances."""
    found = [f"only in {a}: {name}" for name in sorted(reported_files(a) - reported_files(b))]
    found += [f"only in {b}: {name}" for name in sorted(reported_files(b) - reported_files(a))]
    for name in sorted(reported_files(a) & reported_files(b)):
        if name == "results.json":
            found += results_differences(a / name, b / name, across_revisions)
            continue
        x, y = ((out / name).read_text(encoding="utf-8", errors="surrogateescape") for out in (a, b))
        if name.endswith(".xml"):
            x, y = JUNIT_TIMES.sub("", x), JUNIT_TIMES.sub("", y)
        elif name.endswith(".html"):
            x, y = masked_page(x, across_revisions), masked_page(y, across_revisions)
        if x != y:
            found.append(f"{name}: {parting(x, y)}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--across-revisions", action="store_true",
                        help="also ignore the grader revision each run records (a before/after of a change)")
    args = parser.parse_args()
    found = output_differences(args.a, args.b, args.across_revisions)
    for line in found:
        print(line)
    print(f"{len(found)} difference(s) beyond the runs' circumstances" if found else
          f"{args.a} and {args.b} say the same, but for their runs' circumstances")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
