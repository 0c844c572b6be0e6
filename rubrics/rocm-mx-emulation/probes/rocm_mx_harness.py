"""The ROCm harness of rocm-mx-emulation, in the subject: a host without AMD GPUs plays gfx942, gfx90a, gfx950 or a
CUDA GPU, call by call. Probes use it; they return observations and never decide whether they are right.

Installed once per subject, before the probes import anything of vLLM (``ensure_installed``):

* ``vllm.platforms.rocm`` probes the GPU architecture when it is imported, so a stub module stands in for it. Its
  ``on_gfx*`` helpers (and the ``_ON_*`` / ``_GCN_ARCH`` module constants) read a mutable state.
* ``vllm.platforms.current_platform`` is a fake platform whose kind (ROCm or CUDA), compute capability and FP8
  dtype follow the same state.
* ``quark.torch.kernel.mx`` (amd-quark, used to dequantize MXFP4 weights) gets a small torch stand-in when
  amd-quark is not installed.
* The compiled vLLM ops the Triton MoE path calls (activation, moe_sum, FP8 quantization) get torch
  implementations where ``vllm._C`` is absent; the Triton GEMM itself runs under the Triton interpreter.

Each probe runs inside ``device()``: the state starts at the default (ROCm gfx942, no AITER), and everything the
probe switched or patched is undone when it ends, so the next probe starts clean.
"""

from __future__ import annotations

import os
import sys
import types
from contextlib import contextmanager
from types import SimpleNamespace

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch  # noqa: E402

from probe_support import Patches, has_torch_op, put_back  # noqa: E402

# --------------------------------------------------------------------------------------------------------
# Mutable device state
# --------------------------------------------------------------------------------------------------------

# ``gcn`` is the arch as vLLM's ``_GCN_ARCH`` holds it: amdsmi gives the bare name ("gfx942"), torch's fallback
# the name with its target features ("gfx942:sramecc+:xnack-"); vLLM's own helpers test it by substring.
_DEFAULT_STATE = {"kind": "rocm", "arch": "gfx942", "gcn": "gfx942", "cap": (9, 4)}
STATE: dict = dict(_DEFAULT_STATE)

ROCM_CAPS = {"gfx908": (9, 0), "gfx90a": (9, 0), "gfx942": (9, 4), "gfx950": (9, 5), "gfx1030": (10, 3),
             "gfx1100": (11, 0), "gfx1151": (11, 5), "gfx1200": (12, 0), "gfx1201": (12, 0)}


def _arch() -> str:
    return STATE["gcn"] if STATE["kind"] == "rocm" else ""


# --------------------------------------------------------------------------------------------------------
# Stub for vllm.platforms.rocm
# --------------------------------------------------------------------------------------------------------


def _flag(name: str) -> bool:
    a = _arch()
    table = {
        "_ON_GFX1X": any(x in a for x in ("gfx11", "gfx12")),
        "_ON_GFX11": "gfx11" in a,
        "_ON_GFX1100": "gfx1100" in a,
        "_ON_GFX1151": "gfx1151" in a,
        "_ON_GFX12X": "gfx12" in a,
        "_ON_MI3XX": any(x in a for x in ("gfx942", "gfx950")),
        "_ON_GFX9": any(x in a for x in ("gfx90a", "gfx942", "gfx950")),
        "_ON_GFX90A": "gfx90a" in a,
        "_ON_GFX942": "gfx942" in a,
        "_ON_GFX950": "gfx950" in a,
    }
    return table[name]


_FLAGS = ("_ON_GFX1X", "_ON_GFX11", "_ON_GFX1100", "_ON_GFX1151", "_ON_GFX12X", "_ON_MI3XX", "_ON_GFX9",
          "_ON_GFX90A", "_ON_GFX942", "_ON_GFX950")


class _RocmStubModule(types.ModuleType):
    """Module object whose ``_ON_*`` and ``_GCN_ARCH`` attributes follow the harness state."""

    def __getattr__(self, name):  # only called for names not set on the module
        if name == "_GCN_ARCH":
            return _arch()
        if name.startswith("_ON_"):
            try:
                return _flag(name)
            except KeyError:
                pass
        raise AttributeError(f"stub vllm.platforms.rocm has no attribute {name!r}")


