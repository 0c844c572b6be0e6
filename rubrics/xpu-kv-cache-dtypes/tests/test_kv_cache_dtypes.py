"""Hidden tests for xpu-kv-cache-dtypes: which KV cache dtypes the Triton attention backend accepts, per platform.

Two validation sites are exercised: the ``TritonAttentionImpl`` constructor (raises ``ValueError`` to reject)
and ``_is_supported_kv_cache_dtype`` in ``triton_reshape_and_cache_flash.py`` (returns False to reject). The
subject reports what each site did on a faked platform (``probes/xpu_probes.py``), every case of the declared
space in one call; every verdict is decided here, against the truth table below (and, for "the exemption lifts
only the capability requirement", against what the unpatched base's store validator answers on a GPU that has
every capability).
"""

from __future__ import annotations

import math
import re

import claims_grammar
import pytest

FP8_DTYPES = ["fp8", "fp8_e4m3", "fp8_e5m2"]
NEEDS_NO_CAPABILITY = ["float16", "auto"]
CAPABILITY_DTYPES = FP8_DTYPES + ["bfloat16"]
ALL_DTYPES = CAPABILITY_DTYPES + NEEDS_NO_CAPABILITY
REJECTIONS = ("ValueError", "NotImplementedError")
IMPL, VALIDATOR = "TritonAttentionImpl", "_is_supported_kv_cache_dtype"
SITES = [IMPL, VALIDATOR]

# The CUDA capabilities c3 names, from Volta to Blackwell (data centre SM100 and consumer SM120), with the one
# between each threshold's neighbours that a shifted bound would let through (SM87, Jetson Orin: Ampere, no fp8).
CUDA_CAPABILITIES = {"sm70": (7, 0), "sm75": (7, 5), "sm80": (8, 0), "sm86": (8, 6), "sm87": (8, 7),
                     "sm89": (8, 9), "sm90": (9, 0), "sm100": (10, 0), "sm120": (12, 0)}
# The platforms c4 names that are not XPU: (platform kind, capability). ROCm reports its gfx arch as a capability
# (gfx90a 9.0, gfx942 9.4, gfx950 9.5); "rocm-low" is a ROCm device below every threshold.
OTHER_PLATFORMS = {"cpu": ("cpu", None), "tpu": ("tpu", None), "out-of-tree": ("oot", None),
                   "rocm-low": ("rocm", (7, 5)), "gfx90a": ("rocm", (9, 0)), "gfx942": ("rocm", (9, 4)),
                   "gfx950": ("rocm", (9, 5))}
# What the store may be asked on XPU beyond c1/c2's dtypes: quantized modes the base's store validator accepts
# with capability (per-token-head, nvfp4, fp8 variants), modes it never accepts (turboquant), and spellings it
# never accepts (int8, fp16, torch's name, upper case). The exemption must not change any of these answers.
XPU_STORE_DTYPES = ["fp8_per_token_head", "int8_per_token_head", "fp8_inc", "fp8_ds_mla", "nvfp4",
                    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "int8",
                    "fp16", "float8_e4m3fn", "FP8", "half", "float32", "float"]
# The capability that stands for "has every capability" when asking the base what its dtype check alone allows.
EVERY_CAPABILITY = (12, 0)

REQUIRED_CAPABILITY = {**{d: 89 for d in FP8_DTYPES}, "bfloat16": 80}


def needs_capability(capability, need: int) -> bool:
    """Whether a device with ``capability`` (None: it reports none) has SM ``need``."""
    return capability is not None and capability[0] * 10 + capability[1] >= need


def needs_met(capability, dtype: str) -> bool:
    """The truth table: fp8 (every spelling) needs SM89+, bfloat16 SM80+, float16 and auto nothing."""
    need = REQUIRED_CAPABILITY.get(dtype)
    return need is None or needs_capability(capability, need)


def _case(site: str, platform: str, capability, dtype: str) -> dict:
    return {"site": "impl" if site == IMPL else "validator", "platform": platform,
            "capability": list(capability) if capability else None, "dtype": dtype}


