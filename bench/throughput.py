"""Grading latency and throughput on one machine, every mode side by side in one run.

    python bench/throughput.py [BUNDLE] [--jobs N] [--limit K] [--repeat R] [--baseline REV] [--json FILE]

Modes over the bundle (each ``grade.py BUNDLE --gpu off`` as a subprocess, with its own GRADER_CACHE into which
the built bases and the installation's one-time records are linked, so neither is timed; the records are made
first by an untimed grading of one sample per task, see ``INSTALLATION_RECORDS``):

- naive:     one fresh interpreter per candidate, serial, no caches (``--cold --no-cache --jobs 1``)
- warm:      warm fork-server workers, ``--jobs N``, empty result and evidence caches
- fresh-out: the warm command again into a new ``--out``: nothing stored there, every candidate found in the
             evidence cache by its diff key (target: at most 3 s for the seed bundle)
- stored:    the warm command again into the same ``--out``: every result from the results store
- baseline:  (``--baseline REV`` or ``--baseline-dir``) the warm mode of the grader at another revision

and for one small candidate (``--small DIFF --small-task TASK``; its base built, caches empty):

- small:       ``grade.py DIFF --task TASK --no-cache --jobs 1`` into a new ``--out`` (after one untimed round)
- small-tests: ``grade.py run-tests --task TASK --tree T`` on the same diff applied by git to a copy of the base:
               the task's hidden tests alone, in the grader's sandbox (target: small at most 2x this)

``--repeat R`` runs the cheap modes (fresh-out, stored, small, small-tests) R times, interleaved, and prints
min/median/max; naive, warm and baseline run once each. Every mode over the bundle must write the same
results.json apart from the fields that vary between identical runs (``grader.reports.report.comparable``).
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.reports.report import comparable, differences  # noqa: E402
from grader.core.paths import secret_seed  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from cost_model import sample_folders  # noqa: E402

DEFAULT_BUNDLE = REPO.parent / "shared" / "seed" / "graded-candidates.txt"
DEFAULT_SMALL = REPO / "candidates" / "int8-kv-rounding" / "key-only.diff"
CHEAP = ("fresh-out", "stored", "small", "small-tests")


def timed(argv: list[str], cache: Path, repo: Path = REPO, ok: tuple[int, ...] = (0, 1),
          log: Path | None = None, extra_env: dict[str, str] | None = None) -> float:
    """Seconds ``grade.py argv`` took (wall clock), with ``cache`` as its GRADER_CACHE (and ``extra_env``). With
    ``log``, its output is kept there, each line after the seconds since the start at which it came (its progress
    lines then say when each phase ended and each candidate was graded). Each line is written as it comes: a run
    that its caller's time limit cuts still leaves how far it got."""
    env = dict(os.environ, GRADER_CACHE=str(cache), **(extra_env or {}))
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(repo / "grade.py"), *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=repo)
    lines = []
    with open(log if log is not None else os.devnull, "w") as kept:
        for line in proc.stdout:
            lines.append(f"{time.monotonic() - started:9.2f} {line}")
            kept.write(lines[-1])
            kept.flush()
    returncode = proc.wait()
    elapsed = time.monotonic() - started
    if returncode not in ok:
        sys.stderr.write("".join(lines)[-3000:])
        raise SystemExit(f"grade.py {' '.join(argv[:3])}... exited with {returncode}")
    return elapsed


# Kept in the cache once per installation, like the bases: an environment check's pass per task, the warm workers'
# preload list, the judge's compiled rubric modules, each task's control pass and call budgets (the reference and
# the base timed on each probe call) and the CUDA probe. An untimed grading of one sample per task makes them first,
# as any earlier grading on the machine would have; making them is a fixed cost (docs/cost-model.md), not what
# grading a bundle costs.
INSTALLATION_RECORDS = ("environment-ok", "preimport", "judge-pycache", "controls", "call-budgets", "cuda-probe")


def fresh_cache(work: Path, name: str, source: Path, installation: Path | None = None) -> Path:
    """A GRADER_CACHE of its own with the already built bases and sdists linked in (never timed), and the same
    judge secret: the hidden tests draw their inputs from it, so modes with different secrets would quote
    different values in their failure messages. With ``installation``, its one-time records are linked in too."""
    cache = work / f"cache-{name}"
    if not cache.exists():
        cache.mkdir()
        secret_seed(source)  # made now if the source has none: left to each run, every cache would make its own
        for part in ("sdists", "bases", "judge-secret"):
            if (source / part).exists():
                (cache / part).symlink_to(source / part)
        for part in INSTALLATION_RECORDS if installation else ():
            if (installation / part).exists():
                (cache / part).symlink_to(installation / part)
    return cache


