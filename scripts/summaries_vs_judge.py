"""The grader's summaries beside the judge's paragraphs of a graded bundle, for reading by hand, and their lengths.

    .venv/bin/python scripts/summaries_vs_judge.py OUT/results.json [--all] [--pairs] [--again BUNDLE]

For every candidate with a judge's paragraph (``reference_summary``) and a grading that ran (whole diffs; cut
previews and candidates without a diff are left out unless ``--all``): its id, verdict, the two lengths in words
and the cap (``grader.reports.summarize.summary_cap``); ``--pairs`` prints both texts one under the other. The closing
lines give the medians, the largest ratio and how many summaries are over their cap (a hard cap: should be 0).
``--again BUNDLE`` first writes each summary again with this tree's code (the diff re-applied and described, the
recorded evidence summarized anew, no test run), to read a wording change without regrading.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.reports.report import results_of  # noqa: E402
from grader.reports.summarize import summary_cap  # noqa: E402

GRADED = ("full", "partial", "fail")


def summarized_again(results: list, bundle: Path) -> list:
    """``results`` with the summaries of graded candidates written again by this tree's describe and summarize."""
    import shutil
    import tempfile
    from dataclasses import replace

    from grader.pipeline.apply import apply_diff, make_tree
    from grader.core.paths import scratch_root
    from grader.core.rubric import all_tasks
    from grader.reports.describe import describe_tree
    from grader.pipeline.ingest import ingest
    from grader.drive.one_candidate import BaseCache
    from grader.reports.summarize import summarize

    diffs = {c.id: c.diff for c in ingest([bundle])}
    tasks, bases, again = all_tasks(), BaseCache(), []
    for r in results:
        if r.verdict not in GRADED or r.task not in tasks or r.id not in diffs:
            again.append(r)
            continue
        base = bases.get(tasks[r.task])
        parent = Path(tempfile.mkdtemp(prefix="summaries-", dir=scratch_root()))
        try:
            tree = make_tree(base, parent)
            report = apply_diff(diffs[r.id], tree)
            change = describe_tree(base.path, tree, [f.path for f in report.files])
        finally:
            shutil.rmtree(parent, ignore_errors=True)
        again.append(replace(r, summary=summarize(tasks[r.task], r, None, change)))
    return again


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--all", action="store_true", help="every candidate with a judge's paragraph")
    parser.add_argument("--pairs", action="store_true", help="print both texts of each candidate")
    parser.add_argument("--again", type=Path, metavar="BUNDLE", help="summarize again with this tree's code")
    args = parser.parse_args()
    results = results_of(json.loads(args.results.read_text()))
    if args.again is not None:
        results = summarized_again(results, args.again)
    chosen = [r for r in results if r.reference_summary and (args.all or r.verdict in GRADED)]
    chosen.sort(key=lambda r: int(r.source.rsplit("#", 1)[-1]) if "#" in r.source else 0)
    ours, theirs, over = [], [], []
    for r in chosen:
        mine, judge, cap = len(r.summary.split()), len(r.reference_summary.split()), summary_cap(r)
        ours.append(mine)
        theirs.append(judge)
        if mine > cap:
            over.append(r.id)
        position = r.source.rsplit("#", 1)[-1]
        print(f"#{position:>3} {r.id} {r.task} {r.verdict}: ours {mine} words, judge {judge}, cap {cap}")
        if args.pairs:
            print(f"  ours:  {r.summary}\n  judge: {r.reference_summary}\n")
    if not chosen:
        print("no candidate with a judge's paragraph")
        return 1
    ratio = max(m / j for m, j in zip(ours, theirs))
    print(f"{len(chosen)} summaries; median {statistics.median(ours)} words (judge {statistics.median(theirs)}); "
          f"largest ratio to the judge's {ratio:.2f}; over the cap: {len(over)} {over[:5]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
