"""Grading throughput on one machine, in one run: naive vs warm workers vs a fully cached re-run.

    python bench/throughput.py [BUNDLE] [--jobs N] [--limit K] [--baseline REV]

- naive:  one fresh ``python -m pytest`` process per candidate, serial, no caches (``--cold --no-cache --jobs 1``)
- cold:   warm fork-server workers, ``--jobs N``, empty result and evidence caches
- cached: the same command again, everything served from the caches
- baseline (with ``--baseline REV``): the warm mode of the grader as it was at git revision REV (checked out into
  a temporary worktree, its own rubrics and hidden tests), on the same inputs, right after the warm mode: the
  cost of a change to the engine, side by side in one run

Each mode runs ``grade.py`` as a subprocess with its own GRADER_CACHE (bases copied in, so base building is not
timed) and output folder. Prints candidates per minute and the ratios, and checks that every mode wrote the same
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
DEFAULT_BUNDLE = REPO.parent / "shared" / "seed" / "graded-candidates.txt"


def comparable(results_json: Path) -> list[dict]:
    doc = json.loads(results_json.read_text())
    for candidate in doc["candidates"]:
        candidate.pop("timings", None)
    return doc["candidates"]


def differences(a, b, where: str = "") -> list[str]:
    """Where two JSON values differ, as paths (for the report when modes disagree)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in differences(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {str(a)[:100]!r} != {str(b)[:100]!r}"]


def run_mode(name: str, bundle: Path, out: Path, cache: Path, extra: list[str], repo: Path = REPO) -> float:
    env = dict(os.environ, GRADER_CACHE=str(cache))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(repo / "grade.py"), str(bundle), "--out", str(out), "--gpu", "off",
                           *extra], env=env, capture_output=True, text=True, cwd=repo)
    elapsed = time.monotonic() - started
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stderr[-3000:])
        raise SystemExit(f"{name}: grade.py exited with {proc.returncode}")
    return elapsed


def limited_bundle(bundle: Path, limit: int | None, work: Path) -> Path:
    """The first ``limit`` entries of a bundle (a prefix of its records), or the bundle itself."""
    if not limit:
        return bundle
    sys.path.insert(0, str(REPO))
    from grader.ingest import parse_bundle

    keep = parse_bundle(bundle)[:limit]
    lines = [bundle.read_text().splitlines()[0], ""]
    for c in keep:
        lines += ([c.reference_summary, "", c.diff.rstrip("\n"), ""] if c.reference_summary
                  else [f"no diff captured ({c.task_reason.split('(', 1)[-1].rstrip(')')})", ""])
    target = work / bundle.name
    target.write_text("\n".join(lines) + "\n")
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", nargs="?", type=Path, default=DEFAULT_BUNDLE)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit", type=int, help="only the first K entries of the bundle")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--baseline", help="also time the warm mode of the grader at this git revision")
    parser.add_argument("--baseline-dir", type=Path,
                        help="or: the earlier grader as a folder (e.g. unpacked from `git archive REV`), for machines "
                             "without the repository's history")
    parser.add_argument("--skip-naive", action="store_true", help="leave out the (slow) naive mode")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="grader-bench-"))
    source_cache = Path(os.environ.get("GRADER_CACHE", Path.home() / ".cache" / "grader"))
    bundle = limited_bundle(args.bundle.resolve(), args.limit, work)
    baseline = args.baseline_dir.resolve() if args.baseline_dir else None
    if args.baseline:
        baseline = work / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(baseline), args.baseline],
                       check=True, capture_output=True)
    modes = [] if args.skip_naive else [("naive", ["--cold", "--no-cache", "--jobs", "1"], REPO)]
    modes += [("cold", ["--jobs", str(args.jobs)], REPO)]
    if baseline:
        modes += [("baseline", ["--jobs", str(args.jobs)], baseline)]
    modes += [("cached", ["--jobs", str(args.jobs)], REPO)]
    timings = {}
    for name, extra, repo in modes:
        cache = work / {"naive": "cache-naive", "baseline": "cache-baseline"}.get(name, "cache-warm")
        if not cache.exists():
            # Bases (and the sdists) are built once beforehand: the benchmark times grading, not checkout.
            cache.mkdir()
            for part in ("sdists", "bases"):
                if (source_cache / part).exists():
                    (cache / part).symlink_to(source_cache / part)
        out = work / {"naive": "out-naive", "baseline": "out-baseline"}.get(name, "out-warm")
        timings[name] = run_mode(name, bundle, out, cache, extra, repo)
        print(f"{name:8s} {timings[name]:8.1f} s", flush=True)
    if args.baseline:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)], capture_output=True)
    count = len(json.loads((work / "out-warm" / "results.json").read_text())["candidates"])
    warm = comparable(work / "out-warm" / "results.json")
    naive = comparable(work / "out-naive" / "results.json") if "naive" in timings else warm
    same = naive == warm
    rate = {k: 60.0 * count / v for k, v in timings.items()}
    print(f"\n{count} candidates, jobs={args.jobs}, {os.cpu_count()} cores")
    print("mode       seconds   candidates/min")
    for k in timings:
        print(f"{k:8s} {timings[k]:9.1f} {rate[k]:12.1f}")
    if "naive" in timings:
        print(f"warm (cold caches) vs naive: {rate['cold'] / rate['naive']:.2f}x")
        print(f"fully cached re-run: {timings['cached']:.1f} s ({rate['cached'] / rate['naive']:.1f}x naive)")
    if baseline:
        print(f"warm cost per candidate vs baseline {args.baseline or baseline}: "
              f"{timings['cold'] / timings['baseline']:.2f}x "
              f"({timings['cold'] / count:.1f} s vs {timings['baseline'] / count:.1f} s)")
    print(f"results.json identical across modes (timings aside): {same}")
    for line in differences(naive, warm)[:20]:
        print("  differs at", line)
    if args.json:
        args.json.write_text(json.dumps({"candidates": count, "jobs": args.jobs, "seconds": timings,
                                         "per_minute": rate, "identical": same}, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
