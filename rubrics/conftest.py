"""Fixtures shared by every task's hidden tests, in the judge process.

The judge never imports the candidate's vLLM: tests reach it through ``subject`` (probe calls answered by a
sandboxed process holding the patched tree) and read its files through ``vllm_tree``. Expectations come from
the judge: oracles computed here, or the same probes run on the unpatched base (``base_subject``).
"""

from __future__ import annotations

import hashlib
import os
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


@pytest.fixture(scope="session")
def vllm_tree() -> Path:
    """Root of the patched vLLM tree under grading, for static checks that read its files as text."""
    tree = os.environ.get("GRADER_VLLM_TREE")
    if not tree:
        pytest.skip("environment: GRADER_VLLM_TREE is not set")
    return Path(tree)


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
