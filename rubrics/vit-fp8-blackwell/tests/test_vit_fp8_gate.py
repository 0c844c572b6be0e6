"""Hidden tests for vit-fp8-blackwell: FP8 ViT attention (cuDNN FP8 SDPA via FlashInfer) needs Blackwell.

All tests run on CPU with a fake CUDA platform, installed in the subject by ``probes/vit_fp8_probes.py``; every
verdict is decided here. The gate is ``is_flashinfer_cudnn_fp8_prefill_attn_supported``; the user-facing error
comes from constructing ``MMEncoderAttention`` with ``mm_encoder_attn_dtype="fp8"``. The subject answers every
declared case in two calls per candidate (the gate's answers, the layer's builds); each case is its own check.
Nothing is drawn: every status is the same for any secret.
"""

from __future__ import annotations

import pytest

import claims_grammar

# Errors a platform check may reasonably raise; anything else (AttributeError, NameError...) is a bug. Checked
# against the raised exception's classes (its MRO), so a subclass of one of them counts, as with pytest.raises.
CHECK_ERRORS = ("builtins.ValueError", "builtins.RuntimeError", "builtins.NotImplementedError")
GATE, LAYER = "gate", "layer"

# cuDNN as torch reports it (major * 10000 + minor * 100 + patch for cuDNN 9 and later, major * 1000 + ... before).
CUDNN = {"8.9.7": 8907, "9.1.0": 90100, "9.16.0": 91600, "9.17.0": 91700, "9.17.1": 91701, "9.21.0": 92100,
         "10.2.0": 100200}
NEW_ENOUGH_CUDNN = ["9.17.1", "9.21.0", "10.2.0"]
OLD_CUDNN = ["9.17.0", "9.16.0", "9.1.0", "8.9.7"]
FLASHINFER = {"available": True, "unavailable": False}

PRE_BLACKWELL = {"sm75": (7, 5), "sm80": (8, 0), "sm86": (8, 6), "sm89": (8, 9), "sm90": (9, 0), "sm95": (9, 5)}
# Past every family shipped so far (sm140, sm200): a list of families, however long, is not "SM100 or newer".
BLACKWELL_AND_NEWER = {"sm100": (10, 0), "sm103": (10, 3), "sm110": (11, 0), "sm120": (12, 0), "sm121": (12, 1),
                       "sm130": (13, 0), "sm140": (14, 0), "sm200": (20, 0)}
CAPABILITIES = {**PRE_BLACKWELL, **BLACKWELL_AND_NEWER}
REQUIRED = 100  # the truth: compute capability 10.0 or newer


def supported(capability: str, cudnn: str, flashinfer: str) -> bool:
    """The truth table: SM100 or newer, cuDNN 9.17.1 or newer and the FlashInfer ViT backend, all three."""
    major, minor = CAPABILITIES[capability]
    return major * 10 + minor >= REQUIRED and CUDNN[cudnn] >= CUDNN["9.17.1"] and FLASHINFER[flashinfer]


def _gpu(capability: str, cudnn: str = "9.17.1", flashinfer: str = "available") -> dict:
    return {"capability": list(CAPABILITIES[capability]), "cudnn": CUDNN[cudnn], "flashinfer": FLASHINFER[flashinfer]}


def _label(capability, cudnn, flashinfer) -> str:
    return f"{capability.upper()} with cuDNN {cudnn}, FlashInfer ViT backend {flashinfer}"


# Every (capability, cudnn, flashinfer) some criterion names: the gate and the layer are asked on all of them.
DECLARED = sorted({(c, v, "available") for c in CAPABILITIES for v in NEW_ENOUGH_CUDNN}
                  | {(c, v, "available") for c in ("sm100", "sm120") for v in OLD_CUDNN}
                  | {(c, v, "unavailable") for c in ("sm100", "sm120") for v in NEW_ENOUGH_CUDNN})


