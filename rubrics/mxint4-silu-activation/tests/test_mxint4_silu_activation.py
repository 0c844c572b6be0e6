"""Hidden tests for mxint4-silu-activation: which activations the FlashInfer TRT-LLM MxInt4 MoE experts accept, and
which WNA16 MoE backend the oracle picks, on faked GPUs.

Three sites are observed through ``../probes/mxint4_silu_activation_probes.py``: the experts' activation predicate
(``_supports_activation``), the whole support check the oracle runs (``is_supported_config``) and the oracle itself
(``select_wna16_moe_backend``). The declared case space (``rubric.toml``) is asked in one call per subject (a
module fixture; the base's answers in one more), each case its own check, decided here. Layer shapes are the two
fixed corners (smallest, largest) everywhere, plus one shape drawn with ``secret_generator`` per c1/c2 check.
"""

from __future__ import annotations

import pytest
import torch

PROBES = "mxint4_silu_activation_probes"
MODULE = "vllm.model_executor.layers.fused_moe.experts.trtllm_mxint4_moe"
FLASHINFER_BACKEND = {"backend": "FLASHINFER_TRTLLM", "experts": "TrtLlmMxint4ExpertsMonolithic"}

# The SM100 family is every capability 10.x (vLLM's is_device_capability_family(100)): 10.0, 10.1 and 10.3.
SM100_FAMILY = {"sm100": [10, 0], "sm101": [10, 1], "sm103": [10, 3]}
SUPPORTED_ROUTINGS = ["Renormalize", "RenormalizeNaive", "DeepSeekV3", "Llama4", "Simulated"]
OTHER_ROUTINGS = ["Default", "TopK", "SigmoidRenorm", "MiniMax2", "Sigmoid", "DeepseekV4"]
# No parallelism, tensor parallel, data parallel, expert parallel over the TP ranks (no all2all), and expert parallel
# over the allgather/reduce-scatter all2all.
SUPPORTED_PARALLEL = ["none", "tp2", "dp2", "ep2", "dp2-ep-allgather"]
# Expert parallel over every CUDA all2all backend but allgather/reduce-scatter (batched format or not, every name
# the config takes), and EPLB.
REFUSED_PARALLEL = ["dp2-ep-deepep", "dp2-ep-deepep-ht", "dp2-ep-deepep-v2", "dp2-ep-nixl",
                    "dp2-ep-naive", "dp2-ep-pplx", "dp2-ep-flashinfer", "dp2-ep-flashinfer-all2allv",
                    "dp2-ep-flashinfer-one-sided", "eplb"]
# The smallest and largest layers, and one whose widths are multiples of the int4 group (32) and of 64 but of no
# larger power of two (2880, gpt-oss's width) and whose top-k (6) is no power of two: a support check that quietly
# wants wider alignment or a power-of-two top-k refuses it (the drawn shapes alone met top-k 6 only as drawn).
SHAPES = {"smallest": {"num_experts": 8, "top_k": 1, "hidden_dim": 512, "intermediate_size": 256},
          "largest": {"num_experts": 384, "top_k": 8, "hidden_dim": 7168, "intermediate_size": 2048},
          "unaligned": {"num_experts": 32, "top_k": 6, "hidden_dim": 2880, "intermediate_size": 2880}}
LOGITS_DTYPES = ["bfloat16", "float16", "float32"]
# Every MoEActivation of the base but the two the kernel runs.
OTHER_ACTIVATIONS = ["GELU", "GELU_TANH", "RELU2", "SWIGLUOAI_UNINTERLEAVE", "SWIGLUSTEP", "SILU_NO_MUL",
                     "GELU_NO_MUL", "GELU_TANH_NO_MUL", "RELU2_NO_MUL"]
