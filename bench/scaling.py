"""Scaling on one machine: the same corpus graded at several job counts, local and Ray backends side by side.

    python bench/scaling.py [--size 1000] [--seed 0] [--jobs 1 2 4 8 16] [--backends local ray] [--gpu off]
                            [--tasks T ...] [--budget S] [--json FILE]

The corpus is ``bench/corpus.py``'s: ``--size`` candidates from ``--seed``, of ``--tasks`` only when given.
Each run is ``grade.py CORPUS --no-cache --gpu G --jobs N --backend B`` as a subprocess into its own ``--out``,
with a GRADER_CACHE of its own into which the built bases, the sdists, the judge secret and the installation's
one-time records are linked (``bench/throughput.py``), so no run pays for what an installation does once.
Runs go backend by backend, job counts interleaved from the largest down, so a ``--budget`` (seconds) that runs
out still leaves the widest runs measured.

Per run: wall seconds, candidates per minute, speedup over the same backend at the fewest jobs measured and
scaling efficiency (speedup / jobs ratio), and Ray's wall time over the local backend's at the same job count.
Every run must write the same results.json apart from the fields that vary between identical runs
(``grader.report.comparable``); the bench says so, or lists the candidates that differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from corpus import DEFAULT_BUNDLE, build_corpus, write_corpus  # noqa: E402
from throughput import fresh_cache, installation, timed  # noqa: E402

from grader.report import comparable  # noqa: E402


def measure(corpus: Path, backend: str, jobs: int, gpu: str, work: Path, source: Path, records: Path) -> dict:
    name = f"{backend}-{jobs}"
    out = work / f"out-{name}"
    cache = fresh_cache(work, name, source, records)
    argv = [str(corpus), "--out", str(out), "--no-cache", "--gpu", gpu, "--jobs", str(jobs), "--backend", backend]
    seconds = timed(argv, cache)
    document = json.loads((out / "results.json").read_text())
    return {"backend": backend, "jobs": jobs, "wall_s": round(seconds, 2), "candidates": len(document["candidates"]),
            "per_minute": round(60 * len(document["candidates"]) / seconds, 1), "results": comparable(document)}


def table(runs: list[dict]) -> list[str]:
    """The scaling table, with speedup and efficiency against each backend's fewest-jobs run."""
    lines = ["| backend | jobs | wall s | candidates/min | speedup | efficiency | ray / local |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    local = {r["jobs"]: r["wall_s"] for r in runs if r["backend"] == "local"}
    for backend in dict.fromkeys(r["backend"] for r in runs):
        mine = sorted((r for r in runs if r["backend"] == backend), key=lambda r: r["jobs"])
        first = mine[0]
        for r in mine:
            speedup = first["wall_s"] / r["wall_s"]
            efficiency = speedup / (r["jobs"] / first["jobs"])
            versus = f"{r['wall_s'] / local[r['jobs']]:.2f}" if backend != "local" and r["jobs"] in local else ""
            lines.append(f"| {backend} | {r['jobs']} | {r['wall_s']:.1f} | {r['per_minute']:.1f} | {speedup:.2f} | "
                         f"{efficiency:.2f} | {versus} |")
    return lines


def differing(runs: list[dict]) -> list[str]:
    """Ids of candidates whose result differs between any two runs."""
    by_id = [{c["id"]: c for c in r["results"]["candidates"]} for r in runs]
    ids = sorted(set().union(*by_id))
    return [cid for cid in ids if len({json.dumps(run.get(cid), sort_keys=True) for run in by_id}) > 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1000, help="candidates in the corpus (default: 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the corpus's seed (default: 0)")
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="bundle whose whole diffs join it")
    parser.add_argument("--tasks", nargs="*", help="keep only these tasks' candidates (default: every task)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="job counts (default 1-16)")
    parser.add_argument("--backends", nargs="+", default=["local", "ray"], choices=("local", "ray"))
    parser.add_argument("--gpu", choices=("off", "on"), default="off", help="GPU evidence (default: off)")
    parser.add_argument("--budget", type=float, help="seconds after which no further run starts (default: none)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="grader-scaling-"))
    source = Path(os.environ.get("GRADER_CACHE", Path.home() / ".cache" / "grader"))
    entries = build_corpus(args.size, args.seed, args.bundle, args.tasks)
    corpus = work / "corpus"
    write_corpus(corpus, entries)
    shutil.move(str(corpus / "manifest.json"), str(work / "manifest.json"))  # not a candidate
    records = installation(work, source, max(args.jobs))
    print(f"corpus: {len(entries)} candidates (size {args.size}, seed {args.seed}); installation records made",
          flush=True)
    runs: list[dict] = []
    for backend in args.backends:
        for jobs in sorted(args.jobs, reverse=True):
            if args.budget and time.monotonic() - started > args.budget:
                print(f"skipped {backend} at {jobs} jobs: the budget of {args.budget:g} s is spent", flush=True)
                continue
            runs.append(measure(corpus, backend, jobs, args.gpu, work, source, records))
            r = runs[-1]
            print(f"{backend:5s} jobs {jobs:3d}: {r['wall_s']:8.1f} s, {r['per_minute']:7.1f} candidates/min",
                  flush=True)
    print("\n".join(table(runs)))
    changed = differing(runs)
    print("identical results in every run" if not changed else
          f"results differ between runs for {len(changed)} candidate(s): {', '.join(changed[:10])}")
    if args.json:
        args.json.write_text(json.dumps({"size": args.size, "seed": args.seed, "gpu": args.gpu,
                                         "candidates": len(entries), "differing": changed,
                                         "runs": [{k: v for k, v in r.items() if k != "results"} for r in runs]},
                                        indent=1) + "\n")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
