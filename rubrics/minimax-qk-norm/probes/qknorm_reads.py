"""Probe for minimax-qk-norm, run in the subject: which elements around its inputs ``forward_qkv`` reads.

Each rank's qkv and weight shards are placed inside buffers with ``guard`` poisoned elements before and after
them, so a read just outside a tensor lands in memory the probe owns. Under the Triton interpreter every load a
kernel executes goes through ``InterpreterBuilder.create_masked_load`` with its lanes' addresses and mask; the
enabled lanes are the memory the kernel reads. The probe records the enabled lanes that fall inside those buffers
and reports them as element offsets from each tensor's first element (negative: before it; ``numel`` and above:
past its end). Off the interpreter (a GPU run) nothing is recorded and ``reads`` is None; the poison is then the
only evidence (a read past a tensor that reaches an output makes it non-finite). Nothing here decides anything.
"""

from __future__ import annotations

import contextlib
import os

import torch

import qknorm_probes
import qknorm_sim
from probe_support import Patches, unwritten_memory_is_nan

INPUTS = ("qkv", "q_weight", "k_weight")


def _guarded(tensor: torch.Tensor, guard: int, poison: float) -> torch.Tensor:
    """A copy of contiguous ``tensor`` inside a buffer with ``guard`` elements of ``poison`` on each side."""
    buf = torch.full((tensor.numel() + 2 * guard,), poison, dtype=tensor.dtype, device=tensor.device)
    inner = buf[guard:guard + tensor.numel()].view(tensor.shape)
    inner.copy_(tensor)
    return inner


@contextlib.contextmanager
def _recorded_loads(spans: dict):
    """Record, per name, the enabled load lanes whose address lies in ``spans[name] = (lo, hi, first, size)``,
    as element offsets from ``first``. Yields ``{name: sorted offsets}`` (filled when the block ends), or None
    off the interpreter."""
    import numpy as np

    if os.environ.get("TRITON_INTERPRET") != "1" or not spans:
        yield None
        return
    from triton.runtime import interpreter

    hits = {name: [] for name in spans}
    original = interpreter.InterpreterBuilder.create_masked_load

    def recording_load(self, ptrs, mask, *args, **kwargs):
        addresses = np.asarray(ptrs.data).astype(np.int64)
        if mask is not None:
            addresses = addresses[np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)]
        addresses = addresses.ravel()
        for name, (lo, hi, _, _) in spans.items():
            inside = addresses[(addresses >= lo) & (addresses < hi)]
            if inside.size:
                hits[name].append(np.unique(inside))
        return original(self, ptrs, mask, *args, **kwargs)

    seen: dict = {}
    with Patches() as patches:
        patches.set(interpreter.InterpreterBuilder, "create_masked_load", recording_load)
        yield seen
    for name, (_, _, first, size) in spans.items():
        found = np.unique(np.concatenate(hits[name])) if hits[name] else np.zeros(0, dtype=np.int64)
        seen[name] = torch.from_numpy((found - first) // size)


def _span(tensor: torch.Tensor, guard: int) -> tuple[int, int, int, int]:
    size = tensor.element_size()
    first = tensor.data_ptr()
    return first - guard * size, first + (tensor.numel() + guard) * size, first, size


def simulate_reads(qkv: list, q_weight: list, k_weight: list, q_size: int, kv_size: int, eps: float, device: str,
                   guard: int, poison: float) -> dict:
    """``qknorm_probes.simulate``'s observations of ``forward_qkv`` on ``len(qkv)`` simulated ranks, run on inputs
    placed between ``guard`` elements of ``poison``; ``reads[r][name]`` (name one of ``INPUTS``): the element
    offsets of rank r's tensor the kernels loaded, relative to its first element, or None off the interpreter.
    ``kernel_loads``: how many loads the interpreter executed in all (0 when no Triton kernel ran)."""
    mod = qknorm_probes.layer_module()
    placed = {name: [_guarded(t.to(device).contiguous(), guard, poison) for t in shards]
              for name, shards in (("qkv", qkv), ("q_weight", q_weight), ("k_weight", k_weight))}
    # The norms' weights are the placed shards themselves, not copies of them.
    weights = {t.data_ptr(): t for name in ("q_weight", "k_weight") for t in placed[name]}
    spans = {(r, name): _span(placed[name][r], guard) for name in INPUTS for r in range(len(qkv))}
    counter = {"loads": 0}
    with qknorm_sim.vllm_config(), _counted_loads(counter), unwritten_memory_is_nan(), _recorded_loads(
            spans if device == "cpu" else {}) as seen:
        obs = qknorm_sim.run_ranks(mod, placed["qkv"], placed["q_weight"], placed["k_weight"], q_size, kv_size, eps,
                                   place=lambda w: weights[w.data_ptr()])
    obs["reads"] = None if seen is None else [{name: seen[(r, name)] for name in INPUTS} for r in range(len(qkv))]
    obs["kernel_loads"] = counter["loads"]
    return obs


@contextlib.contextmanager
def _counted_loads(counter: dict):
    """Count the loads the interpreter executes (none off the interpreter)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_masked_load

    def counting_load(self, *args, **kwargs):
        counter["loads"] += 1
        return original(self, *args, **kwargs)

    with Patches() as patches:
        patches.set(interpreter.InterpreterBuilder, "create_masked_load", counting_load)
        yield
