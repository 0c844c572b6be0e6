"""Scaling on one machine: the same corpus graded at several job counts, local and Ray backends side by side.

    python bench/scaling.py [--size 1000] [--seed 0] [--jobs 1 2 4 8 16] [--backends local ray] [--gpu off]
                            [--tasks T ...] [--per-job K] [--repeat R] [--budget S] [--json FILE] [--work DIR]

The corpus is ``bench/corpus.py``'s: ``--size`` candidates from ``--seed``, of ``--tasks`` only when given.
Every run grades the whole corpus (strong scaling), or with ``--per-job K`` the same work per job (weak scaling,
so a run at 1 job costs no more wall time than one at 16): ``K`` candidates drawn from the corpus in a random
order from ``--seed``, graded ``jobs`` times over, each copy as a candidate of its own (``NAME-copyNN``). So every
run's mix is the 1-job run's, and what scaling loses is the machine's and the grader's, not the draw's. (Drawing
``K * jobs`` distinct candidates instead, the 1-job run's few candidates cost a third less than the 16-job run's
many, on the lent machine: the draw, not the load, set the efficiency.)
Each run is ``grade.py CORPUS --no-cache --gpu G --jobs N --backend B`` as a subprocess into its own ``--out``
(backend ``ray-cluster``: ``--backend ray --address A``, joining a cluster of N CPUs that ``bench/ray_cluster.py``
started and let settle before the clock started; backend ``ray``: grade starts its own inside the run),
with a GRADER_CACHE of its own into which the built bases, the sdists, the judge secret and the installation's
one-time records are linked (``bench/throughput.py``), so no run pays for what an installation does once.
Runs go backend by backend, job counts interleaved from the largest down, so a ``--budget`` (seconds) that runs
out still leaves the widest runs measured. With ``--repeat R`` every run is made R times, in R rounds of all of
them (so what drifts on a shared machine falls on every job count alike); the table then gives each point's
median wall time with the range of its runs, and computes speedup and efficiency from the medians.

With ``--work DIR`` the corpus, the installation records and every finished run are kept there, and the same command
run again, by the same engine and rubrics, measures only the runs it lacks (the lent GPU machine takes one call per
backend: the Ray wheel does not fit beside the sdist in one call's carry). A reused run is printed as such, with
when it ran.

Per run: wall seconds, candidates per minute, where the time went (``stage_costs``: the candidates' stages and
whole gradings; ``machine_use``: how busy the machine's CPUs were; ``timeline``: read from the run's timestamped
log, kept as ``log-BACKEND-JOBS.txt`` in the work folder), speedup over the same backend at the fewest jobs
measured and scaling efficiency (speedup / jobs ratio), and Ray's wall time over the local backend's at the same
job count.
Speedup is a ratio of throughputs (candidates per minute), which for strong scaling is the ratio of wall times.
Every run must give each candidate it shares with another run, and every copy of it, the same decisions: verdict,
score, run status, flags and every criterion's and check's status (``decisions``); a difference there fails the
bench. Where only
the words differ (failure messages, summaries, rationales: a candidate that reads memory it never wrote quotes
other numbers each run), the bench lists the candidates and where, apart from the fields that vary between
identical runs anyway (``grader.reports.report.comparable``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from corpus import DEFAULT_BUNDLE, build_corpus, write_corpus  # noqa: E402
from ray_cluster import running_cluster  # noqa: E402
from throughput import fresh_cache, installation, timed  # noqa: E402

from grader.reports.report import comparable, differences  # noqa: E402


COPY = re.compile(r"-copy\d+$")


def per_run_candidates(entries: list, per_job: int | None, jobs: list[int], seed: int) -> dict[int, list]:
    """The candidates each job count grades: all of them, or ``jobs`` copies of the first ``per_job`` of one
    seeded order (the first copy under the candidate's own name)."""
    if not per_job:
        return {n: entries for n in jobs}
    order = list(entries)
    random.Random(seed).shuffle(order)
    drawn = order[:per_job]
    return {n: [entry if copy == 0 else replace(entry, name=f"{entry.name}-copy{copy:02d}")
                for copy in range(n) for entry in drawn] for n in jobs}


def original_id(cid: str) -> str:
    """The candidate a copy (``per_run_candidates``) was made of."""
    return COPY.sub("", cid)


def corpus_folders(work: Path, subsets: dict[int, list]) -> dict[int, Path]:
    """One corpus folder per distinct subset size (job counts with the same subset share one)."""
    folders: dict[int, Path] = {}
    for jobs, entries in subsets.items():
        folder = work / f"corpus-{len(entries)}"
        if not folder.exists():
            write_corpus(folder, entries)
            shutil.move(str(folder / "manifest.json"), str(work / f"manifest-{len(entries)}.json"))
        folders[jobs] = folder
    return folders


BACKENDS = ("local", "ray", "ray-cluster")


def measure(corpus: Path, backend: str, jobs: int, gpu: str, work: Path, source: Path, records: Path,
            round_: int = 1) -> dict:
    """One run (of round ``round_``), or the one an earlier invocation over the same ``work`` folder finished."""
    name = f"{backend}-{jobs}" + (f"-round{round_}" if round_ > 1 else "")
    kept = work / f"run-{name}.json"
    if kept.is_file():
        return {**json.loads(kept.read_text()), "reused": True}
    out = work / f"out-{name}"
    shutil.rmtree(out, ignore_errors=True)  # a run cut short by an earlier invocation starts again
    cache = fresh_cache(work, name, source, records)
    argv = [str(corpus), "--out", str(out), "--no-cache", "--gpu", gpu, "--jobs", str(jobs),
            "--backend", "local" if backend == "local" else "ray"]
    log = work / f"log-{name}.txt"
    with contextlib.ExitStack() as cluster:
        extra_env, started_in = None, None
        if backend == "ray-cluster":  # up before the clock starts, stopped after it stops
            address, extra_env, started_in = cluster.enter_context(running_cluster(
                jobs, dict(os.environ, GRADER_CACHE=str(cache)), work / f"cluster-{name}.txt"))
            argv += ["--address", address]
            started_in += settled()
        before = cpu_ticks()
        seconds = timed(argv, cache, log=log, extra_env=extra_env)
        after = cpu_ticks()
    document = json.loads((out / "results.json").read_text())
    count = len(document["candidates"])
    run = {"backend": backend, "jobs": jobs, "round": round_, "wall_s": round(seconds, 2), "candidates": count,
           "per_minute": round(60 * count / seconds, 1),
           **({"cluster_start_s": round(started_in, 2)} if started_in is not None else {}),
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "stages": stage_costs(document, seconds, jobs), "machine": machine_use(before, after, count),
           "timeline": timeline(log.read_text(), document, seconds), "results": comparable(document)}
    kept.write_text(json.dumps(run) + "\n")
    return run


def stage_costs(document: dict, wall_s: float, jobs: int) -> dict:
    """Where a run's wall time went, from its candidates' own timings: mean seconds per candidate of each stage
    (tree, hidden tests), the slowest candidate, how many candidates were busy on average (their seconds over the
    wall time, against ``jobs``), and the wall time outside any candidate's stages if the jobs had been kept busy
    (start, look-ups, reports, idle jobs at the tail)."""
    timings = [c.get("timings") or {} for c in document["candidates"]]
    apply_s = [t.get("apply_s", 0.0) for t in timings]
    tests_s = [t.get("tests_s", 0.0) for t in timings]
    busy_s = sum(apply_s) + sum(tests_s)
    count = max(len(timings), 1)
    return {"apply_s": round(sum(apply_s) / count, 2), "tests_s": round(sum(tests_s) / count, 2),
            "grading_s": round(sum(t.get("grading_s", 0.0) for t in timings) / count, 2),
            "slowest_s": round(max((a + t for a, t in zip(apply_s, tests_s)), default=0.0), 2),
            "concurrency": round(busy_s / wall_s, 2) if wall_s else 0.0,
            "outside_s": round(max(wall_s - busy_s / jobs, 0.0), 2)}


def cpu_ticks() -> tuple[int, int] | None:
    """The machine's busy and total CPU ticks since boot, all CPUs (``/proc/stat``), or None off Linux."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and waiting for I/O
    return sum(fields) - idle, sum(fields)


def settled(quiet: float = 0.1, every: float = 0.5, limit: float = 30.0) -> float:
    """Wait until the machine's CPUs are idle (below ``quiet`` busy over ``every`` seconds), at most ``limit``
    seconds; return the seconds waited. A cluster just up still starts its idle workers: as a cluster in use
    would have, it finishes before a run's clock starts, rather than taking CPUs from the run's first seconds."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before = cpu_ticks()
        time.sleep(every)
        after = cpu_ticks()
        if before is None or after is None or after[1] <= before[1] or \
                (after[0] - before[0]) / (after[1] - before[1]) < quiet:
            break
    return time.monotonic() - started


def machine_use(before: tuple[int, int] | None, after: tuple[int, int] | None, candidates: int) -> dict | None:
    """How busy the whole machine's CPUs were during a run (nothing else runs on the lent machine): the busy
    share of all CPUs, and busy CPU seconds per candidate. A run whose CPUs are all busy is bound by them; one
    whose jobs idle while CPUs are free waits on something else."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    busy, total = after[0] - before[0], after[1] - before[1]
    hertz = os.sysconf("SC_CLK_TCK")
    return {"cpu_busy": round(busy / total, 3), "cpu_s_per_candidate": round(busy / hertz / max(candidates, 1), 2)}


GRADED_LINE = re.compile(r"^\s*(?P<at>[\d.]+) \[\d+/\d+\] (?P<id>.+?): ")


def timeline(log: str, document: dict, wall_s: float) -> dict | None:
    """When a run's time went, from its log (when each candidate was graded) and each candidate's ``grading_s``
    (so when it started): seconds before the first candidate started (the grader's start, ingest, workers),
    seconds while candidates still waited for a job and how many were being graded meanwhile on average, the
    tail from the last start to the last candidate graded, and seconds after it (reports, exit)."""
    graded_at = {m["id"]: float(m["at"]) for m in map(GRADED_LINE.match, log.splitlines()) if m}
    spans = [(graded_at[c["id"]] - c["timings"]["grading_s"], graded_at[c["id"]])
             for c in document["candidates"] if c["id"] in graded_at and "grading_s" in (c.get("timings") or {})]
    if not spans:
        return None
    first, last_start, last = min(s for s, _ in spans), max(s for s, _ in spans), max(e for _, e in spans)
    queued = last_start - first
    overlap = sum(max(0.0, min(e, last_start) - max(s, first)) for s, e in spans)
    return {"start_s": round(first, 1), "queue_s": round(queued, 1),
            "queue_busy": round(overlap / queued, 2) if queued > 0 else None,
            "tail_s": round(last - last_start, 1), "after_s": round(wall_s - last, 1)}


def stage_line(run: dict) -> str:
    stages = run.get("stages")
    if not stages:
        return ""
    lines = [f"      per candidate: tree {stages['apply_s']:.1f} s, tests {stages['tests_s']:.1f} s, whole grading "
             f"{stages.get('grading_s', 0.0):.1f} s, slowest {stages['slowest_s']:.1f} s; busy "
             f"{stages['concurrency']:.1f} of {run['jobs']} jobs; outside the candidates {stages['outside_s']:.1f} s"]
    if machine := run.get("machine"):
        lines.append(f"      machine: CPUs {100 * machine['cpu_busy']:.0f}% busy, {machine['cpu_s_per_candidate']:.1f} "
                     "CPU s per candidate")
    if "cluster_start_s" in run:
        lines.append(f"      cluster: up and idle {run['cluster_start_s']:.1f} s before the clock started (not in the "
                     "wall time)")
    if when := run.get("timeline"):
        at_once = f" with {when['queue_busy']:.1f} graded at once" if when["queue_busy"] is not None else ""
        lines.append(f"      timeline: first start at {when['start_s']:.1f} s, candidates queued {when['queue_s']:.1f} s"
                     f"{at_once}, tail {when['tail_s']:.1f} s, after the last {when['after_s']:.1f} s")
    return "\n".join(lines)


def grader_identity(tasks: list[str] | None) -> dict:
    """What shapes the runs' verdicts: the engine's fingerprint and each graded task's rubric fingerprint."""
    from grader.core.identity import engine_fingerprint
    from grader.core.rubric import all_tasks, rubric_fingerprint

    graded = {tid: t for tid, t in all_tasks().items() if not tasks or tid in tasks}
    return {"engine": engine_fingerprint(), "rubrics": {tid: rubric_fingerprint(t) for tid, t in sorted(graded.items())}}


def work_folder(requested: Path | None, settings: dict) -> Path:
    """A scratch folder, or ``requested`` kept for a later invocation with the same settings."""
    if requested is None:
        return Path(tempfile.mkdtemp(prefix="grader-scaling-"))
    requested.mkdir(parents=True, exist_ok=True)
    recorded = requested / "settings.json"
    if recorded.is_file() and json.loads(recorded.read_text()) != settings:
        raise SystemExit(f"{requested} holds runs of other settings ({recorded}); use another --work folder")
    recorded.write_text(json.dumps(settings) + "\n")
    return requested


def made_installation(work: Path, source: Path, jobs: int, tasks: list[str] | None, gpu: str) -> Path:
    """The installation's one-time records, made for this environment. They are keyed by it (its installed
    distributions among them): a later invocation in another one (the lent machine's second call, which installs
    Ray) would find none of them, and its first run would make them inside its timing, every Ray actor at once.
    So they are made again, untimed, wherever the environment the marker names is not this one."""
    from grader.core.environment import environment_fingerprint

    marker = work / "installation-made"
    here = environment_fingerprint()
    if marker.is_file() and marker.read_text().strip() == here:
        return work / "cache-installation"
    records = installation(work, source, jobs, tasks, gpu)
    marker.write_text(here + "\n")
    return records


def points(runs: list[dict]) -> list[dict]:
    """One point per backend and job count: the median of its runs' wall times, with their range and count."""
    grouped: dict[tuple[str, int], list[dict]] = {}
    for r in runs:
        grouped.setdefault((r["backend"], r["jobs"]), []).append(r)
    found = []
    for (backend, jobs), mine in grouped.items():
        walls = sorted(r["wall_s"] for r in mine)
        wall = statistics.median(walls)
        found.append({"backend": backend, "jobs": jobs, "wall_s": wall, "runs": len(walls),
                      "per_minute": round(60 * mine[0]["candidates"] / wall, 1), "range": (walls[0], walls[-1])})
    return found


def table(runs: list[dict]) -> list[str]:
    """The scaling table, with speedup and efficiency against each backend's fewest-jobs point (``points``)."""
    lines = ["| backend | jobs | wall s | candidates/min | speedup | efficiency | ray / local |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    measured = points(runs)
    local = {p["jobs"]: p for p in measured if p["backend"] == "local"}
    for backend in dict.fromkeys(p["backend"] for p in measured):
        mine = sorted((p for p in measured if p["backend"] == backend), key=lambda p: p["jobs"])
        first = mine[0]
        for p in mine:
            speedup = p["per_minute"] / first["per_minute"]
            efficiency = speedup / (p["jobs"] / first["jobs"])
            # per candidate: Ray's seconds per candidate over the local backend's at the same job count
            versus = (f"{local[p['jobs']]['per_minute'] / p['per_minute']:.2f}"
                      if backend != "local" and p["jobs"] in local else "")
            low, high = p["range"]
            wall = f"{p['wall_s']:.1f}" + (f" ({low:.1f}-{high:.1f}, {p['runs']} runs)" if p["runs"] > 1 else "")
            lines.append(f"| {backend} | {p['jobs']} | {wall} | {p['per_minute']:.1f} | {speedup:.2f} | "
                         f"{efficiency:.2f} | {versus} |")
    return lines


def graded(runs: list[dict]) -> dict[str, list[tuple[dict, dict]]]:
    """Every result, with its run, by the candidate it grades (a copy's under its original's id, ``original_id``).
    The input's path and the id are left out: with ``--per-job`` each run reads its candidates from a corpus folder
    of its own, and a copy has a name of its own."""
    by_id: dict[str, list[tuple[dict, dict]]] = {}
    for r in runs:
        for c in r["results"]["candidates"]:
            result = {k: v for k, v in c.items() if k not in ("source", "id")}
            by_id.setdefault(original_id(c["id"]), []).append((r, result))
    return by_id


WORDS = ("summary", "rationale", "message")


def decisions(result: dict) -> dict:
    """``result`` without its words (``WORDS``, at any depth): what was decided, not how it was told."""
    if isinstance(result, dict):
        return {k: decisions(v) for k, v in result.items() if k not in WORDS}
    if isinstance(result, list):
        return [decisions(v) for v in result]
    return result


def differing(runs: list[dict], view=lambda result: result) -> list[str]:
    """Ids of candidates whose result, seen through ``view``, differs between any two gradings of them (in two
    runs, or two copies in one)."""
    return [cid for cid, results in sorted(graded(runs).items())
            if len({json.dumps(view(result), sort_keys=True) for _, result in results}) > 1]


def how_they_differ(runs: list[dict], cid: str) -> list[str]:
    """Where ``cid``'s gradings differ from its first, per later one (``backend N jobs vs ...: path: a != b``)."""
    (first, reference), *later = graded(runs)[cid]
    return [f"{r['backend']} {r['jobs']} jobs vs {first['backend']} {first['jobs']} jobs{path}"
            for r, result in later for path in differences(reference, result)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1000, help="candidates in the corpus (default: 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the corpus's seed (default: 0)")
    parser.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE, help="bundle whose whole diffs join it")
    parser.add_argument("--tasks", nargs="*", help="keep only these tasks' candidates (default: every task)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="job counts (default 1-16)")
    parser.add_argument("--backends", nargs="+", default=["local", "ray"], choices=BACKENDS,
                        help="local; ray (grade starts a local Ray cluster in each run); ray-cluster (grade joins "
                             "a cluster of --jobs CPUs started before the run's clock)")
    parser.add_argument("--gpu", choices=("off", "on"), default="off", help="GPU evidence (default: off)")
    parser.add_argument("--per-job", type=int,
                        help="grade the same K candidates once per job (default: the whole corpus)")
    parser.add_argument("--repeat", type=int, default=1, help="make every run R times, in R rounds (default: 1)")
    parser.add_argument("--budget", type=float, help="seconds after which no further run starts (default: none)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument("--work", type=Path, help="keep the corpus and finished runs here, for a later invocation")
    parser.add_argument("--table-of", type=Path, nargs="+", metavar="TXT",
                        help="only print the table of the runs the bench outputs TXT list, and stop")
    args = parser.parse_args()
    if args.table_of:
        print("\n".join(table(runs_printed("\n".join(path.read_text() for path in args.table_of)))))
        return 0
    started = time.monotonic()
    os.environ.setdefault("GRADER_PROGRESS_EVERY", "10")  # the runs' logs (log-*.txt) say how each went
    # The engine and the rubrics are settings too: runs kept by another grader would be compared as if the same
    # grader had made them (a later invocation with other code refuses the folder).
    settings = {"size": args.size, "seed": args.seed, "bundle": str(args.bundle), "tasks": args.tasks,
                "per_job": args.per_job, "weak": "copies", "gpu": args.gpu, "grader": grader_identity(args.tasks)}
    work = work_folder(args.work, settings)
    source = Path(os.environ.get("GRADER_CACHE", Path.home() / ".cache" / "grader"))
    entries = build_corpus(args.size, args.seed, args.bundle, args.tasks)
    folders = corpus_folders(work, per_run_candidates(entries, args.per_job, args.jobs, args.seed))
    records = made_installation(work, source, max(args.jobs), args.tasks, args.gpu)
    sizes = ", ".join(f"{n} jobs {len(list(folders[n].glob('*/*.diff')))}" for n in sorted(folders))
    print(f"corpus: {len(entries)} candidates (size {args.size}, seed {args.seed}); per run: {sizes}; "
          "installation records made", flush=True)
    runs: list[dict] = []
    for round_ in range(1, args.repeat + 1):
        for backend in args.backends:
            for jobs in sorted(args.jobs, reverse=True):
                if args.budget and time.monotonic() - started > args.budget:
                    print(f"skipped {backend} at {jobs} jobs, round {round_}: the budget of {args.budget:g} s is "
                          "spent", flush=True)
                    continue
                runs.append(measure(folders[jobs], backend, jobs, args.gpu, work, source, records, round_))
                r = runs[-1]
                again = f" (reused: measured at {r['measured_at']})" if r.get("reused") else ""
                which = f", round {round_}" if args.repeat > 1 else ""
                print(f"{backend:11s} jobs {jobs:3d}: {r['candidates']:5d} candidates {r['wall_s']:8.1f} s, "
                      f"{r['per_minute']:7.1f} candidates/min{which}{again}", flush=True)
                if stage_line(r):
                    print(stage_line(r), flush=True)
                if args.json:
                    write_measurements(args, entries, runs, complete=False)
    print("\n".join(table(runs)))
    decided_otherwise, how = write_measurements(args, entries, runs, complete=True)
    print("identical decisions in every run" if not decided_otherwise else
          f"decisions differ between runs for {len(decided_otherwise)} candidate(s): "
          f"{', '.join(decided_otherwise[:10])}")
    print(f"the words differ too for {len(how)} candidate(s)" if how else "identical words in every run")
    for cid, paths in how.items():
        print(f"  {cid}:", *paths, sep="\n    ")
    return 1 if decided_otherwise else 0


def write_measurements(args, entries: list, runs: list[dict], complete: bool) -> tuple[list[str], dict]:
    """Write ``--json`` (when given) with the runs so far; return the candidates whose decisions differ between
    them, and where each candidate whose words differ differs. Written after every run, so a bench cut short by
    its caller's time limit still leaves what it measured (``complete`` says whether every run was)."""
    decided_otherwise = differing(runs, decisions)
    how = {cid: how_they_differ(runs, cid)[:20] for cid in differing(runs)}
    if args.json:
        args.json.write_text(json.dumps({"size": args.size, "seed": args.seed, "gpu": args.gpu,
                                         "per_job": args.per_job, "cpus": os.cpu_count(), "complete": complete,
                                         "candidates": len(entries), "decided_otherwise": decided_otherwise,
                                         "differing": how,
                                         "runs": [{k: v for k, v in r.items() if k != "results"} for r in runs]},
                                        indent=1) + "\n")
    return decided_otherwise, how


RUN_LINE = re.compile(r"^(?P<backend>local|ray-cluster|ray)\s+jobs\s+(?P<jobs>\d+):\s+"
                      r"(?P<candidates>\d+) candidates\s+"
                      r"(?P<wall>[\d.]+) s,\s+(?P<per_minute>[\d.]+) candidates/min(?:, round (?P<round>\d+))?")


def runs_printed(text: str) -> list[dict]:
    """The runs a bench printed, one per run line (``--table-of``: a bench cut short before its table, or several
    calls' outputs). A run a later call reused is listed again there, as the same round with the same numbers: it
    counts once."""
    runs = {}
    for m in map(RUN_LINE.match, text.splitlines()):
        if m:
            run = {"backend": m["backend"], "jobs": int(m["jobs"]), "candidates": int(m["candidates"]),
                   "wall_s": float(m["wall"]), "per_minute": float(m["per_minute"])}
            runs.setdefault((*run.values(), int(m["round"] or 1)), run)
    return list(runs.values())


if __name__ == "__main__":
    sys.exit(main())
