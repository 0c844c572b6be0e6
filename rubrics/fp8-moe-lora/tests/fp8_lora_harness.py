"""Test harness for the fp8-moe-lora hidden tests (loaded by conftest.py by path).

Everything here is written for these tests: torch reference implementations of the compiled vLLM ops
the MoE path calls (registered under their torch.ops names only where the op is missing), a CPU
stand-in for the platform, a reference for the fused-MoE Triton GEMM and for the fused MoE-LoRA op
(installed as spies that record what they were given), and a builder for a tiny modular MoE kernel
(TritonExperts + a prepare/finalize) with an optional MoE LoRA context.
"""

from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass, field

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0

# ---------------------------------------------------------------------------------------------
# torch reference implementations of compiled ops (device agnostic)
# ---------------------------------------------------------------------------------------------

_LIBS: list = []


def _fp8_cast(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-FP8_MAX, FP8_MAX).to(FP8)


def _silu_and_mul(result, input):
    d = input.shape[-1] // 2
    g = input[..., :d].float()
    u = input[..., d:].float()
    result.copy_((torch.nn.functional.silu(g) * u).to(result.dtype))


def _static_fp8(result, input, scale, group_shape=None):
    result.copy_(_fp8_cast(input.float() / scale.float().reshape(-1)[0]))


def _dynamic_fp8(result, input, scale):
    s = (input.float().abs().amax() / FP8_MAX).clamp(min=1e-12)
    scale.copy_(s.reshape(scale.shape))
    result.copy_(_fp8_cast(input.float() / s))


def _dynamic_token_fp8(result, input, scale, scale_ub=None):
    amax = input.float().abs().amax(dim=-1, keepdim=True)
    if scale_ub is not None:
        amax = amax.clamp(max=scale_ub.float())
    s = (amax / FP8_MAX).clamp(min=1e-12)
    scale.copy_(s.reshape(scale.shape))
    result.copy_(_fp8_cast(input.float() / s))


