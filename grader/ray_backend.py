"""Grading on a Ray cluster (``grade --backend ray [--address ADDR]``): one Ray task per candidate.

The driver (the ``grade`` process) runs :func:`grader.orchestrate.grade_many`, which ingests, looks each candidate
up in the results store, and hands the rest to :class:`RayBackend`. That submits every candidate still to grade
as a Ray task asking for what its rubric needs (1 CPU; 1 GPU as well when GPU
evidence is on and the task's hidden tests carry ``mark.gpu``). Each task grades its candidate with
:func:`grader.pipeline.grade_candidate` on whichever node Ray picked, building the task's base there through
:func:`grader.checkout.build_base`, which caches it on that node's disk under ``$GRADER_CACHE``: a base is built
once per node and reused by every later task on that node. Hidden tests are started by a
:class:`~grader.sandbox.launch.ColdLauncher` inside the task (no warm workers in Ray tasks).

Results stream back to the driver in completion order (a ``ray.wait`` loop), and the orchestrator puts them into
the same atomic, resumable :class:`~grader.store.ResultStore`, with the same progress lines, as local runs; the reports are
written by the same code, so the outputs equal a local run's on the same input apart from the fields that say how
the run was made (timings, ``run.backend``, ``run.jobs``).

Failures: a grading error never leaves :func:`grade_candidate` (it is this candidate's ``error`` result), so
application exceptions are not retried (``retry_exceptions=False``). System failures (the worker process killed,
its node lost) are retried by Ray up to ``MAX_RETRIES`` times; when they are exhausted, or Ray fails for that
task in any other way (:class:`ray.exceptions.RayError`), the candidate gets an ``error`` result built by
:func:`grader.pipeline.error_result`, and only that candidate.

``ray`` is an optional dependency (``pip install -e ".[ray]"``); it is imported only here, and only when the
Ray backend is used.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from grader.core.rubric import REPO_ROOT, Task

MAX_RETRIES = 2
GPU_MARK = "mark.gpu"


def _ray():
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit('--backend ray needs Ray: pip install -e ".[ray]"') from exc
    return ray


# ----------------------------------------------------------------------------------------------- resources

@lru_cache(maxsize=None)
def task_has_gpu_tests(task_id: str, rubrics: Path = REPO_ROOT / "rubrics") -> bool:
    """Whether any file of the task's hidden tests marks a test ``gpu`` (``pytest.mark.gpu`` and the like)."""
    tests = rubrics / task_id / "tests"
    if not tests.is_dir():
        return False
    for path in sorted(tests.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".ini", ".toml", ".cfg"):
            try:
                if GPU_MARK in path.read_text(errors="replace"):
                    return True
            except OSError:
                continue
    return False


def resources_for(task_id: str | None, gpu: bool) -> dict[str, float]:
    """What one candidate's Ray task asks for: a CPU, and a GPU when GPU evidence runs and the task has GPU tests."""
    needs_gpu = bool(gpu and task_id and task_has_gpu_tests(task_id))
    return {"num_cpus": 1, "num_gpus": 1 if needs_gpu else 0}


# ------------------------------------------------------------------------------------------ cluster setup

