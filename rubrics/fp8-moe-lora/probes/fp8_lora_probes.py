"""Probes for fp8-moe-lora, run in the subject: a tiny modular MoE with a MoE-LoRA context, run on the judge's
tensors, and what its pieces were given.

The judge draws every input (activations, weights and their scales, routing, LoRA weights, token mappings) and
says which quantization config to build; a probe builds the vLLM objects from them, runs the candidate's code and
returns observations: the layer output, and what the base fused-MoE GEMM and the MoE-LoRA op received (inputs as
tensors, flags as plain values), or which host reads of tensor values a call made. It never decides whether any of
it is right.

Stand-ins (installed once per subject, the same for every probe of this task): torch implementations of the
compiled ops the MoE path calls, registered under their ``torch.ops`` names only where the op is missing (or, where
a compiled op has no CPU kernel, as its CPU kernel), and the CUTLASS capability probes quantization utils call at
import time on a CUDA host. Installed per call and undone after it: on CPU (``UnspecifiedPlatform``) a platform
stand-in (device name, ``supports_fp8``), a no-op ``torch.accelerator.empty_cache`` and a torch replacement of the
Triton fallback of ``per_token_group_quant_fp8``; spies on ``invoke_fused_moe_triton_kernel`` (base GEMMs) and on
``fused_moe_lora`` as called by ``punica_gpu`` that record their inputs and, on CPU, compute by torch reference
(``fp8_lora_reference_ops``); a wrapper of ``LoRAExpertsMixin.apply_w13_lora`` that records its ``x``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types

import torch

import fp8_lora_reference_ops as R
from probe_support import Patches, has_torch_op, import_module, outcome_of, put_back, unwritten_memory_is_nan

FP8 = R.FP8

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

# ---------------------------------------------------------------------------------------------------------------
# stand-ins for compiled ops (once per subject)
# ---------------------------------------------------------------------------------------------------------------

_LIBS: list = []
_SHIMS_DONE = False


def _register(ns: str, schema: str, fn) -> None:
    name = schema.split("(", 1)[0]
    if not has_torch_op(ns, name):
        lib = torch.library.Library(ns, "FRAGMENT")
        lib.define(schema)
        lib.impl(name, _unwatched(fn), "CompositeExplicitAutograd")
        _LIBS.append(lib)
        return
    # A compiled op exists (GPU host with vLLM's extensions): give it a CPU kernel if it lacks one,
    # so the CPU probes can still run there.
    qual = f"{ns}::{name}"
    if not torch._C._dispatch_has_kernel_for_dispatch_key(qual, "CPU"):
        lib = torch.library.Library(ns, "IMPL")
        lib.impl(name, fn, "CPU")
        _LIBS.append(lib)


def install_op_shims() -> None:
    """Register torch reference ops under the compiled names, where these are missing."""
    global _SHIMS_DONE
    if _SHIMS_DONE:
        return
    _register("_C", "silu_and_mul(Tensor! result, Tensor input) -> ()", R.silu_and_mul)
    _register("_C", "static_scaled_fp8_quant(Tensor! result, Tensor input, Tensor scale, "
                    "int[]? group_shape=None) -> ()", R.static_fp8)
    _register("_C", "dynamic_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale) -> ()",
              R.dynamic_fp8)
    _register("_C", "dynamic_per_token_scaled_fp8_quant(Tensor! result, Tensor input, "
                    "Tensor! scale, Tensor? scale_ub) -> ()", R.dynamic_token_fp8)
    _register("_C", "per_token_group_fp8_quant(Tensor input, Tensor! output_q, Tensor! output_s, "
                    "int group_size, float eps, float fp8_min, float fp8_max, bool scale_ue8m0, "
                    "bool dummy_is_scale_transposed, bool dummy_is_tma_aligned) -> ()",
              R.per_token_group_fp8)
    _register("_C", "silu_and_mul_per_block_quant(Tensor! out, Tensor input, Tensor! scales, "
                    "int group_size, Tensor? scale_ub=None, bool is_scale_transposed=False) -> ()",
              R.silu_mul_block_quant)
    _register("_moe_C", "moe_sum(Tensor input, Tensor! output) -> ()", R.moe_sum)
    _register("_moe_C", "moe_align_block_size(Tensor topk_ids, int num_experts, int block_size, "
                        "Tensor! sorted_token_ids, Tensor! experts_ids, Tensor! num_tokens_post_pad, "
                        "Tensor? maybe_expert_map) -> ()", R.moe_align)
    # capability probes that quantization utils call at import time on a CUDA host; the probes use
    # the Triton MoE path, so these only need to answer "no CUTLASS kernel"
    for probe in ("cutlass_scaled_mm_supports_fp8", "cutlass_scaled_mm_supports_block_fp8",
                  "cutlass_group_gemm_supported", "cutlass_scaled_mm_supports_fp4"):
        if not has_torch_op("_C", probe):
            lib = torch.library.Library("_C", "FRAGMENT")
            lib.define(f"{probe}(int cuda_device_capability) -> bool")
            lib.impl(probe, lambda cap: False, "CompositeExplicitAutograd")
            _LIBS.append(lib)
    _SHIMS_DONE = True


# ---------------------------------------------------------------------------------------------------------------
# platform stand-in (CPU only: on a CUDA host the real platform is used), undone after each probe
# ---------------------------------------------------------------------------------------------------------------


def _patch_platform(patches: Patches) -> None:
    from vllm.platforms import current_platform

    cls = type(current_platform)
    if cls.__name__ != "UnspecifiedPlatform":
        return
    patches.set(cls, "get_device_name", classmethod(lambda c, device_id=0: "grader_cpu_standin"))
    patches.set(cls, "supports_fp8", classmethod(lambda c: True))
    patches.set(cls, "num_compute_units", classmethod(lambda c, device_id=0: 8))
    # The workspace manager empties the accelerator cache when it grows; there is none here.
    patches.set(torch.accelerator, "empty_cache", lambda: None)
    # The Triton fallback of per_token_group_quant_fp8 cannot launch on CPU tensors.
    fmu = import_module("vllm.model_executor.layers.fused_moe.utils")
    f8u = import_module("vllm.model_executor.layers.quantization.utils.fp8_utils")

    def _ptgq(x, group_size, *args, **kwargs):
        return R.group_quant_fp8(x.reshape(-1, x.shape[-1]), group_size, current_platform.fp8_dtype())

    patches.set(f8u, "per_token_group_quant_fp8", _ptgq)
    if hasattr(fmu, "per_token_group_quant_fp8"):
        patches.set(fmu, "per_token_group_quant_fp8", _ptgq)


# ---------------------------------------------------------------------------------------------------------------
# spies
# ---------------------------------------------------------------------------------------------------------------


# Tensor methods that hand a tensor's values to the host (a device-to-host copy, so a sync on a GPU) without going
# through an aten op the dispatch mode sees: tolist and numpy read the storage directly.
_HOST_READ_METHODS = {torch.Tensor.tolist: "tolist", torch.Tensor.numpy: "numpy", torch.Tensor.cpu: "cpu",
                      torch.Tensor.item: "item", torch.Tensor.__bool__: "__bool__", torch.Tensor.__int__: "__int__",
                      torch.Tensor.__float__: "__float__", torch.Tensor.__index__: "__index__",
                      torch.Tensor.__array__: "__array__"}


_VALUE_READ_OPS = {"aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal"}
_VALUE_SIZED_OPS = {"aten::nonzero", "aten::masked_select", "aten::_unique", "aten::_unique2", "aten::unique_dim",
                    "aten::unique_consecutive"}
_INDEX_OPS = {"aten::index", "aten::index_put", "aten::index_put_", "aten::_index_put_impl_"}


def _has_mask_index(args) -> bool:
    """An index argument (a list of tensors or None) holding a boolean or byte mask."""
    return any(isinstance(a, (list, tuple)) and any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
                                                    for i in a) for a in args)


def _host_read_op(func, args) -> bool:
    """Aten ops that read a tensor's values on the host: a scalar read, or an output whose size the values decide
    (on a GPU the host waits for the device to learn it), as a boolean-mask index is."""
    name = func._schema.name
    if name in _VALUE_READ_OPS or name in _VALUE_SIZED_OPS:
        return True
    return name in _INDEX_OPS and _has_mask_index(args)


class _SyncGuard:
    """CPU stand-in for CUDA's sync debug mode: records every read of a tensor's value on the host, both the aten
    ops (aten._local_scalar_dense, which .item(), bool() and int() go through; is_nonzero; equal; the ops whose
    output size the values decide: nonzero, masked_select, unique, a boolean-mask index) and the Tensor methods that
    copy values to the host without an aten op (tolist, numpy, cpu, __array__), except reads of the host-side flag
    tensors named as allowed. On a GPU each such read of a device tensor syncs. The torch stand-ins of vLLM's
    compiled ops are not watched: on a GPU they are device kernels."""

    paused = 0

    def __init__(self, allowed: list[torch.Tensor]):
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        guard = self
        self.allowed = {t.untyped_storage().data_ptr() for t in allowed}
        self.reads: list[str] = []

        class _Methods(TorchFunctionMode):
            def __torch_function__(self, func, types_, args=(), kwargs=None):
                name = _HOST_READ_METHODS.get(func)
                if name is not None and not _SyncGuard.paused and args and isinstance(args[0], torch.Tensor) and \
                        args[0].untyped_storage().data_ptr() not in guard.allowed:
                    guard.reads.append(f"Tensor.{name} on tensor of shape {tuple(args[0].shape)}")
                return func(*args, **(kwargs or {}))

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
                kwargs = kwargs or {}
                if not _SyncGuard.paused and _host_read_op(func, args):
                    for a in args:
                        if isinstance(a, torch.Tensor) and \
                                a.untyped_storage().data_ptr() not in guard.allowed:
                            guard.reads.append(f"{func} on tensor of shape {tuple(a.shape)}")
                            break
                return func(*args, **kwargs)

        self.mode = _Mode()
        self.methods = _Methods()

    def __enter__(self):
        self.methods.__enter__()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        return self.methods.__exit__(*exc)


@contextlib.contextmanager
def _paused_guard():
    _SyncGuard.paused += 1
    try:
        yield
    finally:
        _SyncGuard.paused -= 1


def _unwatched(fn):
    """``fn`` run with the sync guard paused."""
    def run(*args, **kwargs):
        with _paused_guard():
            return fn(*args, **kwargs)

    return run


class _Recorder:
    def __init__(self) -> None:
        self.gemm: list[dict] = []
        self.lora: list[dict] = []
        self.w13_entry: list = []

    def as_data(self) -> dict:
        return {"gemm": self.gemm, "lora": self.lora, "w13_entry": self.w13_entry}

    def clear(self) -> None:
        self.gemm.clear()
        self.lora.clear()
        self.w13_entry.clear()


def _clone(t):
    return None if t is None else t.detach().clone()


def _install_spies(patches: Patches, rec: _Recorder, real_kernels: bool) -> None:
    """Record (and on CPU compute by reference) the base GEMMs and the MoE-LoRA op."""
    pg = import_module("vllm.lora.punica_wrapper.punica_gpu")
    tm = import_module("vllm.model_executor.layers.fused_moe.experts.triton_moe")
    fm = import_module("vllm.model_executor.layers.fused_moe.fused_moe")
    mixin = import_module("vllm.model_executor.layers.fused_moe.experts.lora_experts_mixin").LoRAExpertsMixin

    orig_gemm = tm.invoke_fused_moe_triton_kernel
    orig_lora = getattr(pg, "fused_moe_lora", None)
    orig_w13 = mixin.apply_w13_lora

    def gemm_spy(*args, **kwargs):
        names = ["A", "B", "C", "A_scale", "B_scale", "topk_weights", "sorted_token_ids",
                 "expert_ids", "num_tokens_post_padded", "mul_routed_weight", "top_k", "config"]
        bound = dict(zip(names, args))
        bound.update(kwargs)
        block = bound.get("block_shape")
        rec.gemm.append({
            "A": _clone(bound["A"]), "A_scale": _clone(bound["A_scale"]),
            "top_k": int(bound["top_k"]), "mul_routed_weight": bool(bound["mul_routed_weight"]),
            "use_fp8_w8a8": bool(bound.get("use_fp8_w8a8", False)),
            "block_shape": None if block is None else [int(v) for v in block]})
        if real_kernels:
            return orig_gemm(*args, **kwargs)
        with _paused_guard():
            return R.reference_gemm(*args, **kwargs)

    def lora_spy(*args, **kwargs):
        y, x = args[0], args[1]
        tlm = args[8] if len(args) > 8 else kwargs.get("token_lora_mapping")
        mul = args[28] if len(args) > 28 else kwargs.get("mul_routed_weight", False)
        rec.lora.append({"x": _clone(x), "y_shape": [int(d) for d in y.shape], "mul_routed_weight": bool(mul),
                         "token_lora_mapping": _clone(tlm)})
        if real_kernels:
            return orig_lora(*args, **kwargs)
        with _paused_guard():
            return R.reference_fused_moe_lora(*args, **kwargs)

    def w13_spy(self, lora_context, *args, **kwargs):
        x = kwargs.get("x")
        rec.w13_entry.append(_clone(x) if isinstance(x, torch.Tensor) else None)
        return orig_w13(self, lora_context, *args, **kwargs)

    patches.set(tm, "invoke_fused_moe_triton_kernel", gemm_spy)
    patches.set(fm, "invoke_fused_moe_triton_kernel", gemm_spy)
    patches.set(pg, "fused_moe_lora", lora_spy)
    patches.set(mixin, "apply_w13_lora", w13_spy)


def _patch_fp8_dtype(patches: Patches, name: str) -> None:
    """Make the platform's FP8 dtype ``name`` (``float8_e4m3fnuz``: a ROCm MI300 GPU), as vLLM reads it."""
    from vllm.platforms import current_platform

    dtype = getattr(torch, name)
    if dtype not in R.FP8_DTYPES:
        raise ValueError(f"not a platform FP8 dtype: {name}")
    cls = type(current_platform)
    patches.set(cls, "fp8_dtype", classmethod(lambda c: dtype))
    patches.set(cls, "is_fp8_fnuz", classmethod(lambda c: dtype == torch.float8_e4m3fnuz))