def installation(work: Path, source: Path, jobs: int, tasks: list[str] | None = None, gpu: str = "auto") -> Path:
    """A cache holding the installation's one-time records, made by grading one sample of every task (or of
    ``tasks``) with the GPU switch the timed runs use (untimed)."""
    cache = fresh_cache(work, "installation", source)
    timed([str(sample_folders(1, work, tasks)), "--out", str(work / "out-installation"), "--jobs", str(jobs),
           "--gpu", gpu], cache)
    return cache


def limited_bundle(bundle: Path, limit: int | None, work: Path) -> Path:
    """The first ``limit`` entries of a bundle (a prefix of its records), or the bundle itself."""
    if not limit:
        return bundle
    from grader.pipeline.ingest import parse_bundle

    keep = parse_bundle(bundle)[:limit]
    lines = [bundle.read_text().splitlines()[0], ""]
    for c in keep:
        lines += ([c.reference_summary, "", c.diff.rstrip("\n"), ""] if c.reference_summary
                  else [f"no diff captured ({c.task_reason.split('(', 1)[-1].rstrip(')')})", ""])
    target = work / bundle.name
    target.write_text("\n".join(lines) + "\n")
    return target


def patched_tree(task_id: str, diff: Path, work: Path) -> Path:
    """A copy of the task's built base with ``diff`` applied by git (what run-tests is pointed at)."""
    from grader.pipeline.checkout import build_base
    from grader.core.rubric import all_tasks

    task = all_tasks()[task_id]
    base = build_base(task.id, task.base)
    tree = work / f"tree-{task_id}"
    shutil.copytree(base.path, tree, ignore=shutil.ignore_patterns(".git"), symlinks=True)
    subprocess.run(["git", "apply", str(diff)], cwd=tree, check=True, capture_output=True)
    return tree


def spread(samples: list[float]) -> str:
    return (f"{min(samples):7.2f} {statistics.median(samples):7.2f} {max(samples):7.2f}" if len(samples) > 1
            else f"{'':7s} {samples[0]:7.2f} {'':7s}")


