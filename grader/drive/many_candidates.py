"""Grading many candidates: ``grade_many``, the one grading loop. ``grade``, ``mutate``, ``validate-rubrics``,
``calibrate`` and ``check-task`` all grade through it, with one ``GradingOptions`` record.

For each candidate it looks the result up in the results store (when one is given), grades the rest on a
backend (``LocalBackend``: worker threads in this process; or ``grader.drive.ray_backend.RayBackend``: Ray actors),
saves each finished complete result, and tells an observer what is happening (phases such as a base build, and
each graded candidate). An interrupt (``Interrupted``, raised by the caller's signal handler) stops the work. The
run then returns what finished (each as ``Graded``, its typed result), and says that it was interrupted. Grading
one candidate is :func:`grader.drive.one_candidate.grade_candidate`, which every backend calls; this module only decides
what is graded, where, and in what order.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol

from grader.drive.evidence_cache import EvidenceCache
from grader.drive.controls import Controls
from grader.drive.one_candidate import BaseCache, error_result, grade_candidate
from grader.core.environment import memory_per_subject
from grader.core.records import Graded
from grader.core.records import Candidate, CandidateResult, GradingOptions, RunReport
from grader.core.rubric import Task, all_tasks
from grader.pipeline.checkout import is_built
from grader.sandbox.launch import ColdLauncher, Launcher, preimport_known, start_warm_pool, warm_workers_serve
from grader.sandbox.leftovers import reclaim as reclaim_leftovers
from grader.sandbox.tooling import os_error_line
from grader.drive.store import ResultStore, cache_key, is_final


# Seconds an interrupt waits for the gradings it stopped to wind down (their judges are killed at once).
INTERRUPT_WAIT_S = 3


class Interrupted(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived while grading (raised by the caller's signal handler)."""


@dataclass(frozen=True)
class GradeRun:
    graded: tuple[Graded, ...]
    # The signal that stopped the run, or None when every candidate was graded.
    interrupted: str | None
    not_graded: tuple[str, ...]
    wall_s: float

    @property
    def results(self) -> list[CandidateResult]:
        return [g.result for g in self.graded]

    def by_id(self) -> dict[str, Graded]:
        return {g.candidate.id: g for g in self.graded}


class Observer(Protocol):
    """What a caller is told while a run goes on (the terminal's progress display)."""

    def phase(self, name: str) -> AbstractContextManager[None]: ...

    def started(self, candidate: Candidate) -> None: ...

    def graded(self, item: Graded, done: int, total: int) -> None: ...


class QuietObserver:
    """Tells nobody anything."""

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield

    def started(self, candidate: Candidate) -> None:
        return None

    def graded(self, item: Graded, done: int, total: int) -> None:
        return None


class Backend(Protocol):
    """Where pending candidates are graded. ``deliver`` is called once per finished candidate, from the thread
    that called ``grade``; an ``Interrupted`` raised meanwhile must leave every started job ended."""

    def grade(self, pending: Sequence[Candidate], options: GradingOptions, observer: Observer,
              deliver: Callable[[Graded], None]) -> None: ...


def close_launcher(launcher: Launcher) -> None:
    """Close the run's launcher. A failure of that cleanup (an OSError removing its workers' folders) is said on
    stderr and costs nothing else: every candidate was graded and stored, and the reports are still written."""
    try:
        launcher.close()
    except OSError as exc:
        print(f"warning: cleaning up the judges' workers failed ({os_error_line(exc)}); every result stands",
              file=sys.stderr, flush=True)


def grade_many(candidates: Sequence[Candidate], options: GradingOptions, observer: Observer | None = None,
               store: ResultStore | None = None, backend: Backend | None = None) -> GradeRun:
    """Grade ``candidates`` on ``backend`` (local threads when None), returning them in input order. With a
    ``store``, finished results are looked up there first and each new complete one is saved there."""
    observer = observer or QuietObserver()
    backend = backend or LocalBackend()
    if options.memory_bytes is None:
        options = replace(options, memory_bytes=memory_per_subject(options.jobs))
    started = time.monotonic()
    reclaim_leftovers()  # what a killed grader before this one left (scratch trees, homes, cgroups, staging)
    tasks = all_tasks()
    finished: dict[str, Graded] = {}
    keys: dict[str, str] = {}
    pending: list[Candidate] = []

    def deliver(item: Graded) -> None:
        if store is not None and not item.stored:
            store.save(item.candidate.id, keys[item.candidate.id], item.result)
        finished[item.candidate.id] = item
        observer.graded(item, len(finished), len(candidates))

    interrupted = None
    try:
        for candidate in candidates:
            keys[candidate.id] = cache_key(candidate, tasks.get(candidate.task or ""), options.gpu,
                                           options.contained, options.trace_lines)
            stored = store.load(candidate.id, keys[candidate.id]) if store is not None else None
            if stored is None:
                pending.append(candidate)
            else:
                deliver(Graded(candidate, stored, stored=True))
        if pending:
            backend.grade(pending, options, observer, deliver)
    except Interrupted as exc:
        interrupted = str(exc)
    graded = tuple(finished[c.id] for c in candidates if c.id in finished)
    return GradeRun(graded, interrupted, tuple(c.id for c in candidates if c.id not in finished),
                    round(time.monotonic() - started, 2))


