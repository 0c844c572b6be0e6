"""Grading on a Ray cluster (``grade --backend ray [--address ADDR]``): long-lived actors with warm workers.

The driver (the ``grade`` process) runs :func:`grader.drive.many_candidates.grade_many`, which ingests, looks each candidate
up in the results store, and hands the rest to :class:`RayBackend`. That starts ``--jobs`` actors of 1 CPU (and,
when GPU evidence is on, actors of 1 CPU and a share of a GPU for the candidates whose task's hidden tests carry
``mark.gpu``: ``--jobs`` of them sharing the cluster's GPUs, or one per GPU where that is more) and feeds each
actor one candidate at a time; an actor with no candidate left of its kind ends, freeing its CPU for the others. An actor grades its
candidate with :func:`grader.drive.one_candidate.grade_candidate` on whichever node Ray placed it, building the task's base
there through :func:`grader.pipeline.checkout.build_base`, which caches it on that node's disk under ``$GRADER_CACHE``: a
base is built once per node and reused by every later candidate on that node. Hidden tests run in the actor's
warm worker (:func:`grader.sandbox.launch.start_warm_pool`, started for its first candidate that needs tests and
kept for the rest), as in a local run, instead of a fresh interpreter per candidate; with GPU evidence in a fresh
judge per candidate, as in a local run (:func:`grader.sandbox.launch.warm_workers_serve`).

Results stream back to the driver in completion order (a ``ray.wait`` loop), and the orchestrator puts them into the
same atomic, resumable :class:`~grader.drive.store.ResultStore`, with the same progress lines, as local runs; the reports
are written by the same code, so the outputs equal a local run's on the same input apart from the fields that say
how the run was made (timings, ``run.backend``, ``run.jobs``).

Failures: a grading error never leaves :func:`grade_candidate` (it is this candidate's ``error`` result), so
it is never retried. An actor whose process dies (killed, its node lost) is restarted by Ray and its candidate
retried, up to ``MAX_RETRIES`` times; when they are exhausted, or Ray fails for that candidate in any other way
(:class:`ray.exceptions.RayError`), the candidate gets an ``error`` result built by
:func:`grader.drive.one_candidate.error_result`, and only that candidate: a fresh actor takes the dead one's place.

``ray`` is an optional dependency (``pip install -e ".[ray]"``); it is imported only here, and only when the
Ray backend is used.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from dataclasses import replace
from pathlib import Path

from grader.core.records import CandidateResult, GradingOptions
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
    """What one candidate's Ray task asks for: a CPU, and a GPU when GPU evidence runs and the task has GPU tests
    (a whole one here; :func:`gpu_actors` says how much of one each GPU actor holds)."""
    needs_gpu = bool(gpu and task_id and task_has_gpu_tests(task_id))
    return {"num_cpus": 1, "num_gpus": 1 if needs_gpu else 0}


def gpu_actors(gpus: float, jobs: int) -> tuple[int, float]:
    """How many GPU actors a run starts and how much of a GPU each holds: one per GPU of the cluster, or ``--jobs``
    of them where that is more, sharing the GPUs evenly (Ray's fractional GPUs, whose precision is four decimal
    places), as a local run puts up to ``--jobs`` GPU subjects on one device. Each subject's device memory is
    bounded (grader.sandbox.watchdog.gpu_memory_bound), so sharing a GPU never lets one take it from the others."""
    count = max(1, int(gpus), jobs)
    if gpus <= 0:
        return count, 1  # a GPU no actor can be given: they wait, as Ray makes any request it cannot place
    # At least Ray's smallest share, so that an actor is always given a GPU (past 10,000 jobs a GPU, some wait).
    return count, min(1, max(1, int(gpus / count * 10_000)) / 10_000)


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
        # address="local": a cluster of its own even where `ray start` runs one (or left its address behind),
        # which ray.init would otherwise join, or refuse to join since num_cpus is given.
        ray.init(address="local", num_cpus=max(1, num_cpus or os.cpu_count() or 1), include_dashboard=False,
                 runtime_env=runtime_env, logging_level="warning", log_to_driver=False)
    return True


def disconnect() -> None:
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


def detect_gpu(mode: str, address: str | None) -> tuple[bool, str]:
    """``--gpu`` for the Ray backend. A local cluster is this machine: the local answer, word for word. On a
    remote cluster GPU evidence runs when the cluster has GPUs (``auto``), and ``on`` needs some."""
    from grader.core.environment import detect_gpu as local_detect_gpu

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


def node_bases():
    """One base cache per Ray worker process; behind it, build_base's on-disk cache of this node. A base not yet
    built is built under a lock of the node's cache, so that two worker processes never build it at once; a
    built one is only read (its stamp, manifest and blobs), by every actor at once, not one at a time."""
    global _NODE_BASES
    if _NODE_BASES is None:
        from grader.pipeline.checkout import build_base, is_built
        from grader.core.paths import cache_lock
        from grader.drive.one_candidate import BaseCache

        class NodeBaseCache(BaseCache):
            def build(self, task: Task):
                if is_built(task.id, task.base):
                    return build_base(task.id, task.base)
                with cache_lock(f"base-{task.id}"):
                    return build_base(task.id, task.base)

        _NODE_BASES = NodeBaseCache()
    return _NODE_BASES


_WARM: dict = {}


def warm_launcher(base, gpu: bool):
    """This process's warm worker, started when its first candidate needs tests and reused by every later one:
    an actor's process lives for the whole run, so what the warm worker preloads is paid for once per actor. With
    GPU evidence, fresh judges instead (``warm_workers_serve``)."""
    from contextlib import nullcontext

    from grader.sandbox.launch import ColdLauncher, start_warm_pool, warm_workers_serve

    if gpu not in _WARM:
        _WARM[gpu] = (start_warm_pool(1, base, gpu, lambda name: nullcontext()) if warm_workers_serve(gpu)
                      else ColdLauncher())
    return _WARM[gpu]


def close_warm() -> None:
    for launcher in _WARM.values():
        launcher.close()
    _WARM.clear()


def actor_arguments(options: GradingOptions, gpu_assigned: bool) -> tuple[dict, bool]:
    """What an actor is sent with each candidate besides it: the run's whole options record (as JSON: every field
    reaches the actor, ``memory_bytes`` among them) and whether Ray gave the actor a GPU."""
    return options.to_json(), gpu_assigned


def node_options(options: dict, gpu_assigned: bool) -> GradingOptions:
    """The options an actor grades with: the driver's, and, where Ray narrowed CUDA_VISIBLE_DEVICES to the GPU it
    gave the actor, that variable passed on so the actor's hidden tests see only that one (other actors pass on
    exactly what a local run passes on)."""
    received = GradingOptions.from_json(options)
    if gpu_assigned and "CUDA_VISIBLE_DEVICES" not in received.also_pass:
        received = replace(received, also_pass=(*received.also_pass, "CUDA_VISIBLE_DEVICES"))
    return received


_CONTROLS: dict = {}


def node_controls(bases, options: GradingOptions, launcher):
    """This process's controls (``grader.drive.controls``) for the run's options: a task's control runs on each node
    before its first candidate there, as in a local run, under a lock of the node's cache, so that one actor runs
    it and the node's others find its pass."""
    from functools import partial

    from grader.drive.controls import Controls
    from grader.drive.one_candidate import grade_candidate

    key = (options, launcher)  # both hashable: the options are frozen, a launcher is itself
    if key not in _CONTROLS:
        _CONTROLS[key] = Controls(bases, options, partial(grade_candidate, launcher=launcher))
    return _CONTROLS[key]


