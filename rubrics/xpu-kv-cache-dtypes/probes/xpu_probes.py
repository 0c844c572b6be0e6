"""Probes for xpu-kv-cache-dtypes, run in the subject: what each validation site does on a faked platform.

Each fake is a real subclass of vLLM's ``Platform`` with only ``_enum`` (and a device capability) set, so
``is_xpu``, ``is_cuda``, ``is_cuda_alike``, ``is_rocm``, ``is_cpu``, ``is_tpu`` and ``is_out_of_tree`` all answer
consistently from one enum, whichever of them a candidate gates on. The probe reports what happened (the
constructed backend's dtype, the validator's answer, or what was raised); the judge decides what is right.

Each platform is observed in a fresh import of the two modules, made while its fake is installed: a fix that
reads the platform when its module is imported (a module constant) is then graded on what it does in a process
that runs on that platform, as one that reads it at each call is. The modules the tree had loaded are put back
in ``sys.modules`` (and on their packages) when the probe ends. torch's own XPU queries (``torch.xpu.is_available``,
``device_count``) answer as on a machine of the fake's kind, so a fix that asks torch is graded on its behaviour.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from probe_support import Patches, import_module, install_platform, outcome_of, put_back

ATTN_MODULE = "vllm.v1.attention.backends.triton_attn"
CACHE_MODULE = "vllm.v1.attention.ops.triton_reshape_and_cache_flash"

# kind -> (PlatformEnum member name, device_name, device_type, label used as the device's name)
KINDS = {
    "cuda": ("CUDA", "cuda", "cuda", "Fake NVIDIA GPU"),
    "rocm": ("ROCM", "rocm", "cuda", "Fake AMD GPU"),
    "xpu": ("XPU", "xpu", "xpu", "Fake Intel Arc B580"),
    "cpu": ("CPU", "cpu", "cpu", "Fake CPU"),
    "tpu": ("TPU", "tpu", "tpu", "Fake TPU v5e"),
    "oot": ("OOT", "oot", "oot", "Fake out-of-tree device"),
}


def _make_platform(kind: str, capability):
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    enum_name, device_name, device_type, label = KINDS[kind]
    cap = None if capability is None else DeviceCapability(major=capability[0], minor=capability[1])

    def get_device_capability(cls, device_id: int = 0):
        return cap

    def get_device_name(cls, device_id: int = 0) -> str:
        return label

    attrs = {"_enum": getattr(PlatformEnum, enum_name), "device_name": device_name, "device_type": device_type,
             "get_device_capability": classmethod(get_device_capability),
             "get_device_name": classmethod(get_device_name)}
    return type(f"Fake{enum_name.title()}Platform", (Platform,), attrs)()


# The capabilities whose answers show what a platform reports to the rest of vLLM (every threshold c3 and c4 name).
CAPABILITY_QUERIES = (70, 75, 80, 86, 87, 89, 90, 100, 120)


def _construct(attn_mod, kv_cache_dtype: str, built: list):
    impl = attn_mod.TritonAttentionImpl(num_heads=4, head_size=64, scale=0.125, num_kv_heads=4, alibi_slopes=None,
                                        sliding_window=None, kv_cache_dtype=kv_cache_dtype)
    built.append({name: repr(value) for name, value in vars(impl).items()})
    return impl.kv_cache_dtype


def platform_answers(platform) -> dict:
    """What ``platform`` tells the rest of vLLM about itself: its kind, its capability and each threshold's answer."""
    capability = platform.get_device_capability()
    return {"enum": platform._enum.name,
            "capability": None if capability is None else [capability.major, capability.minor],
            "has_capability": {str(need): bool(platform.has_device_capability(need)) for need in CAPABILITY_QUERIES}}


@contextmanager
def _loaded_modules_kept():
    """Put back, on leaving, the loaded ATTN_MODULE and CACHE_MODULE in ``sys.modules`` and on their packages."""
    names = (ATTN_MODULE, CACHE_MODULE)
    kept = {name: import_module(name) for name in names}
    try:
        yield
    finally:
        put_back(kept)


def _fresh_modules() -> tuple:
    """ATTN_MODULE and CACHE_MODULE imported anew (the attention module first, as vLLM imports them), so that
    whatever they read at import they read from the platform installed now."""
    for name in (ATTN_MODULE, CACHE_MODULE):
        sys.modules.pop(name, None)
    return import_module(ATTN_MODULE), import_module(CACHE_MODULE)


def _platform_of(case: dict) -> tuple:
    return case["platform"], tuple(case["capability"]) if case.get("capability") else None


def _group_of(case: dict) -> tuple:
    """The platform and the site: each site is observed on its own fresh fake and modules, so that what one site
    does to the platform or the modules (a capability patched onto the platform object) never answers for the
    other; a process may ask the KV cache store before any backend is constructed."""
    return *_platform_of(case), case["site"]


def _observe(case: dict, modules: tuple, kind: str, capability, fake) -> dict:
    """What one case did, the backend it built (its attributes' reprs, under ``"backend"``), the device's name and
    what the platform answers afterwards, both the fake the site ran on and a new fake of the same kind (``"platform_after"``)."""
    built: list = []
    if case["site"] == "impl":
        seen = outcome_of(_construct, modules[0], case["dtype"], built)
    else:
        seen = outcome_of(lambda d: bool(modules[1]._is_supported_kv_cache_dtype(d)), case["dtype"])
    if built:
        seen["backend"] = built[0]
    seen["device_name"] = fake.get_device_name()
    seen["platform_after"] = [outcome_of(platform_answers, fake),
                              outcome_of(platform_answers, _make_platform(kind, capability))]
    return seen


def _torch_device_answers(patches: Patches, kind: str) -> None:
    """torch's own device queries answered as on a machine of ``kind``: on XPU, ``torch.xpu.is_available()`` is True
    and one device is counted (a fix may ask torch instead of vLLM's platform, and is right on a real XPU); on every
    other kind there is no XPU device, as on this machine."""
    import torch

    on_xpu = kind == "xpu"
    patches.set(torch.xpu, "is_available", lambda: on_xpu)
    patches.set(torch.xpu, "device_count", lambda: 1 if on_xpu else 0)


def site_outcomes(cases: list[dict]) -> list[dict]:
    """For each ``{"site": "impl"|"validator", "platform": kind, "capability": [major, minor] | None, "dtype"}``:
    what the site did there: ``{"returned": the backend's kv_cache_dtype | the validator's bool}`` or
    ``{"raised": type, "message": text}``, with ``"backend"`` and ``"platform_after"`` (``_observe``). The cases of
    one platform and site run on a fake and modules made afresh for them."""
    import vllm.platforms as vp

    results: list[dict | None] = [None] * len(cases)
    groups = list(dict.fromkeys(map(_group_of, cases)))
    with _loaded_modules_kept(), Patches() as patches:
        replaced = [vp.current_platform]
        for kind, capability, site in groups:
            fake = _make_platform(kind, capability)
            install_platform(patches, replaced, fake)
            _torch_device_answers(patches, kind)
            modules = _fresh_modules()
            for mod in modules:
                patches.set(mod, "current_platform", fake)
            for index, case in enumerate(cases):
                if _group_of(case) != (kind, capability, site):
                    continue
                results[index] = _observe(case, modules, kind, capability, fake)
    return results