# Where the MxInt4 kernel does not run: CUDA outside the SM100 family; ROCm; XPU, CPU and TPU (no capability); an
# out-of-tree platform that reports 10.0; and each SM100-family GPU without FlashInfer MxInt4.
OFF_DEVICES = {"sm80": ("cuda", [8, 0], True), "sm89": ("cuda", [8, 9], True), "sm90": ("cuda", [9, 0], True),
               "sm110": ("cuda", [11, 0], True), "sm120": ("cuda", [12, 0], True), "sm121": ("cuda", [12, 1], True),
               "gfx90a": ("rocm", [9, 0], True), "gfx942": ("rocm", [9, 4], True), "gfx950": ("rocm", [9, 5], True),
               "xpu": ("xpu", None, True), "cpu": ("cpu", None, True), "tpu": ("tpu", None, True),
               "oot-sm100": ("oot", [10, 0], True), "sm100-no-flashinfer": ("cuda", [10, 0], False),
               "sm101-no-flashinfer": ("cuda", [10, 1], False), "sm103-no-flashinfer": ("cuda", [10, 3], False)}
# One requirement other than the activation changed at a time from a layer the backend takes (SM100, Renormalize,
# no parallelism, BF16 router logits, kInt4Static32 weights, BF16 activations, no LoRA), to one the base refuses
# for that requirement alone: axis -> values.
WEIGHT_KEYS = ["kInt4Static32", "kInt4Static", "kInt4Static32Asym", "kInt8Static", "kFp8StaticTensorSym"]
ACTIVATION_KEYS = ["kFp8StaticTensorSym", "kFp8Dynamic128Sym", "kFp8DynamicTokenSym"]
FLOAT32_LOGITS_ROUTINGS = ["DeepSeekV3", "Simulated"]
VARIATIONS = ([("parallel", p) for p in REFUSED_PARALLEL]
              + [("routing", r) for r in OTHER_ROUTINGS]
              + [("routing+float32", r) for r in SUPPORTED_ROUTINGS + OTHER_ROUTINGS
                 if r not in FLOAT32_LOGITS_ROUTINGS]
              + [("weight_key", k) for k in WEIGHT_KEYS[1:]]
              + [("activation_key", k) for k in ACTIVATION_KEYS]
              + [("lora", "on"), ("batch_invariant", "on")])


def layer(site: str, activation: str, capability="sm100", shape="smallest", **more) -> dict:
    """A probe case: a layer with int4 weights in groups of 32 on an SM100-family GPU with FlashInfer, unless
    ``more`` says otherwise."""
    case = {"site": site, "activation": activation, "platform": "cuda", "capability": SM100_FAMILY[capability],
            "flashinfer": True, **(SHAPES[shape] if isinstance(shape, str) else shape)}
    case.update(more)
    return case


def varied(site: str, activation: str, axis: str, value: str) -> dict:
    """The layer the backend takes, with one requirement changed (``VARIATIONS``)."""
    if axis == "routing+float32":
        return layer(site, activation, routing=value, router_logits_dtype="float32")
    if axis == "lora":
        return layer(site, activation, lora=value == "on")
    if axis == "batch_invariant":
        return layer(site, activation, batch_invariant=value)
    return layer(site, activation, **{axis: value})


def off_device(site: str, activation: str, device: str) -> dict:
    platform, capability, flashinfer = OFF_DEVICES[device]
    return {"site": site, "activation": activation, "platform": platform, "capability": capability,
            "flashinfer": flashinfer, **SHAPES["largest"]}


def _key(case: dict) -> str:
    return repr(sorted(case.items()))


# Each supported routing x parallel config on each SM100-family GPU, the shape corners taken in turn.
C1_C2_LAYERS = ([dict(capability=c, routing=r, parallel=p, shape=list(SHAPES)[(i + j) % len(SHAPES)])
                 for c in SM100_FAMILY for i, r in enumerate(SUPPORTED_ROUTINGS)
                 for j, p in enumerate(SUPPORTED_PARALLEL)]
                + [dict(capability=c, routing=r, parallel="none", shape="largest", router_logits_dtype="float32")
                   for c in SM100_FAMILY for r in ("DeepSeekV3", "Simulated")])


