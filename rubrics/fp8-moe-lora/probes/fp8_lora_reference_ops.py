"""Torch reference pieces of the fp8-moe-lora hidden tests: pure torch, no vLLM.

Both sides use this one file: the subject's op stand-ins and spies compute with it, and the judge's oracles rebuild
the unmodified MoE data path from it (``rubric_support.load_probe_module``; it imports no vLLM, so the judge may
load it). A bit-identity check of c5 relies on both computing alike.

Contents: torch implementations of the compiled ops the MoE path calls, dequantization helpers, a reference for
the fused-MoE Triton GEMM (one matrix-vector product per token/expert pair, fp32 accumulation) and one for the
fused MoE-LoRA op (naive block assignment only).
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
# What current_platform.fp8_dtype() can be: float8_e4m3fnuz on ROCm MI300 (gfx94x), float8_e4m3fn elsewhere.
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def fp8_max(dtype: torch.dtype = FP8) -> float:
    """The largest finite value of an FP8 dtype: 448 for float8_e4m3fn, 240 for ROCm's float8_e4m3fnuz."""
    return float(torch.finfo(dtype).max)


def fp8_cast(x: torch.Tensor, dtype: torch.dtype = FP8) -> torch.Tensor:
    m = fp8_max(dtype)
    return x.clamp(-m, m).to(dtype)


def silu_and_mul(result, input):
    d = input.shape[-1] // 2
    g = input[..., :d].float()
    u = input[..., d:].float()
    result.copy_((torch.nn.functional.silu(g) * u).to(result.dtype))


def static_fp8(result, input, scale, group_shape=None):
    result.copy_(fp8_cast(input.float() / scale.float().reshape(-1)[0], result.dtype))


def dynamic_fp8(result, input, scale):
    s = (input.float().abs().amax() / fp8_max(result.dtype)).clamp(min=1e-12)
    scale.copy_(s.reshape(scale.shape))
    result.copy_(fp8_cast(input.float() / s, result.dtype))


def dynamic_token_fp8(result, input, scale, scale_ub=None):
    amax = input.float().abs().amax(dim=-1, keepdim=True)
    if scale_ub is not None:
        amax = amax.clamp(max=scale_ub.float())
    s = (amax / fp8_max(result.dtype)).clamp(min=1e-12)
    scale.copy_(s.reshape(scale.shape))
    result.copy_(fp8_cast(input.float() / s, result.dtype))


def group_quant_fp8(x: torch.Tensor, group: int, dtype: torch.dtype = FP8):
    """Per-token-group FP8 quantization to ``dtype``: (q, scales[M, K // group])."""
    m, k = x.shape
    xg = x.float().reshape(m, k // group, group)
    s = (xg.abs().amax(dim=-1, keepdim=True) / fp8_max(dtype)).clamp(min=1e-10)
    q = fp8_cast(xg / s, dtype).reshape(m, k)
    return q, s.squeeze(-1).contiguous()


def per_token_group_fp8(input, output_q, output_s, group_size, eps, fp8_min, fp8_max,
                        scale_ue8m0, dummy_is_scale_transposed, dummy_is_tma_aligned):
    q, s = group_quant_fp8(input.reshape(-1, input.shape[-1]), group_size, output_q.dtype)
    output_q.copy_(q.reshape(output_q.shape))
    output_s.copy_(s.reshape(output_s.shape))


def silu_mul_block_quant(out, input, scales, group_size, scale_ub=None, is_scale_transposed=False):
    # The fused kernel keeps the activation in fp32 before the group quantization.
    d = input.shape[-1] // 2
    act = torch.nn.functional.silu(input[..., :d].float()) * input[..., d:].float()
    q, s = group_quant_fp8(act, group_size, out.dtype)
    out.copy_(q)
    if is_scale_transposed:
        scales.copy_(s.t().reshape(scales.shape))
    else:
        scales.copy_(s.reshape(scales.shape))


def moe_sum(input, output):
    output.copy_(input.float().sum(dim=1).to(output.dtype))


def moe_align(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids,
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
        assert A.dtype in FP8_DTYPES, f"fp8 GEMM got activations of dtype {A.dtype}"
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
