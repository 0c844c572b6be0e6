"""c4: after a data-parallel dispatch, the LoRA input follows the dispatched tokens' rows and layout.

A two-rank naive DP/EP dispatch is faked in the subject (``get_ep_group`` of ``naive_dp_ep``); what the peer rank
sends (its tokens, FP8-quantized with their scale where the scheme quantizes) is drawn and quantized here, and the
expected dispatched tokens are mixed here the same way the fake group mixes them.
"""

from __future__ import annotations

import pytest
import torch


def _quantize_like(H, scheme, x, static_scale=None):
    if scheme == "fp8-tensor-static":
        return H.fp8_cast(x.float() / static_scale.float()), static_scale
    if scheme == "fp8-token-dynamic":
        s = (x.float().abs().amax(dim=-1, keepdim=True) / H.FP8_MAX).clamp(min=1e-12)
        return H.fp8_cast(x.float() / s), s
    return H.group_quant_fp8(x.float(), 128)


def _mix(mode, local, remote):
    """The dispatched rows: 'gather' adds the peer's tokens before the local ones, 'exchange' keeps the row count
    but swaps the first half of the local tokens for the peer's (as the subject's fake group does)."""
    if mode == "gather":
        return torch.cat([remote, local], dim=0)
    h = local.shape[0] // 2
    return torch.cat([local[h:], remote[:h]], dim=0)


# Unquantized too: its dispatched tokens need no scale, and a fix must not ask for one. K=256 gives block
# quantization two scale groups per token, so a dequantization that treats them as one per-token scale shows.
SCHEMES = ["fp8-token-dynamic", "fp8-block", "unquantized", "fp8-tensor-static"]
# (how the fake group mixes tokens, expert parallel on): with expert parallelism vLLM runs its all2all path;
# DP without it falls back to an all-gather of every rank's tokens, with the all2all switch off.
DISPATCHES = {"ep-gather": ("gather", True), "ep-exchange": ("exchange", True), "dp-gather": ("gather", False)}


def _case(H, g, scheme, dispatch, dtype=torch.bfloat16):
    """The problem, its LoRA adapter and the dispatch the subject fakes; the rows the LoRA input must have."""
    mode, use_ep = DISPATCHES[dispatch]
    p = H.make_problem(scheme, g, E=32, K=256, dtype=dtype)
    peer_hidden, peer_weights, peer_ids = H.make_tokens(g, M=p.M, K=p.K, E=p.E, topk=p.topk, dtype=p.dtype)
    if scheme == "fp8-tensor-static":
        # a static scale is one calibrated constant for every rank: here it covers both ranks' tokens
        amax = torch.maximum(p.hidden.float().abs().amax(), peer_hidden.float().abs().amax())
        p.a1_scale = (amax * 1.25 / H.FP8_MAX).reshape(1)
        p.quant["a1_scale"] = p.a1_scale
    lo = H.make_lora(p, [0, -1, 1, 2], g)
    peer = {"hidden": peer_hidden, "topk_weights": peer_weights, "topk_ids": peer_ids,
            "mapping": torch.tensor([3, 1, -1, 0], dtype=torch.int32), "quantized": None, "scale": None}
    if scheme != "unquantized":
        peer["quantized"], peer["scale"] = _quantize_like(H, scheme, peer_hidden, p.a1_scale)
    expected = _mix(mode, p.hidden.float(), peer_hidden.float())
    return p, lo, {"mode": mode, "use_ep": use_ep, "peer": peer}, expected


def _check_run(run, expected, dtype):
    assert run.lora, "the MoE-LoRA op was never called for dispatched LoRA tokens"
    # The LoRA kernels take activations of the layer's dtype, as their weights are: not float32 (a dequantization
    # left unconverted) nor a dtype of the fix's choosing.
    assert run.lora[0].x.dtype == dtype, f"LoRA input is {run.lora[0].x.dtype}, the layer's input {dtype}"
    x = run.lora[0].x.float()
    assert x.dim() == 2 and x.shape[1] == expected.shape[1], f"LoRA input has shape {tuple(x.shape)}"
    assert x.shape[0] == expected.shape[0], (
        f"LoRA input has {x.shape[0]} rows, the dispatched tokens {expected.shape[0]}")
    row_err = ((x - expected).norm(dim=1) / expected.norm(dim=1)).tolist()
    assert max(row_err) < 0.1, f"LoRA input rows do not match the dispatched tokens: {row_err}"


@pytest.mark.criterion("c4")
@pytest.mark.cases(dtype="bfloat16")
@pytest.mark.parametrize("dispatch", list(DISPATCHES))
@pytest.mark.parametrize("scheme", SCHEMES)
def test_lora_input_follows_dispatched_tokens(H, subject, secret_generator, scheme, dispatch):
    """After a DP/EP dispatch the LoRA shrink input has the dispatched rows, token for token, in the layer's dtype."""
    p, lo, fake, expected = _case(H, secret_generator, scheme, dispatch)
    _check_run(H.run_moe(subject, p, lo, dispatch=fake), expected, p.dtype)


# Every scheme and dispatch again, in a float16 layer (the per-case checks above run bfloat16): a dequantization that
# casts to bfloat16 whatever the layer is shows here. A criterion is met only when every check passes.
@pytest.mark.criterion("c4", weight=1)
@pytest.mark.cases(scheme=SCHEMES, dispatch=list(DISPATCHES), dtype="float16")
def test_lora_input_follows_dispatched_tokens_in_every_case(H, subject, secret_generator):
    """The LoRA shrink input follows the dispatched tokens for every scheme and dispatch of a float16 layer."""
    failures = []
    for scheme in SCHEMES:
        for dispatch in DISPATCHES:
            p, lo, fake, expected = _case(H, secret_generator, scheme, dispatch, dtype=torch.float16)
            run = H.run_moe_outcome(subject, p, lo, dispatch=fake)
            if isinstance(run, str):  # a crash is as wrong as a mismatch
                failures.append(f"{scheme}/{dispatch}: {run}")
                continue
            try:
                _check_run(run, expected, p.dtype)
            except AssertionError as exc:
                failures.append(f"{scheme}/{dispatch}: AssertionError: {str(exc)[:160]}")
    assert not failures, f"{len(failures)} of {len(SCHEMES) * len(DISPATCHES)} cases wrong: {failures}"
