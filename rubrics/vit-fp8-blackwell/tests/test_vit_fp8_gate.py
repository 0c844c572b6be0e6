"""Hidden tests for vit-fp8-blackwell: FP8 ViT attention (cuDNN FP8 SDPA via FlashInfer) needs Blackwell.

All tests run on CPU with a fake CUDA platform; see conftest.py. The gate is
``is_flashinfer_cudnn_fp8_prefill_attn_supported``; the user-facing error comes from constructing
``MMEncoderAttention`` with ``mm_encoder_attn_dtype="fp8"``.
"""

from __future__ import annotations

import re

import pytest

# Errors a platform check may reasonably raise; anything else (AttributeError, NameError...) is a bug.
CHECK_ERRORS = (ValueError, RuntimeError, NotImplementedError)

# The message must name the Blackwell / SM100 requirement.
BLACKWELL_RE = re.compile(
    r"blackwell"
    r"|\bsm[ _-]?1[0-2]\d(?!\d)"  # SM100, sm_100a, SM 120 ...
    r"|\bsm[ _-]?10(?:\.\d)?(?![\d.])"  # SM10, SM 10.0
    r"|capability\D{0,16}10(?:\.\d)?(?![\d.])"  # compute capability >= 10.0
    r"|\bG?B[123]00\b",  # B100 / B200 / GB200 / B300 / GB300
    re.IGNORECASE,
)


def _cap_id(cap):
    return f"sm{cap[0]}{cap[1]}"


# --- c1: Hopper and Ada are rejected ---------------------------------------------------------------------------

REJECTED = [((8, 9), 91701), ((9, 0), 91701), ((9, 0), 92100), ((9, 5), 91701), ((9, 5), 92100)]


@pytest.mark.criterion("c1")
@pytest.mark.parametrize(
    "capability,cudnn", REJECTED, ids=[f"{_cap_id(c)}-cudnn{v}" for c, v in REJECTED]
)
def test_gate_rejects_pre_blackwell(capability, cudnn, gpu, gate):
    """The FP8 ViT attention gate rejects Ada and Hopper even with a new cuDNN and the FlashInfer backend."""
    gpu(capability, cudnn=cudnn)
    assert gate() is False, (
        f"is_flashinfer_cudnn_fp8_prefill_attn_supported() is True on SM{capability[0]}{capability[1]} "
        f"(cuDNN {cudnn}, FlashInfer available): cuDNN's FP8 SDPA with bf16/fp16 output needs SM100+"
    )


# --- c2: the error names the Blackwell requirement -----------------------------------------------------------

UNSUPPORTED_FOR_MESSAGE = [(8, 0), (8, 9)]


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("capability", UNSUPPORTED_FOR_MESSAGE, ids=[_cap_id(c) for c in UNSUPPORTED_FOR_MESSAGE])
def test_error_names_blackwell_requirement(capability, gpu, build_fp8_encoder_attention):
    """Requesting FP8 ViT attention on an unsupported GPU raises an error naming the Blackwell/SM100 need."""
    gpu(capability)
    with pytest.raises(CHECK_ERRORS) as excinfo:
        build_fp8_encoder_attention()
    message = str(excinfo.value)
    assert BLACKWELL_RE.search(message), f"error does not name the Blackwell / SM100 requirement: {message!r}"


# --- c3: Blackwell and newer pass -----------------------------------------------------------------------------

ACCEPTED = [(10, 0), (10, 3), (11, 0), (12, 0), (12, 1)]


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("capability", ACCEPTED, ids=[_cap_id(c) for c in ACCEPTED])
def test_gate_accepts_sm100_and_newer(capability, gpu, gate):
    """SM100 and every newer capability pass the gate with cuDNN 9.17.1 and the FlashInfer backend."""
    gpu(capability, cudnn=91701)
    assert gate() is True, (
        f"is_flashinfer_cudnn_fp8_prefill_attn_supported() is False on SM{capability[0]}{capability[1]}: "
        "the requirement is SM100 or newer, not one exact capability or family"
    )