def _others_cases(weight_key: str, activation_key: str) -> list[dict]:
    """The other predicates' cases: every routing and logits dtype for a weight key with BF16 activations; the
    weight key with Renormalize for another activation key."""
    key = None if activation_key == "None" else activation_key
    combos = ([(r, d) for r in SUPPORTED_ROUTINGS + OTHER_ROUTINGS for d in LOGITS_DTYPES]
              if key is None else [("Renormalize", "bfloat16")])
    return [{"site": "others", "weight_key": weight_key, "routing": r, "router_logits_dtype": d,
             "activation_key": key} for r, d in combos]


def _unique(cases: list[dict]) -> list[dict]:
    return list({_key(c): c for c in cases}.values())


# Every other experts class's support check, with its device check answered True, on the layer the backend takes
# (asked last: it imports every module of the experts package).
OTHER_EXPERTS = {"site": "other-experts", "platform": "cuda", "capability": SM100_FAMILY["sm100"],
                 "flashinfer": True, **SHAPES["smallest"]}


def _base_cases() -> list[dict]:
    """What the base is asked: the other predicates, and every case whose expectation is the base's answer."""
    cases = [varied("config", "SWIGLUOAI", axis, value) for axis, value in VARIATIONS]
    cases += [varied("oracle", act, axis, value) for act in ("SILU", "SWIGLUOAI") for axis, value in VARIATIONS]
    cases += [layer("oracle", act) for act in OTHER_ACTIVATIONS]
    cases += [off_device("oracle", "SILU", d) for d in OFF_DEVICES]
    cases += [c for k in WEIGHT_KEYS for a in ["None", *ACTIVATION_KEYS] for c in _others_cases(k, a)]
    return _unique(cases + [OTHER_EXPERTS])


def _declared_cases() -> list[dict]:
    cases = [{"site": "predicate", "activation": a} for a in ["SILU", "SWIGLUOAI", *OTHER_ACTIVATIONS]]
    cases += [layer(site, act, **spec) for site in ("config", "oracle") for act in ("SILU", "SWIGLUOAI")
              for spec in C1_C2_LAYERS]
    cases += [varied("config", "SILU", axis, value) for axis, value in VARIATIONS]
    cases += [layer("config", act) for act in OTHER_ACTIVATIONS]
    cases += [off_device("config", "SILU", d) for d in OFF_DEVICES]
    return _unique(cases + _base_cases())


def _ask(who, cases: list[dict]) -> dict:
    return dict(zip(map(_key, cases), who.call(f"{PROBES}.observe", cases=cases), strict=True))


@pytest.fixture(scope="module")
def observed(subject) -> dict:
    """What the candidate's tree did in every declared case, asked in one call."""
    return _ask(subject, _declared_cases())


@pytest.fixture(scope="module")
def base_observed(base_subject) -> dict:
    """The same cases on the unpatched base: the expectations only the base defines (what else is required)."""
    return _ask(base_subject, _base_cases())


def returned(observed: dict, case: dict):
    """What the site returned; anything it raised is a failure of the check, described with its case."""
    seen = observed[_key(case)]
    assert "raised" not in seen, f"{case} raised {seen.get('raised')}: {seen.get('message')}"
    return seen["returned"]


def outcome(observed: dict, case: dict) -> tuple:
    """What the site did, compared across trees: ("returned", value) or ("raised", the exception's type)."""
    seen = observed[_key(case)]
    return ("raised", seen["raised"]) if "raised" in seen else ("returned", seen["returned"])


def takes(observed: dict, case: dict) -> bool:
    """Whether is_supported_config accepted the layer (a raise accepts nothing: the base raises formatting some
    refusals' reasons)."""
    seen = observed[_key(case)]
    return "returned" in seen and seen["returned"]["supported"] is True


def draw_shape(generator: torch.Generator) -> dict:
    """A layer shape between the corners: experts, top-k, hidden size and intermediate size (multiples of the int4
    group of 32), drawn where the candidate cannot see them coming."""
    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=generator))]

    experts = pick([16, 64, 128, 256])
    return {"num_experts": experts, "top_k": pick([2, 4, 6]), "hidden_dim": pick([1024, 2048, 4096]),
            "intermediate_size": pick([512, 1024])}


def _spec_id(spec: dict) -> str:
    return "-".join(str(v) for v in spec.values())