def grade_on_node(candidate, options: dict, gpu_assigned: bool) -> dict:
    """What an actor runs for one candidate (with ``actor_arguments``): its task's control where it needs tests,
    then the candidate, graded here with this process's warm worker; its JSON result."""
    from grader.drive.many_candidates import gradable, refused_by_control
    from grader.drive.one_candidate import grade_candidate
    from grader.core.rubric import all_tasks
    from grader.sandbox.launch import ColdLauncher

    received = node_options(options, gpu_assigned)
    tasks = all_tasks()
    bases = node_bases()
    if not gradable(candidate, tasks, received):
        result, _ = grade_candidate(candidate, bases, received, ColdLauncher())
        return result.to_json()
    task = tasks[candidate.task]
    launcher = warm_launcher(bases.get(task), received.gpu)
    problem = node_controls(bases, received, launcher).problem(task) if received.controls else None
    if problem:
        return refused_by_control(candidate, task, problem).to_json()
    result, _ = grade_candidate(candidate, bases, received, launcher)
    return result.to_json()


class CandidateGrader:
    """A Ray actor's body: grades candidates one at a time in one long-lived process (``work`` per candidate;
    tests put a crashing stand-in there), and ends its warm worker when the run closes it."""

    def __init__(self, work: Callable[..., dict]) -> None:
        self.work = work

    def grade(self, *args) -> dict:
        return self.work(*args)

    def close(self) -> None:
        close_warm()


# ---------------------------------------------------------------------------------- submit and stream back

