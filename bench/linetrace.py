"""What tracing the patch's added lines costs: one sample's hidden tests graded untraced and with the traced re-run
of its failing checks (``grade --trace-lines``), side by side (alternating, so load on the machine falls on both
alike), with the median, quartiles and a bootstrap interval of the ratio.

    .venv/bin/python bench/linetrace.py [--task xpu-kv-cache-dtypes --sample backend-only] [--rounds 5] [--out F]
    .venv/bin/python bench/linetrace.py --micro [--rounds 7]

Each round grades the sample twice through the pipeline (no evidence cache, a cold judge each time), once with
``trace_lines`` and once without, in alternating order. The figure is the hidden tests' wall time: the untraced
run's (``timings["tests_s"]``), and for the traced grading that run's plus the re-run's (``timings["rerun_s"]``).

``--micro`` times the tracer alone, in this process: a function of a "changed" file called many times, and one of
another file, each with the tracer on and off (what a subject pays per call of changed and of other code).
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
from grader.core.records import GradingOptions  # noqa: E402
from grader.drive.one_candidate import BaseCache, grade_candidate  # noqa: E402


def graded_seconds(candidate: Candidate, bases: BaseCache, traced: bool) -> tuple[float, float, int, int]:
    """The hidden tests' seconds (the untraced run's, the traced re-run's), the checks evaluated and those
    failing (what the re-run runs)."""
    result, _ = grade_candidate(candidate, bases, GradingOptions(trace_lines=traced, use_evidence_cache=False))
    if result.verdict == "error":
        raise SystemExit(f"{candidate.id} did not grade: {result.summary}")
    entries = [e for c in result.criteria.values() for e in c.evidence]
    evaluated = len({e["test"] for e in entries if e["status"] in ("passed", "failed", "error")})
    failing = len({e["test"] for e in entries if e["status"] in ("failed", "error")})
    return result.timings["tests_s"], result.timings.get("rerun_s", 0.0), evaluated, failing


def measure(task: str, sample: str, rounds: int) -> dict:
    diff = (REPO_ROOT / "candidates" / task / f"{sample}.diff").read_text()
    candidate = Candidate(sample, "bench", diff, task=task)
    bases = BaseCache()
    _, _, evaluated, failing = graded_seconds(candidate, bases, True)  # untimed: builds the base, warms caches
    on, off, reruns = [], [], []
    for round_number in range(rounds):
        order = (True, False) if round_number % 2 == 0 else (False, True)
        for traced in order:
            tests, rerun, _, _ = graded_seconds(candidate, bases, traced)
            if traced:
                on.append(tests + rerun)
                reruns.append(rerun)
            else:
                off.append(tests)
    low, high = bootstrap_ratio_ci(on, off, seed=seed_of(f"linetrace-rerun-{task}-{sample}"), paired=True)
    return {"task": task, "sample": sample, "rounds": rounds, "checks": evaluated, "failing_checks": failing,
            "traced_s": on, "rerun_s": reruns, "untraced_s": off,
            "ratio_of_medians": median(on) / median(off), "ratio_ci95": [low, high]}


def report(found: dict) -> str:
    rows = []
    for name, key in (("traced", "traced_s"), ("  re-run", "rerun_s"), ("untraced", "untraced_s")):
        samples = found[key]
        q1, q3 = quartiles(samples)
        rows.append(f"{name:9} median {median(samples):6.2f} s  IQR {q1:6.2f}-{q3:6.2f} s  "
                    f"range {min(samples):6.2f}-{max(samples):6.2f} s")
    low, high = found["ratio_ci95"]
    return "\n".join([f"{found['task']}/{found['sample']}: hidden tests' wall time over {found['rounds']} rounds; "
                      f"the re-run traces {found['failing_checks']} failing of {found['checks']} evaluated checks",
                      *rows, f"traced (run + re-run) / untraced: {found['ratio_of_medians']:.3f} "
                             f"(95% interval {low:.3f}-{high:.3f})"])


MICRO_SOURCE = """
def work(n):
    total = 0
    for i in range(n):
        if i % 3:
            total += i
        else:
            total -= 1
    return total
"""


def micro(rounds: int, calls: int = 20000) -> dict:
    """Seconds for ``calls`` calls of a small function, traced as changed, traced as another file, untraced."""
    import importlib.util
    import tempfile
    import time

    from grader.sandbox.linetrace import LineTrace

    folder = Path(tempfile.mkdtemp(prefix="linetrace-bench-"))
    modules = {}
    for name in ("changed", "other"):
        path = folder / f"{name}.py"
        path.write_text(MICRO_SOURCE)
        spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
        modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(modules[name])
    added = {str(folder / "changed.py"): list(range(1, MICRO_SOURCE.count(chr(10)) + 2))}

    def timed(name: str, traced: bool) -> float:
        trace = LineTrace(added) if traced else None
        started = time.perf_counter()
        if trace:
            trace.start()
        for _ in range(calls):
            modules[name].work(30)
        if trace:
            trace.stop()
        return time.perf_counter() - started

    cases = {"changed file, traced": ("changed", True), "other file, tracer on": ("other", True),
             "untraced": ("changed", False)}
    found = {case: [] for case in cases}
    for _ in range(rounds):
        for case, (name, traced) in cases.items():
            found[case].append(timed(name, traced))
    return {"calls": calls, "rounds": rounds, "seconds": found}


def micro_report(found: dict) -> str:
    base = median(found["seconds"]["untraced"])
    rows = [f"{found['calls']} calls of a 7-line function, {found['rounds']} rounds (median, IQR, x untraced):"]
    for case, samples in found["seconds"].items():
        q1, q3 = quartiles(samples)
        rows.append(f"  {case:24} {median(samples) * 1e3:8.1f} ms  IQR {q1 * 1e3:7.1f}-{q3 * 1e3:7.1f} ms  "
                    f"x{median(samples) / base:.2f}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="xpu-kv-cache-dtypes")
    parser.add_argument("--sample", default="backend-only")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--micro", action="store_true", help="time the tracer alone, in this process")
    args = parser.parse_args()
    if args.micro:
        found = micro(args.rounds)
        text = micro_report(found)
    else:
        found = measure(args.task, args.sample, args.rounds)
        text = report(found)
    print(text)
    if args.out:
        args.out.write_text(json.dumps(found, indent=1) + "\n")
        args.out.with_suffix(".txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
