"""Probes for moe-swap-ab, run in the subject: what the candidate's fused-MoE launcher and kernel do.

Three observations, none judged here:

- ``record_launches``: under a faked device capability, every Triton kernel object of ``fused_moe.py`` is replaced
  by a recorder and ``invoke_fused_moe_triton_kernel`` is called with the judge's operands; each launch it makes is
  normalised by the kernel's parameter names (tensors by role, scalars and constexprs by value, the grid evaluated,
  launch options). Also each kernel's constexpr parameters and defaults, which the judge needs to read a launch.
- ``run_numerics``: the launcher run for real (compiled on a GPU, through the Triton interpreter on CPU) on the
  judge's operands, whose rows the judge has padded with NaN guard elements; the output buffer comes back.
- ``run_recording_reads``: the same run through the Triton interpreter, with A (and a per-token A_scale) followed by
  guard rows, recording every address the kernel loads; the output buffer comes back with the loads, counted by
  the tensor (or guard region) they fall in.
- ``compiled_dot_lines``: on a GPU, the ``tt.dot`` / ``tt.trans`` lines of the TTIR of every kernel a launch compiled.

The launch arguments cross as data: tensors, plain values, and ``compute_type`` as a name ("bf16", "fp16",
"fp32"), turned into the Triton dtype here. Whatever a probe installs (fake capability, recorders, a capture of
Triton's launch entry) it undoes, and the fused_moe package's ``lru_cache``s are cleared on the way in and out.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import sys

from probe_support import Patches, import_module, outcome_of, put_back

FM = "vllm.model_executor.layers.fused_moe.fused_moe"
TENSOR_ROLES = ("A", "B", "C", "A_scale", "B_scale", "topk_weights", "sorted_token_ids", "expert_ids",
                "num_tokens_post_padded", "B_bias")


# --------------------------------------------------------------------------------------------- environment
class _OpsShim:
    """Forward to torch.ops._C; answer missing compiled capability probes ('*supports*') with False."""

    def __init__(self, real):
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name):
        try:
            return getattr(self._real, name)
        except (AttributeError, RuntimeError):
            if "supports" in name:
                return lambda *a, **k: False
            raise


def _prepare_environment() -> None:
    """Answer the compiled capability probes that fused_moe's import chain calls when they are not built (the
    compiled extension modules themselves are stood in for by shared_probes/vllm_stand_ins.py). Environment,
    installed once per subject and kept: it only answers what a tree without compiled ops cannot."""
    import torch

    if not isinstance(torch.ops._C, _OpsShim):
        torch.ops._C = _OpsShim(torch.ops._C)


def _fm():
    _prepare_environment()
    return import_module(FM)


# --------------------------------------------------------------------------------------------- capability
def _clear_caches() -> None:
    for name, mod in list(sys.modules.items()):
        if not name.startswith("vllm.model_executor.layers.fused_moe") or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if isinstance(obj, functools._lru_cache_wrapper):
                try:
                    obj.cache_clear()
                except Exception:  # noqa: BLE001 - a cache that cannot be cleared is left as it is
                    pass


def _fake_capability(patches: Patches, cap) -> None:
    """Make vLLM's platform (and torch.cuda, where no real device exists) report compute capability ``cap`` =
    [major, minor] as a CUDA device, or as a ROCm device for [major, minor, "rocm"] (gfx90a reports 9.0, gfx942
    9.4, gfx950 9.5), or be an XPU for [0, 0, "xpu"]: vLLM's XPU platform reports no capability (None)."""
    import torch
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability, PlatformEnum

    major, minor, *kind = cap
    cls = type(current_platform)
    capability = None if kind == ["xpu"] else DeviceCapability(major, minor)
    patches.set(cls, "get_device_capability", classmethod(lambda c, device_id=0: capability))
    enum = {"rocm": PlatformEnum.ROCM, "xpu": PlatformEnum.XPU}.get(kind[0] if kind else "", PlatformEnum.CUDA)
    patches.set(current_platform, "_enum", enum)
    if not torch.cuda.is_available():
        # Only where no real device exists: on a GPU, Triton compiles for what torch reports, which must stay true.
        patches.set(torch.cuda, "get_device_capability", lambda device=None: (major, minor))
    _clear_caches()