def _key(case: dict) -> tuple:
    return case["site"], case["platform"], tuple(case["capability"] or ()), case["dtype"]


def _declared_cases() -> list[dict]:
    cases = [_case(site, "xpu", None, dtype) for site in SITES for dtype in ALL_DTYPES]
    cases += [_case(VALIDATOR, "xpu", None, dtype) for dtype in XPU_STORE_DTYPES]
    cases += [_case(site, "cuda", cap, dtype) for site in SITES for cap in CUDA_CAPABILITIES.values()
              for dtype in ALL_DTYPES]
    cases += [_case(site, kind, cap, dtype) for site in SITES for kind, cap in OTHER_PLATFORMS.values()
              for dtype in ALL_DTYPES + XPU_STORE_DTYPES]
    return cases


@pytest.fixture(scope="module")
def observed(subject) -> dict:
    """What each site did in every declared case, asked of the candidate's tree in one call."""
    cases = _declared_cases()
    return dict(zip(map(_key, cases), subject.call("xpu_probes.site_outcomes", cases=cases), strict=True))


@pytest.fixture(scope="module")
def base_other_dtypes(base_subject) -> dict:
    """What the base did with every dtype beyond c3's on each platform that is not XPU, at both sites."""
    cases = [_case(site, kind, cap, dtype) for site in SITES for kind, cap in OTHER_PLATFORMS.values()
             for dtype in XPU_STORE_DTYPES]
    return dict(zip(map(_key, cases), base_subject.call("xpu_probes.site_outcomes", cases=cases), strict=True))


@pytest.fixture(scope="module")
def base_store_answers(base_subject) -> dict:
    """What the base's store validator answers for each XPU store dtype on XPU and on a GPU with every capability:
    the two answers the exemption may give, since it lifts the capability requirement and nothing else."""
    dtypes = XPU_STORE_DTYPES + ALL_DTYPES
    cases = [_case(VALIDATOR, "xpu", None, d) for d in dtypes]
    cases += [_case(VALIDATOR, "cuda", EVERY_CAPABILITY, d) for d in dtypes]
    answers = [answer["returned"] for answer in base_subject.call("xpu_probes.site_outcomes", cases=cases)]
    return {d: (on_xpu, capable) for d, on_xpu, capable in zip(dtypes, answers, answers[len(dtypes):], strict=False)}


@pytest.fixture(scope="module")
def base_backends_on_capable_xpu(base_subject) -> dict:
    """The backend the base builds for each capability dtype on an XPU that reports every capability: what the
    exemption must build on XPU, which reports none (the same attributes: dtype, quant mode, fp8 dtype, soft cap...)."""
    cases = [_case(IMPL, "xpu", EVERY_CAPABILITY, d) for d in CAPABILITY_DTYPES]
    return {d: seen["backend"] for d, seen in
            zip(CAPABILITY_DTYPES, base_subject.call("xpu_probes.site_outcomes", cases=cases), strict=True)}


def expect_backend_as_with_capability(observed: dict, dtype: str, base_backends: dict) -> None:
    """The backend built on XPU for ``dtype`` has every attribute the base builds with the capability, equal."""
    built = observed[_key(_case(IMPL, "xpu", None, dtype))].get("backend", {})
    wrong = [f"{name}={built.get(name, 'missing')} (with the capability: {value})"
             for name, value in base_backends[dtype].items() if built.get(name) != value]
    assert not wrong, (f"{IMPL} on XPU with kv_cache_dtype={dtype!r} built another backend than the base builds on "
                       f"an XPU with the capability: " + "; ".join(wrong))


def verdict(observed: dict, site: str, platform: str, capability, dtype: str) -> str:
    """"accept" or "reject", read off what the site did; anything but a clean rejection is described as a crash."""
    case = _case(site, platform, capability, dtype)
    seen = observed[_key(case)]
    if "raised" in seen:
        if site == IMPL and seen["raised"] in REJECTIONS:
            return "reject"
        return f"crash ({seen['raised']}: {seen['message'][:200]})"
    value = seen["returned"]
    if site == IMPL:
        return "accept" if value == dtype else f"accept but built with kv_cache_dtype {value!r}"
    if not isinstance(value, bool):
        return f"answered {value!r}, not a bool"
    return "accept" if value else "reject"