def _make_on(flag: str):
    def fn() -> bool:
        return _flag(flag)

    fn.__name__ = "on_" + flag[4:].lower()
    return fn


# --------------------------------------------------------------------------------------------------------
# Fake platform
# --------------------------------------------------------------------------------------------------------


def _make_platform_cls():
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    class FakeGpuPlatform(Platform):
        """A ROCm or CUDA platform, as the harness state says, with no device behind it."""

        device_type = "cuda"
        dispatch_key = "CPU"  # vLLM custom ops must run on the CPU tensors the probes use
        ray_device_key = "GPU"
        simple_compile_backend = "inductor"

        @property
        def _enum(self):  # type: ignore[override]
            return PlatformEnum.ROCM if STATE["kind"] == "rocm" else PlatformEnum.CUDA

        @property
        def device_name(self):  # type: ignore[override]
            return "rocm" if STATE["kind"] == "rocm" else "cuda"

        @property
        def device_control_env_var(self):  # type: ignore[override]
            return "HIP_VISIBLE_DEVICES" if STATE["kind"] == "rocm" else "CUDA_VISIBLE_DEVICES"

        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            major, minor = STATE["cap"]
            return DeviceCapability(major=major, minor=minor)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return f"fake {STATE['kind']} {STATE['arch'] if STATE['kind'] == 'rocm' else STATE['cap']}"

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return 64 << 30

        @classmethod
        def is_fp8_fnuz(cls) -> bool:
            return STATE["kind"] == "rocm" and "gfx94" in STATE["arch"]

        @classmethod
        def fp8_dtype(cls) -> torch.dtype:
            return torch.float8_e4m3fnuz if cls.is_fp8_fnuz() else torch.float8_e4m3fn

        @classmethod
        def supports_fp8(cls) -> bool:
            return True

        @classmethod
        def supports_mx(cls) -> bool:
            return STATE["kind"] == "rocm" and "gfx95" in STATE["arch"]

        @classmethod
        def is_async_output_supported(cls, enforce_eager) -> bool:
            return True

        @classmethod
        def get_current_memory_usage(cls, device=None) -> float:
            return 0.0

        @classmethod
        def use_custom_allreduce(cls) -> bool:
            return False

    return FakeGpuPlatform


# --------------------------------------------------------------------------------------------------------
# amd-quark stand-in (MXFP4 dequantization only)
# --------------------------------------------------------------------------------------------------------

_E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def _dq_mxfp4(x: torch.Tensor, scale: torch.Tensor, float_dtype: torch.dtype) -> torch.Tensor:
    """Unpack two e2m1 codes per byte (low nibble first) and apply one e8m0 scale per 32 values."""
    lut = torch.tensor(_E2M1_VALUES, dtype=torch.float32, device=x.device)
    xb = x.view(torch.uint8).to(torch.int64)
    lo = lut[xb & 0xF]
    hi = lut[(xb >> 4) & 0xF]
    vals = torch.stack([lo, hi], dim=-1).reshape(*x.shape[:-1], x.shape[-1] * 2)
    s = torch.exp2(scale.view(torch.uint8).to(torch.float32) - 127.0)
    vals = vals.reshape(*vals.shape[:-1], -1, 32) * s.unsqueeze(-1)
    return vals.reshape(*x.shape[:-1], x.shape[-1] * 2).to(float_dtype)


def _install_fake_quark() -> None:
    try:
        import quark.torch.kernel.mx  # noqa: F401

        return
    except Exception:
        pass
    quark = types.ModuleType("quark")
    quark.__path__ = []  # type: ignore[attr-defined]
    qtorch = types.ModuleType("quark.torch")
    qtorch.__path__ = []  # type: ignore[attr-defined]
    kernel = types.ModuleType("quark.torch.kernel")
    kernel.__path__ = []  # type: ignore[attr-defined]
    mx = types.ModuleType("quark.torch.kernel.mx")
    mx.dq_mxfp4 = _dq_mxfp4  # type: ignore[attr-defined]
    quark.torch = qtorch  # type: ignore[attr-defined]
    qtorch.kernel = kernel  # type: ignore[attr-defined]
    kernel.mx = mx  # type: ignore[attr-defined]
    sys.modules.update(
        {"quark": quark, "quark.torch": qtorch, "quark.torch.kernel": kernel, "quark.torch.kernel.mx": mx}
    )


