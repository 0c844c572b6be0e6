"""Test-time corrections to the Triton interpreter (``TRITON_INTERPRET=1``) for the int8-kv-rounding rubric.

Used on both sides: the subject installs them around each interpreted launch of the candidate's kernel
(``int8_kv_probes``), and the judge (through the link ``tests/kv_interp_shim.py``) installs them around its own
probe kernels to measure that they hold on this install, and uses ``torch_fp8_cast`` for the FP8 oracle. The
module imports neither vLLM nor anything of a candidate.

The interpreter runs Triton kernels on CPU with numpy, but it has two gaps that matter here:

1. ``libdevice`` calls do not run. The backend modules (``tl.extra.cuda.libdevice``, ``tl.extra.hip.libdevice``)
   are never bound to the interpreter, so a call raises "Did you forget to add @triton.jit ?"; the generic
   ``triton.language.extra.libdevice`` functions are empty stubs that return ``None``; and
   ``InterpreterBuilder.create_extern_elementwise`` raises ``NotImplementedError``.
2. fp32 -> fp8 conversion is wrong (the bit-level rounding forgets the carry into the exponent, e.g. -31.6
   becomes -16 in e4m3).
3. The interpreter's ``dtype.to_ir`` knows no IR type for the fnuz formats (e4m3fnuz, e5m2fnuz), so a kernel
   storing to an MI300's FP8 cache fails with "fail to convert fp8e4b8 to ir type".

``install()`` fixes both for as long as it is installed, and ``uninstall()`` puts everything back.
``install(backend="cuda")`` or ``install(backend="hip")`` stands for one GPU backend, as a kernel compiled for it
would: the generic libdevice functions resolve to that backend's, and a call of the other backend's libdevice
symbol raises ``WrongBackend`` (on the hardware it does not link), as does a generic function that module lacks,
in the installed Triton or at vLLM's pin (``HIP_LACKS_AT_PIN``). Without a backend both are evaluated.

- ``_patch_lang`` (called by the interpreter for every kernel launch and device-function call) additionally
  binds the backend libdevice modules to the interpreter and points the generic libdevice stubs at the CUDA
  implementations, inside the same restorable scope the interpreter already uses.
- ``create_extern_elementwise`` evaluates the rounding-related libdevice symbols with numpy (see
  ``SYMBOLS``): round (half away from zero), rint / nearbyint (half to even), floor, ceil, trunc, the
  integer-returning variants (llrint, llround, float2int_rn/rz/rd/ru, ...), fabs and copysign. Any other
  symbol raises ``InterpreterUnsupported``: the grader then reports the criterion as not evaluated on CPU.
- ``_patch_lang`` also gives ``dtype.to_ir`` the fnuz formats' types, which the interpreter's builder has.
- ``create_fp_to_fp`` converts to and from the fp8 formats torch knows (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz) with
  torch's own round-to-nearest-even cast, saturating out-of-range finite values and infinities to the largest
  finite value first (what NVIDIA's ``cvt.rn.satfinite`` does); NaN stays NaN. Other conversions are left to
  the interpreter.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re

import numpy as np


class InterpreterUnsupported(NotImplementedError):
    """A kernel used something the CPU interpreter cannot run faithfully, even with this shim."""


class WrongBackend(RuntimeError):
    """A kernel called a libdevice symbol of another GPU backend than the one it is compiled for."""


def _missing_in_backend(name: str, backend: str):
    """What a generic libdevice function becomes where the installed Triton's ``backend`` libdevice lacks it: a
    kernel compiled for that backend with this Triton cannot resolve the call (Triton 3.6's HIP module has no
    ``rint``; 3.7 has), so the launch raises, saying so, instead of running the generic stub (which returns
    nothing)."""

    def missing(*args, **kwargs):
        raise WrongBackend(f"libdevice.{name} is not in the {backend} libdevice of the installed Triton: a kernel "
                           f"compiled for {backend} with it cannot call it")

    return missing


# Generic libdevice functions that the HIP libdevice of Triton 3.6.0, the version vLLM 0.24 pins, lacks while a
# later Triton's has them: a ROCm build at the pin cannot resolve them, so a ROCm case fails them on any Triton the
# grader itself runs on (the same grade on this machine's 3.7 and the GPU machine's 3.6).
HIP_LACKS_AT_PIN = frozenset({"rint", "finitef", "isfinited"})

# The interpreter builder's type getters for the fp8 formats its ``dtype.to_ir`` leaves out.
_FNUZ_IR_TYPES = {"fp8e4b8": "get_fp8e4b8_ty", "fp8e5b16": "get_fp8e5b16_ty"}

# Which backend owns a libdevice symbol, by its prefix.
_SYMBOL_BACKENDS = (("__nv_", "cuda"), ("__ocml_", "hip"), ("__triton_hip_", "hip"))


# ---------------------------------------------------------------------------------------------------------
# numpy implementations of the libdevice functions
# ---------------------------------------------------------------------------------------------------------
def round_half_away(x: np.ndarray) -> np.ndarray:
    """C ``roundf``/``round``: nearest integer, ties away from zero; keeps the sign of zero; inf/NaN pass."""
    x = np.asarray(x)
    a = np.abs(x)
    f = np.floor(a)
    with np.errstate(invalid="ignore"):
        up = (a - f) >= 0.5  # a - f is exact in the input's own precision
    r = np.where(up, f + 1, f).astype(x.dtype, copy=False)
    return np.copysign(r, x).astype(x.dtype, copy=False)


def round_half_even(x: np.ndarray) -> np.ndarray:
    """C ``rintf``/``nearbyintf`` in the default rounding mode: nearest integer, ties to even."""
    return np.rint(np.asarray(x))


_ROUNDERS = {
    "round": round_half_away,
    "rint": round_half_even,
    "nearbyint": round_half_even,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    # integer-returning forms: same rounding, then a saturating conversion to the result type
    "llrint": round_half_even,
    "lrint": round_half_even,
    "llround": round_half_away,
    "lround": round_half_away,
    "rn": round_half_even,  # float2int_rn, float2ll_rn, double2int_rn, ...
    "rz": np.trunc,
    "rd": np.floor,
    "ru": np.ceil,
}


def _unary_kind(symbol: str) -> str | None:
    """Map a libdevice symbol (CUDA ``__nv_*``, AMD ``__ocml_*`` / ``__triton_hip_*``) to a function kind."""
    m = re.fullmatch(r"__nv_(float|double)2(u?int|u?ll)_(rn|rz|rd|ru)", symbol)
    if m:
        return m.group(3)
    m = re.fullmatch(r"__nv_(round|rint|nearbyint|floor|ceil|trunc|llrint|llround|lrint|lround|fabs|copysign)f?",
                     symbol)
    if m:
        return m.group(1)
    m = re.fullmatch(r"__ocml_(round|rint|nearbyint|floor|ceil|trunc|fabs|copysign)_f(32|64)", symbol)
    if m:
        return m.group(1)
    m = re.fullmatch(r"__triton_hip_(rint|llrint|fabs)", symbol)
    if m:
        return m.group(1)
    return None


SUPPORTED_KINDS = tuple(sorted(set(_ROUNDERS) | {"fabs", "copysign"}))


def eval_libdevice(symbol: str, args: list[np.ndarray], out_dtype: np.dtype,
                   backend: str | None = None) -> np.ndarray:
    """Evaluate one libdevice symbol on numpy arrays, returning an array of ``out_dtype``; with ``backend``, a
    symbol of another backend raises ``WrongBackend``."""
    owner = next((name for prefix, name in _SYMBOL_BACKENDS if symbol.startswith(prefix)), None)
    if backend is not None and owner is not None and owner != backend:
        raise WrongBackend(f"libdevice symbol {symbol} belongs to the {owner} backend; a kernel compiled for the "
                           f"{backend} backend cannot call it")
    kind = _unary_kind(symbol)
    if kind is None:
        raise InterpreterUnsupported(f"libdevice symbol {symbol} has no CPU implementation in the grader")
    if kind == "copysign":
        if len(args) != 2:
            raise InterpreterUnsupported(f"{symbol} expects 2 arguments, got {len(args)}")
        return np.copysign(args[0], args[1]).astype(out_dtype, copy=False)
    if len(args) != 1:
        raise InterpreterUnsupported(f"{symbol} expects 1 argument, got {len(args)}")
    x = np.asarray(args[0])
    if kind == "fabs":
        return np.abs(x).astype(out_dtype, copy=False)
    with np.errstate(invalid="ignore", over="ignore"):
        r = _ROUNDERS[kind](x)
    out_dtype = np.dtype(out_dtype)
    if out_dtype.kind in "iu":
        # Hardware float->int conversions saturate and map NaN to 0; numpy's astype would wrap.
        info = np.iinfo(out_dtype)
        r = np.nan_to_num(r.astype(np.float64), nan=0.0, posinf=float(info.max), neginf=float(info.min))
        r = np.clip(r, info.min, info.max)
    return r.astype(out_dtype)


# ---------------------------------------------------------------------------------------------------------
# fp8 conversion through torch
# ---------------------------------------------------------------------------------------------------------
def _fp8_torch_dtypes():
    import torch
    import triton.language as tl

    table = {}
    for tl_name, torch_name in (
        ("float8e4nv", "float8_e4m3fn"),
        ("float8e5", "float8_e5m2"),
        ("float8e4b8", "float8_e4m3fnuz"),
        ("float8e5b16", "float8_e5m2fnuz"),
    ):
        if hasattr(tl, tl_name) and hasattr(torch, torch_name):
            table[getattr(tl, tl_name)] = getattr(torch, torch_name)
    return table


def _np_to_torch(data: np.ndarray, tl_dtype):
    """Interpreter storage (numpy) -> torch tensor of the Triton dtype it stands for, or None."""
    import torch
    import triton.language as tl

    fp8 = _fp8_torch_dtypes()
    data = np.ascontiguousarray(data)
    if tl_dtype in fp8:
        return torch.from_numpy(data.view(np.uint8).copy()).view(fp8[tl_dtype])
    if tl_dtype == tl.bfloat16:
        return torch.from_numpy(data.view(np.int16).copy()).view(torch.bfloat16)
    if tl_dtype in (tl.float16, tl.float32, tl.float64):
        return torch.from_numpy(data.copy())
    return None


def _torch_to_np(t, tl_dtype) -> np.ndarray:
    import torch
    import triton.language as tl

    fp8 = _fp8_torch_dtypes()
    if tl_dtype in fp8:
        return t.view(torch.uint8).numpy()
    if tl_dtype == tl.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def torch_fp8_cast(t, fp8_dtype):
    """torch's round-to-nearest-even cast to ``fp8_dtype`` with NVIDIA satfinite saturation."""
    import torch

    fmax = torch.finfo(fp8_dtype).max
    wide = t.to(torch.float64) if t.dtype != torch.float64 else t
    sat = torch.where(torch.isnan(wide), wide, wide.clamp(-fmax, fmax))
    # Casting through float64 is exact for every source format here, so there is no double rounding.
    return sat.to(fp8_dtype)