def _c1_c2_params(criterion: str):
    return [pytest.param(spec, id=_spec_id(spec), marks=[pytest.mark.criterion(criterion), pytest.mark.cases(
        capability=spec["capability"], routing=spec["routing"], parallel=spec["parallel"], shape=spec["shape"],
        router_logits_dtype=spec.get("router_logits_dtype", "bfloat16"))]) for spec in C1_C2_LAYERS]


# --- c1: gated SiLU accepted by the experts -------------------------------------------------------------------


@pytest.mark.criterion("c1")
@pytest.mark.cases(site="_supports_activation")
def test_predicate_accepts_gated_silu(observed):
    """The MxInt4 experts' activation predicate accepts MoEActivation.SILU (the kernel's SwiGLU is gated SiLU)."""
    assert returned(observed, {"site": "predicate", "activation": "SILU"}) is True, \
        "_supports_activation(MoEActivation.SILU) is not True"


@pytest.mark.cases(site="is_supported_config")
@pytest.mark.parametrize("spec", _c1_c2_params("c1"))
def test_support_check_accepts_gated_silu_layer(spec, observed):
    """is_supported_config accepts a gated-SiLU int4 layer."""
    case = layer("config", "SILU", **spec)
    result = returned(observed, case)
    assert result["supported"], f"refused {case}: {result['reason']}"


@pytest.mark.criterion("c1")
@pytest.mark.cases(site="is_supported_config", shape="drawn", routing=SUPPORTED_ROUTINGS, capability=list(SM100_FAMILY))
def test_support_check_accepts_drawn_gated_silu_layers(subject, secret_generator):
    """is_supported_config accepts gated-SiLU layers of drawn shapes."""
    cases = [layer("config", "SILU", capability=c, routing=r, shape=draw_shape(secret_generator))
             for c in SM100_FAMILY for r in SUPPORTED_ROUTINGS]
    refused = [f"{case}: {seen}" for case, seen in zip(cases, subject.call(f"{PROBES}.observe", cases=cases))
               if not seen.get("returned", {}).get("supported")]
    assert not refused, "; ".join(refused)


# --- c2: the oracle picks FlashInfer MxInt4 for gated SiLU ------------------------------------------------------


@pytest.mark.cases(site="select_wna16_moe_backend")
@pytest.mark.parametrize("spec", _c1_c2_params("c2"))
def test_oracle_selects_flashinfer_mxint4_for_gated_silu(spec, observed):
    """The WNA16 oracle gives a gated-SiLU int4 layer FlashInfer MxInt4."""
    case = layer("oracle", "SILU", **spec)
    assert returned(observed, case) == FLASHINFER_BACKEND, f"{case} got {observed[_key(case)]}"


@pytest.mark.criterion("c2")
@pytest.mark.cases(site="select_wna16_moe_backend", shape="drawn", routing=SUPPORTED_ROUTINGS,
                   capability=list(SM100_FAMILY))
def test_oracle_selects_flashinfer_mxint4_for_drawn_layers(subject, secret_generator):
    """Gated-SiLU layers of drawn shapes get FlashInfer MxInt4."""
    cases = [layer("oracle", "SILU", capability=c, routing=r, shape=draw_shape(secret_generator))
             for c in SM100_FAMILY for r in SUPPORTED_ROUTINGS]
    wrong = [f"{case}: {seen}" for case, seen in zip(cases, subject.call(f"{PROBES}.observe", cases=cases))
             if seen.get("returned") != FLASHINFER_BACKEND]
    assert not wrong, "; ".join(wrong)


# --- c3: SWIGLUOAI kept ------------------------------------------------------------------------------------------


@pytest.mark.criterion("c3")
@pytest.mark.cases(site="_supports_activation")
def test_predicate_still_accepts_swigluoai(observed):
    """The MxInt4 experts' activation predicate still accepts MoEActivation.SWIGLUOAI."""
    assert returned(observed, {"site": "predicate", "activation": "SWIGLUOAI"}) is True, \
        "_supports_activation(MoEActivation.SWIGLUOAI) is not True"


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("site", ["is_supported_config", "select_wna16_moe_backend"])
@pytest.mark.parametrize("spec", [pytest.param(s, id=_spec_id(s), marks=pytest.mark.cases(
    capability=s["capability"], routing=s["routing"], parallel=s["parallel"], shape=s["shape"])) for s in C1_C2_LAYERS])