def bundle_modes(args, bundle: Path, work: Path, source: Path, baseline: Path | None,
                 records: Path) -> list[tuple]:
    """(name, argv, cache, repo) for the modes over the bundle, in the order they run."""
    jobs = ["--jobs", str(args.jobs)]
    warm_cache = fresh_cache(work, "warm", source, records)
    modes = [] if args.skip_naive else [
        ("naive", [str(bundle), "--out", str(work / "out-naive"), "--cold", "--no-cache", "--jobs", "1"],
         fresh_cache(work, "naive", source, records), REPO)]
    modes.append(("warm", [str(bundle), "--out", str(work / "out-warm"), *jobs], warm_cache, REPO))
    if baseline:
        modes.append(("baseline", [str(bundle), "--out", str(work / "out-baseline"), *jobs],
                      fresh_cache(work, "baseline", source, records), baseline))
    return modes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", nargs="?", type=Path, default=DEFAULT_BUNDLE)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--limit", type=int, help="only the first K entries of the bundle")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each cheap mode (default 3)")
    parser.add_argument("--small", type=Path, default=DEFAULT_SMALL, help="the small candidate's diff")
    parser.add_argument("--small-task", default="int8-kv-rounding")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--baseline", help="also time the warm mode of the grader at this git revision")
    parser.add_argument("--baseline-dir", type=Path,
                        help="or: the earlier grader as a folder (e.g. unpacked from `git archive REV`), for machines "
                             "without the repository's history")
    parser.add_argument("--skip-naive", action="store_true", help="leave out the (slow) naive mode")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="grader-bench-"))
    source = Path(os.environ.get("GRADER_CACHE", Path.home() / ".cache" / "grader"))
    bundle = limited_bundle(args.bundle.resolve(), args.limit, work)
    baseline = args.baseline_dir.resolve() if args.baseline_dir else None
    if args.baseline:
        baseline = work / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(baseline), args.baseline],
                       check=True, capture_output=True)
    records = installation(work, source, args.jobs)
    print(f"installation records made (untimed): {', '.join(INSTALLATION_RECORDS)}", flush=True)
    seconds: dict[str, list[float]] = {}
    for name, argv, cache, repo in bundle_modes(args, bundle, work, source, baseline, records):
        seconds[name] = [timed(argv, cache, repo)]
        print(f"{name:11s} {seconds[name][0]:8.1f} s", flush=True)
    if args.baseline:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(baseline)], capture_output=True)
    warm_cache = work / "cache-warm"
    tree = patched_tree(args.small_task, args.small.resolve(), work)
    small_cache = fresh_cache(work, "small", source, records)
    # One untimed round first all the same: a new cache's first run also probes for CUDA (kept per boot).
    for round_ in range(-1, args.repeat):
        cheap = {
            "fresh-out": ([str(bundle), "--out", str(work / f"out-fresh-{round_}"), "--jobs", str(args.jobs)],
                          warm_cache, (0, 1)),
            "stored": ([str(bundle), "--out", str(work / "out-warm"), "--jobs", str(args.jobs)], warm_cache, (0, 1)),
            "small": ([str(args.small.resolve()), "--task", args.small_task, "--no-cache", "--jobs", "1",
                       "--out", str(work / f"out-small-{round_}")], small_cache, (0, 1)),
            "small-tests": (["run-tests", "--task", args.small_task, "--tree", str(tree), "--gpu", "off"],
                            small_cache, (0, 1)),
        }
        took = {name: timed(cheap[name][0], cheap[name][1], ok=cheap[name][2]) for name in CHEAP}
        if round_ >= 0:
            for name, value in took.items():
                seconds.setdefault(name, []).append(value)
        print(f"round {round_ + 1}{' (untimed)' if round_ < 0 else ''}: "
              + ", ".join(f"{n} {took[n]:.2f} s" for n in CHEAP), flush=True)
    count = len(json.loads((work / "out-warm" / "results.json").read_text())["candidates"])
    reference = comparable(json.loads((work / "out-warm" / "results.json").read_text()))
    disagreeing = {}
    # The baseline is another grader version: its results may rightly differ.
    for folder in ["out-naive", "out-fresh-0"]:
        if (work / folder / "results.json").is_file():
            found = differences(comparable(json.loads((work / folder / "results.json").read_text())), reference)
            if found:
                disagreeing[folder] = found
    median = {k: statistics.median(v) for k, v in seconds.items()}
    print(f"\n{count} candidates, jobs={args.jobs}, {os.cpu_count()} cores; small: {args.small.name} "
          f"({args.small_task}); cheap modes x{args.repeat}")
    print(f"{'mode':11s} {'min':>7s} {'median':>7s} {'max':>7s}   candidates/min (median)")
    for name, samples in seconds.items():
        per_minute = f"{60.0 * count / median[name]:10.1f}" if name not in ("small", "small-tests") else ""
        print(f"{name:11s} {spread(samples)}   {per_minute}")
    ratios = {}
    if "naive" in median:
        ratios["warm_vs_naive"] = median["naive"] / median["warm"]
        print(f"warm vs naive: {ratios['warm_vs_naive']:.2f}x faster (target >= 4x)")
    print(f"cached re-run into a fresh --out: {median['fresh-out']:.2f} s median (target <= 3 s)")
    ratios["small_vs_tests"] = median["small"] / median["small-tests"]
    print(f"one small candidate: {median['small']:.2f} s, {ratios['small_vs_tests']:.2f}x its hidden tests alone "
          f"({median['small-tests']:.2f} s; target <= 2x)")
    if "baseline" in median:
        ratios["warm_vs_baseline"] = median["warm"] / median["baseline"]
        print(f"warm cost vs baseline {args.baseline or baseline}: {ratios['warm_vs_baseline']:.2f}x")
    print("results.json identical across modes (varying fields aside): " + ("yes" if not disagreeing else "NO"))
    for folder, found in disagreeing.items():
        for line in found[:10]:
            print(f"  {folder} differs at {line}")
    if args.json:
        args.json.write_text(json.dumps({"candidates": count, "jobs": args.jobs, "cores": os.cpu_count(),
                                         "seconds": seconds, "ratios": ratios,
                                         "identical": not disagreeing}, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if not disagreeing else 1


if __name__ == "__main__":
    sys.exit(main())
