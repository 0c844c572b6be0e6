"""Per-task setup for the fp8-moe-lora hidden tests.

Loads fp8_lora_harness.py by path (the tests run with --import-mode=importlib), registers torch
reference implementations for the compiled ops the MoE path needs where vLLM's extensions are absent,
and on a CPU host stands in for the platform. Every global patched here is restored at session end.
"""

from __future__ import annotations

import os

import pytest

from rubric_support import load_beside

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


@pytest.fixture(scope="session")
def H():
    """The harness module, with op shims registered and (on CPU) the platform stand-in installed."""
    try:
        import torch  # noqa: F401
    except Exception as exc:  # pragma: no cover - grader environment problem
        pytest.skip(f"environment: torch unavailable: {exc}")
    h = load_beside(__file__, "fp8_lora_harness")
    h.install_op_shims()
    mp = pytest.MonkeyPatch()
    # vLLM is imported from the candidate's tree here: an import error is the candidate's and fails.
    h.patch_platform(mp)
    yield h
    mp.undo()


@pytest.fixture
def rec(H, monkeypatch):
    """Spies on the base fused-MoE GEMM and the MoE-LoRA op, computing both by torch reference."""
    r = H.Recorder()
    with H.spies(monkeypatch, r):
        yield r