def test_swigluoai_layers_still_get_flashinfer_mxint4(spec, site, observed):
    """SWIGLUOAI int4 layers on SM100/SM103 still pass is_supported_config and still get FlashInfer MxInt4."""
    if site == "is_supported_config":
        case = layer("config", "SWIGLUOAI", **spec)
        result = returned(observed, case)
        assert result["supported"], f"refused {case}: {result['reason']}"
    else:
        case = layer("oracle", "SWIGLUOAI", **spec)
        assert returned(observed, case) == FLASHINFER_BACKEND, f"{case} got {observed[_key(case)]}"


# --- c4: the module and the other requirements ---------------------------------------------------------------------


@pytest.mark.criterion("c4")
@pytest.mark.cases(site="trtllm_mxint4_moe")
def test_module_keeps_its_public_names(subject, base_subject):
    """The trtllm_mxint4_moe module still imports and keeps every public name the base defines."""
    before = set(base_subject.call(f"{PROBES}.public_names"))
    after = set(subject.call(f"{PROBES}.public_names"))
    assert before <= after, f"public names gone from {MODULE}: {sorted(before - after)}"


@pytest.mark.criterion("c4")
@pytest.mark.cases(site="support predicates", router_logits_dtype=LOGITS_DTYPES,
                   routing=SUPPORTED_ROUTINGS + OTHER_ROUTINGS)
@pytest.mark.parametrize("activation_key", ["None", *ACTIVATION_KEYS])
@pytest.mark.parametrize("weight_key", WEIGHT_KEYS)
def test_other_support_predicates_unchanged(weight_key, activation_key, observed, base_observed):
    """The experts' quantization-scheme, routing, router-logits-dtype and no-act-and-mul answers equal the base's."""
    cases = _others_cases(weight_key, activation_key)
    wrong = [f"{case}: base {base_observed[_key(case)]}, patched {observed[_key(case)]}"
             for case in cases if observed[_key(case)] != base_observed[_key(case)]]
    assert not wrong, f"{len(wrong)} of {len(cases)} answers changed: " + "; ".join(wrong[:4])


@pytest.mark.criterion("c4")
@pytest.mark.cases(site="other experts")
def test_other_experts_support_checks_unchanged(observed, base_observed):
    """Every other experts class answers the shared support check as in the base, for every activation: the fix
    changes the MxInt4 experts, not the check all kernels share nor another kernel's predicates."""
    before = returned(base_observed, OTHER_EXPERTS)
    after = returned(observed, OTHER_EXPERTS)
    wrong = [f"{key}: base {before[key]}, patched {after.get(key, 'missing')}" for key in sorted(before)
             if after.get(key) != before[key]]
    assert not wrong, f"{len(wrong)} of {len(before)} answers changed: " + "; ".join(wrong[:4])


def _variation_params():
    params = []
    for axis, value in VARIATIONS:
        if axis == "routing+float32":
            marks = pytest.mark.cases(routing=value, router_logits_dtype="float32")
        else:
            marks = pytest.mark.cases(**{axis: value})
        params.append(pytest.param(axis, value, id=f"{axis}={value}", marks=marks))
    return params