def expect(observed, site, platform, capability, dtype, accepted: bool, where: str) -> None:
    got = verdict(observed, site, platform, capability, dtype)
    want = "accept" if accepted else "reject"
    assert got == want, f"{site} on {where} with kv_cache_dtype={dtype!r}: expected {want}, got {got}"


# --- c1: fp8 on XPU ---------------------------------------------------------------------------------------------


@pytest.mark.criterion("c1")
@pytest.mark.cases(platform="xpu", site=IMPL)
@pytest.mark.parametrize("kv_cache_dtype", FP8_DTYPES)
def test_xpu_accepts_fp8_kv_cache(kv_cache_dtype, observed, base_backends_on_capable_xpu):
    """XPU accepts every fp8 KV cache spelling and builds the backend it would build with the capability."""
    expect(observed, IMPL, "xpu", None, kv_cache_dtype, True, "XPU")
    expect_backend_as_with_capability(observed, kv_cache_dtype, base_backends_on_capable_xpu)


# --- c2: bf16 on XPU --------------------------------------------------------------------------------------------


@pytest.mark.criterion("c2")
@pytest.mark.cases(platform="xpu", site=IMPL)
@pytest.mark.parametrize("kv_cache_dtype", ["bfloat16"])
def test_xpu_accepts_bf16_kv_cache(kv_cache_dtype, observed, base_backends_on_capable_xpu):
    """XPU accepts a bfloat16 KV cache and builds the backend it would build with the capability."""
    expect(observed, IMPL, "xpu", None, kv_cache_dtype, True, "XPU")
    expect_backend_as_with_capability(observed, kv_cache_dtype, base_backends_on_capable_xpu)


# --- c3: CUDA capability errors preserved ---------------------------------------------------------------------


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("kv_cache_dtype", ALL_DTYPES)
@pytest.mark.parametrize("capability", list(CUDA_CAPABILITIES))
def test_cuda_capability_rules_kept(capability, kv_cache_dtype, site, observed):
    """CUDA keeps its capability rules at both sites."""
    cap = CUDA_CAPABILITIES[capability]
    expect(observed, site, "cuda", cap, kv_cache_dtype, needs_met(cap, kv_cache_dtype), f"CUDA {capability}")


# A rejection's message is a set of claims about this GPU: the dtypes it suggests (in whatever words: "--kv-cache-dtype
# X", "use X instead", "try X") work here, and the capabilities it names are the device's own or the one the dtype
# truly requires. The message is cut into clauses; a dtype named in a clause that does not itself negate or state a
# requirement is a suggestion; its hardware, capability, platform and software claims are read by the shared
# grammar (rubrics/claims_grammar.py) against this dtype's truth (claims_truth).
# Every name a message may give a dtype: vLLM's spellings, the format names alone (e4m3, e5m2), torch's and
# Triton's names, short forms.
DTYPE_WORDS = {"fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "fp8": "fp8", "e4m3": "fp8_e4m3", "e4m3fn": "fp8_e4m3",
               "e5m2": "fp8_e5m2", "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "float8": "fp8",
               "fp8e4nv": "fp8_e4m3", "fp8e4m3": "fp8_e4m3", "fp8e5": "fp8_e5m2", "fp8e5m2": "fp8_e5m2",
               "bfloat16": "bfloat16", "bf16": "bfloat16", "bfloat": "bfloat16", "float16": "float16",
               "fp16": "float16", "half": "float16", "auto": "auto", "float32": "auto", "fp32": "auto"}
DTYPE_TOKEN = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(sorted(DTYPE_WORDS, key=len, reverse=True))
                         + r")(?![A-Za-z0-9_])", re.IGNORECASE)
