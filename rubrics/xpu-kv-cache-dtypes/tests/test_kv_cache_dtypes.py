"""Hidden tests for xpu-kv-cache-dtypes: which KV cache dtypes the Triton attention backend accepts, per platform.

Two validation sites are exercised: the ``TritonAttentionImpl`` constructor (raises ``ValueError`` to reject)
and ``_is_supported_kv_cache_dtype`` in ``triton_reshape_and_cache_flash.py`` (returns False to reject). The
subject reports what each site did on a faked platform (``probes/xpu_probes.py``); every verdict is decided here.
"""

from __future__ import annotations

import re

import pytest

FP8_DTYPES = ["fp8", "fp8_e4m3", "fp8_e5m2"]
REJECTIONS = ("ValueError", "NotImplementedError")
SITES = ["impl", "validator"]


class SiteCrashed(AssertionError):
    """A site raised something other than a clean rejection."""


def _case(site: str, platform: str, capability, dtype: str) -> dict:
    return {"site": site, "platform": platform, "capability": list(capability) if capability else None,
            "dtype": dtype}


def _accepted(case: dict, observed: dict) -> bool:
    """Accept or reject, read off what the site did; anything but a clean rejection raises SiteCrashed."""
    if "raised" in observed:
        if case["site"] == "impl" and observed["raised"] in REJECTIONS:
            return False
        raise SiteCrashed(f"{case['site']} on {case['platform']} with {case['dtype']!r} raised "
                          f"{observed['raised']}: {observed['message']}")
    value = observed["returned"]
    if case["site"] == "impl":
        assert value == case["dtype"], f"the backend was built with kv_cache_dtype {value!r}, not {case['dtype']!r}"
        return True
    assert isinstance(value, bool), f"the validator's answer is not a bool: {value!r}"
    return value


def accepts(subject, site: str, platform: str, dtype: str, capability=None) -> bool:
    case = _case(site, platform, capability, dtype)
    (observed,) = subject.call("xpu_probes.site_outcomes", cases=[case])
    return _accepted(case, observed)


def _wrong_verdicts(subject, cases: list[tuple[str, dict, bool]]) -> list[str]:
    """Every (label, case, expected) the site gets wrong, each described; an unexpected exception counts."""
    observed = subject.call("xpu_probes.site_outcomes", cases=[case for _, case, _ in cases])
    wrong = []
    for (label, case, accepted), seen in zip(cases, observed, strict=True):
        try:
            got = _accepted(case, seen)
        except AssertionError as exc:
            wrong.append(f"{label} {case['dtype']}: {exc}")
            continue
        if got != accepted:
            wrong.append(f"{label} {case['dtype']}: expected {'accept' if accepted else 'reject'}, "
                         f"got {'accept' if got else 'reject'}")
    return wrong


# --- c1: fp8 on XPU ---------------------------------------------------------------------------------------------


@pytest.mark.criterion("c1")
@pytest.mark.parametrize("kv_cache_dtype", FP8_DTYPES)
def test_xpu_accepts_fp8_kv_cache(kv_cache_dtype, subject):
    """The Triton attention backend accepts an fp8 KV cache on XPU (no CUDA capability)."""
    assert accepts(subject, "impl", "xpu", kv_cache_dtype), f"rejected kv_cache_dtype={kv_cache_dtype!r} on XPU"


# --- c2: bf16 on XPU --------------------------------------------------------------------------------------------


@pytest.mark.criterion("c2")
def test_xpu_accepts_bf16_kv_cache(subject):
    """The Triton attention backend accepts a bfloat16 KV cache on XPU (no CUDA capability)."""
    assert accepts(subject, "impl", "xpu", "bfloat16"), "rejected kv_cache_dtype='bfloat16' on XPU"


# --- c3: CUDA capability errors preserved ---------------------------------------------------------------------

