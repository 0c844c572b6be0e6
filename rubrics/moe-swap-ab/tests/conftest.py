"""Per-task setup for moe-swap-ab: loads the judge-side helper module by path (tests run with
--import-mode=importlib). The candidate's fused_moe is reached only through the subject's probes
(``probes/moe_swap_probes.py``); its source is read here as text."""

from __future__ import annotations

import pytest

from rubric_support import load_beside


@pytest.fixture(scope="session")
def h():
    """The helper module."""
    return load_beside(__file__, "_moe_helpers")


@pytest.fixture(scope="session")
def kernel_source(h, vllm_tree):
    """The patched fused_moe.py, as text."""
    return h.kernel_module_source(vllm_tree)