# The modules a fix of this task lives in (rubric.toml's [summary.places], less the MoE-LoRA kernels' op files,
# which register custom ops when imported and cannot be imported twice in one process).
FIX_MODULES = ("vllm.model_executor.layers.fused_moe.experts.lora_context",
               "vllm.lora.punica_wrapper.punica_gpu",
               "vllm.model_executor.layers.fused_moe.experts.triton_moe")


@contextlib.contextmanager
def _fix_imported_on_the_platform_played():
    """FIX_MODULES imported anew for the call, after the platform it plays is in place; the loaded ones are put
    back (in ``sys.modules`` and on their packages) when it ends. vLLM fixes its platform before it imports the
    model's modules, once per process: a fix that reads the platform (its FP8 dtype) when its module is imported
    is right wherever one that reads it at each call is, and is graded so. Playing the platform under modules
    imported on another would show them a platform no process has."""
    kept = {name: import_module(name) for name in FIX_MODULES}
    try:
        for name in FIX_MODULES:
            sys.modules.pop(name, None)
        for name in FIX_MODULES:
            import_module(name)
        yield
    finally:
        put_back(kept)


@contextlib.contextmanager
def _session(real_kernels: bool = False, spies: bool = True, fp8_dtype: str | None = None):
    """Stand-ins and spies for one probe call; everything is undone when it ends."""
    install_op_shims()
    rec = _Recorder()
    with Patches() as patches:
        _patch_platform(patches)
        if fp8_dtype is not None:
            _patch_fp8_dtype(patches, fp8_dtype)
        with _fix_imported_on_the_platform_played():
            if spies:
                _install_spies(patches, rec, real_kernels)
            yield rec, patches