CLAUSE_BREAK = re.compile(r";|,|:|\.(?=\s|$)|\s[-\u2013\u2014]\s")
NOT_A_SUGGESTION = re.compile(r"\b(not|unsupported|requires?|required|needs?|only|cannot|can't|lacks?|without|"
                              r"neither|nor|isn't|doesn't|too old|below|older)\b", re.IGNORECASE)
# A value given for the flag (or the argument) must be one vLLM takes, spelt as vLLM spells it: a short name such
# as bf16, fp16 or half is refused by the command line however well prose would read it.
FLAG_VALUE = re.compile(r"(?:--kv[-_]cache[-_]dtype|\bkv_cache_dtype)\s*[=\s]\s*[\"'`]?([A-Za-z0-9_.]+)", re.I)
# "Works only on NVIDIA/CUDA" is a claim about vendors the shared grammar does not read: fp8 and bfloat16 KV caches
# work on NVIDIA (with the capability), Intel XPU and AMD ROCm (gfx90a, gfx942, gfx950). That XPU or ROCm lacks them
# is read by the grammar (hardware without CUDA runs it, in this task's truth).
NVIDIA_WORD = re.compile(r"\b(?:nvidia|cuda)\b(?![\s-]*(?:compute\b|capabilit|sm\b|sm_|arch))", re.I)
ONLY_WORDS = re.compile(r"\b(only|exclusive(?:ly)?|solely)\b", re.I)


def false_vendor_claims(clause: str) -> list[str]:
    """A clause that says the dtype needs NVIDIA or CUDA (and names no other platform beside it)."""
    names_nvidia = NVIDIA_WORD.search(clause)
    if names_nvidia and not claims_grammar.NOT_CUDA.search(clause) and ONLY_WORDS.search(clause):
        return [f"says it needs {names_nvidia.group(0)} ({clause.strip()!r}): Intel XPU and AMD ROCm support it"]
    return []


def claims_truth(dtype: str) -> claims_grammar.Truth:
    """The truth the shared claims grammar checks a rejection's hardware claims against: the dtype's capability on
    CUDA, hardware without CUDA (XPU, ROCm) supporting it, no software version required by the check, and no
    requirement a message must name (c3 asks only that what it names is true)."""
    return claims_grammar.Truth(required=REQUIRED_CAPABILITY[dtype], without_cuda=True, software=(),
                                must_name_requirement=False)


def device_words(capability) -> str:
    """How a failure names the device: its SM, or that it reports no capability."""
    return "a device with no capability" if capability is None else f"SM{capability[0] * 10 + capability[1]}"


def false_flag_values(message: str, capability, dtype: str) -> list[str]:
    """The values the message gives for --kv-cache-dtype that vLLM refuses or that this device rejects too."""
    return [f"gives --kv-cache-dtype {value!r}, " + (f"which {device_words(capability)} rejects too"
                                                       if value in ALL_DTYPES else "a value vLLM does not take")
            for value in FLAG_VALUE.findall(message.rstrip("."))
            if value not in ALL_DTYPES or value == dtype or not needs_met(capability, value)]


def false_claims(message: str, capability, dtype: str, device_name: str) -> list[str]:
    """The claims of a rejection message on a device with ``capability`` (None: it reports none) for ``dtype``
    that the truth table contradicts: its hardware, capability, platform and software-version claims read by the
    shared grammar (``rubrics/claims_grammar.py``, as vit-fp8-blackwell reads its messages), its suggestions and
    flag values here. The device's own name (which may hold a vendor's or a part's) claims nothing."""
    message = message.replace(device_name, "this device")
    device = math.nan if capability is None else capability[0] * 10 + capability[1]
    wrong = false_flag_values(message, capability, dtype)
    wrong += claims_grammar.message_problems(message, device, claims_truth(dtype))
    for clause in CLAUSE_BREAK.split(claims_grammar.in_figures(message)):
        wrong += false_vendor_claims(clause)
        if NOT_A_SUGGESTION.search(clause):
            continue
        for token in DTYPE_TOKEN.findall(clause):
            suggested = DTYPE_WORDS[token.lower()]
            if suggested == dtype or not needs_met(capability, suggested):
                wrong.append(f"suggests {token!r} ({clause.strip()!r}), which {device_words(capability)} rejects "
                             "too")
    return wrong

