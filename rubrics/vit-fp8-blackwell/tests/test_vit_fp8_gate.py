"""Hidden tests for vit-fp8-blackwell: FP8 ViT attention (cuDNN FP8 SDPA via FlashInfer) needs Blackwell.

All tests run on CPU with a fake CUDA platform, installed in the subject by ``probes/vit_fp8_probes.py``; every
verdict is decided here. The gate is ``is_flashinfer_cudnn_fp8_prefill_attn_supported``; the user-facing error
comes from constructing ``MMEncoderAttention`` with ``mm_encoder_attn_dtype="fp8"``. The subject answers every
declared case in two calls per candidate (the gate's answers, the layer's builds); each case is its own check.
Nothing is drawn: every status is the same for any secret.
"""

from __future__ import annotations

import re

import pytest

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
# A refusal's message is read as claims, not matched against known phrasings. It is cut into clauses; each
# hardware mention in a clause (an architecture name, a part name, an SM number, a "compute capability X.Y") is a
# capability. In a clause that negates (not, unsupported, older, ...) a mention says that hardware does not run
# FP8 ViT attention; elsewhere it says it does (requires, supported on, works on, or newer). Each claim must agree
# with the truth (SM100 or newer); the device's own capability named as a report ("this device reports 9.0") or
# as the subject of the refusal ("not supported on this GPU (compute capability 9.0)") claims nothing. A cuDNN
# minimum, where one is stated, must be 9.17.1. And the message must name the requirement: some clause says that
# SM100-or-newer hardware is what is needed.

ARCHITECTURES = {"blackwell": 100, "hopper": 90, "ada": 89, "lovelace": 89, "ampere": 80, "turing": 75,
                 "volta": 70}
PARTS = [(re.compile(r"\bG?B[123]00[a-z]?\b|\bGB10\b|\bRTX\s?PRO\s?6000\b", re.I), 100),
         (re.compile(r"\bRTX\s?50\d0\b", re.I), 120),
         (re.compile(r"\bG?H(?:100|200|20|800)\b", re.I), 90),
         (re.compile(r"\bL(?:40S?|4|20)\b|\bRTX\s?40\d0\b", re.I), 89),
         (re.compile(r"\bA(?:100|10G?|30|40|800)\b|\bRTX\s?30\d0\b", re.I), 80)]
ARCH = re.compile(r"\b(" + "|".join(ARCHITECTURES) + r")\b", re.I)
SM = re.compile(r"\bsm[ _-]?(\d{2,3})[a-z]?\b", re.I)
# A capability as a version number after any word for the GPU ("compute capability 9.0", "arch 9.0", "a 9.0 GPU"
# reads the other way round and is caught by GPU_VERSION), never across a cuDNN version.
CAPABILITY_NUMBER = re.compile(r"(?:capabilit(?:y|ies)|\barch(?:itecture)?s?|\bcompute|\bgpus?|\bdevices?|\bsm)"
                               r"(?:(?!cudnn)\D){0,16}?(?<![\d.])(\d{1,2})\.(\d)(?![\d.])", re.I)
GPU_VERSION = re.compile(r"(?<![\d.])(\d{1,2})\.(\d)(?![\d.])(?=[\s-]*(?:\+\s*)?(?:class\s+|series\s+)?"
                         r"(?:gpus?|devices?|archs?|architectures?|hardware|cards?)\b)", re.I)
CLAUSE_BREAK = re.compile(r";|,|:|\.(?=\s|$)|\s[-\u2013\u2014]\s|\bbut\b", re.I)
NEGATION = re.compile(r"\b(not|unsupported|no|cannot|can't|isn't|aren't|doesn't|don't|lacks?|never|refuses?|"
                      r"rejects?|older|too old|below|earlier|prior|predates?|pre-\w+)\b", re.I)
CALLS_IT_OLD = re.compile(r"\b(older|too old|below|earlier|prior|predates?|pre-blackwell|lacks?)\b", re.I)
CUDNN_MINIMUM = re.compile(r"cudnn[^;,]{0,24}?(?:>=|\u2265|=>|at least|version)\s*v?(\d+)\.(\d+)(?:\.(\d+))?"
                           r"|cudnn\s*v?(\d+)\.(\d+)(?:\.(\d+))?\s*(?:\+|or (?:newer|later|above))", re.I)


# Any cuDNN version a message names: it must be the minimum (9.17.1) or the machine's own.
CUDNN_NAMED = re.compile(r"cudnn\D{0,24}?v?(\d+)\.(\d+)(?:\.(\d+))?", re.I)
# What marks a mention of the device's own hardware as a report of it, not a claim ("this device reports 9.0",
# "your H100", "detected SM90"): without one, naming the device's architecture says it runs FP8 ViT attention.
REPORTS_THE_DEVICE = re.compile(r"\b(this|your|current|detected|reports?|reported|found|here|got|running|saw|seen|"
                                r"given)\b", re.I)