# --------------------------------------------------------------------------------------------------------
# Torch stand-ins for compiled vLLM ops the Triton MoE path calls
# --------------------------------------------------------------------------------------------------------

_SHIM_LIBS: list = []


def _fp8_max(dtype: torch.dtype) -> float:
    return float(torch.finfo(dtype).max)


def _install_op_shims() -> None:
    defs = {
        "_C": {
            "silu_and_mul": (
                "silu_and_mul(Tensor! out, Tensor input) -> ()",
                lambda out, x: out.copy_(
                    torch.nn.functional.silu(x[..., : x.shape[-1] // 2]) * x[..., x.shape[-1] // 2 :]
                ),
            ),
            "static_scaled_fp8_quant": (
                "static_scaled_fp8_quant(Tensor! result, Tensor input, Tensor scale, int[]? group_shape=None)"
                " -> ()",
                lambda out, x, scale, group_shape=None: out.copy_(
                    (x.float() / scale.float().reshape(-1)[0])
                    .clamp(-_fp8_max(out.dtype), _fp8_max(out.dtype))
                    .to(out.dtype)
                ),
            ),
            "dynamic_scaled_fp8_quant": (
                "dynamic_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale) -> ()",
                lambda out, x, scale: (
                    scale.copy_((x.float().abs().max() / _fp8_max(out.dtype)).clamp(min=1e-12).reshape(scale.shape)),
                    out.copy_(
                        (x.float() / scale.reshape(-1)[0])
                        .clamp(-_fp8_max(out.dtype), _fp8_max(out.dtype))
                        .to(out.dtype)
                    ),
                )[0]
                and None,
            ),
        },
        "_moe_C": {
            "moe_sum": (
                "moe_sum(Tensor input, Tensor! output) -> ()",
                lambda x, out: out.copy_(x.sum(dim=1).to(out.dtype)),
            ),
        },
    }
    for ns, ops in defs.items():
        missing = {n: d for n, d in ops.items() if not has_torch_op(ns, n)}
        if not missing:
            continue
        lib = torch.library.Library(ns, "FRAGMENT")
        _SHIM_LIBS.append(lib)
        for name, (schema, impl) in missing.items():
            lib.define(schema)

            def _wrap(fn):
                def run(*args, **kwargs):
                    fn(*args, **kwargs)

                return run

            lib.impl(name, _wrap(impl), "CompositeExplicitAutograd")


# --------------------------------------------------------------------------------------------------------
# Install everything before vLLM is imported by any probe
# --------------------------------------------------------------------------------------------------------

_INSTALLED = False


def ensure_installed() -> None:
    """Install the stub, the fake platform and the stand-ins once per subject; a failure propagates (the probe
    that needed the harness raises, and the judge sees it)."""
    global _INSTALLED
    if _INSTALLED:
        return
    stub = _RocmStubModule("vllm.platforms.rocm")
    stub.__file__ = "<rubric stub for vllm.platforms.rocm>"
    for flag in _FLAGS:
        fn = _make_on(flag)
        setattr(stub, fn.__name__, fn)
    stub.use_rocm_custom_paged_attention = lambda *a, **k: False  # type: ignore[attr-defined]
    stub._sync_hip_cuda_env_vars = lambda *a, **k: None  # type: ignore[attr-defined]
    stub.flash_attn_triton_available = lambda *a, **k: False  # type: ignore[attr-defined]
    sys.modules["vllm.platforms.rocm"] = stub

    import vllm.platforms as platforms

    cls = _make_platform_cls()
    stub.RocmPlatform = cls  # type: ignore[attr-defined]
    platforms.rocm = stub  # type: ignore[attr-defined]
    platforms._current_platform = cls()

    _install_fake_quark()
    _install_op_shims()
    _INSTALLED = True


# --------------------------------------------------------------------------------------------------------
# Per-probe device control
# --------------------------------------------------------------------------------------------------------


def _clear_oracle_caches() -> None:
    """Clear functools caches of the modules the oracle reads; tolerate whatever a candidate caches."""
    names = [
        "vllm.model_executor.layers.fused_moe.oracle.mxfp4",
        "vllm.model_executor.layers.fused_moe.experts.gpt_oss_triton_kernels_moe",
        "vllm.model_executor.layers.fused_moe.experts.ocp_mx_emulation_moe",
        "vllm.model_executor.layers.fused_moe.experts.rocm_aiter_moe",
        "vllm.model_executor.layers.fused_moe.experts.aiter_mxfp4_w4a8_moe",
        "vllm.model_executor.layers.quantization.quark.quark_moe",
        "vllm.model_executor.layers.quantization.utils.mxfp4_utils",
        "vllm.model_executor.layers.fused_moe.utils",
        "vllm.utils.import_utils",
    ]
    for name in names:
        mod = sys.modules.get(name)
        if mod is None:
            continue
        for attr in list(vars(mod).values()):
            clear = getattr(attr, "cache_clear", None)
            if callable(clear):
                try:
                    clear()
                except Exception:
                    pass
    try:
        from vllm.logger import _print_info_once, _print_warning_once  # type: ignore

        for f in (_print_info_once, _print_warning_once):
            getattr(f, "cache_clear", lambda: None)()
    except Exception:
        pass


# The modules a fix of this task lives in ([summary.places] and [inference] in rubric.toml), in the order vLLM
# imports them. vLLM fixes the GPU a process runs on before it imports them, once per process; so each is imported
# anew once a probe has set the GPU it plays (``Harness.apply``), and a fix that reads the platform or the GPU
# architecture when its module is imported is graded on what it does on that GPU, as one that reads it at each call
# is. ``fused_moe/utils.py`` is left out: modules outside the fix (the prepare step) bind its functions by name.
FIX_MODULES = (
    "vllm.model_executor.layers.fused_moe.experts.gpt_oss_triton_kernels_moe",
    "vllm.model_executor.layers.fused_moe.experts.triton_moe",
    "vllm.model_executor.layers.fused_moe.experts.ocp_mx_emulation_moe",
    "vllm.model_executor.layers.fused_moe.oracle.mxfp4",
    "vllm.model_executor.layers.quantization.quark.quark_moe",
    "vllm.model_executor.layers.quantization.mxfp4",
)


class Harness:
    """What a probe switches and patches; every patch is undone when its ``device()`` block ends."""

    def __init__(self, patches: Patches):
        self.patches = patches
        self.loaded: dict = {}  # FIX_MODULES as they were before this probe imported them anew

    # ---- device state
    def set_rocm(self, arch: str, aiter: bool = False, features: str = "") -> None:
        STATE.update(kind="rocm", arch=arch, gcn=arch + features, cap=ROCM_CAPS[arch])
        self._set_aiter(aiter)
        _clear_oracle_caches()

    def set_cuda(self, cap) -> None:
        STATE.update(kind="cuda", arch="", gcn="", cap=tuple(cap))
        self._set_aiter(False)
        _clear_oracle_caches()

    def apply(self, spec: dict) -> None:
        """``{"kind": "rocm", "arch": "gfx942", "aiter": bool, "features": ":sramecc+:xnack-"}`` (features
        optional) or ``{"kind": "cuda", "cap": [9, 0]}``."""
        if spec["kind"] == "rocm":
            self.set_rocm(spec["arch"], aiter=bool(spec.get("aiter", False)), features=spec.get("features", ""))
        else:
            self.set_cuda(spec["cap"])
        self._import_fix_modules()

    def _import_fix_modules(self) -> None:
        """FIX_MODULES imported anew on the GPU now played; ``device()`` puts the loaded ones back when it ends."""
        for name in FIX_MODULES:
            if name not in self.loaded:
                self.loaded[name] = __import__(name, fromlist=["_"])
            sys.modules.pop(name, None)
        for name in FIX_MODULES:
            __import__(name, fromlist=["_"])
        _clear_oracle_caches()

    def _set_aiter(self, enabled: bool) -> None:
        import vllm._aiter_ops as aiter_ops
        from vllm._aiter_ops import rocm_aiter_ops

        # The AITER library counts as installed on ROCm; the env switches decide whether it is used.
        if hasattr(aiter_ops, "IS_AITER_FOUND"):
            self.patches.set(aiter_ops, "IS_AITER_FOUND", STATE["kind"] == "rocm")
        for attr in ("_AITER_ENABLED", "_FMOE_ENABLED"):
            if hasattr(rocm_aiter_ops, attr):
                self.patches.set(rocm_aiter_ops, attr, enabled)

    # ---- triton_kernels availability (the OAI Triton MXFP4 backends need it)
    def fake_triton_kernels(self, available: bool = True) -> None:
        import vllm.utils.import_utils as iu

        mods = [
            "vllm.model_executor.layers.fused_moe.experts.gpt_oss_triton_kernels_moe",
            "vllm.model_executor.layers.fused_moe.oracle.mxfp4",
            "vllm.model_executor.layers.quantization.utils.mxfp4_utils",
        ]
        for name in mods:
            __import__(name)
        fn = lambda: available  # noqa: E731
        self.patches.set(iu, "has_triton_kernels", fn)
        for name in mods:
            mod = sys.modules[name]
            if hasattr(mod, "has_triton_kernels"):
                self.patches.set(mod, "has_triton_kernels", fn)

    # ---- the vLLM config the oracle and quark read
    def fake_vllm_config(self) -> None:
        cfg = SimpleNamespace(
            model_config=SimpleNamespace(
                quantization_config=None,
                hf_config=SimpleNamespace(model_type="rubric-moe"),
                dtype=torch.bfloat16,
            ),
            parallel_config=SimpleNamespace(
                tensor_parallel_size=1, enable_expert_parallel=False, data_parallel_size=1
            ),
            kernel_config=SimpleNamespace(moe_backend="auto"),
        )
        for name in (
            "vllm.model_executor.layers.fused_moe.oracle.mxfp4",
            "vllm.model_executor.layers.quantization.quark.quark_moe",
        ):
            mod = __import__(name, fromlist=["_"])
            if hasattr(mod, "get_current_vllm_config"):
                self.patches.set(mod, "get_current_vllm_config", lambda: cfg)

    # ---- running the modular MoE kernel on CPU tensors (the judge decided the interpreter can run it)
    def prepare_cpu_run(self) -> None:
        import vllm.v1.worker.workspace as ws

        # No accelerator here: the workspace manager's cache flush is a no-op on CPU tensors.
        self.patches.set(torch.accelerator, "empty_cache", lambda: None)
        if getattr(ws, "_manager", None) is None:
            ws.init_workspace_manager(torch.device("cpu"))

    @property
    def platform(self):
        import vllm.platforms as platforms

        return platforms._current_platform


@contextmanager
def device(*preimport: str):
    """The harness for one probe: installed, at the default state (ROCm gfx942, no AITER) while ``preimport``
    modules are imported (vLLM's import-time probes need no CUDA extension then); restored afterwards."""
    ensure_installed()
    patches = Patches()
    harness = Harness(patches)
    try:
        harness.set_rocm("gfx942")
        for name in preimport:
            __import__(name)
        yield harness
    finally:
        patches.undo()
        put_back(harness.loaded)
        STATE.clear()
        STATE.update(_DEFAULT_STATE)
        _clear_oracle_caches()


def describe_type(value) -> dict:
    """What a value is, as data: its type's module-qualified name and a text form (a dtype's name, a repr)."""
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if isinstance(value, torch.dtype):
        return {"type": "torch.dtype", "value": str(value).removeprefix("torch.")}
    return {"type": kind, "value": repr(value)[:300]}