# ---------------------------------------------------------------------------------------------------------
# install / uninstall
# ---------------------------------------------------------------------------------------------------------
_saved: dict = {}


def _backend_libdevice_modules():
    mods = {}
    try:
        from triton.language.extra.cuda import libdevice as cuda_ld

        mods["cuda"] = cuda_ld
    except Exception:  # pragma: no cover - depends on the Triton build
        pass
    try:
        from triton.language.extra.hip import libdevice as hip_ld

        mods["hip"] = hip_ld
    except Exception:  # pragma: no cover
        pass
    return mods


def install(backend: str | None = None) -> None:
    """Install the corrections into ``triton.runtime.interpreter`` (idempotent), standing for ``backend``
    ("cuda" or "hip") where one is named."""
    if _saved:
        return
    if backend not in (None, "cuda", "hip"):
        raise ValueError(f"unknown backend {backend!r}")
    import triton.language as tl
    import triton.language.core as tlcore
    import triton.language.extra.libdevice as generic_ld
    from triton.runtime import interpreter as interp

    builder_cls = interp.InterpreterBuilder
    orig_patch_lang = interp._patch_lang
    orig_extern = builder_cls.create_extern_elementwise
    orig_fp_to_fp = builder_cls.create_fp_to_fp
    backend_mods = _backend_libdevice_modules()
    generic_target = backend_mods.get(backend or "cuda")

    def patch_lang(fn):
        scope = orig_patch_lang(fn)
        plain_to_ir = tlcore.dtype.to_ir

        def to_ir(self, builder):
            getter = _FNUZ_IR_TYPES.get(self.name)
            return getattr(builder, getter)() if getter else plain_to_ir(self, builder)

        scope.set_attr(tlcore.dtype, "to_ir", to_ir)
        for mod in backend_mods.values():
            for name, member in inspect.getmembers(mod):
                if tlcore.is_builtin(member):
                    interp._patch_attr(mod, name, member, interp.interpreter_builder, scope)
        if generic_target is not None:
            for name, member in inspect.getmembers(generic_ld, inspect.isfunction):
                if getattr(member, "__module__", "") != generic_ld.__name__:
                    continue
                lacking = backend == "hip" and name in HIP_LACKS_AT_PIN
                impl = None if lacking else getattr(generic_target, name, None)
                scope.set_attr(generic_ld, name, impl or _missing_in_backend(name, backend or "cuda"))
        return scope

    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):
        out_np = interp._get_np_dtype(retType)
        data = eval_libdevice(symbol, [a.data for a in argList], out_np, backend)
        scalar = retType.scalar if hasattr(retType, "scalar") else retType
        return interp.TensorHandle(np.asarray(data, dtype=out_np), scalar)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        src_ty = src.dtype.scalar
        dst_ty = dst_type.scalar
        fp8 = _fp8_torch_dtypes()
        rtne = rounding_mode is None or rounding_mode == interp._ir.ROUNDING_MODE.RTNE
        if (src_ty in fp8 or dst_ty in fp8) and rtne:
            t = _np_to_torch(src.data, src_ty)
            if t is not None and (dst_ty in fp8 or dst_ty in (tl.bfloat16, tl.float16, tl.float32, tl.float64)):
                import torch

                if dst_ty in fp8:
                    out = torch_fp8_cast(t, fp8[dst_ty])
                else:
                    torch_dst = {tl.bfloat16: torch.bfloat16, tl.float16: torch.float16,
                                 tl.float32: torch.float32, tl.float64: torch.float64}[dst_ty]
                    out = t.to(torch_dst)  # fp8 -> wider float is exact
                data = _torch_to_np(out, dst_ty).reshape(np.shape(src.data))
                return interp.TensorHandle(data.view(interp._get_np_dtype(dst_type)), dst_ty)
        return orig_fp_to_fp(self, src, dst_type, rounding_mode)

    _saved.update(patch_lang=orig_patch_lang, extern=orig_extern, fp_to_fp=orig_fp_to_fp)
    interp._patch_lang = patch_lang
    builder_cls.create_extern_elementwise = create_extern_elementwise
    builder_cls.create_fp_to_fp = create_fp_to_fp


