"""Fixtures shared by every task's hidden tests.

The grader runs the hidden tests with the patched vLLM tree first on ``sys.path`` and tells this conftest
where that tree is (``GRADER_VLLM_TREE``) and whether GPU evidence is wanted (``GRADER_GPU``).
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

# Compiled extensions a source tree lacks (vLLM's CUDA platform imports this one at import time on any machine
# where NVML sees a GPU). An empty stand-in is the grader's environment, not the candidate's code: the hidden
# tests never call into it.
COMPILED_STAND_INS = ("vllm._C_stable_libtorch",)


def _stand_in_for_missing_compiled_extensions() -> None:
    package = Path(os.environ.get("GRADER_VLLM_TREE", "")) / "vllm"
    for name in COMPILED_STAND_INS:
        stem = name.rsplit(".", 1)[1]
        if name not in sys.modules and not any(package.glob(f"{stem}*.so")):
            sys.modules[name] = types.ModuleType(name)


_stand_in_for_missing_compiled_extensions()


def gpu_enabled() -> bool:
    """True when the grader asked for GPU evidence and this process can see a CUDA device."""
    if os.environ.get("GRADER_GPU") != "1":
        return False
    import torch

    return torch.cuda.is_available()


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