@pytest.fixture(scope="module")
def answers(subject) -> dict:
    """What the gate and the layer did on every declared GPU: {(site, capability, cudnn, flashinfer): outcome}."""
    gpus = [_gpu(*case) for case in DECLARED]
    gate_seen = subject.call("vit_fp8_probes.gate_answers", cases=gpus)
    built = subject.call("vit_fp8_probes.build_outcomes", cases=gpus)
    return {**{(GATE, *case): seen for case, seen in zip(DECLARED, gate_seen, strict=True)},
            **{(LAYER, *case): seen for case, seen in zip(DECLARED, built, strict=True)}}


def _is_check_error(observed: dict) -> bool:
    return "raised" in observed and any(name in CHECK_ERRORS for name in observed.get("classes", []))


def verdict(answers: dict, site: str, capability: str, cudnn: str, flashinfer: str) -> str:
    """"accept" or "reject" as the site answered; anything else (a crash, a non-bool, FP8 left off) described."""
    seen = answers[(site, capability, cudnn, flashinfer)]
    if site == GATE:
        if "raised" in seen:
            return f"raised {seen['raised']}: {seen['message'][:200]}"
        value = seen["returned"]
        return ("accept" if value else "reject") if isinstance(value, bool) else f"returned {value!r}"
    if _is_check_error(seen):
        return "reject"
    if "raised" in seen:
        return f"raised {seen['raised']} (not ValueError/RuntimeError/NotImplementedError): {seen['message'][:200]}"
    enabled = seen["returned"].get("fp8_enabled")
    return "accept" if enabled is True else f"built without FP8 (fp8_enabled={enabled!r})"


def expect(answers, site, capability, cudnn, flashinfer) -> None:
    want = "accept" if supported(capability, cudnn, flashinfer) else "reject"
    got = verdict(answers, site, capability, cudnn, flashinfer)
    what = "the gate" if site == GATE else "building MMEncoderAttention with FP8"
    assert got == want, f"{what} on {_label(capability, cudnn, flashinfer)}: expected {want}, got {got}"


# --- What an error message claims ----------------------------------------------------------------------------
#
# A refusal's message is read as claims by the shared grammar ``rubrics/claims_grammar.py`` (described there and in
# the README): each hardware mention resolves to a set of capabilities, each clause has a polarity and a qualifier,
# and every claim is compared with this task's truth, CLAIMS_TRUTH. Its own table of true and false messages is
# tests/rubric_support/test_vit_fp8_claims.py in the project.

# SM100 or newer runs it, no hardware without CUDA does, the check asks cuDNN 9.17.1 of the software (a version of
# torch, FlashInfer or CUDA stated as a requirement is one it does not make), and a message must name the
# requirement: one in which no claim can be read fails.
CLAIMS_TRUTH = claims_grammar.Truth(required=REQUIRED, without_cuda=False, software=(("cudnn", (9, 17, 1)),),
                                    must_name_requirement=True)


def message_problems(message: str, capability: str, cudnn: str) -> list[str]:
    """What is false or missing in a refusal's message on ``capability`` with ``cudnn``, read as claims."""
    major, minor = CAPABILITIES[capability]
    return claims_grammar.message_problems(message, major * 10 + minor, CLAIMS_TRUTH,
                                           {"cudnn": tuple(int(part) for part in cudnn.split("."))})


def refusal_message(answers, capability, cudnn, flashinfer) -> str:
    """The message of the check error building the layer raised on this GPU; anything else fails the test."""
    got = verdict(answers, LAYER, capability, cudnn, flashinfer)
    assert got == "reject", f"building MMEncoderAttention with FP8 on {_label(capability, cudnn, flashinfer)}: {got}"
    return answers[(LAYER, capability, cudnn, flashinfer)]["message"]


# --- c1: Hopper and Ada are rejected ---------------------------------------------------------------------------

C1_CASES = [pytest.param(c, v, marks=pytest.mark.criterion("c1", weight=3 if c != "sm89" else 1), id=f"{c}-{v}")
            for c in ("sm89", "sm90", "sm95") for v in NEW_ENOUGH_CUDNN]