@contextlib.contextmanager
def _imported_on_the_capability_played():
    """``fused_moe`` imported anew, after the capability a probe plays is in place (yielded), the loaded module put
    back when the block ends. vLLM fixes its device before it imports the model's modules, once per process: a fix
    that reads the capability when its module is imported, or memoises its decision in the module, is right
    wherever one that reads it at each launch is, and is graded so. The custom ops the module registers at import
    are registered already, so registration is skipped for the fresh copy."""
    import vllm.utils.torch_utils as torch_utils

    kept = {FM: _fm()}
    try:
        sys.modules.pop(FM, None)
        with Patches() as patches:
            patches.set(torch_utils, "direct_register_custom_op", lambda *args, **kwargs: None)
            fresh = import_module(FM)
        yield fresh
    finally:
        put_back(kept)


class _Faked(Patches):
    """Patches whose undo also clears the fused_moe caches, so predicates cached under a fake re-evaluate."""

    def undo(self) -> None:
        super().undo()
        _clear_caches()


# --------------------------------------------------------------------------------------------- for bench/moe_swap_ab.py
def fused_moe_module():
    """The tree's ``fused_moe`` module in the environment the probes give it (the benchmark's setup too)."""
    return _fm()


@contextlib.contextmanager
def faked_capability(cap):
    """Hold the probes' capability fake (``[major, minor]``) for a block: the benchmark's CPU smoke run picks
    configs and launches as on that device."""
    with _Faked() as patches:
        _fake_capability(patches, cap)
        yield


# --------------------------------------------------------------------------------------------- launch arguments
def _launch_kwargs(launch: dict, device: str = "cpu") -> dict:
    """The launcher's keyword arguments from the judge's: tensors on ``device``, compute_type as a Triton dtype."""
    import torch
    import triton.language as tl

    out = {}
    for k, v in launch.items():
        out[k] = v.to(device) if isinstance(v, torch.Tensor) else v
    out["compute_type"] = {"bf16": tl.bfloat16, "fp16": tl.float16, "fp32": tl.float32}[launch["compute_type"]]
    return out


def operand_views(launch: dict, guard: int) -> dict:
    """The launch with A and B as views of the judge's guarded buffers: each row of the buffer is the operand's
    row followed by ``guard`` NaN elements, and the view drops them, so the kernel sees the operand's own shape
    and a row stride ``guard`` elements longer (a read past a row's end picks up NaN). Everything else is shared."""
    out = dict(launch)
    for name in ("A", "B"):
        buf = out[name]
        out[name] = buf[..., : buf.shape[-1] - guard]
    return out


# --------------------------------------------------------------------------------------------- recording
def _jit_of(obj):
    """The JITFunction view of a kernel object, also under TRITON_INTERPRET=1, where kernels are
    InterpretedFunctions that wrap the plain Python function (rebuilt here as a JITFunction, which compiles nothing)."""
    from triton.runtime.jit import JITFunction

    seen = 0
    while not hasattr(obj, "params") and hasattr(obj, "fn") and seen < 8:
        obj, seen = obj.fn, seen + 1
    if hasattr(obj, "params"):
        return obj
    return JITFunction(obj) if inspect.isfunction(obj) and seen else None


def _kernel_objects(fm) -> dict:
    from triton.runtime.jit import KernelInterface

    return {n: v for n, v in vars(fm).items() if isinstance(v, KernelInterface) and _jit_of(v) is not None}


class _Recorder:
    def __init__(self, name, real, log):
        self.name, self.real, self.log = name, real, log

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append((self.name, self.real, grid, args, kwargs))

        return launch

    def __getattr__(self, item):
        return getattr(self.real, item)


def _norm(v, tags):
    import torch

    if isinstance(v, torch.Tensor):
        for tag, t in tags.items():
            if t is v:
                return tag
        return ["tensor", list(v.shape), str(v.dtype)]
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_norm(x, tags) for x in v]
    return str(v)


