"""c2: a batch in which no token uses a LoRA gets no LoRA delta, even after a LoRA batch.

The judge draws the operands of ``add_lora_fused_moe`` and the layer problems; the subject makes the calls and
reports the outputs and the host reads of tensor values it saw (``probes/fp8_lora_probes.py``).
"""

from __future__ import annotations

import pytest
import torch

TILE = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1,
        "NUM_WARPS": 4, "NUM_STAGES": 2, "SPLIT_K": 1}
PROBES = "fp8_lora_probes"


def _operands(g, num_tokens, top_k, n_experts, rank, K, N, max_loras, dtype=torch.float32):
    x = torch.randn(num_tokens, K, generator=g).to(dtype)
    y = torch.randn(num_tokens, top_k, N, generator=g).to(dtype)
    a = [torch.randn(max_loras, n_experts, rank, K, generator=g).to(dtype)]
    b = [torch.randn(max_loras, n_experts, N, rank, generator=g).to(dtype)]
    tw = torch.rand(num_tokens, top_k, generator=g)
    eids = torch.randint(0, n_experts, (num_tokens * top_k,), generator=g).to(torch.int32)
    enabled = torch.ones(max_loras + 1, dtype=torch.int32)
    return {"x": x, "y": y, "a": a, "b": b, "topk_weights": tw, "expert_ids": eids, "adapter_enabled": enabled,
            "rank": rank, "top_k": top_k, "max_loras": max_loras}


STALE = {"two-adapters": [1] * 4 + [2] * 4, "mixed": [0, -1, 3, 3, -1, 1, 0, 2]}
LAYER_SCHEMES = ["fp8-tensor-dynamic", "unquantized"]
PATHS = ["plain", "overlapped"]
# The batches each check runs, in order: a LoRA batch, a no-LoRA one (judged: no delta), the LoRA batch again
# (judged: the result of the first, so the no-LoRA batch changed no state).
SEQUENCE = ["no-lora-after-lora", "lora-after-no-lora"]


def _op_case(g, stale):
    num_tokens, top_k, E, rank, K, N, max_loras = 8, 2, 4, 8, 32, 16, 4
    ops = _operands(g, num_tokens, top_k, E, rank, K, N, max_loras)
    return ops, {"operands": ops, "lora_mapping": torch.tensor(stale, dtype=torch.int32), "tile": TILE}


def _check_op(seen, before):
    after_lora, after_none = seen["after_lora_batch"], seen["after_no_lora_batch"]
    assert isinstance(after_lora, torch.Tensor) and after_lora.shape == before.shape
    assert isinstance(after_none, torch.Tensor) and after_none.shape == before.shape
    # a LoRA batch first: it must still get its delta
    assert not torch.equal(after_lora, before), "a batch that uses LoRA adapters got no LoRA delta"
    # then a base-model batch: the mapping left from the LoRA batch must not leak
    assert torch.equal(after_none, after_lora), "a batch without LoRA tokens was given a LoRA delta (stale mapping)"
    reads = seen["host_reads"]
    assert isinstance(reads, list)
    assert not reads, f"host reads of device values (a sync per call on GPU): {reads}"
    # then the LoRA batch again, on the operands afresh: the exit must have left nothing behind (adapters enabled,
    # mapping, weights), so it gets the first LoRA batch's result bit for bit
    again = seen["lora_batch_again"]
    assert isinstance(again, torch.Tensor) and again.shape == before.shape
    assert torch.equal(again, after_lora), (
        "a LoRA batch after the no-LoRA batch got another result than the same batch before it (state changed)")


def _check_layer(H, seen, p):
    out, plain = seen["no_lora_batch"], seen["lora_free"]
    assert isinstance(out, torch.Tensor) and isinstance(plain, torch.Tensor)
    assert out.shape == plain.shape == p.hidden.shape
    assert torch.equal(out, plain), (
        f"no-LoRA batch differs from the LoRA-free output by {H.rel_err(out, plain):.3g}")
    first, again = seen["lora_batch"], seen["lora_batch_again"]
    assert isinstance(first, torch.Tensor) and isinstance(again, torch.Tensor) and again.shape == first.shape
    assert torch.equal(again, first), (
        f"the LoRA batch after the no-LoRA batch differs from the same batch before it by "
        f"{H.rel_err(again, first):.3g} (the no-LoRA batch changed state)")


@pytest.mark.criterion("c2")
@pytest.mark.cases(site="op", sequence=SEQUENCE)
@pytest.mark.parametrize("stale", [pytest.param(v, id=k, marks=pytest.mark.cases(stale_mapping=k))
                                   for k, v in STALE.items()])
