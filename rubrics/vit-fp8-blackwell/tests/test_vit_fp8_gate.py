"""Hidden tests for vit-fp8-blackwell: FP8 ViT attention (cuDNN FP8 SDPA via FlashInfer) needs Blackwell.

All tests run on CPU with a fake CUDA platform, installed in the subject by ``probes/vit_fp8_probes.py``; every
verdict is decided here. The gate is ``is_flashinfer_cudnn_fp8_prefill_attn_supported``; the user-facing error
comes from constructing ``MMEncoderAttention`` with ``mm_encoder_attn_dtype="fp8"``.
"""

from __future__ import annotations

import re

import pytest

# Errors a platform check may reasonably raise; anything else (AttributeError, NameError...) is a bug. Checked
# against the raised exception's classes (its MRO), so a subclass of one of them counts, as with pytest.raises.
CHECK_ERRORS = ("builtins.ValueError", "builtins.RuntimeError", "builtins.NotImplementedError")

CUDNN_9_17_1 = 91701

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


def _sm(cap) -> str:
    return f"SM{cap[0]}{cap[1]}"


def _gpu(capability, cudnn: int = CUDNN_9_17_1, flashinfer: bool = True) -> dict:
    """A fake GPU for the probes: capability, cuDNN version, FLASHINFER among the supported ViT backends or not."""
    return {"capability": list(capability), "cudnn": cudnn, "flashinfer": flashinfer}


def _gate_value(gpu: dict, observed: dict) -> bool:
    """The gate's answer on ``gpu``; an exception from the gate fails the test (it is a bug, not a rejection)."""
    if "raised" in observed:
        pytest.fail(f"is_flashinfer_cudnn_fp8_prefill_attn_supported() raised {observed['raised']} on "
                    f"{_sm(gpu['capability'])} (cuDNN {gpu['cudnn']}): {observed['message']}")
    value = observed["returned"]
    assert isinstance(value, bool), f"the gate probe reported a non-bool: {value!r}"
    return value


def gate(subject, gpu: dict) -> bool:
    """The patched tree's gate, called fresh (cache cleared) on the fake ``gpu``."""
    (observed,) = subject.call("vit_fp8_probes.gate_answers", cases=[gpu])
    return _gate_value(gpu, observed)


def wrong_gate_answers(subject, cases: list[tuple[dict, bool]]) -> list[str]:
    """Every (fake GPU, expected) the gate gets wrong, described (one probe call, switching GPUs between the
    calls); an exception from the gate counts as wrong."""
    observed = subject.call("vit_fp8_probes.gate_answers", cases=[g for g, _ in cases])
    assert len(observed) == len(cases), f"the gate probe answered {len(observed)} of {len(cases)} cases"
    wrong = []
    for (g, expected), seen in zip(cases, observed):
        label = (f"{_sm(g['capability'])} with cuDNN {g['cudnn']}, FlashInfer backend "
                 f"{'available' if g['flashinfer'] else 'unavailable'}")
        if "raised" in seen:
            wrong.append(f"{label}: raised {seen['raised']}: {seen['message']}")
        elif seen["returned"] is not expected:
            wrong.append(f"{label}: returned {seen['returned']!r}, expected {expected}")
    return wrong


def build(subject, gpu: dict) -> dict:
    """What building MMEncoderAttention with FP8 requested did on the fake ``gpu``."""
    (observed,) = subject.call("vit_fp8_probes.build_outcomes", cases=[gpu])
    return observed


def _is_check_error(observed: dict) -> bool:
    return "raised" in observed and any(name in CHECK_ERRORS for name in observed.get("classes", []))


def _check_error_message(gpu: dict, observed: dict) -> str:
    """The message of the check error building the layer raised; anything else fails the test."""
    if "raised" not in observed:
        pytest.fail(f"MMEncoderAttention was built with FP8 on {_sm(gpu['capability'])} "
                    f"(fp8_enabled={observed['returned'].get('fp8_enabled', '?')}); no error was raised")
    if not _is_check_error(observed):
        pytest.fail(f"building MMEncoderAttention with FP8 on {_sm(gpu['capability'])} raised "
                    f"{observed['raised']} (not ValueError/RuntimeError/NotImplementedError): {observed['message']}")
    return observed["message"]


# --- c1: Hopper and Ada are rejected ---------------------------------------------------------------------------

REJECTED = [((8, 9), 91701), ((9, 0), 91701), ((9, 0), 92100), ((9, 5), 91701), ((9, 5), 92100)]