def connect(address: str | None, num_cpus: int | None = None) -> bool:
    """Join the cluster at ``address`` (or ``$RAY_ADDRESS``), else start a local one of ``num_cpus`` CPUs.

    Returns whether a connection was made here (then :func:`disconnect` should be called). Workers find the
    grader through ``PYTHONPATH``: the repository must lie at the same path on every node (see docs/ray.md).
    """
    ray = _ray()
    if ray.is_initialized():
        return False
    runtime_env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
        p for p in [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")] if p)}}
    if address or os.environ.get("RAY_ADDRESS"):
        ray.init(address=address or None, runtime_env=runtime_env, logging_level="warning",
                 log_to_driver=False)
    else:
        ray.init(num_cpus=max(1, num_cpus or os.cpu_count() or 1), include_dashboard=False,
                 runtime_env=runtime_env, logging_level="warning", log_to_driver=False)
    return True


def disconnect() -> None:
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


def detect_gpu(mode: str, address: str | None) -> tuple[bool, str]:
    """``--gpu`` for the Ray backend. A local cluster is this machine: the local answer, word for word. On a
    remote cluster GPU evidence runs when the cluster has GPUs (``auto``), and ``on`` needs some."""
    from grader.pipeline import detect_gpu as local_detect_gpu

    if mode == "off" or not (address or os.environ.get("RAY_ADDRESS")):
        return local_detect_gpu(mode)
    gpus = _ray().cluster_resources().get("GPU", 0)
    if gpus:
        return True, f"{gpus:g} GPU(s) in the Ray cluster: GPU evidence runs"
    if mode == "on":
        raise SystemExit("--gpu on was given but the Ray cluster has no GPU")
    return False, "no GPU in the Ray cluster: GPU-only criteria are not evaluated"


# --------------------------------------------------------------------------------------- inside a Ray task

_NODE_BASES = None


def _node_bases():
    """One base cache per Ray worker process; behind it, build_base's on-disk cache of this node, taken under a
    file lock so that two worker processes of one node never build the same base at once."""
    global _NODE_BASES
    if _NODE_BASES is None:
        from grader.checkout import build_base, cache_dir
        from grader.pipeline import BaseCache

        class NodeBaseCache(BaseCache):
            def build(self, task: Task):
                locks = cache_dir() / "locks"
                locks.mkdir(parents=True, exist_ok=True)
                with open(locks / f"base-{task.id}.lock", "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    return build_base(task.id, task.base)

        _NODE_BASES = NodeBaseCache()
    return _NODE_BASES


def grade_on_node(candidate, gpu: bool, timeout: float, keep_trees: bool, contained: bool,
                  evidence_cache: bool, gpu_assigned: bool) -> dict:
    """The body of one Ray task: grade ``candidate`` here, with a cold launcher, and return its JSON result."""
    from grader.sandbox import launch
    from grader.evidence_cache import EvidenceCache
    from grader.pipeline import GradeOptions, grade_candidate

    # Ray narrows CUDA_VISIBLE_DEVICES to the GPU it gave a task: that task's hidden tests must see only that one.
    # Other tasks (the same worker process may run both kinds) pass on exactly what a local run passes on.
    options = GradeOptions(gpu=gpu, timeout=timeout, keep_trees=keep_trees, launcher=launch.ColdLauncher(),
                           evidence_cache=EvidenceCache() if evidence_cache else None, contained=contained,
                           also_pass=("CUDA_VISIBLE_DEVICES",) if gpu_assigned else ())
    result, _ = grade_candidate(candidate, _node_bases(), options)
    return result.to_json()


# ---------------------------------------------------------------------------------- submit and stream back

def remote(fn: Callable, **resources: Any):
    """``fn`` as a Ray task with the backend's retry policy: system failures (a killed worker, a lost node) are
    retried ``MAX_RETRIES`` times; exceptions raised by ``fn`` are not (grading errors are results already)."""
    return _ray().remote(max_retries=MAX_RETRIES, retry_exceptions=False, **resources)(fn)


def stream(refs: dict, on_result: Callable[[Any, Any], None], on_failure: Callable[[Any, BaseException], None]) -> None:
    """Wait on ``refs`` ({object ref: key}) and hand each finished one to ``on_result(key, value)`` as it
    completes; a task that Ray gave up on (retries exhausted, or any other Ray error) goes to
    ``on_failure(key, exc)`` instead, and the others carry on."""
    ray = _ray()
    left = list(refs)
    while left:
        done, left = ray.wait(left, num_returns=1)
        for ref in done:
            try:
                value = ray.get(ref)
            except ray.exceptions.RayError as exc:
                on_failure(refs[ref], exc)
            else:
                on_result(refs[ref], value)


def failure_message(exc: BaseException) -> str:
    ray = _ray()
    if isinstance(exc, (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError)):
        what = "the Ray worker grading this candidate died"
    else:
        what = "Ray could not run this candidate's task"
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{what} ({type(exc).__name__}, {MAX_RETRIES} retries exhausted where retryable): {first}"


class RayBackend:
    """The orchestrator's backend for ``--backend ray``: one Ray task per pending candidate, results handed back
    in completion order. ``work`` is what each task runs (:func:`grade_on_node`; tests put a crashing stand-in
    there). The cluster is joined by :func:`connect` before the run."""

    def __init__(self, work: Callable[..., dict] = grade_on_node) -> None:
        self.work = work

    def grade(self, pending, options, observer, deliver) -> None:
        from grader.orchestrate import Graded
        from grader.pipeline import error_result
        from grader.core.rubric import all_tasks

        tasks = all_tasks()
        by_id = {candidate.id: candidate for candidate in pending}
        refs, task_fns = {}, {}
        for candidate in pending:
            resources = resources_for(candidate.task if candidate.task in tasks else None, options.gpu)
            shape = tuple(sorted(resources.items()))
            task_fn = task_fns.get(shape) or task_fns.setdefault(shape, remote(self.work, **resources))
            ref = task_fn.remote(candidate, options.gpu, options.timeout, options.keep_trees, options.contained,
                                 options.use_evidence_cache, bool(resources["num_gpus"]))
            refs[ref] = candidate.id

        def finished(candidate_id: str, record: dict) -> None:
            deliver(Graded(by_id[candidate_id], record))

        def failed(candidate_id: str, exc: BaseException) -> None:
            # Reported like any error result (and, being an error, never stored): a lost node says nothing about
            # the candidate, so a rerun grades it again.
            candidate = by_id[candidate_id]
            deliver(Graded(candidate, error_result(candidate, failure_message(exc),
                                                   tasks.get(candidate.task or "")).to_json()))

        stream(refs, finished, failed)
