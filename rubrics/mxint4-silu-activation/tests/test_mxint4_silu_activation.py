"""Hidden tests for mxint4-silu-activation: which activations the FlashInfer TRT-LLM MxInt4 MoE experts accept, and
which WNA16 MoE backend the oracle picks, on faked GPUs.

Three sites are observed through ``../probes/mxint4_silu_activation_probes.py``: the experts' activation predicate
(``_supports_activation``), the whole support check the oracle runs (``is_supported_config``) and the oracle itself
(``select_wna16_moe_backend``). Layer shapes are drawn with ``secret_generator``; every verdict is decided here.
"""

from __future__ import annotations

import pytest
import torch

PROBES = "mxint4_silu_activation_probes"
MODULE = "vllm.model_executor.layers.fused_moe.experts.trtllm_mxint4_moe"
ACCEPTED = ("SILU", "SWIGLUOAI")
SM100_FAMILY = ([10, 0], [10, 3])
ROUTINGS = ("Renormalize", "RenormalizeNaive", "DeepSeekV3", "Llama4")
FLASHINFER_BACKEND = ("FLASHINFER_TRTLLM", "TrtLlmMxint4ExpertsMonolithic")


def observe(subject, cases: list[dict]) -> list[dict]:
    return subject.call(f"{PROBES}.observe", cases=cases)


def returned(case: dict, seen: dict):
    """What the site returned; anything it raised is a failure of the check, described with its case."""
    assert "raised" not in seen, f"{case} raised {seen.get('raised')}: {seen.get('message')}"
    return seen["returned"]


def draw_shape(generator: torch.Generator) -> dict:
    """A layer shape the backend's checks accept: experts, top-k, hidden size and intermediate size (multiples of
    the int4 group of 32), drawn where the candidate cannot see them coming."""
    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=generator))]

    experts = pick([8, 16, 64, 128, 256, 384])
    return {"num_experts": experts, "top_k": pick([k for k in (1, 2, 4, 6, 8) if k <= experts]),
            "hidden_dim": pick([512, 1024, 2048, 4096, 7168]),
            "intermediate_size": pick([256, 512, 1024, 2048])}


def wrong_verdicts(subject, cases: list[tuple[dict, object]], key) -> list[str]:
    """Every (case, expected) whose observation, read by ``key``, differs; a raise counts as wrong."""
    observed = observe(subject, [case for case, _ in cases])
    wrong = []
    for (case, expected), seen in zip(cases, observed, strict=True):
        if "raised" in seen:
            wrong.append(f"{case}: raised {seen['raised']}: {seen['message'][:200]}")
            continue
        got = key(seen["returned"])
        if got != expected:
            shown = "" if got == seen["returned"] else f" ({seen['returned']})"
            wrong.append(f"{case}: expected {expected!r}, got {got!r}{shown}")
    return wrong


def selected(result: dict) -> tuple[str, str]:
    return result["backend"], result["experts"]


def supported(result: dict) -> bool:
    return result["supported"]


# --- c1: gated SiLU accepted by the experts -------------------------------------------------------------------


@pytest.mark.criterion("c1")
def test_predicate_accepts_gated_silu(subject):
    """The MxInt4 experts' activation predicate accepts MoEActivation.SILU (the kernel's SwiGLU is gated SiLU)."""
    case = {"site": "predicate", "activation": "SILU"}
    (seen,) = observe(subject, [case])
    assert returned(case, seen) is True, "_supports_activation(MoEActivation.SILU) is not True"


@pytest.mark.criterion("c1")
@pytest.mark.parametrize("capability", SM100_FAMILY, ids=["sm100", "sm103"])
@pytest.mark.parametrize("routing", ROUTINGS)
def test_support_check_accepts_gated_silu_layer(capability, routing, subject, secret_generator):
    """is_supported_config accepts a gated-SiLU int4 MoE layer on an SM100-family GPU with FlashInfer MxInt4."""
    case = {"site": "config", "activation": "SILU", "capability": capability, "routing": routing,
            **draw_shape(secret_generator)}
    (seen,) = observe(subject, [case])
    result = returned(case, seen)
    assert result["supported"], f"refused {case}: {result['reason']}"


