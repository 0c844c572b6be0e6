"""GPU candidates on the Ray backend share the cluster's GPUs as a local run shares its device.

- ``gpu_actors``: ``--jobs`` actors share one GPU in equal fractions (four decimal places, never more than a whole
  GPU each); a cluster with more GPUs than jobs keeps one whole GPU per actor.
- On a local Ray cluster that declares one GPU (Ray schedules by declared resources, so no device is needed), a run
  mixing CPU-task and GPU-task candidates at ``--jobs 2`` grades all of them: an actor with no candidate of its
  kind left ends and frees its CPU for the other kind's actors (a local cluster has ``--jobs`` CPUs for both), and
  the GPU-task candidates are graded by two actors holding half a GPU each.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from grader.drive import ray_backend
from grader.core.records import Candidate, CandidateResult, GradingOptions
from grader.drive.many_candidates import grade_many

REPO = Path(__file__).resolve().parents[2]
CPU_TASK = "xpu-kv-cache-dtypes"
GPU_TASK = "moe-swap-ab"


def test_jobs_share_the_gpus_evenly():
    assert ray_backend.gpu_actors(1, 4) == (4, 0.25)
    assert ray_backend.gpu_actors(1, 3) == (3, 0.3333)
    assert ray_backend.gpu_actors(1, 1) == (1, 1)
    assert ray_backend.gpu_actors(2, 16) == (16, 0.125)
    assert ray_backend.gpu_actors(8, 4) == (8, 1)
    count, share = ray_backend.gpu_actors(3, 7)
    assert count == 7 and share * count <= 3 and share == 0.4285
    assert ray_backend.gpu_actors(1, 20_000) == (20_000, 0.0001)  # never no GPU at all: the surplus waits


@pytest.fixture
def one_gpu_cluster():
    ray = pytest.importorskip("ray")
    os.environ.pop("RAY_ADDRESS", None)
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, logging_level="warning",
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_mixed_run_shares_the_gpu_and_frees_cpus(one_gpu_cluster):
    def what_the_actor_holds(candidate, *_args):  # defined here: Ray's workers cannot import a test module
        held = one_gpu_cluster.get_runtime_context().get_assigned_resources()
        return CandidateResult(candidate.id, candidate.task, candidate.source, "partial", 0.5, {}, None,
                               f"{held.get('GPU', 0)} {os.getpid()}").to_json()

    candidates = ([Candidate(f"cpu{i}", f"cpu{i}.diff", "+x\n", CPU_TASK) for i in range(3)]
                  + [Candidate(f"gpu{i}", f"gpu{i}.diff", "+x\n", GPU_TASK) for i in range(4)])
    runs: list = []
    grading = threading.Thread(target=lambda: runs.append(grade_many(
        candidates, GradingOptions(timeout=60, jobs=2, gpu=True),
        backend=ray_backend.RayBackend(what_the_actor_holds))), daemon=True)
    grading.start()
    grading.join(timeout=240)
    assert not grading.is_alive(), "the GPU actors never got a CPU: the CPU actors kept theirs"
    held = {g.result.id: g.result.summary.split() for g in runs[0].graded}
    assert sorted(held) == sorted(c.id for c in candidates)
    assert {held[f"cpu{i}"][0] for i in range(3)} == {"0"}
    assert {held[f"gpu{i}"][0] for i in range(4)} == {"0.5"}
    assert len({held[f"gpu{i}"][1] for i in range(4)}) == 2  # both GPU actors graded
