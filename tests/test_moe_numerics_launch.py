"""``numerics_launch`` of the moe-swap-ab hidden tests: the operands a numerics test hands the kernel.

The tests judge K masks by what a kernel reads past the end of an operand row, so the guard elements must be
there, be NaN, and leave every real value, shape and row stride the kernel computes with as the launch had them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

HELPERS = Path(__file__).resolve().parent.parent / "rubrics" / "moe-swap-ab" / "tests" / "_moe_helpers.py"


@pytest.fixture(scope="module")
def h():
    spec = importlib.util.spec_from_file_location("_selftest_moe_helpers", HELPERS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _past_row_ends(t: torch.Tensor) -> torch.Tensor:
    """The GUARD elements that follow each row of ``t`` in memory, read through its storage."""
    k = t.shape[-1]
    row_stride = t.stride(-2)
    flat = torch.as_strided(t, (t.numel() // k, row_stride), (row_stride, 1))
    return flat[:, k:]


@pytest.mark.parametrize("interpreted", [True, False])
def test_operands_keep_values_and_are_followed_by_nan(h, interpreted):
    launch, _ = h.make_case("fp8_block", 5, 16, 64, N=200, K=320)
    out = h.numerics_launch(launch, interpreted)
    for name in ("A", "B"):
        src, got = launch[name], out[name]
        assert got.shape == src.shape
        assert got.dtype == (torch.float32 if interpreted else src.dtype)
        assert torch.equal(got.float(), src.float())
        assert got.stride(-2) == src.shape[-1] + h.GUARD
        guards = _past_row_ends(got)
        assert guards.shape[-1] == h.GUARD and torch.isnan(guards.float()).all()
    assert out["C"] is launch["C"], "the caller reads the result from the launch's own C"
    assert out["A_scale"] is launch["A_scale"] and out["B_scale"] is launch["B_scale"]


def test_non_fp8_operands_keep_their_dtype(h):
    launch, _ = h.make_case("bf16", 4, 16, 64)
    out = h.numerics_launch(launch, interpreted=True)
    assert out["A"].dtype == torch.bfloat16 and torch.equal(out["A"], launch["A"])
