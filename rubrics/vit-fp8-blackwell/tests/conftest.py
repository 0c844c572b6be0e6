"""Fake GPUs for the vit-fp8-blackwell hidden tests.

The gate under test, ``is_flashinfer_cudnn_fp8_prefill_attn_supported`` in ``vllm/utils/flashinfer.py``, decides
from the platform's compute capability, the platform's supported ViT attention backends and the cuDNN version.
These fixtures control all three on a CPU-only machine:

- a fake CUDA ``Platform`` subclass (``_enum`` set, so every ``is_*`` query answers consistently) with a chosen
  capability and list of supported ViT backends, installed as ``current_platform`` in every loaded vLLM module;
- ``torch.backends.cudnn.is_available`` / ``version`` patched to report a chosen cuDNN;
- ``has_flashinfer`` patched to True, in case a candidate adds that check to the gate.

The gate is ``functools.cache``d on the base: its cache is cleared before and after every test, and a candidate
that dropped the decorator is tolerated.
"""

from __future__ import annotations

import importlib
import sys

import pytest
import torch

FLASHINFER_UTILS = "vllm.utils.flashinfer"
MM_ENCODER_ATTN = "vllm.model_executor.layers.attention.mm_encoder_attention"
GATE = "is_flashinfer_cudnn_fp8_prefill_attn_supported"

CUDNN_9_17_1 = 91701


def _clear_caches(mod) -> None:
    for name in (GATE, "has_flashinfer"):
        fn = getattr(mod, name, None)
        clear = getattr(fn, "cache_clear", None)
        if callable(clear):
            clear()


def make_cuda_platform(capability: tuple[int, int], with_flashinfer: bool = True):
    """A fake CUDA platform with the given capability; FLASHINFER is a supported ViT backend if asked."""
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    cap = DeviceCapability(major=capability[0], minor=capability[1])
    backends = [AttentionBackendEnum.TORCH_SDPA]
    if with_flashinfer:
        backends = [AttentionBackendEnum.FLASHINFER, *backends]
    label = f"Fake NVIDIA GPU sm_{capability[0]}{capability[1]}"

    def get_device_capability(cls, device_id: int = 0):
        return cap

    def get_device_name(cls, device_id: int = 0) -> str:
        return label

    def get_supported_vit_attn_backends(cls):
        return list(backends)

    attrs = {
        "_enum": PlatformEnum.CUDA,
        "device_name": "cuda",
        "device_type": "cuda",
        "get_device_capability": classmethod(get_device_capability),
        "get_device_name": classmethod(get_device_name),
        "get_supported_vit_attn_backends": classmethod(get_supported_vit_attn_backends),
    }
    return type("FakeCudaPlatform", (Platform,), attrs)()


@pytest.fixture
def fi_utils():
    """``vllm.utils.flashinfer`` of the patched tree, with the gate's cache cleared around the test."""
    mod = importlib.import_module(FLASHINFER_UTILS)  # an import error fails the test
    _clear_caches(mod)
    yield mod
    _clear_caches(mod)


@pytest.fixture
def gpu(monkeypatch, fi_utils):
    """Install a fake GPU: ``gpu(capability, cudnn=91701, flashinfer=True)``; everything is undone afterwards."""
    import vllm.platforms as vp

    # The real platform and every fake installed so far: a test may switch GPUs several times (the all-range
    # test does), and each switch must reach every module that still holds an earlier one.
    replaced = [vp.current_platform]

    def install(capability: tuple[int, int], cudnn: int = CUDNN_9_17_1, flashinfer: bool = True):
        fake = make_cuda_platform(capability, with_flashinfer=flashinfer)
        monkeypatch.setattr(vp, "_current_platform", fake)
        for name, mod in list(sys.modules.items()):
            if mod is None or not (name == "vllm" or name.startswith("vllm.")):
                continue
            held = getattr(mod, "__dict__", {}).get("current_platform")
            if any(held is earlier for earlier in replaced):
                monkeypatch.setattr(mod, "current_platform", fake)
        monkeypatch.setattr(fi_utils, "current_platform", fake, raising=False)
        replaced.append(fake)

        import torch.backends.cudnn as cudnn_mod

        monkeypatch.setattr(cudnn_mod, "is_available", lambda: True)
        monkeypatch.setattr(cudnn_mod, "version", lambda: cudnn)
        monkeypatch.setattr(fi_utils, "has_flashinfer", lambda: True, raising=False)
        _clear_caches(fi_utils)
        return fake

    return install


@pytest.fixture
def gate(fi_utils):
    """Call the patched tree's gate fresh (cache cleared first)."""

    def call() -> bool:
        _clear_caches(fi_utils)
        return bool(getattr(fi_utils, GATE)())

    return call


@pytest.fixture
def build_fp8_encoder_attention(monkeypatch):
    """Construct ``MMEncoderAttention`` the way a model does, with FP8 ViT attention requested.

    Everything happens inside the returned callable (config creation included), so an error raised by a
    candidate at config time or at layer construction is raised to the caller either way.
    """
    mm_mod = importlib.import_module(MM_ENCODER_ATTN)
    monkeypatch.setattr(
        mm_mod, "_get_flashinfer_workspace_buffer", lambda: torch.zeros(1, dtype=torch.uint8), raising=False
    )

    def build():
        from types import SimpleNamespace

        from vllm.config import CompilationConfig, set_current_vllm_config
        from vllm.config.multimodal import MultiModalConfig

        mm_config = MultiModalConfig(mm_encoder_attn_dtype="fp8", mm_encoder_attn_backend="FLASHINFER")
        # A full VllmConfig needs engine dependencies that a CPU grading host may lack; the layer only reads
        # the multimodal config and the custom-op settings from the current config.
        vllm_config = SimpleNamespace(
            model_config=SimpleNamespace(multimodal_config=mm_config),
            compilation_config=CompilationConfig(custom_ops=["none"]),
        )
        old_dtype = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with set_current_vllm_config(vllm_config):
                return mm_mod.MMEncoderAttention(num_heads=2, head_size=64, prefix="visual.blocks.0.attn")
        finally:
            torch.set_default_dtype(old_dtype)

    return build
