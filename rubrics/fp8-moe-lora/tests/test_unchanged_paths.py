"""c5: paths without LoRA, weight-only quantization and unquantized MoE keep their exact outputs."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("scheme", ["fp8-tensor-dynamic", "fp8-tensor-static", "fp8-token-dynamic",
                                    "fp8-block", "unquantized", "int8-weight-only"])
def test_moe_without_lora_is_bit_identical(H, rec, scheme):
    """A MoE without LoRA gives bit-identical output to the unmodified data path."""
    p = H.make_problem(scheme)
    out = H.run_moe(p, None)
    exp = H.expected_base_path(p, None)
    assert out.dtype == exp.dtype
    assert torch.equal(out, exp), f"output changed by {H.rel_err(out, exp):.3g} (relative)"


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("scheme", ["unquantized", "int8-weight-only"])
def test_unquantized_activation_moe_with_lora_is_bit_identical(H, rec, scheme):
    """With LoRA, unquantized and weight-only MoE feed LoRA the layer input and keep their output."""
    p = H.make_problem(scheme)
    lo = H.make_lora(p, [0, 1, -1, 0])
    out = H.run_moe(p, lo)
    assert rec.lora and torch.equal(rec.lora[0].x, p.hidden), "LoRA input is not the layer input"
    exp = H.expected_base_path(p, lo)
    assert torch.equal(out, exp), f"output changed by {H.rel_err(out, exp):.3g} (relative)"