# ---------------------------------------------------------------------------------------------------------------
# builders: vLLM objects from the judge's data
# ---------------------------------------------------------------------------------------------------------------


def _to(t, device):
    return None if t is None else t.to(device)


def _quant_config(quant: dict, device: str):
    cfg = import_module("vllm.model_executor.layers.fused_moe.config")
    kind = quant["config"]
    if kind == "unquantized":
        return cfg.FUSED_MOE_UNQUANTIZED_CONFIG
    if kind == "int8_w8a16":
        return cfg.int8_w8a16_moe_quant_config(w1_scale=_to(quant["w1_scale"], device),
                                               w2_scale=_to(quant["w2_scale"], device))
    if kind == "fp8_w8a8":
        kw = {}
        for name in ("a1_scale", "a2_scale"):
            if quant.get(name) is not None:
                kw[name] = quant[name].to(device)
        for name in ("per_act_token_quant", "per_out_ch_quant"):
            if quant.get(name):
                kw[name] = True
        if quant.get("block_shape"):
            kw["block_shape"] = list(quant["block_shape"])
        return cfg.fp8_w8a8_moe_quant_config(w1_scale=_to(quant["w1_scale"], device),
                                             w2_scale=_to(quant["w2_scale"], device), **kw)
    raise ValueError(f"unknown quantization config {kind!r}")