@pytest.mark.cases(flashinfer="available")
@pytest.mark.parametrize("capability,cudnn", C1_CASES)
def test_gate_rejects_pre_blackwell(capability, cudnn, answers):
    """The gate rejects Ada and Hopper."""
    expect(answers, GATE, capability, cudnn, "available")


# --- c2: every refusal names the Blackwell requirement and claims nothing false -------------------------------

C2_CASES = ([(c, "9.17.1", "available") for c in PRE_BLACKWELL if c != "sm95"]
            + [("sm100", "9.16.0", "available"), ("sm120", "9.17.1", "unavailable")])


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("capability,cudnn,flashinfer", C2_CASES, ids=["-".join(c) for c in C2_CASES])
def test_refusal_message_claims_hold(capability, cudnn, flashinfer, answers):
    """A refusal's error names the SM100 need and claims nothing false."""
    message = refusal_message(answers, capability, cudnn, flashinfer)
    problems = message_problems(message, capability, cudnn)
    assert not problems, f"the error on {_label(capability, cudnn, flashinfer)} ({message!r}): " + "; ".join(problems)


# --- c3: Blackwell and newer pass, at the gate and in the layer -----------------------------------------------


@pytest.mark.criterion("c3")
@pytest.mark.cases(flashinfer="available")
@pytest.mark.parametrize("site", [GATE, LAYER])
@pytest.mark.parametrize("cudnn", NEW_ENOUGH_CUDNN)
@pytest.mark.parametrize("capability", list(BLACKWELL_AND_NEWER))
def test_sm100_and_newer_accepted(capability, cudnn, site, answers):
    """SM100 and newer pass the gate and build the layer with FP8."""
    expect(answers, site, capability, cudnn, "available")


# --- c4: cuDNN version and FlashInfer backend checks kept ----------------------------------------------------

C4_CASES = ([(c, v, "available") for c in ("sm100", "sm120") for v in OLD_CUDNN]
            + [(c, v, "unavailable") for c in ("sm100", "sm120") for v in NEW_ENOUGH_CUDNN])


@pytest.mark.criterion("c4")
@pytest.mark.cases(platform="cuda")
@pytest.mark.parametrize("site", [GATE, LAYER])
@pytest.mark.parametrize("capability,cudnn,flashinfer", C4_CASES, ids=["-".join(c) for c in C4_CASES])
def test_cudnn_and_backend_checks_kept(capability, cudnn, flashinfer, site, answers):
    """SM100+ still needs cuDNN 9.17.1 and the FlashInfer backend."""
    expect(answers, site, capability, cudnn, flashinfer)


# Platforms without the FlashInfer ViT backend: the gate answers False there and the layer refuses FP8, as in the
# base, whatever capability the platform reports (ROCm's gfx1201 reads 12.0, XPU and CPU report none). A check
# narrowed to CUDA, or one that reads a capability that is not there, lets FP8 through or crashes instead.
OTHER_PLATFORMS = {"gfx90a": ("rocm", (9, 0)), "gfx942": ("rocm", (9, 4)), "gfx950": ("rocm", (9, 5)),
                   "gfx1201": ("rocm", (12, 0)), "xpu": ("xpu", None), "cpu": ("cpu", None), "tpu": ("tpu", None),
                   "oot": ("oot", (10, 0))}


def _other_platform(name: str) -> dict:
    """The fake platform ``name`` of OTHER_PLATFORMS as a probe case: its kind and capability, cuDNN 9.17.1, no
    FlashInfer ViT backend."""
    kind, cap = OTHER_PLATFORMS[name]
    return {"platform": kind, "capability": None if cap is None else list(cap), "cudnn": CUDNN["9.17.1"],
            "flashinfer": False}


@pytest.fixture(scope="module")
def other_platform_answers(subject) -> dict:
    """What the gate and the layer did on each platform of OTHER_PLATFORMS: {(site, name): outcome}."""
    cases = [_other_platform(name) for name in OTHER_PLATFORMS]
    gate_seen = subject.call("vit_fp8_probes.gate_answers", cases=cases)
    built = subject.call("vit_fp8_probes.build_outcomes", cases=cases)
    return {**{(GATE, name): seen for name, seen in zip(OTHER_PLATFORMS, gate_seen, strict=True)},
            **{(LAYER, name): seen for name, seen in zip(OTHER_PLATFORMS, built, strict=True)}}