def failure_message(exc: BaseException) -> str:
    ray = _ray()
    if isinstance(exc, (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                        ray.exceptions.RayActorError)):
        what = "the Ray worker grading this candidate died"
    else:
        what = "Ray could not run this candidate's task"
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{what} ({type(exc).__name__}, {MAX_RETRIES} retries exhausted where retryable): {first}"


class ActorPool:
    """Actors of one resource shape, at most ``limit`` of them, each grading one candidate at a time from the
    shape's queue. An actor whose process dies is restarted by Ray and its candidate retried, ``MAX_RETRIES``
    times; after that the candidate is an error and a fresh actor takes the actor's place."""

    def __init__(self, work: Callable[..., dict], resources: dict[str, float], limit: int, args) -> None:
        self.make = lambda: _ray().remote(CandidateGrader).options(
            max_restarts=MAX_RETRIES, max_task_retries=MAX_RETRIES, **resources).remote(work)
        self.limit = limit
        self.args = args
        self.queue: list = []
        self.actors: list = []

    def start(self, in_flight: dict) -> None:
        self.queue.reverse()  # popped from the end: input order
        for _ in range(min(self.limit, len(self.queue))):
            self.actors.append(self.make())
            self.submit(self.actors[-1], in_flight)

    def submit(self, actor, in_flight: dict) -> None:
        """Give ``actor`` this shape's next candidate; with none left, end it, so that the CPU (and GPU share) it
        held goes to the actors of another shape still waiting for one (a local cluster has ``--jobs`` CPUs for
        all of them)."""
        if self.queue:
            candidate = self.queue.pop()
            in_flight[actor.grade.remote(candidate, *self.args(candidate))] = (candidate.id, actor, self)
        else:
            self.actors.remove(actor)
            self.end([actor])

    def replace(self, actor):
        self.actors.remove(actor)
        _ray().kill(actor, no_restart=True)
        self.actors.append(self.make())
        return self.actors[-1]

    def close(self) -> None:
        self.end(self.actors)
        self.actors = []

    @staticmethod
    def end(actors: list) -> None:
        ray = _ray()
        try:
            ray.get([actor.close.remote() for actor in actors], timeout=60)
        except (ray.exceptions.RayError, TimeoutError):
            pass  # a dead actor's warm worker died with it
        for actor in actors:
            ray.kill(actor, no_restart=True)


class RayBackend:
    """The orchestrator's backend for ``--backend ray``: long-lived actors, each with a warm worker, grade the
    pending candidates (``--jobs`` CPU actors; GPU candidates on actors sharing the GPUs, :func:`gpu_actors`),
    and results are handed back in completion order. ``work`` is what an actor runs per candidate
    (:func:`grade_on_node`). The cluster is joined by :func:`connect` before the run."""

    def __init__(self, work: Callable[..., dict] = grade_on_node) -> None:
        self.work = work

    def grade(self, pending, options, observer, deliver) -> None:
        from grader.core.records import Graded
        from grader.drive.one_candidate import error_result
        from grader.core.rubric import all_tasks

        ray = _ray()
        tasks = all_tasks()
        by_id = {candidate.id: candidate for candidate in pending}
        pools: dict[tuple, ActorPool] = {}
        gpu_count, gpu_share = gpu_actors(ray.cluster_resources().get("GPU", 0), options.jobs)
        for candidate in pending:
            resources = resources_for(candidate.task if candidate.task in tasks else None, options.gpu)
            shape = tuple(sorted(resources.items()))
            if shape not in pools:
                gpu_assigned = bool(resources["num_gpus"])
                if gpu_assigned:
                    resources = dict(resources, num_gpus=gpu_share)
                pools[shape] = ActorPool(self.work, resources, gpu_count if gpu_assigned else max(1, options.jobs),
                                         lambda c, g=gpu_assigned: actor_arguments(options, g))
            pools[shape].queue.append(candidate)
        in_flight: dict = {}
        try:
            for pool in pools.values():
                pool.start(in_flight)
            while in_flight:
                done, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in done:
                    candidate_id, actor, pool = in_flight.pop(ref)
                    try:
                        result = CandidateResult.from_json(ray.get(ref))
                    except ray.exceptions.RayError as exc:
                        # Reported like any error result (and, being an error, never stored): a lost worker says
                        # nothing about the candidate, so a rerun grades it again.
                        candidate = by_id[candidate_id]
                        result = error_result(candidate, failure_message(exc), tasks.get(candidate.task or ""))
                        actor = pool.replace(actor)
                    # The actor's next candidate first: it grades while the driver stores and reports this one,
                    # as a local run's workers do.
                    pool.submit(actor, in_flight)
                    deliver(Graded(by_id[candidate_id], result))
        finally:
            for pool in pools.values():
                pool.close()