def refused_by_control(candidate: Candidate, task: Task, problem: str) -> CandidateResult:
    """The result of a candidate whose task's control does not hold here: an environment fault, not a verdict."""
    return replace(error_result(candidate, problem, task), run_status="environment_error")


def gradable(candidate: Candidate, tasks: dict[str, Task], options: GradingOptions) -> bool:
    """Whether grading ``candidate`` runs hidden tests (so a worker is worth starting for it)."""
    return candidate.task in tasks and not candidate.ingest_error and \
        bool(candidate.diff.strip() or options.empty_diff_grades_base)


class LocalBackend:
    """Threads in this process, each grading one candidate at a time; hidden tests in warm workers (forked from
    an interpreter that has imported what vLLM imports) unless ``cold``."""

    def __init__(self, bases: BaseCache | None = None) -> None:
        self.bases = bases or BaseCache()
        # At most this many bases are built at once (each unpacks and commits a vLLM tree).
        self.building = threading.BoundedSemaphore(4)

    def grade(self, pending: Sequence[Candidate], options: GradingOptions, observer: Observer,
              deliver: Callable[[Graded], None]) -> None:
        tasks = all_tasks()
        needing = [c for c in pending if gradable(c, tasks, options)]
        # Bases are built in the background, each at most once and each task's on its own: worker start-up and
        # the candidates of bases already built go on meanwhile (a candidate waits only for its own base). The
        # builders are daemon threads: an interrupt does not wait for a build (it is abandoned with the process),
        # and a build that fails is reported by each candidate that asks for the base.
        builders = [threading.Thread(target=self.prepare_base, args=(tasks[task_id], observer), daemon=True,
                                     name=f"base {task_id}") for task_id in dict.fromkeys(c.task for c in needing)]
        for builder in builders:
            builder.start()
        launcher = self.launcher(needing, tasks, options, observer)
        self.grade_with(launcher, pending, options, observer, deliver)
        for builder in builders:
            builder.join()

    def prepare_base(self, task: Task, observer: Observer) -> None:
        """Build ``task``'s base, as a phase the observer is told about when there is building to do. A failure
        is left to the candidates: each asks for the base again and reports why it cannot be had."""
        try:
            if is_built(task.id, task.base):
                self.bases.get(task)
                return
            with self.building, observer.phase(f"base {task.id}"):
                self.bases.get(task)
        except Exception:  # noqa: BLE001 - reported by every candidate of the task (grade_candidate)
            return

    def grade_with(self, launcher: Launcher, pending: Sequence[Candidate], options: GradingOptions,
                   observer: Observer, deliver: Callable[[Graded], None]) -> None:
        evidence = EvidenceCache() if options.use_evidence_cache else None
        stopping = threading.Event()
        delivered: set[str] = set()
        tasks = all_tasks()
        controls = Controls(self.bases, options, partial(grade_candidate, launcher=launcher)) \
            if options.controls else None

        def hand_over(item: Graded) -> None:
            if item.candidate.id not in delivered:
                delivered.add(item.candidate.id)
                deliver(item)

        def work(candidate: Candidate) -> Graded | None:
            if stopping.is_set():
                return None
            task = tasks.get(candidate.task or "")
            problem = controls.problem(task) if controls and task and gradable(candidate, tasks, options) else None
            if problem:
                return None if stopping.is_set() else Graded(candidate, refused_by_control(candidate, task, problem))
            observer.started(candidate)
            result, run = grade_candidate(candidate, self.bases, options, launcher, evidence)
            # An interrupt that cut only a traced re-run short left a final verdict: it is kept (its checks say
            # that their re-run did not finish); one that cut the tests themselves short left none.
            return None if stopping.is_set() and not is_final(result) else Graded(candidate, result, run)

        pool = ThreadPoolExecutor(max_workers=max(1, options.jobs))
        futures = []
        interrupted = False
        try:
            futures = [pool.submit(work, c) for c in pending]
            for future in as_completed(futures):
                if (item := future.result()) is not None:
                    hand_over(item)
        except Interrupted:
            interrupted = True
            stopping.set()
            self.bases.abandoned.set()
            pool.shutdown(wait=False, cancel_futures=True)
            launcher.terminate()
            # Their judges are ended; what is left is removing trees, which the exit does not wait for.
            wait(futures, timeout=INTERRUPT_WAIT_S)
            # A grading that completed just as the signal came is kept, like every other finished one.
            for future in futures:
                if future.done() and not future.cancelled() and future.exception() is None and future.result():
                    hand_over(future.result())
            raise
        finally:
            pool.shutdown(wait=not interrupted)
            close_launcher(launcher)

    def launcher(self, needing: list[Candidate], tasks: dict[str, Task], options: GradingOptions,
                 observer: Observer) -> Launcher:
        """Warm workers, unless ``cold``, GPU evidence (``warm_workers_serve``) or fewer than two candidates need
        running (a warm worker imports what every task's modules import before it forks a judge: that pays off from
        the second candidate on). The workers themselves start when the first candidate needs one; what is prepared
        here is the list of modules they preload (probed once per environment)."""
        if options.cold or len(needing) < 2 or not warm_workers_serve(options.gpu):
            return ColdLauncher()
        base = self.bases.get(tasks[needing[0].task])
        if preimport_known(base, options.gpu):
            return start_warm_pool(max(1, options.jobs), base, options.gpu, observer.phase)
        with observer.phase("probing what warm workers preload"):
            return start_warm_pool(max(1, options.jobs), base, options.gpu, observer.phase)