def group_quant_fp8(x: torch.Tensor, group: int):
    """Per-token-group FP8 quantization: (q, scales[M, K // group])."""
    m, k = x.shape
    xg = x.float().reshape(m, k // group, group)
    s = (xg.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=1e-10)
    q = _fp8_cast(xg / s).reshape(m, k)
    return q, s.squeeze(-1).contiguous()


def _per_token_group_fp8(input, output_q, output_s, group_size, eps, fp8_min, fp8_max,
                         scale_ue8m0, dummy_is_scale_transposed, dummy_is_tma_aligned):
    q, s = group_quant_fp8(input.reshape(-1, input.shape[-1]), group_size)
    output_q.copy_(q.reshape(output_q.shape))
    output_s.copy_(s.reshape(output_s.shape))


def _silu_mul_block_quant(out, input, scales, group_size, scale_ub=None, is_scale_transposed=False):
    # The fused kernel keeps the activation in fp32 before the group quantization.
    d = input.shape[-1] // 2
    act = torch.nn.functional.silu(input[..., :d].float()) * input[..., d:].float()
    q, s = group_quant_fp8(act, group_size)
    out.copy_(q)
    if is_scale_transposed:
        scales.copy_(s.t().reshape(scales.shape))
    else:
        scales.copy_(s.reshape(scales.shape))


def _moe_sum(input, output):
    output.copy_(input.float().sum(dim=1).to(output.dtype))


def _moe_align(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids,
               num_tokens_post_pad, maybe_expert_map=None):
    flat = topk_ids.reshape(-1).to(torch.int64)
    numel = flat.numel()
    sorted_token_ids.fill_(numel)
    experts_ids.fill_(-1)
    pos = 0
    blk = 0
    for e in range(num_experts):
        idx = torch.nonzero(flat == e).reshape(-1)
        if idx.numel() == 0:
            continue
        n_pad = -(-idx.numel() // block_size) * block_size
        sorted_token_ids[pos:pos + idx.numel()] = idx.to(sorted_token_ids.dtype)
        nb = n_pad // block_size
        local_e = e
        if maybe_expert_map is not None:
            local_e = int(maybe_expert_map[e])
        experts_ids[blk:blk + nb] = local_e
        blk += nb
        pos += n_pad
    num_tokens_post_pad.fill_(pos)


def _has_op(ns: str, name: str) -> bool:
    try:
        getattr(getattr(torch.ops, ns), name)
        return True
    except (AttributeError, RuntimeError):
        return False


def _register(ns: str, schema: str, fn) -> None:
    name = schema.split("(", 1)[0]
    if not _has_op(ns, name):
        lib = torch.library.Library(ns, "FRAGMENT")
        lib.define(schema)
        lib.impl(name, fn, "CompositeExplicitAutograd")
        _LIBS.append(lib)
        return
    # A compiled op exists (GPU host with vLLM's extensions): give it a CPU kernel if it lacks one,
    # so the CPU tests can still run there.
    qual = f"{ns}::{name}"
    if not torch._C._dispatch_has_kernel_for_dispatch_key(qual, "CPU"):
        lib = torch.library.Library(ns, "IMPL")
        lib.impl(name, fn, "CPU")
        _LIBS.append(lib)


def _bool_probe(*args, **kwargs):
    return True


_SHIMS_DONE = False


def install_op_shims() -> None:
    """Register torch reference ops under the compiled names, where these are missing."""
    global _SHIMS_DONE
    if _SHIMS_DONE:
        return
    _register("_C", "silu_and_mul(Tensor! result, Tensor input) -> ()", _silu_and_mul)
    _register("_C", "static_scaled_fp8_quant(Tensor! result, Tensor input, Tensor scale, "
                    "int[]? group_shape=None) -> ()", _static_fp8)
    _register("_C", "dynamic_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale) -> ()",
              _dynamic_fp8)
    _register("_C", "dynamic_per_token_scaled_fp8_quant(Tensor! result, Tensor input, "
                    "Tensor! scale, Tensor? scale_ub) -> ()", _dynamic_token_fp8)
    _register("_C", "per_token_group_fp8_quant(Tensor input, Tensor! output_q, Tensor! output_s, "
                    "int group_size, float eps, float fp8_min, float fp8_max, bool scale_ue8m0, "
                    "bool dummy_is_scale_transposed, bool dummy_is_tma_aligned) -> ()",
              _per_token_group_fp8)
    _register("_C", "silu_and_mul_per_block_quant(Tensor! out, Tensor input, Tensor! scales, "
                    "int group_size, Tensor? scale_ub=None, bool is_scale_transposed=False) -> ()",
              _silu_mul_block_quant)
    _register("_moe_C", "moe_sum(Tensor input, Tensor! output) -> ()", _moe_sum)
    _register("_moe_C", "moe_align_block_size(Tensor topk_ids, int num_experts, int block_size, "
                        "Tensor! sorted_token_ids, Tensor! experts_ids, Tensor! num_tokens_post_pad, "
                        "Tensor? maybe_expert_map) -> ()", _moe_align)
    # capability probes that quantization utils call at import time on a CUDA host; the tests use
    # the Triton MoE path, so these only need to answer "no CUTLASS kernel"
    for probe in ("cutlass_scaled_mm_supports_fp8", "cutlass_scaled_mm_supports_block_fp8",
                  "cutlass_group_gemm_supported", "cutlass_scaled_mm_supports_fp4"):
        if not _has_op("_C", probe):
            lib = torch.library.Library("_C", "FRAGMENT")
            lib.define(f"{probe}(int cuda_device_capability) -> bool")
            lib.impl(probe, lambda cap: False, "CompositeExplicitAutograd")
            _LIBS.append(lib)
    _SHIMS_DONE = True


# ---------------------------------------------------------------------------------------------
# platform stand-in (CPU only: on a CUDA host the real platform is used)
# ---------------------------------------------------------------------------------------------


def patch_platform(mp) -> None:
    from vllm.platforms import current_platform

    cls = type(current_platform)
    if cls.__name__ != "UnspecifiedPlatform":
        return
    mp.setattr(cls, "get_device_name", classmethod(lambda c, device_id=0: "grader_cpu_standin"))
    mp.setattr(cls, "supports_fp8", classmethod(lambda c: True))
    mp.setattr(cls, "num_compute_units", classmethod(lambda c, device_id=0: 8), raising=False)
    # The workspace manager empties the accelerator cache when it grows; there is none here.
    mp.setattr(torch.accelerator, "empty_cache", lambda: None)
    # The Triton fallback of per_token_group_quant_fp8 cannot launch on CPU tensors.
    import vllm.model_executor.layers.fused_moe.utils as fmu
    import vllm.model_executor.layers.quantization.utils.fp8_utils as f8u

    def _ptgq(x, group_size, *args, **kwargs):
        return group_quant_fp8(x.reshape(-1, x.shape[-1]), group_size)

    mp.setattr(f8u, "per_token_group_quant_fp8", _ptgq)
    if hasattr(fmu, "per_token_group_quant_fp8"):
        mp.setattr(fmu, "per_token_group_quant_fp8", _ptgq)


# ---------------------------------------------------------------------------------------------
# dequantization helpers
# ---------------------------------------------------------------------------------------------


def dequant_act(a: torch.Tensor, scale: torch.Tensor | None, block_k: int | None = None) -> torch.Tensor:
    a32 = a.float()
    if scale is None:
        return a32
    s = scale.float()
    if s.numel() == 1:
        return a32 * s.reshape(())
    if s.dim() == 2 and s.shape[1] == 1:
        return a32 * s
    if s.dim() == 2 and block_k:
        return a32 * s.repeat_interleave(block_k, dim=1)[:, : a32.shape[1]]
    if s.dim() == 1 and s.numel() == a32.shape[0]:
        return a32 * s[:, None]
    raise AssertionError(f"unexpected activation scale shape {tuple(s.shape)}")


def dequant_weight(b: torch.Tensor, scale: torch.Tensor | None, block: list[int] | None) -> torch.Tensor:
    b32 = b.float()
    if scale is None:
        return b32
    s = scale.float()
    E, N, K = b32.shape
    if block is not None and s.dim() == 3 and not (s.shape[1] == N and s.shape[2] == 1):
        bn, bk = block
        s = s.repeat_interleave(bn, dim=1)[:, :N].repeat_interleave(bk, dim=2)[:, :, :K]
        return b32 * s
    if s.dim() == 1:
        return b32 * s.view(E, 1, 1)
    if s.dim() == 2:
        return b32 * s.view(E, N, 1)
    return b32 * s.reshape(E, N, 1)


# ---------------------------------------------------------------------------------------------
# spies
# ---------------------------------------------------------------------------------------------


@dataclass
class GemmCall:
    A: torch.Tensor
    A_scale: torch.Tensor | None
    B: torch.Tensor
    top_k: int
    mul_routed_weight: bool
    use_fp8_w8a8: bool
    block_shape: list[int] | None


@dataclass
class LoraCall:
    x: torch.Tensor
    y_shape: tuple
    mul_routed_weight: bool
    token_lora_mapping: torch.Tensor | None


@dataclass
class Recorder:
    gemm: list = field(default_factory=list)
    lora: list = field(default_factory=list)
    w13_entry: list = field(default_factory=list)


def reference_gemm(A, B, C, A_scale, B_scale, topk_weights, sorted_token_ids, expert_ids,
                   num_tokens_post_padded, mul_routed_weight, top_k, config, compute_type=None,
                   use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False,
                   use_int4_w4a16=False, per_channel_quant=False, block_shape=None, B_bias=None):
    """torch reference for invoke_fused_moe_triton_kernel (fp32 accumulation)."""
    assert not use_int4_w4a16 and not use_int8_w8a8, "harness: scheme not supported"
    n_out = C.shape[-1]
    c2 = C.view(-1, n_out)
    num_valid = c2.shape[0]
    if sorted_token_ids is None:
        pairs = torch.arange(num_valid, device=A.device)
        experts = expert_ids.reshape(-1)[:num_valid].to(torch.int64)
    else:
        bm = config["BLOCK_SIZE_M"]
        total = int(num_tokens_post_padded.reshape(-1)[0])
        ids = sorted_token_ids[:total].to(torch.int64)
        blk_e = expert_ids[: total // bm].to(torch.int64).repeat_interleave(bm)[: ids.numel()]
        keep = (ids < num_valid) & (blk_e >= 0)
        pairs, experts = ids[keep], blk_e[keep]
    if use_fp8_w8a8:
        assert A.dtype == FP8, f"fp8 GEMM got activations of dtype {A.dtype}"
        assert A_scale is not None, "fp8 GEMM got no activation scale"
        if not per_channel_quant and not block_shape:
            # per-tensor: the kernel reads the first element (a dispatch may hand over one copy per rank)
            A_scale = A_scale.reshape(-1)[:1]
        a = dequant_act(A, A_scale, block_shape[1] if block_shape else None)
        b = dequant_weight(B, B_scale, block_shape)
    elif use_int8_w8a16:
        a = A.float()
        b = dequant_weight(B, B_scale, None)
    else:
        a = A.float()
        b = B.float()
    res = torch.zeros(num_valid, n_out, dtype=torch.float32, device=A.device)
    tw = topk_weights.reshape(-1).float() if mul_routed_weight else None
    # one matrix-vector product per (token, expert) pair: the result of a pair does not depend on
    # how the pairs were blocked, so the expected outputs of the tests can be rebuilt exactly
    for p_, e_ in zip(pairs.tolist(), experts.tolist()):
        o = torch.mv(b[e_], a[p_ // top_k])
        if B_bias is not None:
            o = o + B_bias.float()[e_]
        if tw is not None:
            o = o * tw[p_]
        res[p_] = o
    c2.copy_(res.to(C.dtype))


def reference_fused_moe_lora(y, x, lora_a_stacked, lora_b_stacked, topk_weights, sorted_token_ids,
                             expert_ids, num_tokens_post_padded, token_lora_mapping, max_lora_rank,
                             top_k_num, lora_ids, num_active_loras, adapter_enabled, *cfg,
                             mul_routed_weight=None, fully_sharded=None, offset=None, add_inputs=None):
    """torch reference for the fused MoE-LoRA op (naive block assignment only)."""
    # positional tail: 14 tile ints, then mul_routed_weight, fully_sharded, offset, add_inputs
    tail = list(cfg[14:])
    names = ["mul_routed_weight", "fully_sharded", "offset", "add_inputs"]
    vals = {"mul_routed_weight": False, "fully_sharded": False, "offset": 0, "add_inputs": True}
    for n, v in zip(names, tail):
        vals[n] = v
    for n, v in (("mul_routed_weight", mul_routed_weight), ("fully_sharded", fully_sharded),
                 ("offset", offset), ("add_inputs", add_inputs)):
        if v is not None:
            vals[n] = v
    assert sorted_token_ids is None, "harness: only the naive LoRA block assignment is modelled"
    assert not vals["fully_sharded"]
    mul = bool(vals["mul_routed_weight"])
    num_pairs = topk_weights.numel()
    factor = 1 if mul else top_k_num
    x32 = x.float()
    n_slice = lora_b_stacked[0].shape[2]
    max_loras = lora_a_stacked[0].shape[0]
    yv = y.view(-1, y.shape[-1])
    mapping = token_lora_mapping.to(torch.int64)
    eids = expert_ids.reshape(-1).to(torch.int64)
    enabled = adapter_enabled.to(torch.int64)
    out = yv.float().clone() if vals["add_inputs"] else torch.zeros_like(yv, dtype=torch.float32)
    touched = torch.zeros(yv.shape[0], dtype=torch.bool, device=yv.device)
    for p in range(num_pairs):
        t = p // top_k_num
        lid = int(mapping[t])
        if lid < 0 or lid >= max_loras or int(enabled[lid]) == 0:
            continue
        e = int(eids[p])
        if e < 0:
            continue
        touched[p] = True
        xr = x32[p // factor]
        for s, (a_w, b_w) in enumerate(zip(lora_a_stacked, lora_b_stacked)):
            d = (b_w[lid, e].float() @ (a_w[lid, e].float() @ xr))
            if mul:
                d = d * topk_weights.reshape(-1)[p].float()
            lo = s * n_slice
            out[p, lo:lo + n_slice] += d
    if vals["add_inputs"]:
        yv.copy_(out.to(yv.dtype))
    else:
        yv[touched] = out[touched].to(yv.dtype)


class _SyncGuard:
    """CPU stand-in for CUDA's sync debug mode: records every read of a tensor's value on the host
    (aten._local_scalar_dense, which .item(), bool() and int() go through) except reads of the
    host-side flag tensors named as allowed. On a GPU each such read of a device tensor syncs."""

    paused = 0

    def __init__(self, allowed: list[torch.Tensor]):
        from torch.utils._python_dispatch import TorchDispatchMode

        guard = self
        self.allowed = {t.untyped_storage().data_ptr() for t in allowed}
        self.reads: list[str] = []

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
                kwargs = kwargs or {}
                if not _SyncGuard.paused and func in (torch.ops.aten._local_scalar_dense.default,
                                                      torch.ops.aten.is_nonzero.default,
                                                      torch.ops.aten.equal.default):
                    for a in args:
                        if isinstance(a, torch.Tensor) and \
                                a.untyped_storage().data_ptr() not in guard.allowed:
                            guard.reads.append(f"{func} on tensor of shape {tuple(a.shape)}")
                return func(*args, **kwargs)

        self.mode = _Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


@contextlib.contextmanager
def _paused_guard():
    _SyncGuard.paused += 1
    try:
        yield
    finally:
        _SyncGuard.paused -= 1


SyncGuard = _SyncGuard


@contextlib.contextmanager
def spies(mp, rec: Recorder, real_kernels: bool = False):
    """Record (and on CPU compute by reference) the base GEMMs and the MoE-LoRA op."""
    import vllm.lora.punica_wrapper.punica_gpu as pg
    import vllm.model_executor.layers.fused_moe.experts.triton_moe as tm
    import vllm.model_executor.layers.fused_moe.fused_moe as fm
    from vllm.model_executor.layers.fused_moe.experts.lora_experts_mixin import LoRAExpertsMixin

    orig_gemm = tm.invoke_fused_moe_triton_kernel
    orig_lora = getattr(pg, "fused_moe_lora", None)
    orig_w13 = LoRAExpertsMixin.apply_w13_lora

    def gemm_spy(*args, **kwargs):
        names = ["A", "B", "C", "A_scale", "B_scale", "topk_weights", "sorted_token_ids",
                 "expert_ids", "num_tokens_post_padded", "mul_routed_weight", "top_k", "config"]
        bound = dict(zip(names, args))
        bound.update(kwargs)
        rec.gemm.append(GemmCall(
            A=bound["A"].detach().clone(),
            A_scale=None if bound["A_scale"] is None else bound["A_scale"].detach().clone(),
            B=bound["B"], top_k=bound["top_k"], mul_routed_weight=bound["mul_routed_weight"],
            use_fp8_w8a8=bool(bound.get("use_fp8_w8a8", False)),
            block_shape=bound.get("block_shape")))
        if real_kernels:
            return orig_gemm(*args, **kwargs)
        with _paused_guard():
            return reference_gemm(*args, **kwargs)

    def lora_spy(*args, **kwargs):
        y, x = args[0], args[1]
        tlm = args[8] if len(args) > 8 else kwargs.get("token_lora_mapping")
        mul = args[28] if len(args) > 28 else kwargs.get("mul_routed_weight", False)
        rec.lora.append(LoraCall(x=x.detach().clone(), y_shape=tuple(y.shape),
                                 mul_routed_weight=bool(mul),
                                 token_lora_mapping=None if tlm is None else tlm.detach().clone()))
        if real_kernels:
            return orig_lora(*args, **kwargs)
        with _paused_guard():
            return reference_fused_moe_lora(*args, **kwargs)

    def w13_spy(self, lora_context, *args, **kwargs):
        x = kwargs.get("x")
        rec.w13_entry.append(None if x is None else x.detach().clone())
        return orig_w13(self, lora_context, *args, **kwargs)

    mp.setattr(tm, "invoke_fused_moe_triton_kernel", gemm_spy)
    mp.setattr(fm, "invoke_fused_moe_triton_kernel", gemm_spy)
    mp.setattr(pg, "fused_moe_lora", lora_spy, raising=False)
    mp.setattr(LoRAExpertsMixin, "apply_w13_lora", w13_spy)
    yield rec


# ---------------------------------------------------------------------------------------------
# MoE builder
# ---------------------------------------------------------------------------------------------

SCHEMES = ["fp8-tensor-dynamic", "fp8-tensor-static", "fp8-token-dynamic", "fp8-block"]


@dataclass
class Problem:
    scheme: str
    M: int
    K: int
    I: int
    E: int
    topk: int
    dtype: torch.dtype
    device: str
    hidden: torch.Tensor
    w1_f32: torch.Tensor
    w2_f32: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    w1_scale: torch.Tensor | None
    w2_scale: torch.Tensor | None
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor
    quant_config: object
    block_shape: list[int] | None = None
    lora: object | None = None


def _quant_weight(w: torch.Tensor, how: str, block=None):
    E, N, K = w.shape
    if how == "tensor":
        s = w.abs().amax(dim=(1, 2)) / FP8_MAX
        return _fp8_cast(w / s.view(E, 1, 1)), s.float()
    if how == "channel":
        s = w.abs().amax(dim=2, keepdim=True) / FP8_MAX
        return _fp8_cast(w / s), s.float()
    if how == "block":
        bn, bk = block
        wb = w.reshape(E, N // bn, bn, K // bk, bk)
        s = wb.abs().amax(dim=(2, 4)) / FP8_MAX
        q = _fp8_cast(wb / s[:, :, None, :, None]).reshape(E, N, K)
        return q, s.float().contiguous()
    if how == "int8-channel":
        s = w.abs().amax(dim=2) / 127.0
        return torch.round(w / s[:, :, None]).clamp(-127, 127).to(torch.int8), s.float()
    raise ValueError(how)


def make_problem(scheme: str, *, M: int = 4, E: int = 16, topk: int = 2, K: int | None = None,
                 I: int | None = None, dtype=torch.bfloat16, device: str = "cpu", seed: int = 0,
                 act_scale: float = 0.02) -> Problem:
    from vllm.model_executor.layers.fused_moe.config import (
        FUSED_MOE_UNQUANTIZED_CONFIG,
        fp8_w8a8_moe_quant_config,
        int8_w8a16_moe_quant_config,
    )

    g = torch.Generator(device="cpu").manual_seed(seed)
    block = [128, 128] if scheme == "fp8-block" else None
    K = K or 128
    I = I or (128 if block else 64)
    hidden = (torch.randn(M, K, generator=g) * act_scale).to(dtype)
    w1f = torch.randn(E, 2 * I, K, generator=g) / K ** 0.5
    w2f = torch.randn(E, K, I, generator=g) / I ** 0.5
    logits = torch.randn(M, E, generator=g)
    tw, tid = torch.topk(torch.softmax(logits, dim=-1), topk, dim=-1)
    tw = (tw / tw.sum(dim=-1, keepdim=True)).float()
    tid = tid.to(torch.int32)
    w1s = w2s = None
    if scheme == "unquantized":
        w1 = w1f.to(dtype)
        w2 = w2f.to(dtype)
        w1f, w2f = w1.float(), w2.float()
        qc = FUSED_MOE_UNQUANTIZED_CONFIG
    elif scheme == "int8-weight-only":
        w1, w1s = _quant_weight(w1f, "int8-channel")
        w2, w2s = _quant_weight(w2f, "int8-channel")
        qc = int8_w8a16_moe_quant_config(w1_scale=w1s.to(device), w2_scale=w2s.to(device))
    else:
        how = {"fp8-tensor-dynamic": "tensor", "fp8-tensor-static": "tensor",
               "fp8-token-dynamic": "channel", "fp8-block": "block"}[scheme]
        w1, w1s = _quant_weight(w1f, how, block)
        w2, w2s = _quant_weight(w2f, how, block)
        kw = {}
        if scheme == "fp8-tensor-static":
            kw["a1_scale"] = (hidden.float().abs().amax() * 1.25 / FP8_MAX).reshape(1).to(device)
            kw["a2_scale"] = torch.tensor([0.5 / FP8_MAX], dtype=torch.float32, device=device)
        if scheme == "fp8-token-dynamic":
            kw["per_act_token_quant"] = True
            kw["per_out_ch_quant"] = True
        if block:
            kw["block_shape"] = block
        qc = fp8_w8a8_moe_quant_config(w1_scale=w1s.to(device), w2_scale=w2s.to(device), **kw)
    # exact dequantized weights, the fp32 reference uses these
    w1_ref = dequant_weight(w1, w1s, block) if w1s is not None else w1f
    w2_ref = dequant_weight(w2, w2s, block) if w2s is not None else w2f
    return Problem(scheme=scheme, M=M, K=K, I=I, E=E, topk=topk, dtype=dtype, device=device,
                   hidden=hidden.to(device), w1_f32=w1_ref.to(device), w2_f32=w2_ref.to(device),
                   w1=w1.contiguous().to(device), w2=w2.contiguous().to(device),
                   w1_scale=None if w1s is None else w1s.to(device),
                   w2_scale=None if w2s is None else w2s.to(device),
                   topk_weights=tw.to(device), topk_ids=tid.to(device), quant_config=qc,
                   block_shape=block)


@dataclass
class LoraSetup:
    ctx: object
    wrapper: object
    a13: tuple
    b13: tuple
    a2: tuple
    b2: tuple
    mapping: torch.Tensor
    max_loras: int


def make_wrapper(max_loras: int, max_tokens: int, device: str):
    from vllm.lora.punica_wrapper.punica_gpu import PunicaWrapperGPU

    cfg = types.SimpleNamespace(max_loras=max_loras, specialize_active_lora=False)
    return PunicaWrapperGPU(max_num_batched_tokens=max_tokens, max_batches=max_tokens,
                            device=device, lora_config=cfg)


def make_lora(p: Problem, mapping: list[int], *, max_loras: int = 4, rank: int = 8, seed: int = 1,
              lora_dtype=None, prepare: bool = True, max_tokens: int | None = None) -> LoraSetup:
    from vllm.model_executor.layers.fused_moe.experts.lora_context import MoELoRAContext

    lora_dtype = lora_dtype or (p.dtype if p.dtype != FP8 else torch.bfloat16)
    g = torch.Generator(device="cpu").manual_seed(seed)

    def r(*shape, fan_in):
        return (torch.randn(*shape, generator=g) / fan_in ** 0.5).to(lora_dtype).to(p.device)

    a13 = tuple(r(max_loras, p.E, rank, p.K, fan_in=p.K) for _ in range(2))
    b13 = tuple(r(max_loras, p.E, p.I, rank, fan_in=rank) for _ in range(2))
    a2 = (r(max_loras, p.E, rank, p.I, fan_in=p.I),)
    b2 = (r(max_loras, p.E, p.K, rank, fan_in=rank),)
    wrapper = make_wrapper(max_loras, max_tokens or max(64, len(mapping)), p.device)
    m = torch.tensor(mapping, dtype=torch.int32, device=p.device)
    if prepare:
        wrapper.token_mapping_meta.prepare_tensors(m)
    ctx = MoELoRAContext(
        w13_lora_a_stacked=a13, w13_lora_b_stacked=b13, w2_lora_a_stacked=a2,
        w2_lora_b_stacked=b2,
        adapter_enabled=torch.ones(max_loras + 1, dtype=torch.int32, device=p.device),
        max_loras=max_loras, top_k=p.topk, w13_num_slices=2, fully_sharded=False, tp_rank=0,
        tp_size=1, local_num_experts=p.E, punica_wrapper=wrapper, use_tuned_config=False)
    return LoraSetup(ctx=ctx, wrapper=wrapper, a13=a13, b13=b13, a2=a2, b2=b2, mapping=m,
                     max_loras=max_loras)


def moe_config(p: Problem, parallel=None):
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )

    return FusedMoEConfig(
        num_experts=p.E, experts_per_token=p.topk, hidden_dim=p.K, intermediate_size=p.I,
        num_local_experts=p.E, num_logical_experts=p.E,
        moe_parallel_config=parallel or FusedMoEParallelConfig.make_no_parallel(),
        activation=MoEActivation.SILU, in_dtype=p.dtype, device=p.device,
        routing_method=RoutingMethodType.TopK, max_num_tokens=max(64, p.M))


def make_kernel(p: Problem, lora: LoraSetup | None, prepare_finalize=None, parallel=None):
    import vllm.model_executor.layers.fused_moe.modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts
    from vllm.model_executor.layers.fused_moe.prepare_finalize.no_dp_ep import (
        MoEPrepareAndFinalizeNoDPEPModular,
    )

    experts = TritonExperts(moe_config(p, parallel), p.quant_config)
    if lora is not None:
        experts.set_lora_context(lora.ctx)
    pf = prepare_finalize or MoEPrepareAndFinalizeNoDPEPModular()
    return mk.FusedMoEKernel(pf, experts)


def ensure_workspace(device: str) -> None:
    """vLLM's workspace manager is one per process and keeps the device it was made for: a CUDA test that runs
    after a CPU test in the same pytest process needs it made again on CUDA."""
    from vllm.v1.worker import workspace as ws

    want = torch.device(device)
    if ws.is_workspace_manager_initialized():
        have = getattr(ws.current_workspace_manager(), "_device", None)
        if have is not None and torch.device(have).type == want.type:
            return
    ws.init_workspace_manager(want)


def run_moe(p: Problem, lora: LoraSetup | None, **kw) -> torch.Tensor:
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    ensure_workspace(p.device)
    kernel = make_kernel(p, lora, **kw)
    return kernel.apply(p.hidden, p.w1, p.w2, p.topk_weights, p.topk_ids,
                        activation=MoEActivation.SILU, global_num_experts=p.E, expert_map=None,
                        apply_router_weight_on_input=False)


# ---------------------------------------------------------------------------------------------
# fp32 reference of the whole MoE + LoRA layer
# ---------------------------------------------------------------------------------------------


def qdq(p: Problem, x: torch.Tensor, which: int) -> torch.Tensor:
    """Quantize-dequantize an activation the way the scheme's base GEMM sees it."""
    x = x.float()
    if not p.scheme.startswith("fp8"):
        return x
    if p.scheme == "fp8-tensor-static":
        s = (p.quant_config.a1_scale if which == 1 else p.quant_config.a2_scale).float().reshape(())
    elif p.scheme == "fp8-tensor-dynamic":
        s = (x.abs().amax() / FP8_MAX).clamp(min=1e-12)
    elif p.scheme == "fp8-token-dynamic":
        s = (x.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
    else:
        q, sg = group_quant_fp8(x, 128)
        return dequant_act(q, sg, 128)
    return _fp8_cast(x / s).float() * s


def reference_moe(p: Problem, lora: LoraSetup | None, hidden: torch.Tensor | None = None,
                  mapping: torch.Tensor | None = None, quantized_base: bool = True) -> torch.Tensor:
    """fp32 reference: base GEMMs on the scheme's quantized activations, LoRA on unquantized ones."""
    x = (p.hidden if hidden is None else hidden).float()
    xq = qdq(p, x, 1) if quantized_base else x
    M = x.shape[0]
    lids = [-1] * M
    if lora is not None:
        lids = [int(v) for v in (lora.mapping if mapping is None else mapping)]
    acts = torch.zeros(M, p.topk, p.I, dtype=torch.float32, device=x.device)
    for t in range(M):
        lid = lids[t]
        for j in range(p.topk):
            e = int(p.topk_ids[t, j])
            h = p.w1_f32[e] @ xq[t]
            if lid >= 0:
                h = h + torch.cat([lora.b13[s][lid, e].float() @ (lora.a13[s][lid, e].float() @ x[t])
                                   for s in range(2)])
            acts[t, j] = torch.nn.functional.silu(h[: p.I]) * h[p.I:]
    actq = qdq(p, acts.reshape(M * p.topk, p.I), 2).reshape(M, p.topk, p.I) if quantized_base \
        else acts
    out = torch.zeros(M, p.K, dtype=torch.float32, device=x.device)
    for t in range(M):
        lid = lids[t]
        for j in range(p.topk):
            e = int(p.topk_ids[t, j])
            act = acts[t, j]
            o = p.w2_f32[e] @ actq[t, j]
            if lid >= 0:
                o = o + lora.b2[0][lid, e].float() @ (lora.a2[0][lid, e].float() @ act)
            out[t] += p.topk_weights[t, j] * o
    return out


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a = a.float()
    b = b.float()
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


# ---------------------------------------------------------------------------------------------
# the unmodified (base) MoE data path, rebuilt step by step from the same reference pieces
# ---------------------------------------------------------------------------------------------


def _quantize_act(p: Problem, x: torch.Tensor, which: int):
    if not p.scheme.startswith("fp8"):
        return x, None
    q = torch.empty(x.shape, dtype=FP8, device=x.device)
    if p.scheme == "fp8-tensor-static":
        s = p.quant_config.a1_scale if which == 1 else p.quant_config.a2_scale
        _static_fp8(q, x, s)
        return q, s
    if p.scheme == "fp8-tensor-dynamic":
        s = torch.zeros(1, dtype=torch.float32, device=x.device)
        _dynamic_fp8(q, x, s)
        return q, s
    if p.scheme == "fp8-token-dynamic":
        s = torch.zeros(x.shape[0], 1, dtype=torch.float32, device=x.device)
        _dynamic_token_fp8(q, x, s)
        return q, s
    return group_quant_fp8(x, 128)


def expected_base_path(p: Problem, lora: LoraSetup | None) -> torch.Tensor:
    """Output of the unmodified TritonExperts data path for this problem, on the reference pieces."""
    M, topk, I, K = p.M, p.topk, p.I, p.K
    N = 2 * I
    eids = p.topk_ids.reshape(-1)
    cfg = {"BLOCK_SIZE_M": 16}
    flags = dict(use_fp8_w8a8=p.scheme.startswith("fp8"),
                 use_int8_w8a16=p.scheme == "int8-weight-only",
                 per_channel_quant=p.scheme == "fp8-token-dynamic", block_shape=p.block_shape)
    a1q, s1 = _quantize_act(p, p.hidden, 1)
    c1 = torch.empty(M, topk, N, dtype=p.dtype, device=p.device)
    reference_gemm(a1q, p.w1, c1, s1, p.w1_scale, None, None, eids, None, False, topk, cfg, **flags)
    zeros = [0] * 14
    if lora is not None:
        reference_fused_moe_lora(c1, p.hidden, lora.a13, lora.b13, p.topk_weights, None, eids, None,
                                 lora.mapping, lora.a13[0].shape[-2], topk, None, None,
                                 lora.ctx.adapter_enabled, *zeros, False, False, 0, True)
    cache2 = torch.empty(M * topk, I, dtype=p.dtype, device=p.device)
    if p.scheme == "fp8-block" and lora is None:
        q2 = torch.empty(M * topk, I, dtype=FP8, device=p.device)
        s2 = torch.empty(M * topk, I // 128, dtype=torch.float32, device=p.device)
        _silu_mul_block_quant(q2, c1.view(-1, N), s2, 128)
    else:
        _silu_and_mul(cache2, c1.view(-1, N))
        q2, s2 = _quantize_act(p, cache2, 2)
    c3 = torch.empty(M, topk, K, dtype=p.dtype, device=p.device)
    reference_gemm(q2, p.w2, c3, s2, p.w2_scale, p.topk_weights, None, eids, None, True, 1, cfg,
                   **flags)
    if lora is not None:
        reference_fused_moe_lora(c3, cache2, lora.a2, lora.b2, p.topk_weights, None, eids, None,
                                 lora.mapping, lora.a2[0].shape[-2], topk, None, None,
                                 lora.ctx.adapter_enabled, *zeros, True, False, 0, True)
    out = torch.empty(M, K, dtype=p.dtype, device=p.device)
    _moe_sum(c3, out)
    return out
