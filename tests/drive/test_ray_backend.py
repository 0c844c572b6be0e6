"""The Ray backend (``grade --backend ray``) on a local Ray cluster.

- Three whole xpu-kv-cache-dtypes entries of the seed bundle (the fastest hidden suite) graded through the CLI with ``--backend ray`` give
  the same ``results.json`` and HTML pages as the local backend on the same input, apart from the timing fields
  documented as varying (``run.timings`` and each candidate's ``timings``). No field records the backend, so
  nothing else is stripped. A Ray rerun on the local run's output takes everything from the store.
- A Ray task that kills its own worker process on its first attempt is retried by the backend's retry wrapper
  and succeeds on the second attempt; one that always kills its worker gets an ``error`` result once the
  retries are spent, and only that candidate does.

Needs ``ray`` (``pip install -e ".[ray]"``); skipped without it.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from grader.drive import ray_backend  # noqa: E402
from grader.core.records import Candidate, CandidateResult  # noqa: E402
from grader.reports.report import comparable, differences  # noqa: E402
from grader.core.records import GradingOptions  # noqa: E402
from grader.drive.many_candidates import QuietObserver, grade_many  # noqa: E402
from grader.core.rubric import all_tasks  # noqa: E402
from grader.drive.store import ResultStore, cache_key  # noqa: E402

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
TASK = "xpu-kv-cache-dtypes"


def _grade(paths: list[Path], out: Path, *extra: str, extra_env: dict[str, str] | None = None) -> str:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra_env or {}))
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, str(REPO / "grade.py"), *map(str, paths), "--out", str(out),
                           "--jobs", "2", "--gpu", "off", "--timeout", "300", *extra],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def _without_timings(path: Path) -> dict:
    return comparable(json.loads(path.read_text()))


SEED_BUNDLE = REPO.parent / "shared" / "seed" / "graded-candidates.txt"


def _seed_subset(path: Path, count: int = 3) -> Path:
    """The first ``count`` whole (uncut) xpu-kv-cache-dtypes entries of the seed bundle, as a bundle file."""
    from grader.pipeline.ingest import parse_bundle

    if not SEED_BUNDLE.is_file():
        pytest.skip(f"the seed bundle is not at {SEED_BUNDLE}")
    entries = [c for c in parse_bundle(SEED_BUNDLE) if c.task == TASK and not c.at_preview_limit][:count]
    lines = [SEED_BUNDLE.read_text().splitlines()[0], ""]
    for c in entries:
        lines += [c.reference_summary, "", c.diff.rstrip("\n"), ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_ray_backend_matches_local(tmp_path):
    bundle = _seed_subset(tmp_path / "in" / "seed-subset.txt")
    # --no-cache: both runs execute the hidden tests (no evidence cache), the Ray one inside Ray tasks.
    local = _grade([bundle], tmp_path / "local", "--no-cache")
    on_ray = _grade([bundle], tmp_path / "ray", "--no-cache", "--backend", "ray")

    def progress(log: str) -> list[str]:  # completion order and timing vary: the lines without counter and time
        return sorted(re.sub(r" in [0-9.]+s$", "", line.split("] ", 1)[1]) for line in log.splitlines()
                      if line.startswith("["))

    assert progress(on_ray) == progress(local) and len(progress(local)) == 3
    on_ray_doc, local_doc = (_without_timings(tmp_path / mode / "results.json") for mode in ("ray", "local"))
    assert on_ray_doc == local_doc, differences(on_ray_doc, local_doc)[:10]
    pages = sorted(p.name for p in (tmp_path / "local" / "candidates").iterdir())
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "local", tmp_path / "ray",
                                               [f"candidates/{p}" for p in pages], shallow=False)
    assert not mismatch and not errors

    def index_without_circumstances(mode: str) -> str:  # when and how the run was made differ, nothing else
        text = (tmp_path / mode / "index.html").read_text()
        return re.sub(r'<p class="muted run-circumstances">.*?</p>', "", text, flags=re.S)

    assert index_without_circumstances("ray") == index_without_circumstances("local")
    assert sorted(p.name for p in (tmp_path / "ray" / "store").iterdir()) == \
        sorted(p.name for p in (tmp_path / "local" / "store").iterdir())

    # Same store, same keys: a Ray rerun on the local run's output regrades nothing.
    rerun = _grade([bundle], tmp_path / "local", "--backend", "ray")
    assert sum("(cached)" in line for line in rerun.splitlines()) == 3, rerun


def test_grade_joins_a_running_cluster_or_starts_its_own_beside_it(tmp_path):
    """``--address`` joins a cluster that is already up; without it, ``grade`` starts a cluster of its own even
    while one that ``ray start`` made runs on the machine (ray.init would join that one, or refuse to, since
    ``--jobs`` gives its CPUs). Both grade as the local backend does."""
    sys.path.insert(0, str(REPO / "bench"))
    from ray_cluster import running_cluster

    bundle = _seed_subset(tmp_path / "in" / "seed-subset.txt", count=1)
    _grade([bundle], tmp_path / "local", "--no-cache")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    with running_cluster(2, env, tmp_path / "cluster.txt") as (address, join_env, _):
        _grade([bundle], tmp_path / "joined", "--no-cache", "--backend", "ray", "--address", address,
               extra_env=join_env)
        _grade([bundle], tmp_path / "own", "--no-cache", "--backend", "ray")
    local = _without_timings(tmp_path / "local" / "results.json")
    for mode in ("joined", "own"):
        assert _without_timings(tmp_path / mode / "results.json") == local, mode


@pytest.fixture(scope="module")
def local_cluster():
    os.environ.pop("RAY_ADDRESS", None)
    ray_backend.connect(None, num_cpus=2)  # ray.init(num_cpus=2, include_dashboard=False, ...)
    yield
    ray_backend.disconnect()


def test_killed_worker_is_retried(local_cluster, tmp_path):
    marker = tmp_path / "attempts"

    def dies_once(candidate, *_args):
        with open(marker, "a") as f:
            f.write("attempt\n")
        if marker.read_text().count("attempt") == 1:
            os._exit(1)  # the actor's process dies mid-candidate, as on an OOM kill or a lost node
        return CandidateResult(candidate.id, candidate.task, candidate.source, "partial", 0.5, {}, None, "").to_json()

    run = grade_many([Candidate("only", "only.diff", "+x\n", TASK)],
                     GradingOptions(timeout=60), backend=ray_backend.RayBackend(dies_once))
    assert [g.result.verdict for g in run.graded] == ["partial"]
    assert marker.read_text().count("attempt") == 2


def test_actors_keep_their_process_between_candidates(local_cluster):
    """One actor (--jobs 1) grades every candidate in the same process: what it warmed up stays warm."""
    def which_process(candidate, *_args):
        return CandidateResult(candidate.id, candidate.task, candidate.source, "partial", 0.5, {}, None,
                               str(os.getpid())).to_json()

    candidates = [Candidate(f"c{i}", f"c{i}.diff", "+x\n", TASK) for i in range(3)]
    run = grade_many(candidates, GradingOptions(timeout=60, jobs=1), backend=ray_backend.RayBackend(which_process))
    assert len({g.result.summary for g in run.graded}) == 1 and len(run.graded) == 3


def test_an_actor_grades_its_next_candidate_while_the_driver_delivers_the_last(local_cluster, tmp_path):
    """Storing and reporting a result is the driver's work: the actor that graded it has its next candidate by
    then, as a local run's worker threads do (they never wait on the store)."""
    import time

    def stamps_its_start(candidate, *_args):
        (tmp_path / f"started-{candidate.id}").write_text(str(time.time()))
        return CandidateResult(candidate.id, candidate.task, candidate.source, "partial", 0.5, {}, None, "").to_json()

    delivered: dict[str, float] = {}

    class SlowStore(QuietObserver):
        def graded(self, item, done, total):
            time.sleep(3)  # a slow disk under the store, or a terminal that blocks
            delivered[item.candidate.id] = time.time()

    candidates = [Candidate(f"c{i}", f"c{i}.diff", "+x\n", TASK) for i in range(2)]
    run = grade_many(candidates, GradingOptions(timeout=60, jobs=1), SlowStore(),
                     backend=ray_backend.RayBackend(stamps_its_start))
    assert [g.result.verdict for g in run.graded] == ["partial", "partial"]
    assert float((tmp_path / "started-c1").read_text()) < delivered["c0"] - 2