class _Problem(types.SimpleNamespace):
    pass


def _problem(problem: dict, device: str) -> _Problem:
    hidden = problem["hidden"].to(device)
    return _Problem(E=int(problem["E"]), topk=int(problem["topk"]), K=int(hidden.shape[1]), I=int(problem["I"]),
                    M=int(hidden.shape[0]), dtype=hidden.dtype, device=device, hidden=hidden,
                    w1=problem["w1"].to(device).contiguous(), w2=problem["w2"].to(device).contiguous(),
                    topk_weights=problem["topk_weights"].to(device), topk_ids=problem["topk_ids"].to(device),
                    quant_config=_quant_config(problem["quant"], device))


def _wrapper(max_loras: int, max_tokens: int, device: str):
    pg = import_module("vllm.lora.punica_wrapper.punica_gpu")
    cfg = types.SimpleNamespace(max_loras=max_loras, specialize_active_lora=False)
    return pg.PunicaWrapperGPU(max_num_batched_tokens=max_tokens, max_batches=max_tokens, device=device,
                               lora_config=cfg)


def _map_tokens(wrapper, mapping: torch.Tensor) -> None:
    """Give the wrapper a batch's token -> LoRA slot mapping (-1: no LoRA) as vLLM's model runner does, through
    ``update_metadata`` with a ``LoRAMapping`` (slot i holds the adapter of id i + 1), so that a fix may act
    wherever the batch's metadata is made, not only in ``prepare_tensors``."""
    lora_utils = import_module("vllm.lora.layers.utils")
    torch_utils = import_module("vllm.utils.torch_utils")
    ids = tuple(int(slot) + 1 if int(slot) >= 0 else 0 for slot in mapping.tolist())
    batch = lora_utils.LoRAMapping(index_mapping=ids, prompt_mapping=ids, is_prefill=False)
    # the host copies of the mapping are pinned where the platform read at import said so; a CPU host has no
    # pinned memory (pinning decides no value)
    pinned = torch_utils.PIN_MEMORY
    torch_utils.PIN_MEMORY = pinned and torch.device(wrapper.device).type != "cpu"
    try:
        wrapper.update_metadata(batch, list(range(1, wrapper.max_loras + 1)), wrapper.max_loras, vocab_size=32)
    finally:
        torch_utils.PIN_MEMORY = pinned