CUDA_CASES = [
    # (capability, dtype, accepted)
    ((7, 5), "fp8", False),
    ((8, 0), "fp8", False),
    ((8, 6), "fp8", False),
    ((7, 5), "bfloat16", False),
    ((8, 0), "bfloat16", True),
    ((8, 9), "fp8", True),
    ((9, 0), "fp8", True),
    # A capability error is kept only where it was: dtypes that need no capability stay accepted on old GPUs.
    ((7, 5), "float16", True),
    ((7, 5), "auto", True),
]


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize(
    "capability,kv_cache_dtype,accepted",
    CUDA_CASES,
    ids=[f"sm{c[0]}{c[1]}-{d}-{'accept' if a else 'reject'}" for c, d, a in CUDA_CASES],
)
def test_cuda_capability_rules_kept(capability, kv_cache_dtype, accepted, site, subject):
    """On CUDA, fp8 still needs SM89+ and bfloat16 SM80+ (float16 and auto nothing), at both validation sites."""
    got = accepts(subject, site, "cuda", kv_cache_dtype, capability)
    assert got == accepted, (
        f"{site} on CUDA SM{capability[0]}{capability[1]} with kv_cache_dtype={kv_cache_dtype!r}: "
        f"expected {'accept' if accepted else 'reject'}, got {'accept' if got else 'reject'}"
    )


# The per-case tests above give partial credit; this one asks that a site keeps *all* of the CUDA rules. Its
# weight equals the site's case count, so a site that gets even one rule wrong leaves c3 below met: keeping the
# capability errors means keeping every one of them, not most of them.
@pytest.mark.criterion("c3", weight=len(CUDA_CASES))
@pytest.mark.parametrize("site", SITES)
def test_cuda_capability_rules_all_kept_per_site(site, subject):
    """One validation site gets every CUDA capability case right: SM89+ for fp8, SM80+ for bf16, fp16 anywhere."""
    cases = [(f"CUDA SM{c[0]}{c[1]}", _case(site, "cuda", c, d), a) for c, d, a in CUDA_CASES]
    wrong = _wrong_verdicts(subject, cases)
    assert not wrong, f"{site} gets {len(wrong)} CUDA case(s) wrong: " + "; ".join(wrong)


# A rejection's advice is part of what it claims: "Re-run with --kv-cache-dtype X" says X works on this GPU. An
# error that sends an SM75 user to bfloat16 (which SM75 rejects too) keeps the rejection and breaks its promise.
# Each rejection must still happen (a missing one is wrong here too, never a vacuous pass), and its advice, where
# it gives one, must hold. Weighted as the two all-cases tests together: wrong advice leaves c3 below met.
SUGGESTION = re.compile(r"--kv-cache-dtype[ =]+([A-Za-z0-9_]+)")


@pytest.mark.criterion("c3", weight=2 * len(CUDA_CASES))
def test_cuda_rejections_suggest_a_dtype_that_is_accepted_there(subject):
    """Each CUDA rejection still happens, and where it suggests another --kv-cache-dtype, that one is accepted there."""
    rejected = [(c, d) for c, d, a in CUDA_CASES if not a]
    observed = subject.call("xpu_probes.site_outcomes", cases=[_case("impl", "cuda", c, d) for c, d in rejected])
    wrong = []
    for (capability, dtype), seen in zip(rejected, observed, strict=True):
        if seen.get("raised") not in REJECTIONS:
            wrong.append(f"SM{capability[0]}{capability[1]} {dtype}: not rejected ({seen})")
            continue
        suggested = SUGGESTION.search(seen.get("message", ""))
        if suggested and not accepts(subject, "impl", "cuda", suggested.group(1), capability):
            wrong.append(f"SM{capability[0]}{capability[1]} {dtype}: suggests {suggested.group(1)!r}, "
                         "which is rejected there too")
    assert not wrong, "; ".join(wrong)


# --- c4: the exemption is limited to XPU ----------------------------------------------------------------------

OTHER_PLATFORMS = [
    ("cpu", None),
    ("tpu", None),
    ("oot", None),
    ("rocm", (7, 5)),
]
C4_DTYPES = ["fp8", "bfloat16"]


@pytest.mark.criterion("c4")
@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("kv_cache_dtype", C4_DTYPES)
@pytest.mark.parametrize(
    "kind,capability",
    OTHER_PLATFORMS,
    ids=[k if c is None else f"{k}-cap{c[0]}{c[1]}" for k, c in OTHER_PLATFORMS],
)
def test_non_xpu_without_capability_still_rejected(kind, capability, kv_cache_dtype, site, subject):
    """Platforms other than XPU without the needed capability (CPU, TPU, out-of-tree, low ROCm) still reject."""
    assert not accepts(subject, site, kind, kv_cache_dtype, capability), (
        f"{site} accepted kv_cache_dtype={kv_cache_dtype!r} on {kind} (capability {capability}); "
        "only XPU is exempt from the capability check"
    )


