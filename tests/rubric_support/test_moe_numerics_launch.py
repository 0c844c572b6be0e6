"""The operands a moe-swap-ab numerics test hands the kernel: ``guarded_operands`` (the judge's helper, which
draws the NaN guard buffers) composed with ``operand_views`` (the probe that takes the operands back as views of
them in the subject).

The tests judge K masks by what a kernel reads past the end of an operand row, so the guard elements must be
there, be NaN, and leave every real value, shape and row stride the kernel computes with as the launch had them.
Both modules are loaded by path; neither imports vLLM.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

RUBRICS = Path(__file__).resolve().parents[2] / "rubrics"
HELPERS = RUBRICS / "moe-swap-ab" / "tests" / "_moe_helpers.py"
PROBES = RUBRICS / "moe-swap-ab" / "probes" / "moe_swap_probes.py"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def h():
    return _load("_selftest_moe_helpers", HELPERS)


@pytest.fixture(scope="module")
def probes():
    sys.path.insert(0, str(RUBRICS / "shared_probes"))  # the probe imports probe_support, as in a subject
    try:
        return _load("_selftest_moe_swap_probes", PROBES)
    finally:
        sys.path.remove(str(RUBRICS / "shared_probes"))


def _past_row_ends(t: torch.Tensor) -> torch.Tensor:
    """The GUARD elements that follow each row of ``t`` in memory, read through its storage."""
    k = t.shape[-1]
    row_stride = t.stride(-2)
    flat = torch.as_strided(t, (t.numel() // k, row_stride), (row_stride, 1))
    return flat[:, k:]


def _as_sent(launch: dict) -> dict:
    """What the subject gets: every tensor rebuilt from its bytes, contiguous (``grader.sandbox.channel``)."""
    from grader.sandbox.channel import decode, encode

    obj, blobs = encode(launch)
    return decode(obj, blobs)


@pytest.mark.parametrize("interpreted", [True, False])
def test_operands_keep_values_and_are_followed_by_nan(h, probes, interpreted):
    launch, _ = h.make_case("fp8_block", 5, 16, 64, N=200, K=320)
    sent = _as_sent(h.guarded_operands(launch, interpreted))
    out = probes.operand_views(sent, h.GUARD)
    for name in ("A", "B"):
        src, got = launch[name], out[name]
        assert got.shape == src.shape
        assert got.dtype == (torch.float32 if interpreted else src.dtype)
        assert torch.equal(got.float(), src.float())
        assert got.stride(-2) == src.shape[-1] + h.GUARD
        guards = _past_row_ends(got)
        assert guards.shape[-1] == h.GUARD and torch.isnan(guards.float()).all()
    assert out["C"] is sent["C"], "the caller reads the result from the launch's own C"
    assert out["A_scale"] is sent["A_scale"] and out["B_scale"] is sent["B_scale"]
    assert torch.equal(sent["C"], launch["C"]) and torch.equal(sent["A_scale"], launch["A_scale"])


def test_non_fp8_operands_keep_their_dtype(h, probes):
    launch, _ = h.make_case("bf16", 4, 16, 64)
    out = probes.operand_views(_as_sent(h.guarded_operands(launch, interpreted=True)), h.GUARD)
    assert out["A"].dtype == torch.bfloat16 and torch.equal(out["A"], launch["A"])


def test_launch_arguments_cross_the_channel(h):
    """Every launcher argument the judge draws is data the channel carries (compute_type by name)."""
    launch, _ = h.make_case("fp8_block", 4, 16, 128, bias=True)
    sent = _as_sent(launch)
    assert sent["compute_type"] == "bf16" and sent["block_shape"] == [128, 128]
    for name, value in launch.items():
        if isinstance(value, torch.Tensor):
            assert sent[name].dtype == value.dtype and torch.equal(sent[name].float(), value.float()), name
