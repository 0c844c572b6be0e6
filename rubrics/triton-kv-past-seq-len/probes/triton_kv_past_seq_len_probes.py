"""Probes for triton-kv-past-seq-len, run in the sandboxed subject next to the tree under grading.

Each probe runs one of the candidate's public attention launchers on tensors the judge built (queries, paged
caches whose unwritten slots hold what the judge chose, block tables) and sends back what it saw: the output, the
caches as the call left them, and, under the Triton interpreter, which elements of the caller's caches the
kernels loaded; it never decides whether any of it is right. On a CPU run the kernels go through the Triton
interpreter (the grader sets ``TRITON_INTERPRET=1``); on a GPU run they compile for the device the judge names.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types

from probe_support import Patches, import_module, outcome_of

UNIFIED_MODULE = "vllm.v1.attention.ops.triton_unified_attention"
DIFFKV_MODULE = "vllm.v1.attention.ops.triton_unified_attention_diffkv"
PAGED_MODULE = "vllm.v1.attention.ops.chunked_prefill_paged_decode"
ROCM_PLATFORM_MODULE = "vllm.platforms.rocm"
# An architecture name that matches none vLLM has ROCm-specific kernels for: the paged-decode launcher then takes
# its Triton path, the one under test.
NO_CUSTOM_KERNEL_ARCH = "gfx000"


def public_names(module: str) -> list[str]:
    """The public names ``module`` defines once imported (its import errors fail the probe)."""
    loaded = import_module(module)
    return sorted(name for name in vars(loaded) if not name.startswith("_"))


def _on(device: str, value):
    import torch

    return value.to(device) if isinstance(value, torch.Tensor) else value


@contextlib.contextmanager
def _writes_to(tensors: dict):
    """Which of the caller's tensors the block wrote, even where it put their values back before it ended.

    Yields ``{name: bool}``, filled when the block ends: an in-place torch operation on a tensor (``nan_to_num_``,
    ``copy_``, an indexed assignment) moves its version counter, whatever it wrote; and, under the interpreter, the
    tensor's bytes are compared with a copy taken before the call when a kernel first loads anything (a write
    through another view, put back after the kernel, is seen there)."""
    import torch

    versions = {name: t._version for name, t in tensors.items()}
    before = {name: t.detach().clone() for name, t in tensors.items()}
    written = {name: False for name in tensors}
    checked = []

    def compare_now():
        if checked:
            return
        checked.append(True)
        for name, t in tensors.items():
            if not torch.equal(_bits(t), _bits(before[name])):
                written[name] = True

    yield written, compare_now
    for name, t in tensors.items():
        if t._version != versions[name]:
            written[name] = True


def _bits(t):
    import torch

    return t.detach().contiguous().view(-1).view(torch.uint8)


@contextlib.contextmanager
def _loads_of(caches: dict, on_first_load=None):
    """Record which elements of each named cache tensor the interpreter loads while the block runs.

    Every Triton load the interpreter executes (plain, block-pointer, tensor-descriptor) goes through
    ``InterpreterBuilder.create_masked_load`` with the lanes' addresses and mask: the lanes the mask enables are
    exactly the memory the kernel reads; the interpreter runs one program (grid point) at a time and names it in
    ``grid_idx``. Yields ``{name: int64 tensor [n, 4]}``, one row ``(x, y, z, element offset)`` per element a
    program loaded from that tensor, filled when the block ends; ``None`` values where kernels do not run
    through the interpreter (nothing is recorded)."""
    import numpy as np
    import torch

    seen = {name: None for name in caches}
    if os.environ.get("TRITON_INTERPRET") != "1" or any(t.device.type != "cpu" for t in caches.values()):
        yield seen
        return
    from triton.runtime import interpreter

    spans = {name: (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), t.element_size())
             for name, t in caches.items()}
    hits = {name: [] for name in caches}
    original = interpreter.InterpreterBuilder.create_masked_load

    def recording_load(self, ptrs, mask, *args, **kwargs):
        if on_first_load is not None:
            on_first_load()
        addresses = np.asarray(ptrs.data, dtype=np.uint64)[np.broadcast_to(np.asarray(mask.data, dtype=bool),
                                                                           np.shape(ptrs.data))]
        program = tuple(int(i) for i in (self.grid_idx or (-1, -1, -1)))
        for name, (lo, hi, _) in spans.items():
            inside = addresses[(addresses >= lo) & (addresses < hi)]
            if inside.size:
                hits[name].append((program, np.unique(inside)))
        return original(self, ptrs, mask, *args, **kwargs)

    with Patches() as patches:
        patches.set(interpreter.InterpreterBuilder, "create_masked_load", recording_load)
        yield seen
    for name, (lo, _, size) in spans.items():
        rows = [np.column_stack([np.broadcast_to(np.asarray(program, dtype=np.int64), (found.size, 3)),
                                 ((found - lo) // size).astype(np.int64)]) for program, found in hits[name]]
        table = np.unique(np.concatenate(rows), axis=0) if rows else np.zeros((0, 4), dtype=np.int64)
        seen[name] = torch.from_numpy(np.ascontiguousarray(table))


def _observed(out, loads: dict, caches: dict, inputs: dict, written: dict) -> dict:
    """What one launch left behind: its output, the caches and the other inputs (block table, lengths, queries)
    as it left them, the cache elements it loaded, and which of the caches and inputs it wrote while it ran."""
    return {"output": out.cpu(), "loads": loads, "caches_after": {name: t.cpu() for name, t in caches.items()},
            "inputs_after": {name: t.cpu() for name, t in inputs.items()}, "written": dict(written)}


@contextlib.contextmanager
def _watched(caches: dict, inputs: dict):
    """The loads the kernels make from ``caches`` and the writes the call makes to ``caches`` and ``inputs``."""
    with _writes_to({**caches, **inputs}) as (written, compare_now):
        with _loads_of(caches, on_first_load=compare_now) as loads:
            yield loads, written


def _run_unified(module, *, q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, max_seqlen_q, max_seqlen_k,
                 scale, causal, window_left, softcap, sinks, mm_prefix_range, segments, device, kv_quant_mode=0,
                 k_scale_cache=None, v_scale_cache=None, k_descale=None, v_descale=None, chunk_lookback=-1):
    import torch

    q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, causal, sinks, mm_prefix_range = (
        _on(device, t) for t in (q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, causal, sinks,
                                 mm_prefix_range))
    k_scale_cache, v_scale_cache = _on(device, k_scale_cache), _on(device, v_scale_cache)
    k_descale, v_descale = _on(device, k_descale), _on(device, v_descale)
    quant = {}
    if kv_quant_mode:
        # A quantised cache: int8 or fp8 slots, and either one fp32 scale per (slot, KV head) in scale caches of
        # their own or (fp8 per tensor) one K and one V scale, the descales of the call.
        from vllm.v1.kv_cache_interface import KVQuantMode

        quant = {"kv_quant_mode": KVQuantMode(kv_quant_mode), "k_scale_cache": k_scale_cache,
                 "v_scale_cache": v_scale_cache}
    out = torch.full_like(q, float("nan"))
    split = {}
    if segments:
        # Buffers for the split-KV (3D) launch, sized as the Triton backend sizes them: one row per token of a
        # batch of at most `threshold` sequences.
        threshold = max(q.shape[0], len(seq_lens))
        padded = 1 << (q.shape[2] - 1).bit_length()
        split = {
            "seq_threshold_3D": threshold,
            "num_par_softmax_segments": segments,
            "softmax_segm_output": torch.empty(threshold, q.shape[1], segments, padded, dtype=torch.float32,
                                               device=device),
            "softmax_segm_max": torch.empty(threshold, q.shape[1], segments, dtype=torch.float32, device=device),
            "softmax_segm_expsum": torch.empty(threshold, q.shape[1], segments, dtype=torch.float32,
                                               device=device),
        }
    caches = {"k": k_cache, "v": v_cache}
    if k_scale_cache is not None:
        caches.update(k_scale=k_scale_cache, v_scale=v_scale_cache)
    inputs = {"q": q, "block_table": block_table, "cu_seqlens_q": cu_seqlens_q, "seq_lens": seq_lens}
    with _watched(caches, inputs) as (loads, written):
        module.unified_attention(q, k_cache, v_cache, out, cu_seqlens_q, max_seqlen_q, seq_lens, max_seqlen_k,
                                 scale, causal, (window_left, -1), block_table, softcap, None, k_descale, v_descale,
                                 sinks=sinks, mm_prefix_range=mm_prefix_range, chunk_lookback=chunk_lookback,
                                 **split, **quant)
        if device == "cuda":
            torch.cuda.synchronize()
    return _observed(out, loads, caches, inputs, written)


def _run_diffkv(module, *, q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, max_seqlen_q, scale, device):
    import torch

    q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens = (
        _on(device, t) for t in (q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens))
    out = torch.full_like(q, float("nan"))
    caches = {"k": k_cache, "v": v_cache}
    inputs = {"q": q, "block_table": block_table, "cu_seqlens_q": cu_seqlens_q, "seq_lens": seq_lens}
    with _watched(caches, inputs) as (loads, written):
        module.unified_attention_diffkv(q, k_cache, v_cache, out, cu_seqlens_q, seq_lens, scale, True, (-1, -1),
                                        block_table, 0.0, max_seqlen_q=max_seqlen_q)
        if device == "cuda":
            torch.cuda.synchronize()
    return _observed(out, loads, caches, inputs, written)


def diffkv_attention_runs(cases: list[dict]) -> list[dict]:
    """For each case (the arguments of one causal ``unified_attention_diffkv`` call): what it returned or raised,
    as ``unified_attention_runs`` reports it."""
    module = import_module(DIFFKV_MODULE)
    return [outcome_of(_run_diffkv, module, **case) for case in cases]


def unified_attention_runs(cases: list[dict]) -> list[dict]:
    """For each case (the keyword arguments of one ``unified_attention`` call, as the judge built them):
    ``{"returned": {"output", "loads", "caches_after"}}`` or ``{"raised": type, "message": text}``."""
    module = import_module(UNIFIED_MODULE)
    return [outcome_of(_run_unified, module, **case) for case in cases]


def _import_rocm_platform_helpers() -> None:
    """The paged-decode launcher imports ``vllm.platforms.rocm`` to ask whether a ROCm custom kernel applies. That
    module reads the GPU architecture when it is imported; on a machine without a ROCm device it is imported here
    with the device properties answering an architecture that has no custom kernel."""
    if ROCM_PLATFORM_MODULE in sys.modules:
        return
    import torch

    def properties(*args, **kwargs):
        return types.SimpleNamespace(gcnArchName=NO_CUSTOM_KERNEL_ARCH, name="no ROCm device")

    with Patches() as patches:
        patches.set(torch.cuda, "get_device_properties", properties)
        import_module(ROCM_PLATFORM_MODULE)


def _run_paged(module, *, query, key_cache, value_cache, block_table, seq_lens, max_seq_len, scale, sliding_window,
               alibi_slopes, sinks, device, kv_cache_dtype="auto", k_scale=1.0, v_scale=1.0):
    import torch

    query, key_cache, value_cache, block_table, seq_lens, alibi_slopes, sinks = (
        _on(device, t) for t in (query, key_cache, value_cache, block_table, seq_lens, alibi_slopes, sinks))
    out = torch.full_like(query, float("nan"))
    k_scale = torch.tensor(k_scale, dtype=torch.float32, device=device)
    v_scale = torch.tensor(v_scale, dtype=torch.float32, device=device)
    caches = {"k": key_cache, "v": value_cache}
    query_start_loc = torch.arange(len(seq_lens) + 1, dtype=torch.int32, device=device)
    inputs = {"q": query, "block_table": block_table, "cu_seqlens_q": query_start_loc, "seq_lens": seq_lens}
    with _watched(caches, inputs) as (loads, written):
        module.chunked_prefill_paged_decode(
            query=query, key=None, value=None, output=out, kv_cache_dtype=kv_cache_dtype, key_cache=key_cache,
            value_cache=value_cache, block_table=block_table,
            query_start_loc=query_start_loc, seq_lens=seq_lens,
            max_seq_len=max_seq_len, max_query_len=1, k_scale=k_scale, v_scale=v_scale, alibi_slopes=alibi_slopes,
            sliding_window=sliding_window, sm_scale=scale, sinks=sinks)
        if device == "cuda":
            torch.cuda.synchronize()
    return _observed(out, loads, caches, inputs, written)


def paged_decode_runs(cases: list[dict]) -> list[dict]:
    """For each case (one decode batch for ``chunked_prefill_paged_decode``, as the judge built it): what it
    returned or raised, as ``unified_attention_runs`` reports it."""
    _import_rocm_platform_helpers()
    module = import_module(PAGED_MODULE)
    return [outcome_of(_run_paged, module, **case) for case in cases]