# As for c3: the per-case tests give partial credit, this one asks that a site rejects on *every* platform that is
# not XPU and lacks the capability. A rejection must be a clean one (ValueError / NotImplementedError or False);
# code that crashes on a platform without a capability (for instance reading the missing capability) is wrong.
@pytest.mark.criterion("c4", weight=len(OTHER_PLATFORMS) * len(C4_DTYPES))
@pytest.mark.parametrize("site", SITES)
def test_non_xpu_rejections_all_kept_per_site(site, subject):
    """One validation site rejects fp8 and bf16 on every non-XPU platform that lacks the capability."""
    cases = [(f"{kind} (capability {cap})", _case(site, kind, cap, dtype), False)
             for kind, cap in OTHER_PLATFORMS for dtype in C4_DTYPES]
    wrong = _wrong_verdicts(subject, cases)
    assert not wrong, f"{site} gets {len(wrong)} non-XPU case(s) wrong: " + "; ".join(wrong)


# The exemption is XPU's, and it lifts the capability requirement and nothing else: the store validator rejects
# on every other platform without the capability, and a dtype it never supports (neither native nor quantized, as
# the base decides) stays rejected on XPU too. A validator that answers True on XPU before looking at the dtype
# accepts any string there. All at once, weighted as all the per-case c4 tests: an exemption wider than asked, in
# platforms or in dtypes, leaves c4 below met.
NEVER_SUPPORTED = ["turboquant_k8v4", "turboquant_3bit_nc"]


@pytest.mark.criterion("c4", weight=len(OTHER_PLATFORMS) * len(C4_DTYPES) * len(SITES))
def test_xpu_exemption_keeps_unsupported_dtypes_rejected(subject):
    """The store validator's exemption is exactly XPU's capability: other platforms and unsupported dtypes still fail."""
    cases = [(f"{kind} (capability {cap})", _case("validator", kind, cap, dtype), False)
             for kind, cap in OTHER_PLATFORMS for dtype in C4_DTYPES]
    cases += [("XPU", _case("validator", "xpu", None, dtype), False) for dtype in NEVER_SUPPORTED]
    wrong = _wrong_verdicts(subject, cases)
    assert not wrong, "the exemption is wider than XPU's capability: " + "; ".join(wrong)


# --- c5: every validation site agrees -------------------------------------------------------------------------


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("kv_cache_dtype", FP8_DTYPES + ["bfloat16"])
def test_cache_store_validator_accepts_on_xpu(kv_cache_dtype, subject):
    """_is_supported_kv_cache_dtype in triton_reshape_and_cache_flash.py accepts fp8 and bf16 on XPU."""
    assert accepts(subject, "validator", "xpu", kv_cache_dtype), (
        f"_is_supported_kv_cache_dtype({kv_cache_dtype!r}) is False on XPU: the KV cache store would "
        "reject what the attention backend accepts"
    )


# As for c3 and c4: c5 names every dtype (fp8, fp8_e4m3, fp8_e5m2 and bfloat16); a store validator that accepts
# all but one of them does not do what c5 asks. Weight 2: one dtype rejected entirely leaves c5 at 4/7, below
# met, while a validator that accepts bf16 alone (and agrees with its backend) stays partial (2/7).
@pytest.mark.criterion("c5", weight=2)
def test_cache_store_validator_accepts_every_dtype_on_xpu(subject):
    """The KV cache store validator accepts every fp8 dtype and bfloat16 on XPU, not just some of them."""
    cases = [("XPU", _case("validator", "xpu", None, dtype), True) for dtype in FP8_DTYPES + ["bfloat16"]]
    wrong = _wrong_verdicts(subject, cases)
    assert not wrong, f"the store validator gets {len(wrong)} XPU dtype(s) wrong: " + "; ".join(wrong)


@pytest.mark.criterion("c5")
def test_validation_sites_agree_on_xpu(subject):
    """On XPU the attention backend and the KV cache store validator give the same verdict for every dtype."""
    disagreements = []
    for dtype in FP8_DTYPES + ["bfloat16", "float16", "auto"]:
        impl_ok = accepts(subject, "impl", "xpu", dtype)
        store_ok = accepts(subject, "validator", "xpu", dtype)
        if impl_ok != store_ok:
            disagreements.append(f"{dtype}: backend {'accepts' if impl_ok else 'rejects'}, "
                                 f"store validator {'accepts' if store_ok else 'rejects'}")
    assert not disagreements, "; ".join(disagreements)