# --- c2: the oracle picks FlashInfer MxInt4 for gated SiLU ------------------------------------------------------


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("capability", SM100_FAMILY, ids=["sm100", "sm103"])
def test_oracle_selects_flashinfer_mxint4_for_gated_silu(capability, subject, secret_generator):
    """select_wna16_moe_backend picks FLASHINFER_TRTLLM (TrtLlmMxint4ExpertsMonolithic) for a gated-SiLU int4 layer."""
    case = {"site": "oracle", "activation": "SILU", "capability": capability, **draw_shape(secret_generator)}
    (seen,) = observe(subject, [case])
    assert selected(returned(case, seen)) == FLASHINFER_BACKEND, f"{case} got {seen}"


# Every routing method and several drawn shapes in one batch, weighted as their count: a selection that holds for
# one routing method or shape and not another leaves c2 below met.
@pytest.mark.criterion("c2", weight=2 * len(ROUTINGS))
def test_oracle_selects_flashinfer_mxint4_for_every_gated_silu_layer(subject, secret_generator):
    """Every gated-SiLU int4 layer (each routing method, drawn shapes, SM100/SM103) gets FlashInfer MxInt4."""
    cases = [({"site": "oracle", "activation": "SILU", "capability": capability, "routing": routing,
               **draw_shape(secret_generator)}, FLASHINFER_BACKEND)
             for capability in SM100_FAMILY for routing in ROUTINGS]
    wrong = wrong_verdicts(subject, cases, selected)
    assert not wrong, f"{len(wrong)} of {len(cases)} layers not given FlashInfer MxInt4: " + "; ".join(wrong)


# --- c3: SWIGLUOAI kept ------------------------------------------------------------------------------------------


@pytest.mark.criterion("c3")
def test_predicate_still_accepts_swigluoai(subject):
    """The MxInt4 experts' activation predicate still accepts MoEActivation.SWIGLUOAI."""
    case = {"site": "predicate", "activation": "SWIGLUOAI"}
    (seen,) = observe(subject, [case])
    assert returned(case, seen) is True, "_supports_activation(MoEActivation.SWIGLUOAI) is not True"


@pytest.mark.criterion("c3", weight=2)
def test_swigluoai_layers_still_get_flashinfer_mxint4(subject, secret_generator):
    """SWIGLUOAI int4 layers on SM100/SM103 still pass is_supported_config and still get FlashInfer MxInt4."""
    cases = []
    for capability in SM100_FAMILY:
        for routing in ROUTINGS:
            shape = draw_shape(secret_generator)
            base = {"activation": "SWIGLUOAI", "capability": capability, "routing": routing, **shape}
            cases.append(({"site": "config", **base}, True))
            cases.append(({"site": "oracle", **base}, FLASHINFER_BACKEND))
    observed = observe(subject, [case for case, _ in cases])
    wrong = []
    for (case, expected), seen in zip(cases, observed, strict=True):
        if "raised" in seen:
            wrong.append(f"{case}: raised {seen['raised']}")
            continue
        got = supported(seen["returned"]) if case["site"] == "config" else selected(seen["returned"])
        if got != expected:
            wrong.append(f"{case}: expected {expected!r}, got {seen['returned']}")
    assert not wrong, "; ".join(wrong)


# --- c4: the module and the other predicates ---------------------------------------------------------------------


@pytest.mark.criterion("c4")
def test_module_keeps_its_public_names(subject, base_subject):
    """The trtllm_mxint4_moe module still imports and keeps every public name the base defines."""
    before = set(base_subject.call(f"{PROBES}.public_names"))
    after = set(subject.call(f"{PROBES}.public_names"))
    assert before <= after, f"public names gone from {MODULE}: {sorted(before - after)}"


OTHER_CASES = [
    {"weight_key": key, "routing": routing, "router_logits_dtype": dtype}
    for key in ("kInt4Static32", "kInt4Static", "kInt4Static32Asym", "kInt8Static", "kFp8StaticTensorSym")
    for routing in ("Renormalize", "DeepSeekV3", "Llama4", "Simulated", "TopK", "Default", "Sigmoid", "MiniMax2")
    for dtype in ("bfloat16", "float32")
]