AS_MINIMUM = re.compile(r"\s*(?:\+|or (?:newer|later|above|higher)|and (?:newer|later|above|up))", re.I)
SUPPORT_WORDS = re.compile(r"\b(supported|supports|works?|runs?|available)\b", re.I)
# A mention that is the bar another is measured against ("older than Blackwell", "pre-Blackwell", "below SM100").
AS_BAR = re.compile(r"(?:\bthan|\bpre-|\bbelow|\bbefore|\bprior to|\bunder)\W{0,3}(?:\w+\W{1,3})?$", re.I)
# The device itself, named without a number ("this GPU", "your device", "the current hardware"): on an SM100+ GPU
# refused for its cuDNN or backend, calling it old or telling the user to change it is false.
DEVICE_REFERENCE = re.compile(r"\b(?:this|your|the current|current|detected)\s+(?:\w+\s+)?"
                              r"(?:gpus?|devices?|hardware|cards?|accelerators?)\b", re.I)
DEVICE_CALLED_OLD = re.compile(r"\b(older|too old|outdated|obsolete|legacy|below|predates?|pre-blackwell|lacks?|"
                               r"insufficient|not new enough)\b", re.I)
GPU_CHANGE = re.compile(r"\b(upgrade|replace|switch)\b[^;,.]{0,40}?\b(gpus?|devices?|hardware|cards?)\b", re.I)
# Market segments that hold SM100+ parts (GeForce RTX 50x0 and RTX PRO 6000 are SM120, Jetson Thor SM110): a clause
# that says such a segment does not run it, without narrowing it to older parts, says an SM100+ GPU does not.
SEGMENT = re.compile(r"\b(geforce|consumer|workstation|desktop|laptop|jetson|rtx(?!\s?(?:pro\s?)?\d))\b", re.I)
# "only on SM100 (B200)": the requirement said to be one capability or part, not "or newer", excludes the rest.
ONLY = re.compile(r"\b(only|exclusively|solely)\b", re.I)


def _hardware_mentions(clause: str) -> list[tuple[str, int, bool, bool]]:
    """Each hardware mention in ``clause``: its text, its capability (major * 10 + minor), whether it is stated
    as a minimum ("SM90+", "Hopper or newer") and whether it is a bar ("older than Blackwell (SM100)")."""
    found = [(m, ARCHITECTURES[m.group(1).lower()]) for m in ARCH.finditer(clause)]
    found += [(m, value) for pattern, value in PARTS for m in pattern.finditer(clause)]
    found += [(m, int(m.group(1)) * (10 if int(m.group(1)) < 20 else 1)) for m in SM.finditer(clause)]
    found += [(m, int(m.group(1)) * 10 + int(m.group(2))) for pattern in (CAPABILITY_NUMBER, GPU_VERSION)
              for m in pattern.finditer(clause)]
    return [(m.group(0), value, bool(AS_MINIMUM.match(clause, m.end())), bool(AS_BAR.search(clause[:m.start()])))
            for m, value in found]


def _clauses(message: str) -> list[tuple[str, str]]:
    """The message's clauses, each with its context for a report of the device: the clause itself, and the one
    before it where a colon joins them ("this device: compute capability 9.0")."""
    pieces = re.split(f"({CLAUSE_BREAK.pattern})", message, flags=re.I)
    clauses, breaks = pieces[0::2], [""] + [b or "" for b in pieces[1::2]]
    return [(clause, (clauses[i - 1] + " " if i and breaks[i].strip() == ":" else "") + clause)
            for i, clause in enumerate(clauses)]


def _device_problems(clause: str, device: int) -> list[str]:
    """On an SM100+ GPU (refused for its cuDNN or backend), what a clause says falsely of the device or of SM100+
    parts without naming a capability: calls this GPU old, tells the user to change it, or says a market segment
    holding SM100+ parts does not run it."""
    if device < REQUIRED:
        return []
    problems = []
    if DEVICE_REFERENCE.search(clause) and DEVICE_CALLED_OLD.search(clause):
        problems.append(f"calls this SM100+ GPU old ({clause.strip()!r})")
    if (change := GPU_CHANGE.search(clause)) and not re.search(r"cudnn|flashinfer|driver", clause, re.I):
        problems.append(f"tells the user of an SM100+ GPU to {change.group(1).lower()} it ({clause.strip()!r})")
    return problems


def _segment_problems(clause: str, negated: bool, mentions: list) -> list[str]:
    """A clause that says a market segment holding SM100+ parts does not run it, unless it narrows the segment to
    older parts (an older capability named, or called old)."""
    segment = SEGMENT.search(clause)
    if not (segment and negated) or CALLS_IT_OLD.search(clause) or any(v < REQUIRED for _, v, _, _ in mentions):
        return []
    return [f"says {segment.group(0)!r} GPUs, among them SM100+ parts, do not run it ({clause.strip()!r})"]


def _only_problems(clause: str, negated: bool, mentions: list) -> list[str]:
    """A clause that says only some SM100+ capabilities or parts run it (none stated as a minimum): the rest of
    SM100 or newer runs it too. An architecture name ("only on Blackwell") is left alone."""
    exact = [t for t, v, as_minimum, as_bar in mentions if v >= REQUIRED and not as_minimum and not as_bar
             and t.lower() not in ARCHITECTURES]
    if negated or not ONLY.search(clause) or not exact or any(m for _, v, m, _ in mentions if v >= REQUIRED):
        return []
    return [f"says only {', '.join(exact)} runs it, not SM100 or newer ({clause.strip()!r})"]