@pytest.mark.criterion("c1")
@pytest.mark.parametrize(
    "capability,cudnn", REJECTED, ids=[f"{_cap_id(c)}-cudnn{v}" for c, v in REJECTED]
)
def test_gate_rejects_pre_blackwell(capability, cudnn, subject):
    """The FP8 ViT attention gate rejects Ada and Hopper even with a new cuDNN and the FlashInfer backend."""
    assert gate(subject, _gpu(capability, cudnn=cudnn)) is False, (
        f"is_flashinfer_cudnn_fp8_prefill_attn_supported() is True on SM{capability[0]}{capability[1]} "
        f"(cuDNN {cudnn}, FlashInfer available): cuDNN's FP8 SDPA with bf16/fp16 output needs SM100+"
    )


# The per-case tests above give partial credit; this one asks that every pre-Blackwell case is rejected at once.
# Its weight equals the case count, so a gate that still admits one of them (8.9 alone, say) leaves c1 below met:
# "8.9, 9.0 and 9.5 rejected" means all of them.
@pytest.mark.criterion("c1", weight=len(REJECTED))
def test_gate_rejects_every_pre_blackwell_case(subject):
    """The gate rejects every Ada and Hopper case at once (8.9, 9.0, 9.5; cuDNN 9.17.1 and 9.21; FlashInfer)."""
    wrong = wrong_gate_answers(subject, [(_gpu(capability, cudnn=cudnn), False) for capability, cudnn in REJECTED])
    assert not wrong, (
        f"the gate admits {len(wrong)} pre-Blackwell case(s): " + "; ".join(wrong)
        + " (cuDNN's FP8 SDPA with bf16/fp16 output needs SM100+)"
    )


# --- c2: the error names the Blackwell requirement -----------------------------------------------------------

UNSUPPORTED_FOR_MESSAGE = [(8, 0), (8, 9)]


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("capability", UNSUPPORTED_FOR_MESSAGE, ids=[_cap_id(c) for c in UNSUPPORTED_FOR_MESSAGE])
def test_error_names_blackwell_requirement(capability, subject):
    """Requesting FP8 ViT attention on an unsupported GPU raises an error naming the Blackwell/SM100 need."""
    gpu = _gpu(capability)
    message = _check_error_message(gpu, build(subject, gpu))
    assert BLACKWELL_RE.search(message), f"error does not name the Blackwell / SM100 requirement: {message!r}"


# Naming Blackwell is not enough: the message must not also claim that an older GPU works. "Requires a Hopper or
# Blackwell GPU (SM90 or newer)" names Blackwell and tells the Hopper user the opposite of the truth.
FALSE_SUPPORT_CLAIM = re.compile(
    r"\b(?:hopper|ada|sm[ _-]?[89]\d|(?:capability\D{0,4})?[89]\.\d)\b[^.;:]{0,24}?"
    r"(?:\bor\b|\band\b|/)\s*(?:newer|later|above|higher|blackwell|sm[ _-]?1\d\d)"
    r"|\bsm[ _-]?[89]\d\s*\+",
    re.IGNORECASE,
)


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("capability", UNSUPPORTED_FOR_MESSAGE + [(9, 0)],
                         ids=[_cap_id(c) for c in UNSUPPORTED_FOR_MESSAGE + [(9, 0)]])
def test_error_claims_no_pre_blackwell_support(capability, subject):
    """The error names the Blackwell requirement and does not say that an older GPU (Ada, Hopper) supports it."""
    gpu = _gpu(capability)
    message = _check_error_message(gpu, build(subject, gpu))
    assert BLACKWELL_RE.search(message), f"error does not name the Blackwell / SM100 requirement: {message!r}"
    claim = FALSE_SUPPORT_CLAIM.search(message)
    assert not claim, f"the error claims pre-Blackwell support ({claim.group(0)!r}): {message!r}"


# --- c3: Blackwell and newer pass -----------------------------------------------------------------------------

ACCEPTED = [(10, 0), (10, 3), (11, 0), (12, 0), (12, 1)]


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("capability", ACCEPTED, ids=[_cap_id(c) for c in ACCEPTED])
def test_gate_accepts_sm100_and_newer(capability, subject):
    """SM100 and every newer capability pass the gate with cuDNN 9.17.1 and the FlashInfer backend."""
    assert gate(subject, _gpu(capability, cudnn=91701)) is True, (
        f"is_flashinfer_cudnn_fp8_prefill_attn_supported() is False on SM{capability[0]}{capability[1]}: "
        "the requirement is SM100 or newer, not one exact capability or family"
    )


# The per-capability tests above give partial credit; this one asks for the whole range at once. A gate that
# locks out any SM100+ capability, the first Blackwell one (10.0) included, does not meet "SM100 and newer", so
# the range test pulls such a gate below met; a gate that passes one capability only stays unmet.
@pytest.mark.criterion("c3")
def test_gate_accepts_whole_sm100_and_newer_range(subject):
    """Every capability from 10.0 on (10.0, 10.3, 11.0, 12.0, 12.1) passes the gate, none locked out."""
    wrong = wrong_gate_answers(subject, [(_gpu(capability, cudnn=91701), True) for capability in ACCEPTED])
    assert not wrong, (
        f"the gate locks out {len(wrong)} SM100+ capability(ies) with cuDNN 9.17.1 and FlashInfer: "
        + "; ".join(wrong) + " (the requirement is every capability >= 10.0)"
    )


