"""Candidates per minute on a local Ray cluster against the local process pool: same machine, same run.

    python bench/ray_vs_local.py [PATH] [--jobs N] [--limit K] [--json FILE]

PATH is what ``grade.py`` takes (default: candidates/xpu-kv-cache-dtypes, the fastest hidden suite); ``--limit``
keeps the first K candidate diffs of a directory. Modes, each ``grade.py PATH --no-cache --gpu off --jobs N`` as a
subprocess with its own output folder and the caller's GRADER_CACHE (bases already built there are reused, so
base building is not timed; ``--no-cache`` keeps the evidence cache out, so every mode runs the hidden tests):

- local:       the default backend, warm fork-server workers
- local-cold:  the default backend with ``--cold`` (a fresh interpreter per run, as inside Ray tasks)
- ray:         ``--backend ray``: a local Ray cluster of N CPUs started by grade.py, one Ray task per candidate

Also measured on their own, to explain the gap: starting and stopping a local Ray cluster (``ray.init`` +
``ray.shutdown``), and the round trip of empty Ray tasks on it. Checks that all modes wrote the same
results.json apart from timing fields.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.reports.report import comparable  # noqa: E402

DEFAULT_INPUT = REPO / "candidates" / "xpu-kv-cache-dtypes"

RAY_PROBE = """
import json, sys, time
t0 = time.monotonic()
import ray
t1 = time.monotonic()
ray.init(address="local", num_cpus=int(sys.argv[1]), include_dashboard=False, logging_level="warning",
         log_to_driver=False)
t2 = time.monotonic()
@ray.remote(num_cpus=1)
def noop(i):
    return i
ray.get(noop.remote(0))            # first task: starts a worker process
t3 = time.monotonic()
n = 50
ray.get([noop.remote(i) for i in range(n)])
t4 = time.monotonic()
ray.shutdown()
t5 = time.monotonic()
print(json.dumps({"import_s": t1 - t0, "init_s": t2 - t1, "first_task_s": t3 - t2,
                  "task_roundtrip_ms": 1000 * (t4 - t3) / n, "shutdown_s": t5 - t4}))
"""


def comparable_results(results_json: Path) -> list[dict]:
    """The candidates of a results.json without the fields that vary between identical runs."""
    return comparable(json.loads(results_json.read_text()))["candidates"]


def subset(path: Path, limit: int | None, work: Path) -> tuple[Path, int]:
    """A directory's first ``limit`` diffs (all without ``--limit``), copied under the same folder name so that a
    task folder keeps its task; any other input (a bundle, a single diff) as it is."""
    from grader.pipeline.ingest import ingest

    if path.is_dir():
        target = work / "in" / path.name
        target.mkdir(parents=True)
        for diff in sorted([*path.glob("*.diff"), *path.glob("*.patch")])[:limit]:
            shutil.copy(diff, target / diff.name)
        path = target.parent
    return path, len(ingest([path], None))


def run_mode(name: str, inputs: Path, out: Path, extra: list[str]) -> float:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(REPO / "grade.py"), str(inputs), "--out", str(out), "--gpu", "off",
                           "--no-cache", *extra], cwd=REPO, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"{name}: grade.py exited with {proc.returncode}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit", type=int, help="only the first K diffs of a directory")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="grader-raybench-"))
    try:
        inputs, count = subset(args.path.resolve(), args.limit, work)
        jobs = ["--jobs", str(args.jobs)]
        modes = {"local": jobs, "local-cold": [*jobs, "--cold"], "ray": [*jobs, "--backend", "ray"]}
        seconds = {name: run_mode(name, inputs, work / name, extra) for name, extra in modes.items()}
        probe = subprocess.run([sys.executable, "-c", RAY_PROBE, str(args.jobs)], capture_output=True, text=True,
                               cwd=REPO)
        ray_costs = json.loads(probe.stdout.strip().splitlines()[-1]) if probe.returncode == 0 else {}
        reference = comparable_results(work / "local" / "results.json")
        same = all(comparable_results(work / name / "results.json") == reference for name in modes)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    per_minute = {name: 60 * count / s for name, s in seconds.items()}
    print(f"{count} candidate(s) from {args.path}, --jobs {args.jobs}, on {os.cpu_count()} core(s)")
    for name, s in seconds.items():
        print(f"  {name:11s} {s:7.1f} s  {per_minute[name]:6.2f} candidates/min")
    print(f"  ray / local:      {seconds['ray'] / seconds['local']:.2f}x the wall time")
    print(f"  ray / local-cold: {seconds['ray'] / seconds['local-cold']:.2f}x the wall time")
    if ray_costs:
        print(f"  ray alone: import {ray_costs['import_s']:.1f} s, ray.init {ray_costs['init_s']:.1f} s, "
              f"first task {ray_costs['first_task_s']:.1f} s, empty task round trip "
              f"{ray_costs['task_roundtrip_ms']:.1f} ms, shutdown {ray_costs['shutdown_s']:.1f} s")
    print(f"  results.json identical across modes (timings aside): {same}")
    if args.json:
        args.json.write_text(json.dumps({"candidates": count, "jobs": args.jobs, "seconds": seconds,
                                         "per_minute": per_minute, "ray_costs": ray_costs, "identical": same},
                                        indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