def test_add_lora_fused_moe_no_lora_batch_leaves_output(H, subject, secret_generator, stale):
    """add_lora_fused_moe leaves the output untouched for an all-minus-one batch, with no sync, and a LoRA batch
    after it gets the delta it got before."""
    ops, args = _op_case(secret_generator, stale)
    before = ops["y"].clone()
    seen = subject.call(f"{PROBES}.add_lora_fused_moe_lora_then_no_lora", **args)
    _check_op(seen, before)


@pytest.mark.criterion("c2")
@pytest.mark.cases(site="layer", sequence=SEQUENCE)
@pytest.mark.parametrize("scheme", LAYER_SCHEMES)
@pytest.mark.parametrize("path", PATHS)
def test_moe_no_lora_batch_after_lora_batch_matches_lora_free_output(H, subject, secret_generator, scheme, path):
    """A MoE batch with no LoRA tokens, after a LoRA batch, equals the output without any LoRA (LoRA kernels on the
    main stream, or overlapped on the auxiliary one, whose delta buffer a skipped launch leaves as allocated), and
    the LoRA batch run again after it gives what it gave before."""
    p = H.make_problem(scheme, secret_generator)
    lo = H.make_lora(p, [0, 1, 2, 3], secret_generator)
    # the subject runs the LoRA batch (populating the token mapping), then an all -1 batch on the same context,
    # then the layer without any LoRA context
    seen = subject.call(f"{PROBES}.moe_no_lora_batch_after_lora_batch", problem=p.as_args(), lora=lo.as_args(),
                        overlap=path == "overlapped")
    _check_layer(H, seen, p)


# Every c2 case at once (the earlier LoRA batch's two patterns at the op, the layer's FP8 and unquantized paths),
# each crash counted as wrong: one call of the judge over the whole declared space.
@pytest.mark.criterion("c2", weight=1)
@pytest.mark.cases(site=["op", "layer"], stale_mapping=list(STALE), scheme=LAYER_SCHEMES, path=PATHS, sequence=SEQUENCE)
def test_no_lora_batch_gets_no_delta_in_every_case(H, subject, secret_generator):
    """Every no-LoRA batch (after either stale pattern, FP8 and unquantized layers) gets no delta, with no sync."""
    failures = []
    cases = 0
    for name, stale in STALE.items():
        cases += 1
        ops, args = _op_case(secret_generator, stale)
        before = ops["y"].clone()
        seen = subject.outcome(f"{PROBES}.add_lora_fused_moe_lora_then_no_lora", **args)
        try:
            assert "raised" not in seen, f"raised {seen.get('raised')}: {str(seen.get('message'))[:160]}"
            _check_op(seen["returned"], before)
        except AssertionError as exc:
            failures.append(f"add_lora_fused_moe after {name}: {str(exc)[:200]}")
    for scheme in LAYER_SCHEMES:
        for path in PATHS:
            cases += 1
            p = H.make_problem(scheme, secret_generator)
            lo = H.make_lora(p, [0, 1, 2, 3], secret_generator)
            seen = subject.outcome(f"{PROBES}.moe_no_lora_batch_after_lora_batch", problem=p.as_args(),
                                   lora=lo.as_args(), overlap=path == "overlapped")
            try:
                assert "raised" not in seen, f"raised {seen.get('raised')}: {str(seen.get('message'))[:160]}"
                _check_layer(H, seen["returned"], p)
            except AssertionError as exc:
                failures.append(f"{scheme} layer, {path}: {str(exc)[:200]}")
    assert not failures, f"{len(failures)} of {cases} cases wrong: {failures}"


@pytest.mark.gpu
@pytest.mark.criterion("c2")
@pytest.mark.cases(site="op", stale_mapping="two-adapters")
def test_no_lora_exit_without_device_sync_on_gpu(H, subject, secret_generator):
    """On CUDA, the no-LoRA exit of add_lora_fused_moe neither syncs nor touches the output."""
    num_tokens, top_k, E, rank, K, N, max_loras = 16, 2, 8, 16, 256, 128, 4
    ops = _operands(secret_generator, num_tokens, top_k, E, rank, K, N, max_loras, dtype=torch.bfloat16)
    seen = subject.call(f"{PROBES}.add_lora_fused_moe_no_lora_exit_on_gpu", operands=ops,
                        lora_mapping=torch.tensor([1] * 8 + [2] * 8, dtype=torch.int32), tile=TILE)
    call = seen["call"]
    assert "raised" not in call, (
        f"add_lora_fused_moe raised under torch.cuda.set_sync_debug_mode('error'): {call['raised']}: "
        f"{call['message']}")
    y = seen["y"]
    assert isinstance(y, torch.Tensor) and y.shape == ops["y"].shape
    assert torch.equal(y, ops["y"]), "a batch without LoRA tokens was given a LoRA delta on the GPU"
