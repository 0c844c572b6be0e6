"""Probes for vit-fp8-blackwell, run in the subject: what the FP8 ViT attention gate and layer do on a fake GPU.

The gate under test, ``is_flashinfer_cudnn_fp8_prefill_attn_supported`` in ``vllm/utils/flashinfer.py``, decides
from the platform's compute capability, the platform's supported ViT attention backends and the cuDNN version.
Each case the judge sends, ``{"capability": [major, minor] or None, "cudnn": int, "flashinfer": bool}`` (and
``"platform"``, the fake's kind: "cuda" unless it says rocm, xpu, cpu, tpu or oot), controls all three on a
CPU-only machine:

- a fake ``Platform`` subclass of that kind (``_enum`` set, so every ``is_*`` / ``has_device_capability`` query is
  vLLM's own and answers consistently) with that capability (None: the platform reports none, as XPU and CPU do)
  and FLASHINFER listed as a supported ViT backend or not,
  installed as ``current_platform`` in ``vllm.platforms`` and in every loaded vLLM module that holds it;
- ``torch.backends.cudnn.is_available`` / ``version`` patched to report that cuDNN;
- ``has_flashinfer`` patched to True, in case a candidate adds that check to the gate.

The gate is ``functools.cache``d on the base: its cache is cleared before every call and when the probe ends (a
candidate that dropped the decorator is tolerated). Everything installed is undone before the probe returns.
The probes report what happened (the gate's truth value, what building the layer raised); the judge decides.
"""

from __future__ import annotations

import enum


import torch

from probe_support import Patches, import_module, install_platform, outcome_of

FLASHINFER_UTILS = "vllm.utils.flashinfer"
MM_ENCODER_ATTN = "vllm.model_executor.layers.attention.mm_encoder_attention"
GATE = "is_flashinfer_cudnn_fp8_prefill_attn_supported"


def _clear_caches(mod) -> None:
    for name in (GATE, "has_flashinfer"):
        fn = getattr(mod, name, None)
        clear = getattr(fn, "cache_clear", None)
        if callable(clear):
            clear()


# The fake's kind -> (PlatformEnum member, device_type): CUDA and ROCm GPUs are "cuda" devices to torch.
PLATFORM_KINDS = {"cuda": ("CUDA", "cuda"), "rocm": ("ROCM", "cuda"), "xpu": ("XPU", "xpu"), "cpu": ("CPU", "cpu"),
                  "tpu": ("TPU", "tpu"), "oot": ("OOT", "oot")}


def _make_platform(kind: str, capability: tuple[int, int] | None, with_flashinfer: bool):
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    enum_name, device_type = PLATFORM_KINDS[kind]
    cap = None if capability is None else DeviceCapability(major=capability[0], minor=capability[1])
    backends = [AttentionBackendEnum.TORCH_SDPA]
    if with_flashinfer:
        backends = [AttentionBackendEnum.FLASHINFER, *backends]
    label = f"Fake {kind} device" + ("" if capability is None else f" sm_{capability[0]}{capability[1]}")

    def get_device_capability(cls, device_id: int = 0):
        return cap

    def get_device_name(cls, device_id: int = 0) -> str:
        return label

    def get_supported_vit_attn_backends(cls):
        return list(backends)

    attrs = {
        "_enum": PlatformEnum[enum_name],
        "device_name": device_type,
        "device_type": device_type,
        "get_device_capability": classmethod(get_device_capability),
        "get_device_name": classmethod(get_device_name),
        "get_supported_vit_attn_backends": classmethod(get_supported_vit_attn_backends),
    }
    return type(f"Fake{enum_name.title()}Platform", (Platform,), attrs)()


def _install(patches: Patches, replaced: list, fi_utils, case: dict) -> None:
    """Install the case's fake GPU everywhere vLLM code can see it (also where a module still holds a fake that an
    earlier case of this probe installed), with its cuDNN version; clear the gate's cache."""
    import torch.backends.cudnn as cudnn_mod

    given = case["capability"]
    capability = None if given is None else (int(given[0]), int(given[1]))
    cudnn = int(case["cudnn"])
    fake = _make_platform(case.get("platform", "cuda"), capability, bool(case["flashinfer"]))
    install_platform(patches, replaced, fake)
    patches.set(fi_utils, "current_platform", fake)
    patches.set(cudnn_mod, "is_available", lambda: True)
    patches.set(cudnn_mod, "version", lambda: cudnn)
    patches.set(fi_utils, "has_flashinfer", lambda: True)
    _clear_caches(fi_utils)


