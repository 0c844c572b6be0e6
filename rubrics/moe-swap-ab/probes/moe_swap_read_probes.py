"""Probe for moe-swap-ab, run in the subject: which memory the candidate's fused-MoE kernel reads.

``launch_reads`` runs the launcher through the Triton interpreter on the judge's operands, with A handed over as the
first rows of a larger buffer (the rows after it are a guard region no launch may read), and records every address
the kernel loads. Every Triton load the interpreter executes goes through ``InterpreterBuilder.create_masked_load``
with the lanes' addresses and mask, so the enabled lanes are exactly what the kernel reads, whatever the outputs
show. Nothing is judged here: the loads come back counted by the tensor they fall in.
"""

from __future__ import annotations

import contextlib
import os

from moe_swap_probes import faked_capability, fused_moe_module
from probe_support import Patches

# Tensors the launcher hands to the kernel, by the launcher's keyword names.
READABLE = ("A", "B", "C", "A_scale", "B_scale", "topk_weights", "sorted_token_ids", "expert_ids",
            "num_tokens_post_padded", "B_bias")
A_GUARD = "A guard rows"
OUTSIDE = "outside every argument"


@contextlib.contextmanager
def _recorded_loads(spans: dict):
    """While the block runs, count the distinct element addresses each interpreted load enables, by the span
    ``{name: (first byte, end byte)}`` they fall in (``OUTSIDE`` for none). Yields the counts, filled at the end."""
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


def _span(t) -> tuple[int, int]:
    return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()


def launch_reads(launch: dict, cap, a_rows: int) -> dict:
    """Run the launcher through the Triton interpreter under capability ``cap`` (as ``moe_swap_probes`` fakes it)
    with the judge's arguments, where ``launch["A"]`` is a contiguous buffer whose first ``a_rows`` rows are the
    operand A the kernel is given (the rest is the guard region). ``compute_type`` comes by name.

    Returns ``{"reads": {tensor name, A_GUARD or OUTSIDE: distinct elements loaded}, "output": C}``; raises
    RuntimeError where kernels do not run through the interpreter (nothing could be recorded)."""
    import triton.language as tl

    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("the Triton interpreter is off: the kernel's loads cannot be recorded")
    fm = fused_moe_module()
    kwargs = dict(launch)
    kwargs["compute_type"] = {"bf16": tl.bfloat16, "fp16": tl.float16, "fp32": tl.float32}[launch["compute_type"]]
    buffer = kwargs["A"]
    kwargs["A"] = buffer[:a_rows]
    spans = {name: _span(kwargs[name]) for name in READABLE if kwargs.get(name) is not None}
    spans[A_GUARD] = (_span(kwargs["A"])[1], _span(buffer)[1])
    with faked_capability(cap), _recorded_loads(spans) as reads:
        fm.invoke_fused_moe_triton_kernel(**kwargs)
    return {"reads": reads, "output": kwargs["C"]}