CUDA_REJECTIONS = [(name, dtype) for name, cap in CUDA_CAPABILITIES.items() for dtype in CAPABILITY_DTYPES
                   if not needs_met(cap, dtype)]


@pytest.mark.criterion("c3")
@pytest.mark.cases(site=IMPL)
@pytest.mark.parametrize("capability,kv_cache_dtype", CUDA_REJECTIONS,
                         ids=[f"{c}-{d}" for c, d in CUDA_REJECTIONS])
def test_cuda_rejection_message_claims_hold(capability, kv_cache_dtype, observed):
    """A CUDA rejection's message claims only what holds on that GPU."""
    cap = CUDA_CAPABILITIES[capability]
    expect(observed, IMPL, "cuda", cap, kv_cache_dtype, False, f"CUDA {capability}")
    seen = observed[_key(_case(IMPL, "cuda", cap, kv_cache_dtype))]
    message = seen["message"]
    wrong = false_claims(message, cap, kv_cache_dtype, seen["device_name"])
    assert not wrong, f"the rejection on CUDA {capability} of {kv_cache_dtype!r} ({message!r}): " + "; ".join(wrong)


# --- c4: the exemption is limited to XPU ----------------------------------------------------------------------


@pytest.mark.criterion("c4")
@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("kv_cache_dtype", ALL_DTYPES)
@pytest.mark.parametrize("platform", list(OTHER_PLATFORMS))
def test_non_xpu_platforms_decide_as_before(platform, kv_cache_dtype, site, observed):
    """Other platforms accept what their capability allows."""
    kind, cap = OTHER_PLATFORMS[platform]
    expect(observed, site, kind, cap, kv_cache_dtype, needs_met(cap, kv_cache_dtype), platform)


@pytest.mark.criterion("c4")
@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("kv_cache_dtype", XPU_STORE_DTYPES)
@pytest.mark.parametrize("platform", list(OTHER_PLATFORMS))
def test_non_xpu_platforms_decide_other_dtypes_as_before(platform, kv_cache_dtype, site, observed,
                                                          base_other_dtypes):
    """Other platforms decide the quantized modes, the other fp8 names and the store's aliases as the base does."""
    kind, cap = OTHER_PLATFORMS[platform]
    want = verdict(base_other_dtypes, site, kind, cap, kv_cache_dtype)
    got = verdict(observed, site, kind, cap, kv_cache_dtype)
    assert got == want, (f"{site} on {platform} with kv_cache_dtype={kv_cache_dtype!r}: {got}, where the base "
                         f"would {want}")


@pytest.mark.criterion("c4")
@pytest.mark.cases(platform="xpu", site=VALIDATOR)
@pytest.mark.parametrize("kv_cache_dtype", XPU_STORE_DTYPES + ALL_DTYPES)
def test_xpu_exemption_lifts_only_the_capability(kv_cache_dtype, observed, base_store_answers):
    """On XPU the store lifts only the capability requirement."""
    allowed = set(base_store_answers[kv_cache_dtype])
    assert allowed <= {True, False}, f"the base's store validator answered {allowed} for {kv_cache_dtype!r}"
    got = verdict(observed, VALIDATOR, "xpu", None, kv_cache_dtype)
    assert got in {"accept" if a else "reject" for a in allowed}, (
        f"{VALIDATOR} on XPU with kv_cache_dtype={kv_cache_dtype!r}: {got}, where the base, on XPU or with every "
        f"capability, would {' or '.join(sorted({'accept' if a else 'reject' for a in allowed}))}")


# The constructor's rejections on the platforms that are not XPU: each message's claims must hold there too (a
# suggestion that assumes a GPU with a capability, bfloat16 on a CPU, is as false as one on an old GPU).
OTHER_REJECTIONS = [(name, dtype) for name, (_, cap) in OTHER_PLATFORMS.items() for dtype in CAPABILITY_DTYPES
                    if not needs_met(cap, dtype)]