def _run_cases(cases: list[dict], modules: tuple, run) -> list[dict]:
    import vllm.platforms as vp

    fi_utils = modules[0]
    results = []
    _clear_caches(fi_utils)
    try:
        with Patches() as patches:
            replaced = [vp.current_platform]
            for case in cases:
                _install(patches, replaced, fi_utils, case)
                results.append(run(case, *modules))
    finally:
        _clear_caches(fi_utils)
    return results


def _gate_truth(fi_utils) -> bool:
    _clear_caches(fi_utils)
    return bool(getattr(fi_utils, GATE)())


def gate_answers(cases: list[dict]) -> list[dict]:
    """For each case: the gate's truth value on that fake GPU, ``{"returned": bool}``, or what it raised,
    ``{"raised": type, "message": text}``."""
    fi_utils = import_module(FLASHINFER_UTILS)  # an import error fails the probe
    return _run_cases(cases, (fi_utils,), lambda case, fi: outcome_of(_gate_truth, fi))


def _exception_record(exc: BaseException) -> dict:
    return {"raised": type(exc).__name__, "message": str(exc)[:2000],
            "classes": [f"{k.__module__}.{k.__qualname__}" for k in type(exc).__mro__]}


def _build(mm_mod, backend, attn_dtype: str | None = "fp8", with_mm_config: bool = True):
    from types import SimpleNamespace

    from vllm.config import CompilationConfig, set_current_vllm_config
    from vllm.config.multimodal import MultiModalConfig

    mm_config = (MultiModalConfig(mm_encoder_attn_dtype=attn_dtype, mm_encoder_attn_backend=backend)
                 if with_mm_config else None)
    # A full VllmConfig needs engine dependencies that a CPU grading host may lack; the layer only reads the
    # multimodal config and the custom-op settings from the current config.
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


def _build_outcome(case, fi_utils, mm_mod) -> dict:
    # A user asks for the FlashInfer backend where the platform has it (unless the case leaves the choice to the
    # layer: "backend_requested" False); elsewhere the layer picks its own.
    requested = case["flashinfer"] and case.get("backend_requested", True)
    try:
        layer = _build(mm_mod, "FLASHINFER" if requested else None, case.get("attn_dtype", "fp8"),
                       case.get("multimodal_config", True))
    except Exception as exc:  # noqa: BLE001 - the judge decides what each exception means
        return _exception_record(exc)
    fp8_enabled = getattr(layer, "fp8_enabled", "?")
    return {"returned": {"fp8_enabled": fp8_enabled if isinstance(fp8_enabled, (bool, str)) else repr(fp8_enabled),
                         "attributes": _plain_attributes(layer)}}


def _plain_attributes(layer) -> dict:
    """The layer's plain attributes (the backend it chose, its FlashAttention version, its dtype, head counts, FP8
    flags ...), each as its repr: what "builds as in the base" compares. Tensors, modules and callables are left
    out."""
    plain = (bool, int, float, str, type(None), enum.Enum, torch.dtype)
    return {name: repr(value) for name, value in sorted(vars(layer).items()) if isinstance(value, plain)}


def build_outcomes(cases: list[dict]) -> list[dict]:
    """For each case: what building ``MMEncoderAttention`` with ``mm_encoder_attn_dtype`` the case's
    ``attn_dtype`` ('fp8' unless it says otherwise; None leaves it unset), or with no multimodal config at all
    where ``multimodal_config`` is False (the way a model does, config creation included, the FlashInfer backend
    requested where the fake GPU lists it unless ``backend_requested`` is False, the layer's own choice elsewhere)
    did on that fake GPU: ``{"returned": {"fp8_enabled": ..., "attributes": {name: repr}}}`` or
    ``{"raised": type, "message": text, "classes": the exception's MRO as module.qualname}``. Only the CUDA
    workspace allocation is stubbed."""
    fi_utils = import_module(FLASHINFER_UTILS)
    mm_mod = import_module(MM_ENCODER_ATTN)
    with Patches() as patches:
        patches.set(mm_mod, "_get_flashinfer_workspace_buffer", lambda: torch.zeros(1, dtype=torch.uint8))
        return _run_cases(cases, (fi_utils, mm_mod), _build_outcome)
