"""c5: paths without LoRA, weight-only quantization and unquantized MoE keep their exact outputs.

The subject runs the layer on the judge's problem; the expected output is the unmodified data path rebuilt here
step by step from the reference pieces (``fp8_lora_harness.expected_base_path``).
"""

from __future__ import annotations

import pytest
import torch

NO_LORA_SCHEMES = ["fp8-tensor-dynamic", "fp8-tensor-static", "fp8-token-dynamic", "fp8-block", "unquantized",
                   "int8-weight-only"]
WITH_LORA_SCHEMES = ["unquantized", "int8-weight-only"]
MAPPING = [0, 1, -1, 0]


def _check_no_lora(H, out, p):
    exp = H.expected_base_path(p, None)
    assert out.dtype == exp.dtype, f"output dtype {out.dtype} != {exp.dtype}"
    assert out.shape == exp.shape, f"output shape {tuple(out.shape)} != {tuple(exp.shape)}"
    assert torch.equal(out, exp), f"output changed by {H.rel_err(out, exp):.3g} (relative)"


def _check_with_lora(H, run, p, lo):
    assert run.lora and torch.equal(run.lora[0].x, p.hidden), "LoRA input is not the layer input"
    exp = H.expected_base_path(p, lo)
    assert run.out.dtype == exp.dtype and run.out.shape == exp.shape, (
        f"output is {run.out.dtype} {tuple(run.out.shape)}, expected {exp.dtype} {tuple(exp.shape)}")
    assert torch.equal(run.out, exp), f"output changed by {H.rel_err(run.out, exp):.3g} (relative)"


@pytest.mark.criterion("c5")
@pytest.mark.cases(lora="without", dtype="bfloat16")
@pytest.mark.parametrize("scheme", NO_LORA_SCHEMES)
def test_moe_without_lora_is_bit_identical(H, subject, secret_generator, scheme):
    """A MoE without LoRA gives bit-identical output to the unmodified data path."""
    p = H.make_problem(scheme, secret_generator)
    _check_no_lora(H, H.run_moe(subject, p, None).out, p)


@pytest.mark.criterion("c5")
@pytest.mark.cases(lora="with", dtype="bfloat16")
@pytest.mark.parametrize("scheme", WITH_LORA_SCHEMES)
def test_unquantized_activation_moe_with_lora_is_bit_identical(H, subject, secret_generator, scheme):
    """With LoRA, unquantized and weight-only MoE feed LoRA the layer input and keep their output."""
    p = H.make_problem(scheme, secret_generator)
    lo = H.make_lora(p, MAPPING, secret_generator)
    _check_with_lora(H, H.run_moe(subject, p, lo), p, lo)


# Every case of c5 at once, in bfloat16 as above and again in float16 (a change that only moves float16 outputs,
# such as a cast to bfloat16 for LoRA, shows there), each crash counted as wrong.
@pytest.mark.criterion("c5", weight=2)
@pytest.mark.cases(scheme=NO_LORA_SCHEMES, lora=["without", "with"], dtype=["bfloat16", "float16"])
def test_every_unchanged_path_is_bit_identical(H, subject, secret_generator):
    """Every path without LoRA, and unquantized and weight-only MoE with LoRA, keep bit-identical outputs in bfloat16 and float16."""
    failures = []
    cases = [(scheme, False, dtype) for dtype in ("bfloat16", "float16") for scheme in NO_LORA_SCHEMES]
    cases += [(scheme, True, dtype) for dtype in ("bfloat16", "float16") for scheme in WITH_LORA_SCHEMES]
    for scheme, with_lora, dtype in cases:
        p = H.make_problem(scheme, secret_generator, dtype=getattr(torch, dtype))
        lo = H.make_lora(p, MAPPING, secret_generator) if with_lora else None
        run = H.run_moe_outcome(subject, p, lo)
        name = f"{scheme} {dtype} {'with' if with_lora else 'without'} LoRA"
        if isinstance(run, str):  # a crash is as wrong as a changed output
            failures.append(f"{name}: {run}")
            continue
        try:
            if with_lora:
                _check_with_lora(H, run, p, lo)
            else:
                _check_no_lora(H, run.out, p)
        except AssertionError as exc:
            failures.append(f"{name}: AssertionError: {str(exc)[:200]}")
    assert not failures, f"{len(failures)} of {len(cases)} cases wrong: {failures}"
