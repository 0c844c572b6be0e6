"""Probes for int8-kv-rounding, run in the subject: what the candidate's per-token-head cache store writes.

The judge builds every tensor (inputs, caches filled with sentinels, scale caches, slot mapping) and decides what
the results mean; the probe only moves them to the device the judge names, runs the public launcher
``triton_reshape_and_cache_flash_per_token_head_quant`` on them, and sends the four written caches back. On a
CPU device (every case of a CPU run, and the ROCm cases of a GPU run) the kernels run through Triton's interpreter
with the corrections of ``int8_interp_shim`` installed for the launch and taken out afterwards, standing for the
GPU backend the judge names; whatever the launch raises goes back to the judge as it is.

Platforms (``platform``): each imports a copy of the module with vLLM's platform answering as that GPU does, and
with fresh copies of the vLLM modules it imports that read the platform (``FP8_DTYPE``, a platform-selected
``round_int8``), as on that machine; the copy keeps that platform for its calls too. "cuda": a CUDA GPU (FP8
e4m3fn, libdevice CUDA's; on a CUDA machine the module as it imports there). "rocm-gfx942" (MI300) and
"rocm-gfx950" (MI350): ROCm, FP8 e4m3fnuz with range +-224, or e4m3fn; the interpreter then stands for the HIP
backend. So a fix that dispatches on ``current_platform`` (``is_cuda()``, ``is_rocm()``, ``is_cuda_alike()``),
at import or at call time, is judged as each platform would run it.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys

import int8_interp_shim
from probe_support import Patches, import_module, install_platform, outcome_of

CACHE_MODULE = "vllm.v1.attention.ops.triton_reshape_and_cache_flash"
LAUNCHER = "triton_reshape_and_cache_flash_per_token_head_quant"
OUTPUTS = ("key_cache", "value_cache", "k_scale_cache", "v_scale_cache")
BACKENDS = {"cuda": "cuda", "rocm-gfx950": "hip", "rocm-gfx942": "hip"}
_copies: dict = {}


class _Gpu:
    """vLLM's platform as a CUDA or a ROCm GPU answers it (FP8 e4m3fnuz on MI300, e4m3fn elsewhere); anything else
    as the real one."""

    def __init__(self, real, rocm: bool, fnuz: bool):
        self._real = real
        self._rocm = rocm
        self._fnuz = fnuz

    def __getattr__(self, name):
        return getattr(self._real, name)

    def is_rocm(self) -> bool:
        return self._rocm

    def is_cuda(self) -> bool:
        return not self._rocm

    def is_cuda_alike(self) -> bool:
        return True

    def is_xpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return False

    def is_fp8_fnuz(self) -> bool:
        return self._fnuz

    def fp8_dtype(self):
        import torch

        return torch.float8_e4m3fnuz if self._fnuz else torch.float8_e4m3fn


def _fresh_copy(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    return copy


def _binds_by_platform(path: str) -> bool:
    """Whether the module's top-level code reads ``current_platform`` (a constant or a definition chosen by it)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    return any(isinstance(node, (ast.If, ast.Assign, ast.AnnAssign, ast.Try))
               and any(isinstance(n, (ast.Name, ast.Attribute)) and "current_platform" in ast.unparse(n)
                       for n in ast.walk(node.test if isinstance(node, ast.If) else node))
               for node in tree.body)


def _platform_readers(module) -> list[str]:
    """The vLLM modules ``module`` imports from whose import-time code reads ``current_platform`` (what they bind
    may depend on it); vLLM's platform and Triton shims excluded."""
    names = []
    for node in ast.walk(ast.parse(open(module.__file__, encoding="utf-8").read())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm.") and node.module not in (
                "vllm.platforms", "vllm.triton_utils"):
            path = getattr(sys.modules.get(node.module) or import_module(node.module), "__file__", None)
            if path and _binds_by_platform(path):
                names.append(node.module)
    return names


def _module(platform: str):
    """The cache module as ``platform`` imports it."""
    base = import_module(CACHE_MODULE)
    import vllm.platforms as vp

    if platform == "cuda" and vp.current_platform.is_cuda():
        return base  # a CUDA machine: the module as it imports there
    if platform not in _copies:
        real = vp.current_platform
        fake = _Gpu(real, rocm=platform != "cuda", fnuz=platform == "rocm-gfx942")
        readers = _platform_readers(base)
        with Patches() as patches:
            install_platform(patches, [real], fake)
            held = {name: sys.modules[name] for name in readers}
            try:
                for name in readers:
                    sys.modules[name] = _fresh_copy(name, held[name].__file__)
                _copies[platform] = _fresh_copy(f"{CACHE_MODULE}__{platform.replace('-', '_')}", base.__file__)
            finally:
                sys.modules.update(held)
    return _copies[platform]


def _launch(module, tensors, device: str, platform: str) -> None:
    import torch

    interpreted = device == "cpu"
    with int8_interp_shim.interpreting(interpreted):
        if interpreted:
            int8_interp_shim.install(BACKENDS[platform])
        try:
            getattr(module, LAUNCHER)(*tensors)
            if device == "cuda":
                torch.cuda.synchronize()
        finally:
            if interpreted:
                int8_interp_shim.uninstall()


def store_per_token_head(key, value, key_cache, value_cache, k_scale_cache, v_scale_cache, slot_mapping,
                         device: str = "cpu", platform: str = "cuda") -> dict:
    """Run the launcher on the judge's tensors (on ``device``, as ``platform``); the caches it wrote, on CPU."""
    module = _module(platform)
    tensors = [t.to(device) for t in (key, value, key_cache, value_cache, k_scale_cache, v_scale_cache,
                                      slot_mapping)]
    _launch(module, tensors, device, platform)
    return {name: t.cpu() for name, t in zip(OUTPUTS, tensors[2:6])}


def stores_by_cache_dtype(cases: dict, device: str = "cpu", platform: str = "cuda") -> dict:
    """For each named cache dtype, the launcher's outcome on one small store into caches of that dtype
    (``{"returned": None}`` or ``{"raised": type, "message": text}``): which cache dtypes it accepts."""
    module = _module(platform)
    outcomes = {}
    for name, tensors in cases.items():
        moved = [t.to(device) for t in tensors]
        outcomes[name] = outcome_of(_launch, module, moved, device, platform)
    return outcomes