# The per-capability tests above give partial credit; this one asks for the whole range at once. A gate that
# locks out any SM100+ capability, the first Blackwell one (10.0) included, does not meet "SM100 and newer", so
# the range test pulls such a gate below met; a gate that passes one capability only stays unmet.
@pytest.mark.criterion("c3")
def test_gate_accepts_whole_sm100_and_newer_range(gpu, gate):
    """Every capability from 10.0 on (10.0, 10.3, 11.0, 12.0, 12.1) passes the gate, none locked out."""
    locked_out = []
    for capability in ACCEPTED:
        gpu(capability, cudnn=91701)
        if gate() is not True:
            locked_out.append(f"SM{capability[0]}{capability[1]}")
    assert not locked_out, (
        f"the gate is False on {', '.join(locked_out)} with cuDNN 9.17.1 and FlashInfer: "
        "the requirement is every capability >= 10.0"
    )


# --- c4: cuDNN version and FlashInfer backend checks kept ----------------------------------------------------

OTHER_CHECKS = [
    # (capability, cudnn, flashinfer backend supported, expected)
    ((10, 0), 91700, True, False),
    ((10, 0), 91600, True, False),
    ((12, 0), 90100, True, False),
    ((10, 0), 91701, False, False),
    ((10, 0), 91701, True, True),
]


@pytest.mark.criterion("c4")
@pytest.mark.parametrize(
    "capability,cudnn,flashinfer,expected",
    OTHER_CHECKS,
    ids=[
        f"{_cap_id(c)}-cudnn{v}-{'fi' if f else 'nofi'}-{'accept' if e else 'reject'}"
        for c, v, f, e in OTHER_CHECKS
    ],
)
def test_cudnn_and_backend_checks_kept(capability, cudnn, flashinfer, expected, gpu, gate):
    """On Blackwell the gate still needs cuDNN >= 9.17.1 and the FlashInfer ViT backend."""
    gpu(capability, cudnn=cudnn, flashinfer=flashinfer)
    got = gate()
    assert got is expected, (
        f"gate returned {got} on SM{capability[0]}{capability[1]} with cuDNN {cudnn} and the FlashInfer "
        f"backend {'available' if flashinfer else 'unavailable'}; expected {expected}"
    )


# --- c5: a Hopper user is stopped up front with that error ---------------------------------------------------

HOPPER = [((9, 0), 91701), ((9, 0), 92100)]


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("capability,cudnn", HOPPER, ids=[f"{_cap_id(c)}-cudnn{v}" for c, v in HOPPER])
def test_hopper_stopped_at_construction(capability, cudnn, gpu, build_fp8_encoder_attention):
    """On Hopper, requesting FP8 ViT attention fails when the layer is built, before any cuDNN call."""
    gpu(capability, cudnn=cudnn)
    try:
        layer = build_fp8_encoder_attention()
    except CHECK_ERRORS:
        return
    pytest.fail(
        "MMEncoderAttention was built on Hopper with FP8 enabled "
        f"(fp8_enabled={getattr(layer, 'fp8_enabled', '?')}); the failure would only surface inside cuDNN"
    )


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("capability,cudnn", HOPPER, ids=[f"{_cap_id(c)}-cudnn{v}" for c, v in HOPPER])
def test_hopper_error_names_blackwell(capability, cudnn, gpu, build_fp8_encoder_attention):
    """The error a Hopper user gets for FP8 ViT attention names the Blackwell/SM100 requirement."""
    gpu(capability, cudnn=cudnn)
    with pytest.raises(CHECK_ERRORS) as excinfo:
        build_fp8_encoder_attention()
    message = str(excinfo.value)
    assert BLACKWELL_RE.search(message), f"error does not name the Blackwell / SM100 requirement: {message!r}"
