"""What a Ray actor adds to grading: the same candidates graded by ``grade_on_node`` in a process of its own and in
an actor on a running cluster, call by call.

    python bench/ray_actor_cost.py CORPUS_DIR [--ids ID ...] [--repeat R] [--jobs N] [--gpu]

``CORPUS_DIR`` is a folder ``grade`` reads (``TASK/NAME.diff``; a bench's ``corpus-N``). The candidates (``--ids``,
else every one, in order) are graded one after another, as one job grades them, first in a fresh Python process
here and then in one fresh actor of a cluster that ``bench/ray_cluster.py`` starts; with ``--jobs N``, N such jobs
at once (N processes, or N actors of an N-CPU cluster), each grading every candidate, as N jobs of a run start
together. Per mode and job it prints each call's seconds twice: as the caller saw it (for an actor: dispatch, the
actor's start on the first call, the result's way back) and inside ``grade_on_node``; and per call what its parts
cost inside (the engine's fingerprint, the warm worker's preload list and start, the patch, the hidden tests) and
its costliest check, where a subject's start shows. ``--gpu`` grades with GPU evidence, each actor holding 1/N of
the cluster's GPUs as the backend's GPU actors do (``grader.drive.ray_backend.gpu_actors``). ``--repeat R`` alternates
the two modes R times, so that what drifts on the machine falls on both. ``GRADER_CACHE`` must hold the tasks'
built bases and the installation's records for that evidence (a bench's ``cache-installation``, or a cache a local
run used), or the first call makes them too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

# The parts of a grade_on_node call that are timed: function name (as cProfile labels it) -> what it is.
SETUP = {"engine_fingerprint": "engine fingerprint", "third_party_modules": "preload list",
         "start_workers": "warm worker start", "apply_diff": "patch", "run_hidden_tests": "hidden tests"}


class Grading:
    """One job's grading, as a backend's actor does it: ``grade_on_node`` per candidate in one process, which keeps
    its warm worker between calls. Each call is profiled for what its setup cost (``SETUP``: the first call that
    runs tests pays for the warm worker)."""

    def __init__(self, corpus: str, gpu: bool = False, jobs: int = 1, gpu_assigned: bool = False) -> None:
        from grader.core.environment import memory_per_subject
        from grader.core.records import GradingOptions
        from grader.pipeline.ingest import ingest

        self.candidates = {c.id: c for c in ingest([Path(corpus)])}
        # as grade_many gives the backend: the subjects' memory bound follows the job count
        self.options = GradingOptions(gpu=gpu, timeout=300, jobs=jobs, use_evidence_cache=False,
                                      memory_bytes=memory_per_subject(jobs)).to_json()
        self.gpu_assigned = gpu_assigned
        self.inside_s: list[float] = []
        self.setup_s: list[dict[str, float]] = []
        self.costliest: list[str] = []

    def grade(self, cid: str) -> None:
        import cProfile
        import pstats

        from grader.drive import ray_backend

        profile = cProfile.Profile()
        started = time.monotonic()
        profile.enable()
        result = ray_backend.grade_on_node(self.candidates[cid], self.options, self.gpu_assigned)
        profile.disable()
        self.costliest.append(costliest_check(result))
        self.inside_s.append(round(time.monotonic() - started, 2))
        setup: dict[str, float] = {}
        for (_, _, name), (_, _, _, cumulative, _) in pstats.Stats(profile).stats.items():
            if name in SETUP:
                setup[SETUP[name]] = round(max(setup.get(SETUP[name], 0.0), cumulative), 2)
        self.setup_s.append(setup)

    def close(self) -> dict:
        from grader.drive import ray_backend

        ray_backend.close_warm()
        return {"inside_s": self.inside_s, "setup_s": self.setup_s, "costliest": self.costliest}


def costliest_check(result: dict) -> str:
    """The check of ``result`` (a candidate's JSON result) that took longest, with its seconds."""
    from check_costs import check_seconds

    checks = check_seconds(result)
    if not checks:
        return "no check ran"
    name = max(checks, key=lambda n: (checks[n], n))
    return f"{name} {checks[name]:.2f} s"


def graded_here(corpus: str, ids: list[str], gpu: bool = False, jobs: int = 1) -> dict:
    """The candidates graded by a ``Grading`` in this process, each call timed from here too."""
    grading, seen = Grading(corpus, gpu, jobs), []
    try:
        for cid in ids:
            started = time.monotonic()
            grading.grade(cid)
            seen.append(round(time.monotonic() - started, 2))
    finally:
        found = grading.close()
    return {**found, "seen_s": seen}


def in_processes(corpus: str, ids: list[str], gpu: bool, jobs: int) -> list[dict]:
    """``graded_here`` in ``jobs`` fresh interpreters at once (whose start, like an actor's process start, precedes
    the calls), as a local run's jobs grade side by side."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from ray_actor_cost import graded_here; "
            "print(json.dumps(graded_here(sys.argv[2], sys.argv[5:], sys.argv[3] == '1', int(sys.argv[4]))))")
    argv = [sys.executable, "-c", code, str(REPO / "bench"), corpus, str(int(gpu)), str(jobs), *ids]
    running = [subprocess.Popen(argv, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                                text=True) for _ in range(jobs)]
    found = []
    for proc in running:
        out, _ = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"a grading process failed (exit {proc.returncode})")
        found.append(json.loads(out.strip().splitlines()[-1]))
    return found


def in_actors(corpus: str, ids: list[str], gpu: bool, jobs: int) -> list[dict]:
    """The same in ``jobs`` fresh actors of the cluster joined, at once, each call timed from here (dispatch, the
    actor's start on the first, the way back) and inside. With ``gpu``, each actor holds its share of the cluster's
    GPUs, where it has any."""
    from concurrent.futures import ThreadPoolExecutor

    import ray

    share = ray.cluster_resources().get("GPU", 0) / jobs if gpu else 0
    actors = [ray.remote(num_cpus=1, num_gpus=share)(Grading).remote(corpus, gpu, jobs, bool(share))
              for _ in range(jobs)]

    def one_job(grading) -> dict:
        seen = []
        for cid in ids:
            started = time.monotonic()
            ray.get(grading.grade.remote(cid))
            seen.append(round(time.monotonic() - started, 2))
        return {**ray.get(grading.close.remote()), "seen_s": seen}

    try:
        with ThreadPoolExecutor(jobs) as pool:
            return list(pool.map(one_job, actors))
    finally:
        for grading in actors:
            ray.kill(grading)


@contextlib.contextmanager
def joined_cluster(cpus: int):
    """A running cluster of ``cpus`` CPUs (``bench/ray_cluster.py``), joined by this process for the whole bench: Ray
    reads the cluster's token once, when it is first imported."""
    from ray_cluster import running_cluster

    from grader.drive import ray_backend

    with running_cluster(cpus, dict(os.environ), Path(os.environ.get("TMPDIR", "/tmp")) / "ray-actor-cost.txt") \
            as (address, join_env, _):
        os.environ.update(join_env)
        ray_backend.connect(address)  # as grade --address joins it
        try:
            yield
        finally:
            ray_backend.disconnect()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="a folder grade reads (TASK/NAME.diff)")
    parser.add_argument("--ids", nargs="+", help="these candidates, in this order (default: all, sorted)")
    parser.add_argument("--repeat", type=int, default=1, help="alternate the two modes R times (default: 1)")
    parser.add_argument("--modes", nargs="+", choices=("process", "actor"), default=["process", "actor"],
                        help="the modes, in this order each round (default: process actor); one alone, on a "
                             "fresh cache, shows what that mode makes for itself")
    parser.add_argument("--jobs", type=int, default=1, help="this many jobs at once, each grading every candidate")
    parser.add_argument("--gpu", action="store_true", help="GPU evidence (default: CPU evidence, --gpu off)")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()
    from grader.pipeline.ingest import ingest

    ids = args.ids or sorted(c.id for c in ingest([args.corpus]))
    measured = []
    with joined_cluster(args.jobs):
        for round_ in range(1, args.repeat + 1):
            for mode in args.modes:
                grade = in_processes if mode == "process" else in_actors
                for job, found in enumerate(grade(str(args.corpus), ids, args.gpu, args.jobs), 1):
                    measured.append({"mode": mode, "round": round_, "job": job, **found})
                    print(f"round {round_} {mode:7s} job {job}: calls seen {found['seen_s']} s, "
                          f"inside {found['inside_s']} s", flush=True)
                    for cid, setup, costliest in zip(ids, found["setup_s"], found["costliest"]):
                        print(f"    {cid}: " + ", ".join(f"{k} {v:.2f} s" for k, v in setup.items())
                              + f"; costliest check {costliest}", flush=True)
                if args.json:  # after every mode: a call's time limit keeps what was measured before it
                    args.json.write_text(json.dumps({"ids": ids, "runs": measured}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