# The fix changes which activation the backend takes and nothing else: with one other requirement changed so that
# the base refuses a SWIGLUOAI layer, a gated-SiLU layer and a SWIGLUOAI one are refused too, and the oracle picks
# for each what the base picks. A fix that relaxes a check while it is there, or lets the oracle skip the support
# check for gated SiLU, widens the backend here. (Where the base takes the layer, c1 to c3 ask for it.)
@pytest.mark.criterion("c4")
@pytest.mark.cases(site=["is_supported_config", "select_wna16_moe_backend"])
@pytest.mark.parametrize("axis,value", _variation_params())
def test_no_other_requirement_widened(axis, value, observed, base_observed):
    """No requirement but the activation is widened."""
    assert not takes(base_observed, varied("config", "SWIGLUOAI", axis, value)), (
        f"the rubric expects the base to refuse a SWIGLUOAI layer with {axis}={value}; it accepts it")
    wrong = []
    for act in ("SILU", "SWIGLUOAI"):
        if takes(observed, varied("config", act, axis, value)):
            wrong.append(f"is_supported_config accepts {act}, where the base refuses SWIGLUOAI")
        if axis == "activation_key":
            continue  # the oracle always asks with BF16 activations
        oracle = varied("oracle", act, axis, value)
        if axis == "weight_key":
            # Past the activation check, the support check formats the refused weight key into its reason, which
            # raises KeyError in this vLLM (the base for SWIGLUOAI, the reference fix for SILU too): whether the
            # oracle then raises depends on where the activation is refused, so only "not MxInt4" is asked here.
            if outcome(observed, oracle) == ("returned", FLASHINFER_BACKEND):
                wrong.append(f"the oracle gives {act} the MxInt4 backend with weight key {value}")
            continue
        want, got = outcome(base_observed, oracle), outcome(observed, oracle)
        if got != want:
            wrong.append(f"the oracle picks {got} for {act}, the base {want}")
    assert not wrong, f"{axis}={value}: " + "; ".join(wrong)


# Asking is not changing: the support check and the oracle are handed the layer's own config, which the layer then
# runs with. A site that rewrites it (an activation renamed in place, a routing or a parallel field adjusted) changes
# what the model computes, whatever it answers. Every layer either site is asked about, of every activation, on
# every device, is compared field by field before and after the call.
@pytest.mark.criterion("c4")
@pytest.mark.cases(site=["is_supported_config", "select_wna16_moe_backend"])
def test_sites_leave_the_layer_config_unchanged(observed):
    """is_supported_config and select_wna16_moe_backend leave the layer's config as they were given it."""
    sites = {"config": "is_supported_config", "oracle": "select_wna16_moe_backend"}
    cases = [c for c in _declared_cases() if c["site"] in sites]
    changed = [f"{sites[c['site']]} changed {observed[_key(c)]['config_changed']} of {c}" for c in cases
               if observed[_key(c)].get("config_changed")]
    assert not changed, f"{len(changed)} of {len(cases)} calls changed the config: " + "; ".join(changed[:3])


# --- c5: every other activation and device refused --------------------------------------------------------------


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("site", ["_supports_activation", "is_supported_config", "select_wna16_moe_backend"])
@pytest.mark.parametrize("activation", OTHER_ACTIVATIONS)
def test_every_other_activation_refused(activation, site, observed, base_observed):
    """Every other activation is still refused."""
    if site == "_supports_activation":
        got = returned(observed, {"site": "predicate", "activation": activation})
        assert got is False, f"_supports_activation(MoEActivation.{activation}) is {got!r}"
    elif site == "is_supported_config":
        result = returned(observed, layer("config", activation))
        assert not result["supported"], f"is_supported_config accepts a {activation} layer on SM100"
    else:
        case = layer("oracle", activation)
        want, got = outcome(base_observed, case), outcome(observed, case)
        assert got == want, f"the oracle picks {got} for a {activation} layer on SM100, the base {want}"


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("site", ["is_supported_config", "select_wna16_moe_backend"])
@pytest.mark.parametrize("device", list(OFF_DEVICES))
def test_gated_silu_not_given_mxint4_off_sm100_or_without_flashinfer(device, site, observed, base_observed):
    """Off the SM100 family or without FlashInfer, gated SiLU gets no MxInt4."""
    if site == "is_supported_config":
        result = returned(observed, off_device("config", "SILU", device))
        assert not result["supported"], f"is_supported_config accepts a gated-SiLU layer on {device}"
    else:
        case = off_device("oracle", "SILU", device)
        want, got = outcome(base_observed, case), outcome(observed, case)
        assert got == want, f"the oracle picks {got} for a gated-SiLU layer on {device}, the base {want}"
