"""Per-task setup for the fp8-moe-lora hidden tests, in the judge.

Loads fp8_lora_harness.py by path (the tests run with --import-mode=importlib): pure torch, it draws the
problems, runs the layer in the subject through ``probes/fp8_lora_probes.py`` and computes the expectations.
"""

from __future__ import annotations

import pytest

from rubric_support import load_beside


@pytest.fixture(scope="session")
def H():
    """The judge-side harness module."""
    return load_beside(__file__, "fp8_lora_harness")
