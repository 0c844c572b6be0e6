"""How grading cost grows with candidates, tasks and cores, measured here and projected (docs/cost-model.md).

    python bench/cost_model.py [PATH] [--limit K] [--nodes 10 --cores 32] [--json FILE]

Measures, on this machine, with empty result and evidence caches (bases already built, except where timed):

- the local backend (warm workers) at --jobs 1 and --jobs 2, and the Ray backend on a local cluster at
  --jobs 1 and --jobs 2, over PATH (default: every sample folder under candidates/, first K diffs of each);
- one base build from its sdist (the first task of PATH), in a cache of its own;
- per candidate, the stages results.json records (``apply_s``: tree copy + apply + description; ``tests_s``:
  the hidden tests in judge and subjects), by task.

Then projects wall time for 10, 1,000 and 100,000 candidates: on this machine (the measured rate at 2 jobs) and
on a Ray cluster of ``--nodes`` x ``--cores`` (the measured per-candidate Ray cost at one job, divided over the
cluster's cores, plus one set of base builds per node). The projection assumes every candidate is distinct
(no evidence-cache hits) and the same mix of tasks as PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from ray_vs_local import run_mode  # noqa: E402

SIZES = (10, 1_000, 100_000)


def sample_folders(limit: int, work: Path, tasks: list[str] | None = None) -> Path:
    """Every task's sample folder (or only ``tasks``'), first ``limit`` diffs each, under one input folder (task from
    the sub-folder), made afresh: a later invocation over the same ``work`` may ask for other tasks or counts."""
    target = work / "in"
    shutil.rmtree(target, ignore_errors=True)
    for folder in sorted((REPO / "candidates").iterdir()):
        diffs = sorted(folder.glob("*.diff"))[:limit] if tasks is None or folder.name in tasks else []
        if diffs:
            (target / folder.name).mkdir(parents=True)
            for diff in diffs:
                shutil.copy(diff, target / folder.name / diff.name)
    return target


def base_build_seconds(task_id: str, work: Path) -> float:
    """One base built from its (already downloaded) sdist in an empty cache."""
    cache = work / "cache-base"
    cache.mkdir()
    source = Path(os.environ.get("GRADER_CACHE", Path.home() / ".cache" / "grader"))
    if (source / "sdists").exists():
        (cache / "sdists").symlink_to(source / "sdists")
    started = time.monotonic()
    subprocess.run([sys.executable, str(REPO / "grade.py"), "bases", "--task", task_id], cwd=REPO, check=True,
                   capture_output=True, env=dict(os.environ, GRADER_CACHE=str(cache)))
    return time.monotonic() - started


def stages_by_task(results_json: Path) -> dict[str, dict[str, float]]:
    """Median apply_s and tests_s per task, over the candidates that ran hidden tests."""
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for result in json.loads(results_json.read_text())["candidates"]:
        timings = result.get("timings", {})
        if result.get("task") and "tests_s" in timings:
            for stage in ("apply_s", "tests_s"):
                found[result["task"]][stage].append(timings.get(stage, 0.0))
    return {task: {stage: round(statistics.median(v), 2) for stage, v in stages.items()} | {"n": len(stages["tests_s"])}
            for task, stages in sorted(found.items())}


def hours(seconds: float) -> str:
    return f"{seconds / 3600:8.2f} h" if seconds >= 3600 else f"{seconds / 60:8.1f} min"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", type=Path, help="what grade.py takes (default: the sample folders)")
    parser.add_argument("--limit", type=int, default=2, help="diffs per sample folder (default 2)")
    parser.add_argument("--nodes", type=int, default=10, help="Ray cluster nodes for the projection")
    parser.add_argument("--cores", type=int, default=32, help="cores per Ray node for the projection")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="grader-cost-"))
    try:
        inputs = args.path.resolve() if args.path else sample_folders(args.limit, work)
        sys.path.insert(0, str(REPO))
        from grader.pipeline.ingest import ingest

        candidates = ingest([inputs], None)
        count = len(candidates)
        tasks = sorted({c.task for c in candidates if c.task})
        seconds = {}
        for jobs in (1, 2):
            for backend in ("local", "ray"):
                name = f"{backend}-{jobs}"
                extra = ["--jobs", str(jobs)] + (["--backend", "ray"] if backend == "ray" else [])
                seconds[name] = run_mode(name, inputs, work / name, extra)
                print(f"{name:8s} {seconds[name]:8.1f} s", flush=True)
        stages = stages_by_task(work / "local-1" / "results.json")
        base_s = base_build_seconds(tasks[0], work)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    per_candidate = {name: s / count for name, s in seconds.items()}
    scaling = {b: seconds[f"{b}-1"] / seconds[f"{b}-2"] for b in ("local", "ray")}
    print(f"\n{count} candidates over {len(tasks)} task(s), {os.cpu_count()} cores here")
    print(f"{'mode':8s} {'wall':>8s} {'per candidate':>14s}")
    for name, s in seconds.items():
        print(f"{name:8s} {s:7.1f}s {per_candidate[name]:13.1f}s")
    print(f"speed-up from 1 to 2 jobs: local {scaling['local']:.2f}x, ray {scaling['ray']:.2f}x")
    print(f"one base build from its sdist ({tasks[0]}): {base_s:.1f} s")
    print("per candidate at 1 job, median by task (apply_s = tree copy + apply + description, tests_s = tests):")
    for task, t in stages.items():
        print(f"  {task:24s} apply {t['apply_s']:5.1f} s  tests {t['tests_s']:6.1f} s  (n={t['n']})")
    cluster = args.nodes * args.cores
    print(f"\nprojected wall time, every candidate distinct, this mix of tasks (ray: {args.nodes} nodes x "
          f"{args.cores} cores, each node building the {len(tasks)} bases once):")
    projection = {}
    for n in SIZES:
        here = n * seconds["local-2"] / count
        on_ray = base_s * len(tasks) + n * per_candidate["ray-1"] / cluster
        projection[n] = {"here_s": round(here, 1), "ray_cluster_s": round(on_ray, 1)}
        print(f"  {n:>7,d} candidates: here (2 jobs) {hours(here)}   ray cluster {hours(on_ray)}")
    if args.json:
        args.json.write_text(json.dumps({"candidates": count, "tasks": tasks, "cores": os.cpu_count(),
                                         "seconds": seconds, "scaling_1_to_2": scaling, "base_build_s": base_s,
                                         "stages": stages, "nodes": args.nodes, "cores_per_node": args.cores,
                                         "projection": projection}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
