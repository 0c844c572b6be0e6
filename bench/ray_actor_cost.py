"""What a Ray actor adds to grading: the same candidates graded by ``grade_on_node`` in a process of its own and in
an actor on a running cluster, call by call.

    python bench/ray_actor_cost.py CORPUS_DIR [--ids ID ...] [--repeat R]

``CORPUS_DIR`` is a folder ``grade`` reads (``TASK/NAME.diff``; a bench's ``corpus-N``). The candidates (``--ids``,
else every one, in order) are graded one after another, as one job grades them, first in a fresh Python process
here and then in one fresh actor of a one-CPU cluster that ``bench/ray_cluster.py`` starts. Per mode it prints each
call's seconds twice: as the caller saw it (for the actor: dispatch, the actor's start on the first call, the
result's way back) and inside ``grade_on_node``; and per call what its parts cost inside: the engine's
fingerprint, the warm worker's preload list and start, the patch, the hidden tests. ``--repeat R``
alternates the two modes R times, so that what drifts on the machine falls on both. ``GRADER_CACHE`` must hold
the tasks' built bases and the installation's records (a bench's ``cache-installation``, or a cache a local run
used), or the first call makes them too.
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

    def __init__(self, corpus: str) -> None:
        from grader.core.records import GradingOptions
        from grader.ingest import ingest

        self.candidates = {c.id: c for c in ingest([Path(corpus)])}
        self.options = GradingOptions(gpu=False, timeout=300, jobs=1, use_evidence_cache=False).to_json()
        self.inside_s: list[float] = []
        self.setup_s: list[dict[str, float]] = []

    def grade(self, cid: str) -> None:
        import cProfile
        import pstats

        from grader import ray_backend

        profile = cProfile.Profile()
        started = time.monotonic()
        profile.enable()
        ray_backend.grade_on_node(self.candidates[cid], self.options, False)
        profile.disable()
        self.inside_s.append(round(time.monotonic() - started, 2))
        setup: dict[str, float] = {}
        for (_, _, name), (_, _, _, cumulative, _) in pstats.Stats(profile).stats.items():
            if name in SETUP:
                setup[SETUP[name]] = round(max(setup.get(SETUP[name], 0.0), cumulative), 2)
        self.setup_s.append(setup)

    def close(self) -> dict:
        from grader import ray_backend

        ray_backend.close_warm()
        return {"inside_s": self.inside_s, "setup_s": self.setup_s}


def graded_here(corpus: str, ids: list[str]) -> dict:
    """The candidates graded by a ``Grading`` in this process, each call timed from here too."""
    grading, seen = Grading(corpus), []
    try:
        for cid in ids:
            started = time.monotonic()
            grading.grade(cid)
            seen.append(round(time.monotonic() - started, 2))
    finally:
        found = grading.close()
    return {**found, "seen_s": seen}


def in_process(corpus: str, ids: list[str]) -> dict:
    """``graded_here`` in a fresh interpreter (whose start, like an actor's process start, precedes the calls)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from ray_actor_cost import graded_here; "
            "print(json.dumps(graded_here(sys.argv[2], sys.argv[3:])))")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "bench"), corpus, *ids], cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def in_actor(corpus: str, ids: list[str]) -> dict:
    """The same in one fresh actor of the cluster joined, each call timed from here (dispatch, the actor's start on
    the first, the way back) and inside."""
    import ray

    grading, seen = ray.remote(num_cpus=1)(Grading).remote(corpus), []
    for cid in ids:
        started = time.monotonic()
        ray.get(grading.grade.remote(cid))
        seen.append(round(time.monotonic() - started, 2))
    found = ray.get(grading.close.remote())
    ray.kill(grading)
    return {**found, "seen_s": seen}


@contextlib.contextmanager
def joined_cluster():
    """A running one-CPU cluster (``bench/ray_cluster.py``), joined by this process for the whole bench: Ray reads
    the cluster's token once, when it is first imported."""
    from ray_cluster import running_cluster

    from grader import ray_backend

    with running_cluster(1, dict(os.environ), Path(os.environ.get("TMPDIR", "/tmp")) / "ray-actor-cost.txt") \
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
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()
    from grader.ingest import ingest

    ids = args.ids or sorted(c.id for c in ingest([args.corpus]))
    measured = []
    with joined_cluster():
        for round_ in range(1, args.repeat + 1):
            for mode in args.modes:
                grade = in_process if mode == "process" else in_actor
                found = grade(str(args.corpus), ids)
                measured.append({"mode": mode, "round": round_, **found})
                print(f"round {round_} {mode:7s}: calls seen {found['seen_s']} s, inside {found['inside_s']} s",
                      flush=True)
                for cid, setup in zip(ids, found["setup_s"]):
                    print(f"    {cid}: " + ", ".join(f"{k} {v:.2f} s" for k, v in setup.items()), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"ids": ids, "runs": measured}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