def _lora_context(p: _Problem, lora: dict):
    ctx_mod = import_module("vllm.model_executor.layers.fused_moe.experts.lora_context")
    device = p.device
    max_loras = int(lora["max_loras"])
    wrapper = _wrapper(max_loras, int(lora["max_tokens"]), device)
    _map_tokens(wrapper, lora["mapping"])
    ctx = ctx_mod.MoELoRAContext(
        w13_lora_a_stacked=tuple(t.to(device) for t in lora["a13"]),
        w13_lora_b_stacked=tuple(t.to(device) for t in lora["b13"]),
        w2_lora_a_stacked=tuple(t.to(device) for t in lora["a2"]),
        w2_lora_b_stacked=tuple(t.to(device) for t in lora["b2"]),
        adapter_enabled=lora["adapter_enabled"].to(device),
        max_loras=max_loras, top_k=p.topk, w13_num_slices=2, fully_sharded=False, tp_rank=0,
        tp_size=1, local_num_experts=p.E, punica_wrapper=wrapper, use_tuned_config=False)
    return ctx, wrapper


def _moe_config(p: _Problem, parallel=None):
    act = import_module("vllm.model_executor.layers.fused_moe.activation")
    cfg = import_module("vllm.model_executor.layers.fused_moe.config")
    return cfg.FusedMoEConfig(
        num_experts=p.E, experts_per_token=p.topk, hidden_dim=p.K, intermediate_size=p.I,
        num_local_experts=p.E, num_logical_experts=p.E,
        moe_parallel_config=parallel or cfg.FusedMoEParallelConfig.make_no_parallel(),
        activation=act.MoEActivation.SILU, in_dtype=p.dtype, device=p.device,
        routing_method=cfg.RoutingMethodType.TopK, max_num_tokens=max(64, p.M))


