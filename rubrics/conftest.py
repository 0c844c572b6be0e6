"""Fixtures shared by every task's hidden tests, in the judge process.

The judge never imports the candidate's vLLM: tests reach it through ``subject`` (probe calls answered by a
sandboxed process holding the patched tree) and read its files through ``vllm_tree``. Expectations come from
the judge: oracles computed here, or the same probes run on the unpatched base (``base_subject``).
"""

from __future__ import annotations

import hashlib
import os
import signal
import threading
from pathlib import Path

import pytest

from grader.sandbox.client import subject as subject_named
from rubric_support import cuda_present, gpu_enabled


@pytest.fixture(autouse=True)
def _seeded_random_state():
    """Every hidden test starts from the same random state, whatever ran before it in the judge."""
    import random

    import torch

    random.seed(0)
    torch.manual_seed(0)
    try:
        import numpy

        numpy.random.seed(0)
    except ImportError:
        pass


@pytest.fixture(scope="session")
def subject():
    """The sandboxed process that holds the patched tree: ``subject.call("module.probe", **args)``."""
    return subject_named("candidate")


@pytest.fixture(scope="session")
def subject_on():
    """The patched tree's subject on a platform the task's rubric declares (``[platforms.NAME]``):
    ``subject_on("without-triton").call(...)``, a process of its own that was never the machine's platform."""
    return lambda platform: subject_named("candidate", platform=platform)


@pytest.fixture(scope="session")
def base_subject():
    """The same, holding the unpatched base: the source of expectations that only the base's behaviour defines."""
    return subject_named("base")


@pytest.fixture
def secret_generator(request):
    """A ``torch.Generator`` seeded from the judge's secret and the test's id: inputs that decide pass/fail, drawn
    where the candidate cannot predict them (it sees them only as probe arguments), the same in every run here."""
    import torch

    secret = os.environ.get("GRADER_SECRET", "")
    seed = int.from_bytes(hashlib.sha256(f"{secret}\0{request.node.nodeid}".encode()).digest()[:8], "big")
    return torch.Generator().manual_seed(seed)


# The budget of the judge's own analysis of the candidate's text (issue 49): a file read whole at most this large,
# and at most this long for a static check or a fixture that reads the tree. Past either, the check it serves
# fails: a crafted file (a huge one, an expression chain that makes an AST walk exponential) cannot spin the judge
# until the run's limit, and never turns into a skip.
ANALYSIS_BYTES = 8 * 1024 * 1024
ANALYSIS_SECONDS = 60.0


class AnalysisBudgetExceeded(AssertionError):
    """The judge's analysis of the candidate's text went past its budget: the check it serves fails."""


class BudgetedPath(type(Path())):
    """A path of the patched tree whose whole-file reads hold to ``ANALYSIS_BYTES`` (paths made from it, by ``/``,
    ``glob`` or ``iterdir``, are budgeted too)."""

    def _checked_size(self) -> None:
        size = self.stat().st_size
        if size > ANALYSIS_BYTES:
            raise AnalysisBudgetExceeded(f"{self.name} holds {size} bytes, over the judge's analysis budget of "
                                         f"{ANALYSIS_BYTES} bytes: the check that reads it fails")

    def read_text(self, *args, **kwargs) -> str:
        self._checked_size()
        return super().read_text(*args, **kwargs)

    def read_bytes(self) -> bytes:
        self._checked_size()
        return super().read_bytes()


@pytest.fixture(scope="session")
def vllm_tree() -> Path:
    """Root of the patched vLLM tree under grading, for static checks that read its files as text (whole-file
    reads within the analysis budget)."""
    tree = os.environ.get("GRADER_VLLM_TREE")
    if not tree:
        pytest.skip("environment: GRADER_VLLM_TREE is not set")
    return BudgetedPath(tree)


class analysis_time_budget:
    """``ANALYSIS_SECONDS`` of the judge's time for what it wraps (on the main thread, by SIGALRM): past it,
    ``AnalysisBudgetExceeded`` is raised in the analysis, which fails its check."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.armed = threading.current_thread() is threading.main_thread()

    def _over(self, signum, frame):
        raise AnalysisBudgetExceeded(f"{self.what} ran past the judge's analysis budget of {ANALYSIS_SECONDS:g} s "
                                     "on the candidate's text")

    def __enter__(self):
        if self.armed:
            self.previous = signal.signal(signal.SIGALRM, self._over)
            signal.setitimer(signal.ITIMER_REAL, ANALYSIS_SECONDS)
        return self

    def __exit__(self, *exc):
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)
        return False


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """A fixture that reads the patched tree (one that asks for ``vllm_tree``) sets up within the time budget."""
    if "vllm_tree" in fixturedef.argnames:
        with analysis_time_budget(f"the fixture {fixturedef.argname}"):
            yield
    else:
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A ``static`` check (it decides from the patched source) runs within the time budget."""
    if item.get_closest_marker("static"):
        with analysis_time_budget(f"the static check {item.name}"):
            yield
    else:
        yield


def pytest_collection_modifyitems(config, items):
    if gpu_enabled():
        return
    if os.environ.get("GRADER_GPU") == "1":
        reason = "needs a CUDA GPU: none is visible to this process"
    elif cuda_present():
        reason = "needs a CUDA GPU: GPU evidence is switched off for this run (--gpu off)"
    else:
        reason = "needs a CUDA GPU: no CUDA GPU on this machine"
    for item in items:
        if item.get_closest_marker("gpu"):
            prefix = "variant: " if item.get_closest_marker("variant") else ""
            item.add_marker(pytest.mark.skip(reason=prefix + reason))
