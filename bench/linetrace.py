"""What tracing the patch's added lines costs: one sample's hidden tests run with line tracing on and off, side by
side (alternating, so load on the machine falls on both alike), with the median, quartiles and a bootstrap
interval of the ratio.

    .venv/bin/python bench/linetrace.py [--task xpu-kv-cache-dtypes --sample backend-only] [--rounds 5] [--out F]

Each round grades the sample twice through the pipeline (no evidence cache, a cold judge each time), once traced
and once not, in alternating order; the figure is the hidden tests' wall time (``timings["tests_s"]``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.stats import bootstrap_ratio_ci, median, quartiles, seed_of  # noqa: E402
from grader.core.records import Candidate  # noqa: E402
from grader.core.rubric import REPO_ROOT  # noqa: E402
from grader.pipeline import BaseCache, GradeOptions, grade_candidate  # noqa: E402


def tests_seconds(candidate: Candidate, bases: BaseCache, traced: bool) -> float:
    result, _ = grade_candidate(candidate, bases, GradeOptions(trace_lines=traced))
    if result.verdict == "error":
        raise SystemExit(f"{candidate.id} did not grade: {result.summary}")
    return result.timings["tests_s"]


def measure(task: str, sample: str, rounds: int) -> dict:
    diff = (REPO_ROOT / "candidates" / task / f"{sample}.diff").read_text()
    candidate = Candidate(sample, "bench", diff, task=task)
    bases = BaseCache()
    tests_seconds(candidate, bases, True)  # untimed: builds the base, warms the file cache
    on, off = [], []
    for round_number in range(rounds):
        order = (True, False) if round_number % 2 == 0 else (False, True)
        for traced in order:
            (on if traced else off).append(tests_seconds(candidate, bases, traced))
    low, high = bootstrap_ratio_ci(on, off, seed=seed_of(f"linetrace-{task}-{sample}"), paired=True)
    return {"task": task, "sample": sample, "rounds": rounds, "traced_s": on, "untraced_s": off,
            "ratio_of_medians": median(on) / median(off), "ratio_ci95": [low, high]}


def report(found: dict) -> str:
    rows = []
    for name, key in (("traced", "traced_s"), ("untraced", "untraced_s")):
        samples = found[key]
        q1, q3 = quartiles(samples)
        rows.append(f"{name:9} median {median(samples):6.2f} s  IQR {q1:6.2f}-{q3:6.2f} s  "
                    f"range {min(samples):6.2f}-{max(samples):6.2f} s")
    low, high = found["ratio_ci95"]
    return "\n".join([f"{found['task']}/{found['sample']}: hidden tests' wall time over {found['rounds']} rounds",
                      *rows, f"traced / untraced: {found['ratio_of_medians']:.3f} (95% interval {low:.3f}-{high:.3f})"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="xpu-kv-cache-dtypes")
    parser.add_argument("--sample", default="backend-only")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    found = measure(args.task, args.sample, args.rounds)
    text = report(found)
    print(text)
    if args.out:
        args.out.write_text(json.dumps(found, indent=1) + "\n")
        args.out.with_suffix(".txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