def _ensure_workspace(device: str) -> None:
    """vLLM's workspace manager is one per process and keeps the device it was made for: a CUDA probe that runs
    after a CPU probe in the same subject needs it made again on CUDA."""
    ws = import_module("vllm.v1.worker.workspace")
    want = torch.device(device)
    if ws.is_workspace_manager_initialized():
        have = getattr(ws.current_workspace_manager(), "_device", None)
        if have is not None and torch.device(have).type == want.type:
            return
    ws.init_workspace_manager(want)


def _kernel(p: _Problem, ctx, prepare_finalize=None, parallel=None):
    mk = import_module("vllm.model_executor.layers.fused_moe.modular_kernel")
    tm = import_module("vllm.model_executor.layers.fused_moe.experts.triton_moe")
    _ensure_workspace(p.device)
    experts = tm.TritonExperts(_moe_config(p, parallel), p.quant_config)
    if ctx is not None:
        experts.set_lora_context(ctx)
    if prepare_finalize is None:
        prepare_finalize = import_module(
            "vllm.model_executor.layers.fused_moe.prepare_finalize.no_dp_ep").MoEPrepareAndFinalizeNoDPEPModular()
    return mk.FusedMoEKernel(prepare_finalize, experts)


def _forward(kernel, p: _Problem, hidden: torch.Tensor | None = None) -> torch.Tensor:
    act = import_module("vllm.model_executor.layers.fused_moe.activation")
    return kernel.apply(p.hidden if hidden is None else hidden, p.w1, p.w2, p.topk_weights, p.topk_ids,
                        activation=act.MoEActivation.SILU, global_num_experts=p.E, expert_map=None,
                        apply_router_weight_on_input=False)


def _apply(p: _Problem, ctx, prepare_finalize=None, parallel=None) -> torch.Tensor:
    return _forward(_kernel(p, ctx, prepare_finalize, parallel), p)


class _InOrderEvent:
    """Stands in for a CUDA event where the auxiliary 'stream' runs its work in order on the host."""

    def record(self, *args, **kwargs):
        pass

    def wait(self, *args, **kwargs):
        pass


def _overlapped(ctx, patches: Patches) -> None:
    """The LoRA context's auxiliary stream set: on CPU a stream that runs its work in order and no-op events."""
    ctx.aux_stream = object()
    ctx.events = tuple(_InOrderEvent() for _ in range(4))
    patches.set(torch.cuda, "stream", lambda stream: contextlib.nullcontext())


class _FakeEPGroup:
    """Two-rank stand-in for the EP group: dispatch adds the peer rank's tokens ('gather') or swaps half of the
    local tokens for the peer's ('exchange', same row count, different tokens). What the peer sends (its tokens,
    quantized with their scale where the local tokens are FP8) is the judge's."""

    def __init__(self, mode: str, peer: dict):
        self.mode, self.peer = mode, peer

    def _mix(self, local, remote):
        if self.mode == "gather":
            return torch.cat([remote, local], dim=0)
        h = local.shape[0] // 2
        return torch.cat([local[h:], remote[:h]], dim=0)

    def dispatch(self, a1q, topk_weights, topk_ids, is_sequence_parallel=False, extra_tensors=None):
        peer = self.peer
        if a1q.dtype == FP8:
            if peer.get("quantized") is None:
                raise RuntimeError("fake EP group: the peer has no FP8 tokens for this scheme")
            pq, ps = peer["quantized"].to(a1q.device), peer["scale"]
        else:
            pq, ps = peer["hidden"].to(a1q.dtype).to(a1q.device), None
        out = [self._mix(a1q, pq), self._mix(topk_weights, peer["topk_weights"].to(topk_weights.device)),
               self._mix(topk_ids, peer["topk_ids"].to(topk_ids.device))]
        if extra_tensors is None:
            return tuple(out)
        extras = []
        for t in extra_tensors:
            if t.dtype in (torch.int32, torch.int64) and t.dim() == 1:
                extras.append(self._mix(t, peer["mapping"].to(t.dtype).to(t.device)))
            else:
                if ps is None:
                    raise RuntimeError("fake EP group: a scale was dispatched for unquantized activations")
                extras.append(self._mix(t, ps.to(t.dtype).to(t.device).reshape(-1, *t.shape[1:])))
        return (*out, extras)

    def combine(self, out, is_sequence_parallel=False):
        return out[-self.peer["hidden"].shape[0]:]


