"""Per-task setup for moe-swap-ab: loads the helper module by path (tests run with --import-mode=importlib)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_HELPERS = Path(__file__).resolve().parent / "_moe_helpers.py"


def _load_helpers():
    name = "_grader_moe_swap_ab_helpers"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _HELPERS)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def h():
    """The helper module."""
    return _load_helpers()


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