@pytest.mark.criterion("c4")
@pytest.mark.parametrize("site", [GATE, LAYER])
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.cases(
    platform=kind, capability=n if kind == "rocm" else ("none" if cap is None else "sm100"))) for n, (kind, cap)
    in OTHER_PLATFORMS.items()], ids=list(OTHER_PLATFORMS))
def test_platforms_without_the_backend_refused(name, site, other_platform_answers):
    """Platforms without the FlashInfer ViT backend (ROCm, XPU, CPU, TPU, out-of-tree) are refused as in the base."""
    kind, cap = OTHER_PLATFORMS[name]
    seen = other_platform_answers[(site, name)]
    answers = {(site, name, "9.17.1", "unavailable"): seen}
    got = verdict(answers, site, name, "9.17.1", "unavailable")
    what = "the gate" if site == GATE else "building MMEncoderAttention with FP8"
    assert got == "reject", (f"{what} on a {kind} platform ({name}, capability {cap}, no FlashInfer ViT backend): "
                             f"expected reject, as in the base, got {got}")


# --- c5: a Hopper user is stopped up front with that error ---------------------------------------------------


@pytest.fixture(scope="module")
def hopper_builds(subject, answers) -> dict:
    """Building the layer with FP8 on Hopper (FlashInfer available): {(cudnn, backend): outcome}, the backend
    requested by the user ("requested") or left to the layer's own choice ("layer-choice")."""
    left = subject.call("vit_fp8_probes.build_outcomes",
                        cases=[{**_gpu("sm90", v), "backend_requested": False} for v in NEW_ENOUGH_CUDNN])
    return {**{(v, "requested"): answers[(LAYER, "sm90", v, "available")] for v in NEW_ENOUGH_CUDNN},
            **{(v, "layer-choice"): seen for v, seen in zip(NEW_ENOUGH_CUDNN, left, strict=True)}}


HOPPER_BACKENDS = ["requested", "layer-choice"]


def _hopper_answers(hopper_builds, cudnn, backend) -> dict:
    """One Hopper build in the shape ``verdict`` and ``refusal_message`` read."""
    return {(LAYER, "sm90", cudnn, "available"): hopper_builds[(cudnn, backend)]}


@pytest.mark.criterion("c5")
@pytest.mark.cases(capability="sm90", flashinfer="available", attn_dtype="fp8")
@pytest.mark.parametrize("backend", HOPPER_BACKENDS)
@pytest.mark.parametrize("cudnn", NEW_ENOUGH_CUDNN)
def test_hopper_stopped_at_construction(cudnn, backend, hopper_builds):
    """Hopper is stopped when the layer is built, whether the FlashInfer backend is requested or not."""
    got = verdict(_hopper_answers(hopper_builds, cudnn, backend), LAYER, "sm90", cudnn, "available")
    assert got == "reject", (f"building MMEncoderAttention with FP8 on {_label('sm90', cudnn, 'available')}, the "
                             f"ViT backend {backend}: expected reject, got {got}")


@pytest.mark.criterion("c5")
@pytest.mark.cases(capability="sm90", flashinfer="available", attn_dtype="fp8")
@pytest.mark.parametrize("backend", HOPPER_BACKENDS)
@pytest.mark.parametrize("cudnn", NEW_ENOUGH_CUDNN)
def test_hopper_error_names_blackwell(cudnn, backend, hopper_builds):
    """The Hopper error names the SM100 need and claims nothing false."""
    message = refusal_message(_hopper_answers(hopper_builds, cudnn, backend), "sm90", cudnn, "available")
    problems = message_problems(message, "sm90", cudnn)
    assert not problems, f"the error on Hopper with cuDNN {cudnn} ({message!r}): " + "; ".join(problems)


