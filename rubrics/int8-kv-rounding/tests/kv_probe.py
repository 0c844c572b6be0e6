"""Probe kernels for the interpreter corrections (imported only after TRITON_INTERPRET is decided)."""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def probe_rounding(x_ptr, round_ptr, rint_ptr, fp8_ptr, N: tl.constexpr):
    """round via the generic libdevice, rint via the CUDA module, and an fp32 -> fp8 store."""
    o = tl.arange(0, N)
    x = tl.load(x_ptr + o)
    tl.store(round_ptr + o, libdevice.round(x))
    tl.store(rint_ptr + o, tl.extra.cuda.libdevice.rint(x))
    tl.store(fp8_ptr + o, x)


@triton.jit
def probe_unary(x_ptr, y_ptr, N: tl.constexpr, FN: tl.constexpr):
    """One libdevice function by name, from the generic, CUDA or HIP module, stored as fp32."""
    o = tl.arange(0, N)
    x = tl.load(x_ptr + o)
    if FN == "round":
        y = libdevice.round(x)
    elif FN == "rint":
        y = libdevice.rint(x)
    elif FN == "nearbyint":
        y = libdevice.nearbyint(x)
    elif FN == "floor":
        y = libdevice.floor(x)
    elif FN == "ceil":
        y = libdevice.ceil(x)
    elif FN == "trunc":
        y = libdevice.trunc(x)
    elif FN == "llrint":
        y = libdevice.llrint(x).to(tl.float32)
    elif FN == "float2int_rn":
        y = tl.extra.cuda.libdevice.float2int_rn(x).to(tl.float32)
    elif FN == "cuda_round":
        y = tl.extra.cuda.libdevice.round(x)
    elif FN == "hip_round":
        y = tl.extra.hip.libdevice.round(x)
    elif FN == "hip_rint":
        y = tl.extra.hip.libdevice.rint(x)
    else:
        y = libdevice.exp(x)  # deliberately unsupported by the corrections
    tl.store(y_ptr + o, y)


@triton.jit
def probe_cast(x_ptr, y_ptr, N: tl.constexpr):
    """Store x into y's element type (the conversion under test)."""
    o = tl.arange(0, N)
    tl.store(y_ptr + o, tl.load(x_ptr + o))
