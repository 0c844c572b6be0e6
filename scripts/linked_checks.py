"""How many failing checks a grading's scorecards tie to the diff: linked to a hunk (its added lines ran in the
check, or the check's message names a line a hunk holds) or saying that none of the diff's lines ran.

    .venv/bin/python scripts/linked_checks.py --out OUT [--bundle BUNDLE]

``OUT`` is a folder ``grade.py BUNDLE --out OUT`` wrote; the pages' view model (``grader.reports.scorecard``) is built
again from its results.json and the bundle's diffs (without ``--bundle``: each result's source file), so the
counts are those of the pages. Prints one line for all
candidates and one each for whole diffs and cut previews.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grader.core.records import CandidateResult
from grader.pipeline.ingest import parse_bundle
from grader.reports.report import results_of
from grader.reports.scorecard import build_candidate, input_kind, known_tasks


def count(results: list[CandidateResult], diffs: dict[str, str]) -> dict[str, dict[str, int]]:
    """Per input kind ("all", "whole", "cut"): failing checks, those linked to a hunk, those saying none ran."""
    tasks = known_tasks()
    totals = {kind: {"failing": 0, "hunk": 0, "none_ran": 0, "candidates": 0} for kind in ("all", "whole", "cut")}
    for result in results:
        page = build_candidate(result, diffs.get(result.id, ""), None, tasks)
        for kind in ("all", input_kind(result)):
            totals[kind]["failing"] += page.failing_checks
            totals[kind]["hunk"] += page.hunk_linked_checks
            totals[kind]["none_ran"] += page.none_ran_checks
            totals[kind]["candidates"] += page.failing_checks > 0
    return totals


def line(kind: str, found: dict[str, int]) -> str:
    tied = found["hunk"] + found["none_ran"]
    share = f"{100 * tied / found['failing']:.1f}%" if found["failing"] else "-"
    return (f"{kind}: {tied} of {found['failing']} failing checks ({share}) in {found['candidates']} candidates: "
            f"{found['hunk']} linked to a hunk, {found['none_ran']} say none of the diff's lines ran")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--bundle", type=Path)
    args = parser.parse_args(argv)
    results = results_of(json.loads((args.out / "results.json").read_text()))
    if args.bundle:
        diffs = {c.id: c.diff for c in parse_bundle(args.bundle)}
    else:
        diffs = {r.id: Path(r.source).read_text() for r in results if Path(r.source).is_file()}
    for kind, found in count(results, diffs).items():
        print(line(kind, found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