# The layer without FP8: the Blackwell requirement is FP8's alone. Asked of the candidate and of the base on the
# same fake GPUs and platforms; the candidate's layer must be the base's on each, every plain attribute the same (a
# check moved out of the FP8 branch stops every ViT on Hopper and Ada, FP8 or not; a backend demoted below SM100
# changes what a non-FP8 user gets). mm_encoder_attn_dtype takes "fp8" or None, so "unset" is its only non-FP8
# value; "no-multimodal-config" is a layer built outside a multimodal model's config. The platforms other than CUDA
# are OTHER_PLATFORMS (ROCm, XPU, CPU, TPU, out-of-tree), where a ViT without FP8 builds as in the base too.
WITHOUT_FP8 = {"unset": {"attn_dtype": None}, "no-multimodal-config": {"multimodal_config": False}}
WITHOUT_FP8_GPUS = ["sm80", "sm89", "sm90", "sm100", "sm120"]
WITHOUT_FP8_CASES = [(c, d, f) for c in WITHOUT_FP8_GPUS for d in WITHOUT_FP8 for f in FLASHINFER]
WITHOUT_FP8_PLATFORM_CASES = [(n, d) for n in OTHER_PLATFORMS for d in WITHOUT_FP8]


def _without_fp8_outcomes(subject) -> list[dict]:
    gpus = [{**_gpu(c, "9.17.1", f), **WITHOUT_FP8[d]} for c, d, f in WITHOUT_FP8_CASES]
    platforms = [{**_other_platform(n), **WITHOUT_FP8[d]} for n, d in WITHOUT_FP8_PLATFORM_CASES]
    return subject.call("vit_fp8_probes.build_outcomes", cases=gpus + platforms)


def _without_fp8_labels() -> list[str]:
    return ([f"{_label(c, '9.17.1', f)}, mm_encoder_attn_dtype {d}" for c, d, f in WITHOUT_FP8_CASES]
            + [f"the {OTHER_PLATFORMS[n][0]} platform {n}, mm_encoder_attn_dtype {d}"
               for n, d in WITHOUT_FP8_PLATFORM_CASES])


def _layer_outcome(seen: dict) -> str:
    if "raised" in seen:
        return f"raised {seen['raised']}: {seen['message'][:200]}"
    returned = seen["returned"]
    return f"built with fp8_enabled={returned.get('fp8_enabled')!r}, attributes {returned.get('attributes')}"


@pytest.mark.criterion("c5")
@pytest.mark.cases(capability=WITHOUT_FP8_GPUS, attn_dtype=list(WITHOUT_FP8), flashinfer=list(FLASHINFER),
                   platform=["cuda", *sorted({kind for kind, _ in OTHER_PLATFORMS.values()})])
def test_layer_without_fp8_builds_as_in_the_base(subject, base_subject):
    """Without FP8 the layer builds on every GPU and platform exactly as in the base (the requirement stops FP8
    only)."""
    got, want = _without_fp8_outcomes(subject), _without_fp8_outcomes(base_subject)
    problems = [f"{label}: {_difference(o, w)}" for label, o, w in zip(_without_fp8_labels(), got, want, strict=True)
                if _difference(o, w)]
    assert not problems, "; ".join(problems)


def _difference(got: dict, want: dict) -> str:
    """How the candidate's build differs from the base's ("" where it does not): each attribute the base's layer
    has that the candidate's lacks or holds at another value (one it adds, such as a flag of its own, changes no
    choice the base made), or both outcomes where either raised."""
    if "returned" in got and "returned" in want:
        mine, base = got["returned"].get("attributes") or {}, want["returned"].get("attributes") or {}
        flags = [] if got["returned"].get("fp8_enabled") == want["returned"].get("fp8_enabled") else \
            [f"fp8_enabled is {got['returned'].get('fp8_enabled')!r} where the base has "
             f"{want['returned'].get('fp8_enabled')!r}"]
        return ", ".join(flags + [f"{name} is {mine.get(name, 'unset')} where the base has {value}"
                                  for name, value in sorted(base.items()) if mine.get(name) != value])
    return "" if _layer_outcome(got) == _layer_outcome(want) else \
        f"{_layer_outcome(got)}, where the base {_layer_outcome(want)}"
