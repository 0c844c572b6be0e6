"""Fixtures shared by every task's hidden tests.

The grader runs the hidden tests with the patched vLLM tree first on ``sys.path`` and tells this conftest
where that tree is (``GRADER_VLLM_TREE``) and whether GPU evidence is wanted (``GRADER_GPU``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import vllm_stand_ins
from rubric_support import gpu_enabled


# Before any test imports the patched vLLM (see vllm_stand_ins.py).
vllm_stand_ins.prepare_process()


@pytest.fixture(autouse=True)
def _seeded_random_state():
    """Every hidden test starts from the same random state, whatever ran before it in the process (a warm
    worker's imports, earlier tests): evidence, failure messages included, is then the same in every run."""
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
def vllm_tree() -> Path:
    """Root of the patched vLLM tree under grading."""
    tree = os.environ.get("GRADER_VLLM_TREE")
    if not tree:
        pytest.skip("environment: GRADER_VLLM_TREE is not set")
    return Path(tree)


def pytest_collection_modifyitems(config, items):
    if gpu_enabled():
        return
    reason = (
        "needs a CUDA GPU: GPU evidence is switched off for this run"
        if os.environ.get("GRADER_GPU") != "1"
        else "needs a CUDA GPU: none is visible to this process"
    )
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.skip(reason=reason))
