"""Hidden tests for xpu-kv-cache-dtypes: which KV cache dtypes the Triton attention backend accepts, per platform.

Two validation sites are exercised: the ``TritonAttentionImpl`` constructor (raises ``ValueError`` to reject)
and ``_is_supported_kv_cache_dtype`` in ``triton_reshape_and_cache_flash.py`` (returns False to reject).
"""

from __future__ import annotations

import pytest

FP8_DTYPES = ["fp8", "fp8_e4m3", "fp8_e5m2"]
REJECTIONS = (ValueError, NotImplementedError)
SITES = ["impl", "validator"]


def _accepts(site: str, kv_cache_dtype: str, build_impl, validator) -> bool:
    """True when the given site accepts the dtype on the installed platform, False when it rejects it."""
    if site == "validator":
        return validator(kv_cache_dtype)
    try:
        build_impl(kv_cache_dtype)
    except REJECTIONS:
        return False
    return True


# --- c1: fp8 on XPU ---------------------------------------------------------------------------------------------


@pytest.mark.criterion("c1")
@pytest.mark.parametrize("kv_cache_dtype", FP8_DTYPES)
def test_xpu_accepts_fp8_kv_cache(kv_cache_dtype, use_platform, build_impl):
    """The Triton attention backend accepts an fp8 KV cache on XPU (no CUDA capability)."""
    use_platform("xpu")
    impl = build_impl(kv_cache_dtype)
    assert impl.kv_cache_dtype == kv_cache_dtype


# --- c2: bf16 on XPU --------------------------------------------------------------------------------------------


@pytest.mark.criterion("c2")
def test_xpu_accepts_bf16_kv_cache(use_platform, build_impl):
    """The Triton attention backend accepts a bfloat16 KV cache on XPU (no CUDA capability)."""
    use_platform("xpu")
    impl = build_impl("bfloat16")
    assert impl.kv_cache_dtype == "bfloat16"


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
]


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize(
    "capability,kv_cache_dtype,accepted",
    CUDA_CASES,
    ids=[f"sm{c[0]}{c[1]}-{d}-{'accept' if a else 'reject'}" for c, d, a in CUDA_CASES],
)
def test_cuda_capability_rules_kept(capability, kv_cache_dtype, accepted, site, use_platform, build_impl, validator):
    """On CUDA, fp8 still needs SM89+ and bfloat16 SM80+, at both validation sites."""
    use_platform("cuda", capability)
    got = _accepts(site, kv_cache_dtype, build_impl, validator)
    assert got == accepted, (
        f"{site} on CUDA SM{capability[0]}{capability[1]} with kv_cache_dtype={kv_cache_dtype!r}: "
        f"expected {'accept' if accepted else 'reject'}, got {'accept' if got else 'reject'}"
    )


# --- c4: the exemption is limited to XPU ----------------------------------------------------------------------

OTHER_PLATFORMS = [
    ("cpu", None),
    ("tpu", None),
    ("oot", None),
    ("rocm", (7, 5)),
]


@pytest.mark.criterion("c4")
@pytest.mark.parametrize("site", SITES)
@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "bfloat16"])
@pytest.mark.parametrize(
    "kind,capability",
    OTHER_PLATFORMS,
    ids=[k if c is None else f"{k}-cap{c[0]}{c[1]}" for k, c in OTHER_PLATFORMS],
)
def test_non_xpu_without_capability_still_rejected(
    kind, capability, kv_cache_dtype, site, use_platform, build_impl, validator
):
    """Platforms other than XPU without the needed capability (CPU, TPU, out-of-tree, low ROCm) still reject."""
    use_platform(kind, capability)
    assert not _accepts(site, kv_cache_dtype, build_impl, validator), (
        f"{site} accepted kv_cache_dtype={kv_cache_dtype!r} on {kind} (capability {capability}); "
        "only XPU is exempt from the capability check"
    )


# --- c5: every validation site agrees -------------------------------------------------------------------------


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("kv_cache_dtype", FP8_DTYPES + ["bfloat16"])
def test_cache_store_validator_accepts_on_xpu(kv_cache_dtype, use_platform, validator):
    """_is_supported_kv_cache_dtype in triton_reshape_and_cache_flash.py accepts fp8 and bf16 on XPU."""
    use_platform("xpu")
    assert validator(kv_cache_dtype), (
        f"_is_supported_kv_cache_dtype({kv_cache_dtype!r}) is False on XPU: the KV cache store would "
        "reject what the attention backend accepts"
    )


@pytest.mark.criterion("c5")
def test_validation_sites_agree_on_xpu(use_platform, build_impl, validator):
    """On XPU the attention backend and the KV cache store validator give the same verdict for every dtype."""
    use_platform("xpu")
    disagreements = []
    for dtype in FP8_DTYPES + ["bfloat16", "float16", "auto"]:
        impl_ok = _accepts("impl", dtype, build_impl, validator)
        store_ok = validator(dtype)
        if impl_ok != store_ok:
            disagreements.append(f"{dtype}: backend {'accepts' if impl_ok else 'rejects'}, "
                                 f"store validator {'accepts' if store_ok else 'rejects'}")
    assert not disagreements, "; ".join(disagreements)
