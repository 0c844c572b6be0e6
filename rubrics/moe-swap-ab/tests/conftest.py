"""Per-task setup for moe-swap-ab: loads the helper module by path (tests run with --import-mode=importlib)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubric_support import load_beside


@pytest.fixture(scope="session")
def h():
    """The helper module."""
    return load_beside(__file__, "_moe_helpers")


@pytest.fixture(scope="session")
def fm(h, vllm_tree):
    """The candidate's fused_moe module, imported from the tree under grading (import errors fail tests)."""
    mod = h.import_fm()
    origin = Path(mod.__file__).resolve()
    if not str(origin).startswith(str(Path(vllm_tree).resolve())):
        pytest.skip(f"environment: fused_moe imported from {origin}, not from the tree under grading")
    return mod


@pytest.fixture(scope="session")
def kernel_source(h, vllm_tree):
    return h.kernel_module_source(Path(vllm_tree))