def test_exhausted_retries_give_an_error_for_that_candidate_only(local_cluster, tmp_path):
    attempts = tmp_path / "attempts"
    attempts.mkdir()

    def work(candidate, *_args):
        with open(attempts / candidate.id, "a") as f:
            f.write("attempt\n")
        if candidate.id == "crashes":
            os._exit(1)
        return CandidateResult(candidate.id, candidate.task, candidate.source, "partial", 0.5, {}, None, "").to_json()

    candidates = [Candidate("crashes", "crashes.diff", "+x\n", TASK), Candidate("fine", "fine.diff", "+y\n", TASK)]
    store, lines = ResultStore(tmp_path / "out"), []

    class Lines(QuietObserver):
        def graded(self, item, done, total):
            lines.append((done, item.result.id, item.result.verdict))

    run = grade_many(candidates, GradingOptions(timeout=60), Lines(), store, ray_backend.RayBackend(work))
    results = {g.candidate.id: g.result for g in run.graded}
    keys = {c.id: cache_key(c, all_tasks()[TASK], False, True) for c in candidates}
    assert results["fine"].verdict == "partial" and store.load("fine", keys["fine"]) == results["fine"]
    crashed = results["crashes"]
    assert crashed.verdict == "error" and crashed.score is None
    assert "died" in crashed.error and "ActorDiedError" in crashed.error
    assert {c.status for c in crashed.criteria.values()} == {"not_evaluated"}
    assert store.load("crashes", keys["crashes"]) is None  # not stored: a rerun grades it again
    assert (attempts / "crashes").read_text().count("attempt") == 1 + ray_backend.MAX_RETRIES
    assert (attempts / "fine").read_text().count("attempt") == 1
    assert sorted((done, cid) for done, cid, _ in lines)[-1][0] == 2
    assert sorted(cid for _, cid, _ in lines) == ["crashes", "fine"]


def test_resources_follow_the_rubric():
    assert ray_backend.task_has_gpu_tests("moe-swap-ab")
    assert not ray_backend.task_has_gpu_tests(TASK)
    assert ray_backend.resources_for("moe-swap-ab", True) == {"num_cpus": 1, "num_gpus": 1}
    assert ray_backend.resources_for("moe-swap-ab", False) == {"num_cpus": 1, "num_gpus": 0}
    assert ray_backend.resources_for(TASK, True) == {"num_cpus": 1, "num_gpus": 0}
    assert ray_backend.resources_for(None, True) == {"num_cpus": 1, "num_gpus": 0}