def message_problems(message: str, capability: str, cudnn: str) -> list[str]:
    """What is false or missing in a refusal's message on ``capability`` with ``cudnn``, read as claims."""
    device = CAPABILITIES[capability][0] * 10 + CAPABILITIES[capability][1]
    problems, names_requirement = [], False
    for clause, context in _clauses(message):
        negated = bool(NEGATION.search(clause))
        mentions = _hardware_mentions(clause)
        problems += (_device_problems(clause, device) + _segment_problems(clause, negated, mentions)
                     + _only_problems(clause, negated, mentions))
        for text, value, as_minimum, as_bar in mentions:
            if negated and as_bar:
                names_requirement = names_requirement or value >= REQUIRED
            elif negated:
                if value == device and not CALLS_IT_OLD.search(clause):
                    continue  # the subject of the refusal: "not supported on this GPU (capability 9.0)"
                if value >= REQUIRED:
                    problems.append(f"says {text!r} does not run it ({clause.strip()!r})")
            elif value >= REQUIRED:
                names_requirement = True
            elif (value == device and not as_minimum and not SUPPORT_WORDS.search(clause)
                  and REPORTS_THE_DEVICE.search(context)):
                continue  # the device named ("this device reports 9.0", "on NVIDIA H100 this needs ...")
            else:
                problems.append(f"says {text!r} runs it or is what it needs ({clause.strip()!r})")
    for m in CUDNN_MINIMUM.finditer(message):
        version = tuple(int(g) for g in (m.group(1, 2, 3) if m.group(1) else m.group(4, 5, 6)) if g is not None)
        if version not in ((9, 17, 1), (9, 17)):
            problems.append(f"states cuDNN minimum {'.'.join(map(str, version))} ({m.group(0)!r}; the truth: 9.17.1)")
    own = tuple(int(part) for part in cudnn.split("."))
    for m in CUDNN_NAMED.finditer(message):
        version = tuple(int(g) for g in m.group(1, 2, 3) if g is not None)
        if version not in ((9, 17, 1), (9, 17), own, own[:2]):
            problems.append(f"names cuDNN {'.'.join(map(str, version))} ({m.group(0)!r}), neither the minimum 9.17.1 "
                            f"nor this machine's {cudnn}")
    if not names_requirement:
        problems.append("does not name the Blackwell / SM100-or-newer requirement")
    return problems


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


@pytest.fixture(scope="module")
def other_platform_answers(subject) -> dict:
    """What the gate and the layer did on each platform of OTHER_PLATFORMS: {(site, name): outcome}."""
    cases = [{"platform": kind, "capability": None if cap is None else list(cap), "cudnn": CUDNN["9.17.1"],
              "flashinfer": False} for kind, cap in OTHER_PLATFORMS.values()]
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
# same fake GPUs; the candidate's outcome must be the base's on each (a check moved out of the FP8 branch stops
# every ViT on Hopper and Ada, FP8 or not). mm_encoder_attn_dtype takes "fp8" or None, so "unset" is its only
# non-FP8 value; "no-multimodal-config" is a layer built outside a multimodal model's config.
WITHOUT_FP8 = {"unset": {"attn_dtype": None}, "no-multimodal-config": {"multimodal_config": False}}
WITHOUT_FP8_GPUS = ["sm80", "sm89", "sm90", "sm100", "sm120"]
WITHOUT_FP8_CASES = [(c, d, f) for c in WITHOUT_FP8_GPUS for d in WITHOUT_FP8 for f in FLASHINFER]


def _without_fp8_outcomes(subject) -> list[dict]:
    return subject.call("vit_fp8_probes.build_outcomes",
                        cases=[{**_gpu(c, "9.17.1", f), **WITHOUT_FP8[d]} for c, d, f in WITHOUT_FP8_CASES])


def _layer_outcome(seen: dict) -> str:
    if "raised" in seen:
        return f"raised {seen['raised']}: {seen['message'][:200]}"
    return f"built with fp8_enabled={seen['returned'].get('fp8_enabled')!r}"


@pytest.mark.criterion("c5")
@pytest.mark.cases(capability=WITHOUT_FP8_GPUS, attn_dtype=list(WITHOUT_FP8), flashinfer=list(FLASHINFER))
def test_layer_without_fp8_builds_as_in_the_base(subject, base_subject):
    """Without FP8 the layer builds on every GPU exactly as in the base (the requirement stops FP8 only)."""
    got, want = _without_fp8_outcomes(subject), _without_fp8_outcomes(base_subject)
    problems = [f"{_label(c, '9.17.1', f)}, mm_encoder_attn_dtype {d}: {_layer_outcome(o)}, where the base "
                f"{_layer_outcome(w)}" for (c, d, f), o, w in zip(WITHOUT_FP8_CASES, got, want, strict=True)
                if _layer_outcome(o) != _layer_outcome(w)]
    assert not problems, "; ".join(problems)