# The gate is not the only place that can refuse: the layer itself must build with FP8 enabled wherever the
# requirement holds. A constructor with a narrower check of its own (the 10.x family only, say) passes every gate
# test and still stops an SM120 user. One test per capability and one for the whole range, weighted as the gate's.
def _built_with_fp8(observed: dict) -> bool:
    return "raised" not in observed and observed["returned"].get("fp8_enabled") is True


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("capability", ACCEPTED, ids=[_cap_id(c) for c in ACCEPTED])
def test_layer_builds_with_fp8_on_sm100_and_newer(capability, subject):
    """MMEncoderAttention builds with FP8 enabled on SM100 and every newer capability (cuDNN 9.17.1, FlashInfer)."""
    observed = build(subject, _gpu(capability))
    assert _built_with_fp8(observed), (
        f"building MMEncoderAttention with FP8 on {_sm(capability)} did not enable FP8: "
        + (f"raised {observed['raised']}: {observed['message']}" if "raised" in observed else str(observed["returned"]))
    )


@pytest.mark.criterion("c3")
def test_layer_builds_with_fp8_on_the_whole_range(subject):
    """The layer builds with FP8 on every capability from 10.0 on at once, none refused at construction."""
    observed = subject.call("vit_fp8_probes.build_outcomes", cases=[_gpu(c) for c in ACCEPTED])
    refused = [_sm(c) for c, seen in zip(ACCEPTED, observed, strict=True) if not _built_with_fp8(seen)]
    assert not refused, f"the layer refuses FP8 on {', '.join(refused)} although the requirement holds there"


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
def test_cudnn_and_backend_checks_kept(capability, cudnn, flashinfer, expected, subject):
    """On Blackwell the gate still needs cuDNN >= 9.17.1 and the FlashInfer ViT backend."""
    got = gate(subject, _gpu(capability, cudnn=cudnn, flashinfer=flashinfer))
    assert got is expected, (
        f"gate returned {got} on SM{capability[0]}{capability[1]} with cuDNN {cudnn} and the FlashInfer "
        f"backend {'available' if flashinfer else 'unavailable'}; expected {expected}"
    )


# As for c1: the per-case tests give partial credit, this one asks that the gate keeps *both* other checks on
# every case at once. Its weight equals the case count, so a gate that drops one check (the FlashInfer backend
# test alone, say, which only one case sees) leaves c4 below met.
@pytest.mark.criterion("c4", weight=len(OTHER_CHECKS))
def test_cudnn_and_backend_checks_all_kept(subject):
    """On Blackwell the gate gets every cuDNN-version and FlashInfer-backend case right at once."""
    cases = [(_gpu(c, cudnn=v, flashinfer=f), e) for c, v, f, e in OTHER_CHECKS]
    wrong = wrong_gate_answers(subject, cases)
    assert not wrong, (
        f"the gate gets {len(wrong)} cuDNN / FlashInfer case(s) wrong: " + "; ".join(wrong)
        + " (it must still need cuDNN >= 9.17.1 and the FlashInfer ViT backend)"
    )


# --- c5: a Hopper user is stopped up front with that error ---------------------------------------------------

HOPPER = [((9, 0), 91701), ((9, 0), 92100)]


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("capability,cudnn", HOPPER, ids=[f"{_cap_id(c)}-cudnn{v}" for c, v in HOPPER])
def test_hopper_stopped_at_construction(capability, cudnn, subject):
    """On Hopper, requesting FP8 ViT attention fails when the layer is built, before any cuDNN call."""
    observed = build(subject, _gpu(capability, cudnn=cudnn))
    if _is_check_error(observed):
        return
    if "raised" in observed:
        pytest.fail(f"building MMEncoderAttention with FP8 on Hopper raised {observed['raised']} "
                    f"(not ValueError/RuntimeError/NotImplementedError): {observed['message']}")
    pytest.fail(
        "MMEncoderAttention was built on Hopper with FP8 enabled "
        f"(fp8_enabled={observed['returned'].get('fp8_enabled', '?')}); the failure would only surface inside cuDNN"
    )


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("capability,cudnn", HOPPER, ids=[f"{_cap_id(c)}-cudnn{v}" for c, v in HOPPER])
def test_hopper_error_names_blackwell(capability, cudnn, subject):
    """The error a Hopper user gets for FP8 ViT attention names the Blackwell/SM100 requirement."""
    gpu = _gpu(capability, cudnn=cudnn)
    message = _check_error_message(gpu, build(subject, gpu))
    assert BLACKWELL_RE.search(message), f"error does not name the Blackwell / SM100 requirement: {message!r}"