@pytest.mark.criterion("c4", weight=4)
def test_other_support_predicates_unchanged(subject, base_subject):
    """The experts' quantization-scheme, routing, router-logits-dtype and no-act-and-mul answers equal the base's."""
    cases = [{"site": "others", **case} for case in OTHER_CASES]
    expected = observe(base_subject, cases)
    observed = observe(subject, cases)
    wrong = [f"{case}: base {want.get('returned')}, patched {got}"
             for case, want, got in zip(cases, expected, observed, strict=True) if got != want]
    assert not wrong, f"{len(wrong)} of {len(cases)} answers changed: " + "; ".join(wrong[:6])


# --- c5: every other activation and device refused --------------------------------------------------------------


def _other_activations(base_subject) -> list[str]:
    return [name for name in base_subject.call(f"{PROBES}.activation_names") if name not in ACCEPTED]


@pytest.mark.criterion("c5")
def test_predicate_rejects_every_other_activation(subject, base_subject):
    """Every MoEActivation but SILU and SWIGLUOAI (GELU, RELU2, SWIGLUSTEP, each _no_mul variant) is still refused."""
    others = _other_activations(base_subject)
    assert others, "the base's MoEActivation lists no other activation"
    cases = [({"site": "predicate", "activation": name}, False) for name in others]
    wrong = wrong_verdicts(subject, cases, bool)
    assert not wrong, "; ".join(wrong)


@pytest.mark.criterion("c5", weight=2)
def test_support_check_rejects_every_other_activation(subject, base_subject, secret_generator):
    """is_supported_config still refuses every other activation on SM100, with FlashInfer MxInt4 available."""
    cases = [({"site": "config", "activation": name, "capability": [10, 0], **draw_shape(secret_generator)}, False)
             for name in _other_activations(base_subject)]
    wrong = wrong_verdicts(subject, cases, supported)
    assert not wrong, "; ".join(wrong)


DEVICE_CASES = [
    # (platform, capability, flashinfer available)
    ("cuda", [9, 0], True),
    ("cuda", [8, 9], True),
    ("cuda", [12, 0], True),
    ("cuda", [11, 0], True),
    ("cuda", [10, 0], False),
    ("cuda", [10, 3], False),
    ("rocm", [9, 4], True),
]


@pytest.mark.criterion("c5", weight=2)
def test_gated_silu_not_given_mxint4_off_sm100_or_without_flashinfer(subject, secret_generator):
    """Off the SM100 family, on ROCm, or without FlashInfer MxInt4, a gated-SiLU layer is refused by the backend."""
    cases = [({"site": "config", "activation": "SILU", "platform": platform, "capability": capability,
               "flashinfer": available, **draw_shape(secret_generator)}, False)
             for platform, capability, available in DEVICE_CASES]
    wrong = wrong_verdicts(subject, cases, supported)
    assert not wrong, "; ".join(wrong)


@pytest.mark.criterion("c5", weight=2)
def test_oracle_keeps_marlin_where_mxint4_does_not_apply(subject, base_subject, secret_generator):
    """Where MxInt4 does not apply (Hopper, SM120, no FlashInfer, a GELU layer) the oracle picks as the base does."""
    cases = [{"site": "oracle", "activation": "SILU", "platform": "cuda", "capability": capability,
              "flashinfer": available, **draw_shape(secret_generator)}
             for platform, capability, available in DEVICE_CASES if platform == "cuda"]
    cases.append({"site": "oracle", "activation": "GELU", "capability": [10, 0], **draw_shape(secret_generator)})
    expected = observe(base_subject, cases)
    observed = observe(subject, cases)
    wrong = []
    for case, want, got in zip(cases, expected, observed, strict=True):
        assert "returned" in want, f"the base raised on {case}: {want}"
        if got != want:
            wrong.append(f"{case}: base {want['returned']}, patched {got}")
    assert not wrong, "; ".join(wrong)
