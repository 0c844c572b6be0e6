"""Where a candidate's test seconds go, per task, from the results.json files of gradings.

    python bench/check_costs.py RESULTS.json [RESULTS.json ...] [--top N] [--candidates PREFIX ...]

For each file and task: how many candidates ran tests, their mean ``tests_s`` (the judge's whole run), the mean
of their checks' summed ``duration_s``, and the checks that cost most on average, with the share of the tests'
seconds they take. A task's subjects start inside its first checks (a subject is started by the first probe call
made to it), so a start that costs seconds shows as one or two checks far above the rest. ``--candidates`` keeps
the candidates whose id starts with one of the prefixes (a bench's copies, ``NAME-copyNN``, start with ``NAME``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def check_seconds(candidate: dict) -> dict[str, float]:
    """Each check of ``candidate`` (its JSON result), by its name in its file, with the seconds it took."""
    return {e["test"].split("::", 1)[-1]: e.get("duration_s") or 0.0
            for criterion in candidate.get("criteria", {}).values() for e in criterion["evidence"] if e.get("test")}


def per_task(document: dict, prefixes: tuple[str, ...] = ("",)) -> dict[str, list[dict]]:
    tasks: dict[str, list[dict]] = defaultdict(list)
    for candidate in document.get("candidates", []):
        timings = candidate.get("timings") or {}
        if not timings.get("tests_s") or not candidate["id"].startswith(prefixes):
            continue
        tasks[candidate["task"]].append({"tests_s": timings["tests_s"], "checks": check_seconds(candidate)})
    return tasks


def report(path: Path, top: int, prefixes: tuple[str, ...] = ("",)) -> list[str]:
    lines = [f"== {path}"]
    tasks = per_task(json.loads(path.read_text()), prefixes)
    every = [r["tests_s"] for runs in tasks.values() for r in runs]
    if every:
        lines.append(f"all tasks: {len(every)} candidate(s), tests {statistics.mean(every):.1f} s")
    for task, runs in sorted(tasks.items()):
        tests = statistics.mean(r["tests_s"] for r in runs)
        summed = statistics.mean(sum(r["checks"].values()) for r in runs)
        lines.append(f"{task}: {len(runs)} candidate(s), tests {tests:.1f} s, checks summed {summed:.1f} s")
        means = {name: statistics.mean(r["checks"].get(name, 0.0) for r in runs)
                 for name in {n for r in runs for n in r["checks"]}}
        for name, seconds in sorted(means.items(), key=lambda item: -item[1])[:top]:
            lines.append(f"    {seconds:6.2f} s  {100 * seconds / tests:4.0f}%  {name}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--candidates", nargs="+", default=[""], metavar="PREFIX",
                        help="only the candidates whose id starts with one of these")
    args = parser.parse_args(argv)
    for path in args.results:
        print("\n".join(report(path, args.top, tuple(args.candidates))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
