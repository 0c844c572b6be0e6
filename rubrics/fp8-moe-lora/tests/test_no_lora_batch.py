"""c2: a batch in which no token uses a LoRA gets no LoRA delta, even after a LoRA batch."""

from __future__ import annotations

import pytest
import torch

TILE = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1,
        "NUM_WARPS": 4, "NUM_STAGES": 2, "SPLIT_K": 1}


def _operands(H, num_tokens, top_k, n_experts, rank, K, N, max_loras, device, seed=3):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(num_tokens, K, generator=g).to(device)
    y = torch.randn(num_tokens, top_k, N, generator=g).to(device)
    a = (torch.randn(max_loras, n_experts, rank, K, generator=g).to(device),)
    b = (torch.randn(max_loras, n_experts, N, rank, generator=g).to(device),)
    tw = torch.rand(num_tokens, top_k, generator=g).to(device)
    eids = torch.randint(0, n_experts, (num_tokens * top_k,), generator=g).to(torch.int32).to(device)
    enabled = torch.ones(max_loras + 1, dtype=torch.int32, device=device)
    return x, y, a, b, tw, eids, enabled


def _call(wrapper, y, x, a, b, tw, eids, enabled, rank, top_k):
    wrapper.add_lora_fused_moe(
        y=y, x=x, lora_a_stacked=a, lora_b_stacked=b, topk_weights=tw, sorted_token_ids=None,
        expert_ids=eids, num_tokens_post_padded=None, max_lora_rank=rank, top_k_num=top_k,
        shrink_config=TILE, expand_config=TILE, adapter_enabled=enabled)


def _flags(meta):
    return [t for t in (getattr(meta, "no_lora_flag_cpu", None),
                        getattr(meta, "num_active_loras_cpu", None),
                        getattr(meta, "default_num_active_loras_cpu", None)) if t is not None]


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("stale", [[1] * 4 + [2] * 4, [0, -1, 3, 3, -1, 1, 0, 2]],
                         ids=["two-adapters", "mixed"])
def test_add_lora_fused_moe_no_lora_batch_leaves_output(H, rec, stale):
    """add_lora_fused_moe leaves the output untouched for an all-minus-one batch, with no sync."""
    num_tokens, top_k, E, rank, K, N, max_loras = 8, 2, 4, 8, 32, 16, 4
    wrapper = H.make_wrapper(max_loras, num_tokens, "cpu")
    x, y, a, b, tw, eids, enabled = _operands(H, num_tokens, top_k, E, rank, K, N, max_loras, "cpu")
    # a LoRA batch first: it must still get its delta
    wrapper.token_mapping_meta.prepare_tensors(torch.tensor(stale, dtype=torch.int32))
    before = y.clone()
    _call(wrapper, y, x, a, b, tw, eids, enabled, rank, top_k)
    assert not torch.equal(y, before), "a batch that uses LoRA adapters got no LoRA delta"
    # then a base-model batch: the mapping left from the LoRA batch must not leak
    wrapper.token_mapping_meta.prepare_tensors(torch.full((num_tokens,), -1, dtype=torch.int32))
    snap = y.clone()
    with H.SyncGuard(_flags(wrapper.token_mapping_meta)) as guard:
        _call(wrapper, y, x, a, b, tw, eids, enabled, rank, top_k)
    assert torch.equal(y, snap), "a batch without LoRA tokens was given a LoRA delta (stale mapping)"
    assert not guard.reads, f"host reads of device values (a sync per call on GPU): {guard.reads}"


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("scheme", ["fp8-tensor-dynamic", "unquantized"])
def test_moe_no_lora_batch_after_lora_batch_matches_lora_free_output(H, rec, scheme):
    """A MoE batch with no LoRA tokens, after a LoRA batch, equals the output without any LoRA."""
    p = H.make_problem(scheme)
    lo = H.make_lora(p, [0, 1, 2, 3])
    H.run_moe(p, lo)  # LoRA batch: populates the token mapping
    lo.wrapper.token_mapping_meta.prepare_tensors(
        torch.full((p.M,), -1, dtype=torch.int32, device=p.device))
    lo.mapping = torch.full((p.M,), -1, dtype=torch.int32, device=p.device)
    out = H.run_moe(p, lo)
    plain = H.run_moe(p, None)
    assert torch.equal(out, plain), (
        f"no-LoRA batch differs from the LoRA-free output by {H.rel_err(out, plain):.3g}")


@pytest.mark.gpu
@pytest.mark.criterion("c2")
def test_no_lora_exit_without_device_sync_on_gpu(H):
    """On CUDA, the no-LoRA exit of add_lora_fused_moe neither syncs nor touches the output."""
    dev = "cuda"
    num_tokens, top_k, E, rank, K, N, max_loras = 16, 2, 8, 16, 256, 128, 4
    wrapper = H.make_wrapper(max_loras, num_tokens, dev)
    x, y, a, b, tw, eids, enabled = _operands(H, num_tokens, top_k, E, rank, K, N, max_loras, dev)
    x, y = x.to(torch.bfloat16), y.to(torch.bfloat16)
    a, b = (a[0].to(torch.bfloat16),), (b[0].to(torch.bfloat16),)
    wrapper.token_mapping_meta.prepare_tensors(
        torch.tensor([1] * 8 + [2] * 8, dtype=torch.int32, device=dev))
    wrapper.token_mapping_meta.prepare_tensors(
        torch.full((num_tokens,), -1, dtype=torch.int32, device=dev))
    snap = y.clone()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _call(wrapper, y, x, a, b, tw, eids, enabled, rank, top_k)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.equal(y, snap), "a batch without LoRA tokens was given a LoRA delta on the GPU"
