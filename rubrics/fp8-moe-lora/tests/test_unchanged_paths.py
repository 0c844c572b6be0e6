"""c5: paths without LoRA, weight-only quantization and unquantized MoE keep their exact outputs.

The subject runs the layer on the judge's problem; the expected output is the unmodified data path rebuilt here
step by step from the reference pieces (``fp8_lora_harness.expected_base_path``).
"""

from __future__ import annotations

import pytest
import torch


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("scheme", ["fp8-tensor-dynamic", "fp8-tensor-static", "fp8-token-dynamic",
                                    "fp8-block", "unquantized", "int8-weight-only"])
def test_moe_without_lora_is_bit_identical(H, subject, secret_generator, scheme):
    """A MoE without LoRA gives bit-identical output to the unmodified data path."""
    p = H.make_problem(scheme, secret_generator)
    out = H.run_moe(subject, p, None).out
    exp = H.expected_base_path(p, None)
    assert out.dtype == exp.dtype
    assert out.shape == exp.shape, f"output shape {tuple(out.shape)} != {tuple(exp.shape)}"
    assert torch.equal(out, exp), f"output changed by {H.rel_err(out, exp):.3g} (relative)"


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("scheme", ["unquantized", "int8-weight-only"])
def test_unquantized_activation_moe_with_lora_is_bit_identical(H, subject, secret_generator, scheme):
    """With LoRA, unquantized and weight-only MoE feed LoRA the layer input and keep their output."""
    p = H.make_problem(scheme, secret_generator)
    lo = H.make_lora(p, [0, 1, -1, 0], secret_generator)
    run = H.run_moe(subject, p, lo)
    assert run.lora and torch.equal(run.lora[0].x, p.hidden), "LoRA input is not the layer input"
    exp = H.expected_base_path(p, lo)
    assert run.out.dtype == exp.dtype and run.out.shape == exp.shape, (
        f"output is {run.out.dtype} {tuple(run.out.shape)}, expected {exp.dtype} {tuple(exp.shape)}")
    assert torch.equal(run.out, exp), f"output changed by {H.rel_err(run.out, exp):.3g} (relative)"
