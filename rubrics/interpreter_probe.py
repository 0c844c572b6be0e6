"""A probe kernel for the Triton interpreter, imported only once TRITON_INTERPRET is decided (see rubric_support)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def sum_in_blocks(src, dst, n, BLOCK: tl.constexpr):
    """dst[0] = sum(src[:n]), in a loop whose trip count comes from the runtime argument ``n``, as MoE GEMMs loop
    over K."""
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, tl.cdiv(n, BLOCK)):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        total += tl.load(src + offs, mask=offs < n, other=0.0)
    tl.store(dst, tl.sum(total, axis=0))
