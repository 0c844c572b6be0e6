"""Probe for moe-swap-ab, run in the subject: does each kernel launch the candidate makes still pass Triton's
front end for the GPU it targets?

The Triton interpreter runs a kernel as Python and checks no types, so a kernel that no GPU compile accepts (an int8
dot given a float32 accumulator makes the loop-carried accumulator int32, which the compiler refuses) can compute the
right numbers there. ``launch_front_end`` captures the launches the launcher makes under a faked capability (no kernel
runs) and lowers each one, with its own arguments and constexprs, to Triton IR for a CUDA target of that capability,
which needs no GPU. Nothing is judged here: each launch's error, or None, comes back.
"""

from __future__ import annotations

import inspect
import sys

from moe_swap_probes import faked_capability, fused_moe_module
from probe_support import Patches

_TORCH_TO_TRITON = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int8": "i8", "uint8": "u8",
                    "int32": "i32", "int64": "i64", "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}


def _plain_jit(obj):
    """The JITFunction of a kernel object (under TRITON_INTERPRET=1 an InterpretedFunction wraps the plain
    function, from which a JITFunction that compiles is rebuilt)."""
    from triton.runtime.jit import JITFunction

    while not isinstance(obj, JITFunction) and hasattr(obj, "fn"):
        obj = obj.fn
    return obj if isinstance(obj, JITFunction) else JITFunction(obj)


def _kernels(fm) -> dict:
    from triton.runtime.jit import KernelInterface

    return {n: v for n, v in vars(fm).items() if isinstance(v, KernelInterface)}


class _Capture:
    def __init__(self, name, real, log):
        self.name, self.real, self.log = name, real, log

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.log.append((self.name, self.real, args, kwargs))


def _signature(jit, args, kwargs) -> tuple[dict, dict, dict]:
    import torch

    bound = dict(zip(jit.arg_names, args))
    options = {}
    for k, v in kwargs.items():
        (bound if k in jit.arg_names else options)[k] = v
    defaults = {n: p.default for n, p in inspect.signature(jit.fn).parameters.items()
                if p.default is not inspect.Parameter.empty}
    signature, constexprs = {}, {}
    for p in jit.params:
        v = bound[p.name] if p.name in bound else defaults.get(p.name)
        if p.is_constexpr or v is None:
            signature[p.name], constexprs[p.name] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            signature[p.name] = "*" + _TORCH_TO_TRITON[str(v.dtype).removeprefix("torch.")]
        elif isinstance(v, bool):
            signature[p.name] = "i1"
        elif isinstance(v, int):
            signature[p.name] = "i32" if -2**31 <= v < 2**31 else "i64"
        else:
            signature[p.name] = "fp32"
    return signature, constexprs, options


def _to_ttir(fm, jit, args, kwargs, cap) -> None:
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import JITFunction, KernelInterface

    signature, constexprs, options = _signature(jit, args, kwargs)
    target = GPUTarget("cuda", cap[0] * 10 + cap[1], 32)
    backend = make_backend(target)
    opts = backend.parse_options({k: v for k, v in options.items() if k in ("num_warps", "num_stages")})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    src = ASTSource(fn=jit, signature=signature, constexprs=constexprs)
    with Patches() as patches:
        # The kernel calls @jit helpers (its module's, and Triton's library ones such as tl.cdiv) through module
        # attributes; under TRITON_INTERPRET=1 they are interpreted functions, which the front end cannot lower.
        for module in [fm] + [m for n, m in list(sys.modules.items()) if n.startswith("triton.language") and m]:
            for name, obj in list(vars(module).items()):
                if isinstance(obj, KernelInterface) and not isinstance(obj, JITFunction):
                    patches.set(module, name, _plain_jit(obj))
        src.make_ir(target, opts, backend.get_codegen_implementation(opts), backend.get_module_map(), context)


def launch_front_end(launch: dict, cap) -> list:
    """For the launcher's arguments ``launch`` (``compute_type`` by name) under CUDA capability ``cap`` = [major,
    minor]: each kernel launch it makes, as ``{"kernel": name, "error": None or what the front end raised}``."""
    import triton.language as tl

    fm = fused_moe_module()
    kwargs = dict(launch)
    kwargs["compute_type"] = {"bf16": tl.bfloat16, "fp16": tl.float16, "fp32": tl.float32}[launch["compute_type"]]
    log: list = []
    with faked_capability(cap), Patches() as patches:
        for name, obj in _kernels(fm).items():
            patches.set(fm, name, _Capture(name, obj, log))
        fm.invoke_fused_moe_triton_kernel(**kwargs)
    out = []
    for name, real, args, kw in log:
        try:
            _to_ttir(fm, _plain_jit(real), args, kw, cap)
            out.append({"kernel": name, "error": None})
        except Exception as exc:  # noqa: BLE001 - what the front end refused is the observation
            out.append({"kernel": name, "error": f"{type(exc).__name__}: {str(exc)[-500:]}"})
    return out