def _dispatching(patches: Patches, ctx, dispatch: dict):
    """A naive DP/EP prepare/finalize over the fake two-rank group, and the parallel config to go with it."""
    nde = import_module("vllm.model_executor.layers.fused_moe.prepare_finalize.naive_dp_ep")
    cfg = import_module("vllm.model_executor.layers.fused_moe.config")
    group = _FakeEPGroup(dispatch["mode"], dispatch["peer"])
    patches.set(nde, "get_ep_group", lambda: group)
    use_ep = bool(dispatch["use_ep"])
    parallel = cfg.FusedMoEParallelConfig(
        tp_size=1, pcp_size=1, dp_size=2, ep_size=2 if use_ep else 1, tp_rank=0, pcp_rank=0, dp_rank=0,
        ep_rank=0, sp_size=1, use_ep=use_ep, all2all_backend="allgather_reducescatter", enable_eplb=False)
    pf = nde.MoEPrepareAndFinalizeNaiveDPEPModular(num_dispatchers=2)
    if ctx is not None:
        pf.set_lora_context(ctx)
    return pf, parallel


# ---------------------------------------------------------------------------------------------------------------
# probes
# ---------------------------------------------------------------------------------------------------------------


def run_moe(problem: dict, lora: dict | None = None, device: str = "cpu", real_kernels: bool = False,
            overlap: bool = False, dispatch: dict | None = None, fp8_dtype: str | None = None,
            earlier_hidden: torch.Tensor | None = None) -> dict:
    """Run the MoE once: ``{"out": layer output, "gemm": [base GEMM calls], "lora": [MoE-LoRA op calls],
    "w13_entry": [x given to apply_w13_lora]}``. ``overlap``: the LoRA context's aux_stream set (a stream that runs
    in order and no-op events stand in on CPU); ``dispatch``: ``{"mode", "use_ep", "peer"}`` for a faked two-rank
    naive DP/EP dispatch; ``fp8_dtype``: the platform's FP8 dtype by name, for the run only (``float8_e4m3fnuz``
    plays a ROCm MI300 GPU: the activations are quantized to it); ``earlier_hidden``: activations the same layer
    (kernel, experts and LoRA context) runs first, as vLLM runs one layer object forward after forward; what that
    earlier forward pass records is dropped."""
    with _session(real_kernels=real_kernels, fp8_dtype=fp8_dtype) as (rec, patches):
        p = _problem(problem, device)
        ctx = None
        if lora is not None:
            ctx, _ = _lora_context(p, lora)
        if overlap:
            _overlapped(ctx, patches)
        pf = parallel = None
        if dispatch is not None:
            pf, parallel = _dispatching(patches, ctx, dispatch)
        kernel = _kernel(p, ctx, prepare_finalize=pf, parallel=parallel)
        if earlier_hidden is not None:
            _forward(kernel, p, _to(earlier_hidden, device))
            rec.clear()
        out = _forward(kernel, p)
        if device != "cpu":
            torch.cuda.synchronize()
        return {"out": out.detach().clone(), **rec.as_data()}


def moe_no_lora_batch_after_lora_batch(problem: dict, lora: dict, overlap: bool = False) -> dict:
    """A LoRA batch (the judge's mapping), then on the same LoRA context a batch whose mapping is all -1, then the
    LoRA batch again, then the same layer without any LoRA context: the four outputs. ``overlap``: the LoRA kernels
    on the auxiliary stream (as in ``run_moe``); memory allocated without values reads NaN throughout."""
    with _session() as (rec, patches), unwritten_memory_is_nan():
        p = _problem(problem, "cpu")
        ctx, wrapper = _lora_context(p, lora)
        if overlap:
            _overlapped(ctx, patches)
        lora_out = _apply(p, ctx).detach().clone()
        _map_tokens(wrapper, torch.full((p.M,), -1, dtype=torch.int32))
        no_lora_out = _apply(p, ctx).detach().clone()
        _map_tokens(wrapper, lora["mapping"])
        lora_again_out = _apply(p, ctx).detach().clone()
        plain_out = _apply(p, None).detach().clone()
        return {"lora_batch": lora_out, "no_lora_batch": no_lora_out, "lora_batch_again": lora_again_out,
                "lora_free": plain_out}


