"""The controls' times per probe call, measured once per task, rubric, base and environment on this machine.

A calibration run is a judge run over the reference fix (or, for a task without one, the base) in which every
call of the candidate subject is timed, then made again with the same arguments on the base subject and timed
there (``grader.sandbox.client``); the record lands under the cache, where no subject can see it. Candidates'
judges read it to hold each call to its budget (``grader.sandbox.budget``). It is made on first use, never from a
candidate's run, and kept only when the calibration run finished within its time limit.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
import threading
from pathlib import Path

from grader.apply import apply_diff, make_tree
from grader.core.identity import grading_identity
from grader.core.paths import cache_dir, make_import_root, scratch_root
from grader.core.records import BuiltBase
from grader.core.rubric import REPO_ROOT, Task
from grader.diffparse import parse_diff
from grader.run import DEFAULT_TIMEOUT_S, run_hidden_tests
from grader.sandbox.launch import Launcher

REFERENCE_DIR = REPO_ROOT / "reference_impl"
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def record_path(task: Task, base: BuiltBase, gpu: bool, contained: bool = True) -> Path:
    """Where the controls' times of ``task`` are kept: keyed by the grading identity (the rubric, its tests and
    probes, the engine, the environment, the GPU and containment switches), the base and the machine."""
    machine = f"{platform.node()}\0{os.cpu_count()}\0{platform.machine()}"
    key = grading_identity(task, gpu, contained).key("call-budgets", base.key, machine)[:24]
    return cache_dir() / "call-budgets" / f"{task.id}-{key}.json"


def ensure_call_times(task: Task, base: BuiltBase, gpu: bool, launcher: Launcher, contained: bool = True,
                      memory_bytes: int | None = None, also_pass: tuple[str, ...] = ()) -> Path | None:
    """The record of the controls' times for ``task``, measured now if there is none; None when the calibration
    run could not finish (every candidate call then keeps its plain limit)."""
    path = record_path(task, base, gpu, contained)
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(str(path), threading.Lock())
    with lock:
        if not path.is_file():
            measure_call_times(task, base, gpu, launcher, path, contained, memory_bytes, also_pass)
    return path if path.is_file() else None


def measure_call_times(task: Task, base: BuiltBase, gpu: bool, launcher: Launcher, path: Path,
                       contained: bool = True, memory_bytes: int | None = None,
                       also_pass: tuple[str, ...] = ()) -> None:
    reference = REFERENCE_DIR / f"{task.id}.diff"
    scratch = Path(tempfile.mkdtemp(prefix=f"grader-calls-{task.id}-", dir=scratch_root()))
    try:
        tree = make_tree(base, scratch)
        if reference.is_file():
            applied = apply_diff(parse_diff(reference.read_text()), tree, contained)
            if applied.status not in ("applied", "partial"):
                return
        draft = scratch / "call-times.json"
        run = run_hidden_tests(task, tree, make_import_root(tree, scratch / "import-root"), base.path, scratch, gpu, launcher,
                               DEFAULT_TIMEOUT_S, contained, memory_bytes=memory_bytes, also_pass=also_pass,
                               call_times_out=draft)
        if run.timed_out or run.environment_error or not draft.is_file():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        landing = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        shutil.copyfile(draft, landing)
        os.replace(landing, path)  # whole or absent for a reader in another grader
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
