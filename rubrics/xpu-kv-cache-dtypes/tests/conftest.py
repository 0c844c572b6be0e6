"""Fake platforms for the xpu-kv-cache-dtypes hidden tests.

Nothing here needs Triton kernels or a GPU: the tests only construct ``TritonAttentionImpl`` and call
``_is_supported_kv_cache_dtype`` while a fake platform stands in for ``current_platform``. Each fake is a real
subclass of vLLM's ``Platform`` with only ``_enum`` (and a device capability) set, so ``is_xpu``, ``is_cuda``,
``is_cuda_alike``, ``is_rocm``, ``is_cpu``, ``is_tpu`` and ``is_out_of_tree`` all answer consistently from one
enum, whichever of them a candidate gates on.
"""

from __future__ import annotations

import importlib
import sys

import pytest

ATTN_MODULE = "vllm.v1.attention.backends.triton_attn"
CACHE_MODULE = "vllm.v1.attention.ops.triton_reshape_and_cache_flash"

# kind -> (PlatformEnum member name, device_name, device_type, label used as the device's name)
_KINDS = {
    "cuda": ("CUDA", "cuda", "cuda", "Fake NVIDIA GPU"),
    "rocm": ("ROCM", "rocm", "cuda", "Fake AMD GPU"),
    "xpu": ("XPU", "xpu", "xpu", "Fake Intel Arc B580"),
    "cpu": ("CPU", "cpu", "cpu", "Fake CPU"),
    "tpu": ("TPU", "tpu", "tpu", "Fake TPU v5e"),
    "oot": ("OOT", "oot", "oot", "Fake out-of-tree device"),
}


def make_platform(kind: str, capability: tuple[int, int] | None = None):
    """A fake ``Platform`` instance of the given kind, with ``capability`` (None: no capability)."""
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    enum_name, device_name, device_type, label = _KINDS[kind]
    cap = None if capability is None else DeviceCapability(major=capability[0], minor=capability[1])

    def get_device_capability(cls, device_id: int = 0):
        return cap

    def get_device_name(cls, device_id: int = 0) -> str:
        return label

    attrs = {
        "_enum": getattr(PlatformEnum, enum_name),
        "device_name": device_name,
        "device_type": device_type,
        "get_device_capability": classmethod(get_device_capability),
        "get_device_name": classmethod(get_device_name),
    }
    cls = type(f"Fake{enum_name.title()}Platform", (Platform,), attrs)
    return cls()


def _import(name: str):
    # A candidate's import error must fail the test, not skip it: let it propagate.
    return importlib.import_module(name)


@pytest.fixture
def modules():
    """The two validation modules of the patched tree, imported."""
    return _import(ATTN_MODULE), _import(CACHE_MODULE)


@pytest.fixture
def use_platform(monkeypatch, modules):
    """Install a fake platform as ``current_platform`` everywhere vLLM code can see it; undone after the test."""
    import vllm.platforms as vp

    # The real platform and every fake installed so far: a test may switch platforms several times (the
    # all-cases tests do), and each switch must reach every module that still holds an earlier one.
    replaced = [vp.current_platform]

    def install(kind: str, capability: tuple[int, int] | None = None):
        fake = make_platform(kind, capability)
        monkeypatch.setattr(vp, "_current_platform", fake)
        for name, mod in list(sys.modules.items()):
            if mod is None or not (name == "vllm" or name.startswith("vllm.")):
                continue
            held = getattr(mod, "__dict__", {}).get("current_platform")
            if any(held is earlier for earlier in replaced):
                monkeypatch.setattr(mod, "current_platform", fake)
        replaced.append(fake)
        # The two sites under test must see the fake even if they bound the platform some other way.
        for mod in modules:
            monkeypatch.setattr(mod, "current_platform", fake, raising=False)
        return fake

    return install


@pytest.fixture
def build_impl(modules):
    """Construct ``TritonAttentionImpl`` with tiny shapes and the given KV cache dtype."""
    attn_mod = modules[0]

    def build(kv_cache_dtype: str):
        return attn_mod.TritonAttentionImpl(
            num_heads=4,
            head_size=64,
            scale=0.125,
            num_kv_heads=4,
            alibi_slopes=None,
            sliding_window=None,
            kv_cache_dtype=kv_cache_dtype,
        )

    return build


@pytest.fixture
def validator(modules):
    """``_is_supported_kv_cache_dtype`` from ``triton_reshape_and_cache_flash.py`` as a bool-valued callable."""
    cache_mod = modules[1]

    def check(kv_cache_dtype: str) -> bool:
        return bool(cache_mod._is_supported_kv_cache_dtype(kv_cache_dtype))

    return check