_TILE_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "NUM_WARPS", "NUM_STAGES", "SPLIT_K")


def _add_lora_fused_moe(wrapper, operands: dict, y, device: str, tile: dict):
    wrapper.add_lora_fused_moe(
        y=y, x=operands["x"].to(device), lora_a_stacked=tuple(t.to(device) for t in operands["a"]),
        lora_b_stacked=tuple(t.to(device) for t in operands["b"]), topk_weights=operands["topk_weights"].to(device),
        sorted_token_ids=None, expert_ids=operands["expert_ids"].to(device), num_tokens_post_padded=None,
        max_lora_rank=int(operands["rank"]), top_k_num=int(operands["top_k"]),
        shrink_config={k: int(tile[k]) for k in _TILE_KEYS}, expand_config={k: int(tile[k]) for k in _TILE_KEYS},
        adapter_enabled=operands["adapter_enabled"].to(device))


def _host_flags(meta) -> list:
    """The token-mapping meta's host-side tensors (reading them is no device sync)."""
    return [t for t in (getattr(meta, "no_lora_flag_cpu", None), getattr(meta, "num_active_loras_cpu", None),
                        getattr(meta, "default_num_active_loras_cpu", None)) if isinstance(t, torch.Tensor)]


def add_lora_fused_moe_lora_then_no_lora(operands: dict, lora_mapping, tile: dict) -> dict:
    """On CPU with the MoE-LoRA op computed by reference: ``add_lora_fused_moe`` on a batch with the judge's LoRA
    mapping, then on a batch whose mapping is all -1 (this call watched for host reads of tensor values other than
    the meta's host-side flags), then on the LoRA mapping again with the operands' ``y`` afresh.
    ``{"after_lora_batch": y, "after_no_lora_batch": y, "lora_batch_again": y, "host_reads": [...]}``."""
    with _session():
        y = operands["y"].clone()
        num_tokens = int(operands["x"].shape[0])
        wrapper = _wrapper(int(operands["max_loras"]), num_tokens, "cpu")
        _map_tokens(wrapper, lora_mapping)
        _add_lora_fused_moe(wrapper, operands, y, "cpu", tile)
        after_lora = y.clone()
        _map_tokens(wrapper, torch.full((num_tokens,), -1, dtype=torch.int32))
        with _SyncGuard(_host_flags(wrapper.token_mapping_meta)) as guard:
            _add_lora_fused_moe(wrapper, operands, y, "cpu", tile)
        after_none = y.clone()
        _map_tokens(wrapper, lora_mapping)
        y_again = operands["y"].clone()
        _add_lora_fused_moe(wrapper, operands, y_again, "cpu", tile)
        return {"after_lora_batch": after_lora, "after_no_lora_batch": after_none, "lora_batch_again": y_again,
                "host_reads": list(guard.reads)}


def add_lora_fused_moe_no_lora_exit_on_gpu(operands: dict, lora_mapping, tile: dict) -> dict:
    """On CUDA with the real kernels: the mapping of a LoRA batch prepared, then an all -1 one, then one
    ``add_lora_fused_moe`` call under ``torch.cuda.set_sync_debug_mode("error")``.
    ``{"call": {"returned": None} | {"raised", "message"}, "y": y after the call}``."""
    install_op_shims()
    dev = "cuda"
    # every operand is on the device before the watched call: a host-to-device copy would sync inside it
    operands = {k: (v.to(dev) if isinstance(v, torch.Tensor) else [t.to(dev) for t in v] if isinstance(v, list)
                    else v) for k, v in operands.items()}
    y = operands["y"]
    num_tokens = int(operands["x"].shape[0])
    wrapper = _wrapper(int(operands["max_loras"]), num_tokens, dev)
    _map_tokens(wrapper, lora_mapping)
    _map_tokens(wrapper, torch.full((num_tokens,), -1, dtype=torch.int32))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        call = outcome_of(_add_lora_fused_moe, wrapper, operands, y, dev, tile)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return {"call": call, "y": y.detach().clone()}