def _normalise(entry, tags):
    name, real, grid, args, kwargs = entry
    jit = _jit_of(real)
    names = list(jit.arg_names)
    bound = dict(zip(names, args))
    options = {}
    for k, v in kwargs.items():
        (bound if k in names else options)[k] = v
    grid_val = grid({**bound, **options}) if callable(grid) else grid
    return {
        "kernel": name,
        "args": {k: _norm(v, tags) for k, v in bound.items()},
        "options": {k: _norm(v, tags) for k, v in options.items()},
        "grid": [int(x) for x in grid_val],
    }


def _record_one(launch: dict, cap) -> list:
    kwargs = _launch_kwargs(launch)
    log = []
    with _Faked() as patches:
        _fake_capability(patches, cap)
        with _imported_on_the_capability_played() as fm:
            _record_into(fm, patches, kwargs, log)
    tags = {k: kwargs[k] for k in TENSOR_ROLES if kwargs.get(k) is not None}
    return [json.loads(json.dumps(_normalise(entry, tags))) for entry in log]


def _record_into(fm, patches, kwargs: dict, log: list) -> None:
    for n, k in _kernel_objects(fm).items():
        patches.set(fm, n, _Recorder(n, k, log))
    fm.invoke_fused_moe_triton_kernel(**kwargs)


def _signature(kernel) -> dict:
    jit = _jit_of(kernel)
    try:
        sig = inspect.signature(jit.fn)
        defaults = {n: json.loads(json.dumps(_norm(p.default, {}))) for n, p in sig.parameters.items()
                    if p.default is not inspect.Parameter.empty}
    except (TypeError, ValueError):
        defaults = {}
    constexprs = sorted(p.name for p in getattr(jit, "params", []) if getattr(p, "is_constexpr", False))
    return {"constexprs": constexprs, "defaults": defaults}


def record_launches(cases: list[dict]) -> dict:
    """For each ``{"launch": launcher arguments, "cap": [major, minor(, "rocm")]}``: every kernel launch the
    launcher made under that capability, normalised (``{"returned": [launch, ...]}``), or what it raised. With
    them, ``kernels``: each kernel object's constexpr parameter names and parameter defaults (normalised)."""
    fm = _fm()
    outcomes = [outcome_of(_record_one, case["launch"], case["cap"]) for case in cases]
    kernels = {n: _signature(k) for n, k in _kernel_objects(fm).items()}
    return {"outcomes": outcomes, "kernels": kernels}


# --------------------------------------------------------------------------------------------- running
def run_numerics(launch: dict, cap, guard: int, device: str = "cpu"):
    """Run the launcher for real under capability ``cap`` on ``device`` (a GPU compiles the kernel; on CPU the
    Triton interpreter runs it), with A and B taken as views of the judge's guarded buffers (``operand_views``).
    Returns the output buffer C after the launch."""
    import torch

    _fm()
    kwargs = operand_views(_launch_kwargs(launch, device), guard)
    with _Faked() as patches:
        _fake_capability(patches, cap)
        with _imported_on_the_capability_played() as fm:
            fm.invoke_fused_moe_triton_kernel(**kwargs)
        if device != "cpu":
            torch.cuda.synchronize()
    return kwargs["C"].cpu()


GUARD_ROWS_OF = "{} guard rows"
OUTSIDE = "outside every argument"


def _span(t) -> tuple[int, int]:
    """The bytes a (possibly strided) tensor's elements lie in: from its first element to just past its last."""
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) if t.numel() else -1
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