def uninstall() -> None:
    if not _saved:
        return
    from triton.runtime import interpreter as interp

    interp._patch_lang = _saved["patch_lang"]
    interp.InterpreterBuilder.create_extern_elementwise = _saved["extern"]
    interp.InterpreterBuilder.create_fp_to_fp = _saved["fp_to_fp"]
    _saved.clear()


def interpreter_cannot_run(exc: BaseException) -> str | None:
    """If ``exc`` (or its cause chain) says the interpreter cannot run the kernel, return why; else None."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, InterpreterUnsupported):
            return str(e)
        text = f"{type(e).__name__}: {e}"
        for marker in ("not supported in interpreter mode", "InterpreterUnsupported",
                       "has no CPU implementation in the grader"):
            if marker in text:
                return text[:300]
        e = e.__cause__ or e.__context__
    return None


@contextlib.contextmanager
def _language_put_back():
    """Every attribute the interpreter's patch scopes change inside the block, set back at its end to what it was
    before the block (or removed, where it was not there), whether or not the scope that changed it restored it."""
    from triton.runtime import interpreter as interp

    scope_cls = interp._LangPatchScope
    plain_set_attr = scope_cls.set_attr
    before: dict = {}
    absent = object()

    def set_attr(scope, obj, name, value):
        before.setdefault((id(obj), name), (obj, name, getattr(obj, name, absent)))
        plain_set_attr(scope, obj, name, value)

    scope_cls.set_attr = set_attr
    try:
        yield
    finally:
        scope_cls.set_attr = plain_set_attr
        for obj, name, value in reversed(list(before.values())):
            if value is absent:
                if hasattr(obj, name):
                    delattr(obj, name)
            else:
                setattr(obj, name, value)


@contextlib.contextmanager
def interpreting(on: bool = True):
    """Triton's interpreter on for the block, as a CPU run has it for the whole process (``TRITON_INTERPRET=1``).

    A GPU run uses it for the ROCm cases, which no machine here can compile for. There Triton was imported with
    the interpreter off, so every ``@triton.jit`` function (the candidate's kernels and Triton's own, such as
    ``tl.max``) is a compiled-kernel object: for the block, launching one or calling one from a kernel runs its
    Python function through the interpreter, as the same function defined under ``TRITON_INTERPRET=1`` would.

    The interpreter patches ``triton.language`` for each launch and puts it back at the launch's end, but a device
    function it calls (``tl.max`` is one) patches it again without ever putting it back: harmless where every
    kernel is interpreted, it leaves the compiler's ``tl.load`` and the rest bound to the interpreter, so the next
    compiled launch fails ("block_argument has no attribute get_element_ty", as the first GPU run of v8 showed).
    So every attribute any patch changes in the block is put back as it was before the block."""
    held = os.environ.get("TRITON_INTERPRET")
    if not on or held == "1":
        yield
        return
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    interpreted: dict = {}

    def as_interpreted(kernel):
        if kernel.fn not in interpreted:
            interpreted[kernel.fn] = InterpretedFunction(kernel.fn)
        return interpreted[kernel.fn]

    compiled = {"run": JITFunction.run, "__call__": JITFunction.__call__}
    os.environ["TRITON_INTERPRET"] = "1"
    JITFunction.run = lambda self, *args, **kwargs: as_interpreted(self).run(*args, **kwargs)
    JITFunction.__call__ = lambda self, *args, **kwargs: as_interpreted(self)(*args, **kwargs)
    try:
        with _language_put_back():
            yield
    finally:
        JITFunction.run = compiled["run"]
        JITFunction.__call__ = compiled["__call__"]
        if held is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = held