@pytest.mark.criterion("c4")
@pytest.mark.cases(site=IMPL)
@pytest.mark.parametrize("platform,kv_cache_dtype", OTHER_REJECTIONS, ids=[f"{p}-{d}" for p, d in OTHER_REJECTIONS])
def test_non_xpu_rejection_message_claims_hold(platform, kv_cache_dtype, observed):
    """A rejection on a platform that is not XPU claims only what holds there (what it suggests works there)."""
    kind, cap = OTHER_PLATFORMS[platform]
    expect(observed, IMPL, kind, cap, kv_cache_dtype, False, platform)
    seen = observed[_key(_case(IMPL, kind, cap, kv_cache_dtype))]
    wrong = false_claims(seen["message"], cap, kv_cache_dtype, seen["device_name"])
    assert not wrong, f"the rejection on {platform} of {kv_cache_dtype!r} ({seen['message']!r}): " + "; ".join(wrong)


# What the probe's fakes are, by kind: the PlatformEnum member each plays.
PLATFORM_ENUMS = {"cuda": "CUDA", "rocm": "ROCM", "xpu": "XPU", "cpu": "CPU", "tpu": "TPU", "oot": "OOT"}
C4_PLATFORMS = {**OTHER_PLATFORMS, "xpu": ("xpu", None)}


def platform_answers_of(kind: str, capability) -> dict:
    """What a platform of ``kind`` with ``capability`` answers when nothing has changed it."""
    queries = (70, 75, 80, 86, 87, 89, 90, 100, 120)
    return {"enum": PLATFORM_ENUMS[kind], "capability": list(capability) if capability else None,
            "has_capability": {str(need): needs_capability(capability, need) for need in queries}}


@pytest.mark.criterion("c4")
@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("platform", list(C4_PLATFORMS))
def test_sites_leave_the_platform_as_it_was(platform, site, observed):
    """Asking a site changes nothing the platform reports to the rest of vLLM (its kind, its capability)."""
    kind, cap = C4_PLATFORMS[platform]
    want = platform_answers_of(kind, cap)
    dtypes = ALL_DTYPES + (XPU_STORE_DTYPES if platform != "xpu" or site == VALIDATOR else [])
    changed = []
    for dtype in dtypes:
        seen = observed[_key(_case(site, kind, cap, dtype))]
        for which, answers in zip(("the platform it ran on", "a new platform of its kind"), seen["platform_after"],
                                  strict=True):
            if answers.get("returned") != want:
                changed.append(f"after kv_cache_dtype={dtype!r}, {which} answers {answers} (before: {want})")
    assert not changed, f"{site} on {platform} changed the platform: " + "; ".join(changed[:3])


# --- c5: every validation site agrees -------------------------------------------------------------------------


@pytest.mark.criterion("c5")
@pytest.mark.cases(platform="xpu", site=VALIDATOR)
@pytest.mark.parametrize("kv_cache_dtype", CAPABILITY_DTYPES)
def test_cache_store_validator_accepts_on_xpu(kv_cache_dtype, observed):
    """The KV cache store accepts fp8 and bfloat16 on XPU."""
    expect(observed, VALIDATOR, "xpu", None, kv_cache_dtype, True,
           "XPU (the KV cache store would reject what the attention backend accepts)")


@pytest.mark.criterion("c5")
@pytest.mark.cases(platform="xpu", site=SITES, kv_cache_dtype=ALL_DTYPES)
def test_validation_sites_agree_on_xpu(observed):
    """On XPU both sites give the same verdict."""
    disagreements = []
    for dtype in ALL_DTYPES:
        impl = verdict(observed, IMPL, "xpu", None, dtype)
        store = verdict(observed, VALIDATOR, "xpu", None, dtype)
        if impl != store:
            disagreements.append(f"{dtype}: backend {impl}, store validator {store}")
    assert not disagreements, "; ".join(disagreements)