@contextlib.contextmanager
def _recorded_loads(spans: dict):
    """While the block runs, count the distinct element addresses the interpreted loads enable, by the span
    ``{name: (first byte, end byte)}`` they fall in (``OUTSIDE`` for none). Every Triton load the interpreter runs
    (plain, block-pointer, tensor-descriptor) goes through ``InterpreterBuilder.create_masked_load`` with the lanes'
    addresses and mask, so the enabled lanes are exactly what the kernel reads. Yields the counts, filled at the end."""
    import numpy as np
    from triton.runtime import interpreter

    seen: list = []
    original = interpreter.InterpreterBuilder.create_masked_load

    def recording_load(self, ptrs, mask, *args, **kwargs):
        enabled = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptrs.data))
        seen.append(np.unique(np.asarray(ptrs.data, dtype=np.uint64)[enabled]))
        return original(self, ptrs, mask, *args, **kwargs)

    counts: dict = {}
    with Patches() as patches:
        patches.set(interpreter.InterpreterBuilder, "create_masked_load", recording_load)
        yield counts
    addresses = np.unique(np.concatenate(seen)) if seen else np.zeros(0, dtype=np.uint64)
    claimed = np.zeros(addresses.shape, dtype=bool)
    for name, (lo, hi) in spans.items():
        inside = (addresses >= lo) & (addresses < hi) & ~claimed
        claimed |= inside
        if inside.any():
            counts[name] = int(inside.sum())
    if (~claimed).any():
        counts[OUTSIDE] = int((~claimed).sum())


def run_recording_reads(launch: dict, cap, guard: int) -> dict:
    """Run the launcher through the Triton interpreter under capability ``cap`` as ``run_numerics`` does, where the
    judge's A buffer (and a 2-D A_scale buffer) has more rows than the launch has tokens: the kernel gets the first
    rows (one per token of C) and the rows after them are a guard region. Every address the kernel loads is recorded.

    Returns ``{"output": C, "reads": {tensor role, "<role> guard rows" or OUTSIDE: distinct elements loaded}}``;
    raises RuntimeError where kernels do not run through the interpreter (nothing could be recorded)."""
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("the Triton interpreter is off: the kernel's loads cannot be recorded")
    _fm()
    kwargs = operand_views(_launch_kwargs(launch, "cpu"), guard)
    tokens = kwargs["C"].shape[0]
    guarded = {}
    for name in ("A", "A_scale"):
        t = kwargs.get(name)
        if t is not None and t.dim() == 2 and t.shape[0] > tokens:
            guarded[name] = t
            kwargs[name] = t[:tokens]
    spans = {name: _span(kwargs[name]) for name in TENSOR_ROLES if kwargs.get(name) is not None}
    for name, buffer in guarded.items():
        spans[GUARD_ROWS_OF.format(name)] = (spans[name][1], _span(buffer)[1])
    with _Faked() as patches:
        _fake_capability(patches, cap)
        with _imported_on_the_capability_played() as fm, _recorded_loads(spans) as reads:
            fm.invoke_fused_moe_triton_kernel(**kwargs)
    return {"output": kwargs["C"], "reads": reads}


def compiled_dot_lines(launch: dict, cap, device: str = "cuda") -> list:
    """Launch for real on the GPU under capability ``cap``, capturing each kernel compiled at Triton's own launch
    entry (``JITFunction.run``; the module's kernel objects are left alone, so the @jit helpers a kernel calls
    still compile). For each compiled kernel, the lines of its TTIR that name ``tt.dot`` or ``tt.trans`` (None for
    a launch that returned no kernel)."""
    import torch
    from triton.runtime.jit import JITFunction

    _fm()
    kwargs = _launch_kwargs(launch, device)
    compiled = []
    real_run = JITFunction.run

    def run_and_keep(self, *args, **kw):
        kernel = real_run(self, *args, **kw)
        compiled.append(kernel)
        return kernel

    with _Faked() as patches:
        _fake_capability(patches, cap)
        patches.set(JITFunction, "run", run_and_keep)
        with _imported_on_the_capability_played() as fm:
            fm.invoke_fused_moe_triton_kernel(**kwargs)
        torch.cuda.synchronize()
    out = []
    for kernel in compiled:
        if kernel is None:
            out.append(None)
            continue
        ttir = str(kernel.asm["ttir"])
        out.append([line for line in ttir.splitlines() if "tt.dot" in line or "tt.trans" in line])
    return out
