"""Judge-side harness of the fp8-moe-lora hidden tests (loaded by conftest.py by path). Pure torch: no vLLM.

The judge draws every input here (activations, weights quantized with their scales, routing, LoRA weights), says
which quantization config the subject builds (``Problem.quant``), runs the layer in the subject through the probes
of ``probes/fp8_lora_probes.py`` and gets back what happened (``Run``: the output, what the base fused-MoE GEMM and
the MoE-LoRA op were given). The expectations are computed here: an fp32 reference of the whole MoE + LoRA layer
and the unmodified data path rebuilt step by step from the reference pieces (``probes/fp8_lora_reference_ops.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch

from rubric_support import load_probe_module

R = load_probe_module(__file__, "fp8_lora_reference_ops")

FP8 = R.FP8
FP8_MAX = R.FP8_MAX
FP8_MAX_ANY = min(R.fp8_max(d) for d in R.FP8_DTYPES)
fp8_cast = R.fp8_cast
group_quant_fp8 = R.group_quant_fp8
dequant_act = R.dequant_act
dequant_weight = R.dequant_weight

SCHEMES = ["fp8-tensor-dynamic", "fp8-tensor-static", "fp8-token-dynamic", "fp8-block"]
PROBES = "fp8_lora_probes"


# ---------------------------------------------------------------------------------------------
# problems, drawn in the judge
# ---------------------------------------------------------------------------------------------


def _shape(t) -> str:
    return "None" if t is None else f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"


@dataclass(repr=False)
class Problem:
    scheme: str
    M: int
    K: int
    I: int
    E: int
    topk: int
    dtype: torch.dtype
    hidden: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    w1_scale: torch.Tensor | None
    w2_scale: torch.Tensor | None
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor
    quant: dict
    a1_scale: torch.Tensor | None = None
    a2_scale: torch.Tensor | None = None
    block_shape: list[int] | None = None

    # The exact dequantized weights the fp32 reference uses, made when it first does: most checks never compute
    # the reference, and a dequantization of every expert is most of what drawing a problem costs.
    @cached_property
    def w1_f32(self) -> torch.Tensor:
        return dequant_weight(self.w1, self.w1_scale, self.block_shape)

    @cached_property
    def w2_f32(self) -> torch.Tensor:
        return dequant_weight(self.w2, self.w2_scale, self.block_shape)

    def __repr__(self) -> str:
        return (f"Problem({self.scheme}, M={self.M}, K={self.K}, I={self.I}, E={self.E}, topk={self.topk}, "
                f"hidden {_shape(self.hidden)})")

    def as_args(self) -> dict:
        """What the subject builds the layer from."""
        return {"E": self.E, "topk": self.topk, "I": self.I, "hidden": self.hidden, "w1": self.w1, "w2": self.w2,
                "topk_weights": self.topk_weights, "topk_ids": self.topk_ids, "quant": self.quant}


def _quant_weight(w: torch.Tensor, how: str, block=None):
    E, N, K = w.shape
    if how == "tensor":
        s = w.abs().amax(dim=(1, 2)) / FP8_MAX
        return fp8_cast(w / s.view(E, 1, 1)), s.float()
    if how == "channel":
        s = w.abs().amax(dim=2, keepdim=True) / FP8_MAX
        return fp8_cast(w / s), s.float()
    if how == "block":
        bn, bk = block
        wb = w.reshape(E, N // bn, bn, K // bk, bk)
        s = wb.abs().amax(dim=(2, 4)) / FP8_MAX
        q = fp8_cast(wb / s[:, :, None, :, None]).reshape(E, N, K)
        return q, s.float().contiguous()
    if how == "int8-channel":
        s = w.abs().amax(dim=2) / 127.0
        return torch.round(w / s[:, :, None]).clamp(-127, 127).to(torch.int8), s.float()
    raise ValueError(how)


def _route(logits: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token's ``topk`` experts and their renormalized weights, from router logits."""
    tw, tid = torch.topk(torch.softmax(logits, dim=-1), topk, dim=-1)
    return (tw / tw.sum(dim=-1, keepdim=True)).float(), tid.to(torch.int32)


# Every drawn batch has tokens of unlike magnitude and, from hidden size 256 on, 128-wide scale groups of unlike
# magnitude: fixed factors, not draws. A dequantization that applies one token's scale to another token, or one
# group's to the other group, is then off by a factor of two or more on every secret; with equal magnitudes it is
# off only by how far two random tokens' ranges happen to differ (a few percent to twenty), which the draw decides.
TOKEN_SPREAD = (1.0, 4.0, 0.5, 2.0)
GROUP_SPREAD = (1.0, 3.0)


def spread(M: int, K: int) -> torch.Tensor:
    """The fixed magnitude of each activation: its token's factor times its scale group's."""
    tokens = torch.tensor([TOKEN_SPREAD[t % len(TOKEN_SPREAD)] for t in range(M)])
    groups = torch.tensor([GROUP_SPREAD[(k // 128) % len(GROUP_SPREAD)] for k in range(K)])
    return tokens[:, None] * groups[None, :]


def _activations(g: torch.Generator, M: int, K: int, act_scale: float, dtype) -> torch.Tensor:
    return (torch.randn(M, K, generator=g) * act_scale * spread(M, K)).to(dtype)


def make_tokens(g: torch.Generator, *, M: int = 4, K: int = 128, E: int = 16, topk: int = 2, dtype=torch.bfloat16,
                act_scale: float = 0.02) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of tokens and its routing (hidden, topk_weights, topk_ids), drawn from ``g``: what another rank
    sends in a dispatch, which needs no weights of its own (drawing a whole problem for it cost the judge most of
    a check's time)."""
    hidden = _activations(g, M, K, act_scale, dtype)
    tw, tid = _route(torch.randn(M, E, generator=g), topk)
    return hidden, tw, tid


def make_problem(scheme: str, g: torch.Generator, *, M: int = 4, E: int = 16, topk: int = 2, K: int | None = None,
                 I: int | None = None, dtype=torch.bfloat16, act_scale: float = 0.02) -> Problem:
    """A MoE problem of the given scheme, drawn from ``g`` (the judge's generator)."""
    block = [128, 128] if scheme == "fp8-block" else None
    K = K or 128
    I = I or (128 if block else 64)
    hidden = _activations(g, M, K, act_scale, dtype)
    w1f = torch.randn(E, 2 * I, K, generator=g) / K ** 0.5
    w2f = torch.randn(E, K, I, generator=g) / I ** 0.5
    tw, tid = _route(torch.randn(M, E, generator=g), topk)
    w1s = w2s = a1s = a2s = None
    if scheme == "unquantized":
        w1 = w1f.to(dtype)
        w2 = w2f.to(dtype)
        quant = {"config": "unquantized"}
    elif scheme == "int8-weight-only":
        w1, w1s = _quant_weight(w1f, "int8-channel")
        w2, w2s = _quant_weight(w2f, "int8-channel")
        quant = {"config": "int8_w8a16", "w1_scale": w1s, "w2_scale": w2s}
    else:
        how = {"fp8-tensor-dynamic": "tensor", "fp8-tensor-static": "tensor",
               "fp8-token-dynamic": "channel", "fp8-block": "block"}[scheme]
        w1, w1s = _quant_weight(w1f, how, block)
        w2, w2s = _quant_weight(w2f, how, block)
        quant = {"config": "fp8_w8a8", "w1_scale": w1s, "w2_scale": w2s}
        if scheme == "fp8-tensor-static":
            # calibrated for the smaller FP8 range of the two platform dtypes (float8_e4m3fnuz, ROCm MI300: 240;
            # vLLM rescales a checkpoint's static scales for it), so that neither saturates
            a1s = (hidden.float().abs().amax() * 1.25 / FP8_MAX_ANY).reshape(1)
            a2s = torch.tensor([0.5 / FP8_MAX_ANY], dtype=torch.float32)
            quant.update(a1_scale=a1s, a2_scale=a2s)
        if scheme == "fp8-token-dynamic":
            quant.update(per_act_token_quant=True, per_out_ch_quant=True)
        if block:
            quant["block_shape"] = block
    return Problem(scheme=scheme, M=M, K=K, I=I, E=E, topk=topk, dtype=dtype, hidden=hidden,
                   w1=w1.contiguous(), w2=w2.contiguous(), w1_scale=w1s, w2_scale=w2s,
                   topk_weights=tw, topk_ids=tid, quant=quant, a1_scale=a1s, a2_scale=a2s, block_shape=block)


@dataclass(repr=False)
class LoraSetup:
    a13: tuple
    b13: tuple
    a2: tuple
    b2: tuple
    mapping: torch.Tensor
    max_loras: int
    max_tokens: int
    adapter_enabled: torch.Tensor

    def __repr__(self) -> str:
        return f"LoraSetup(mapping={self.mapping.tolist()}, max_loras={self.max_loras}, rank={self.a13[0].shape[-2]})"

    def as_args(self) -> dict:
        return {"a13": list(self.a13), "b13": list(self.b13), "a2": list(self.a2), "b2": list(self.b2),
                "mapping": self.mapping, "max_loras": self.max_loras, "max_tokens": self.max_tokens,
                "adapter_enabled": self.adapter_enabled}


def make_lora(p: Problem, mapping: list[int], g: torch.Generator, *, max_loras: int = 4, rank: int = 8,
              lora_dtype=None, max_tokens: int | None = None) -> LoraSetup:
    """LoRA weights for ``p`` drawn from ``g``, and the token mapping the subject prepares before the batch."""
    lora_dtype = lora_dtype or (p.dtype if p.dtype != FP8 else torch.bfloat16)

    def r(*shape, fan_in):
        return (torch.randn(*shape, generator=g) / fan_in ** 0.5).to(lora_dtype)

    a13 = tuple(r(max_loras, p.E, rank, p.K, fan_in=p.K) for _ in range(2))
    b13 = tuple(r(max_loras, p.E, p.I, rank, fan_in=rank) for _ in range(2))
    a2 = (r(max_loras, p.E, rank, p.I, fan_in=p.I),)
    b2 = (r(max_loras, p.E, p.K, rank, fan_in=rank),)
    return LoraSetup(a13=a13, b13=b13, a2=a2, b2=b2, mapping=torch.tensor(mapping, dtype=torch.int32),
                     max_loras=max_loras, max_tokens=max_tokens or max(64, len(mapping)),
                     adapter_enabled=torch.ones(max_loras + 1, dtype=torch.int32))


# ---------------------------------------------------------------------------------------------
# running the layer in the subject
# ---------------------------------------------------------------------------------------------


@dataclass
class GemmCall:
    A: torch.Tensor
    A_scale: torch.Tensor | None
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


@dataclass(repr=False)
class Run:
    """What one run of the layer in the subject produced and what its pieces were given."""

    out: torch.Tensor
    gemm: list = field(default_factory=list)
    lora: list = field(default_factory=list)
    w13_entry: list = field(default_factory=list)

    def __repr__(self) -> str:
        return (f"Run(out {_shape(self.out)}, {len(self.gemm)} GEMM call(s) with A "
                f"{[_shape(c.A) for c in self.gemm]}, {len(self.lora)} MoE-LoRA call(s) with x "
                f"{[_shape(c.x) for c in self.lora]})")


def _as_tensor(value, what: str) -> torch.Tensor:
    assert isinstance(value, torch.Tensor), f"the subject reported {what} as {type(value).__name__}, not a tensor"
    return value


def _run_from(data) -> Run:
    assert isinstance(data, dict) and {"out", "gemm", "lora"} <= set(data), "malformed run record from the subject"
    gemm = [GemmCall(A=_as_tensor(c["A"], "a GEMM input"), A_scale=c["A_scale"], top_k=c["top_k"],
                     mul_routed_weight=c["mul_routed_weight"], use_fp8_w8a8=c["use_fp8_w8a8"],
                     block_shape=c["block_shape"]) for c in data["gemm"]]
    lora = [LoraCall(x=_as_tensor(c["x"], "the MoE-LoRA op input"), y_shape=tuple(c["y_shape"]),
                     mul_routed_weight=c["mul_routed_weight"], token_lora_mapping=c["token_lora_mapping"])
            for c in data["lora"]]
    return Run(out=_as_tensor(data["out"], "the layer output"), gemm=gemm, lora=lora,
               w13_entry=list(data.get("w13_entry", [])))


def run_moe(subject, p: Problem, lora: LoraSetup | None, **options) -> Run:
    """Run the layer once in the subject (options: device, real_kernels, overlap, dispatch)."""
    data = subject.call(f"{PROBES}.run_moe", problem=p.as_args(), lora=None if lora is None else lora.as_args(),
                        **options)
    return _run_from(data)


def run_moe_outcome(subject, p: Problem, lora: LoraSetup | None, **options) -> Run | str:
    """As ``run_moe``, or a description of what the candidate's code raised."""
    seen = subject.outcome(f"{PROBES}.run_moe", problem=p.as_args(),
                           lora=None if lora is None else lora.as_args(), **options)
    if "raised" in seen:
        return f"{seen['raised']}: {seen['message'][:160]}"
    return _run_from(seen["returned"])


# ---------------------------------------------------------------------------------------------
# fp32 reference of the whole MoE + LoRA layer
# ---------------------------------------------------------------------------------------------


def qdq(p: Problem, x: torch.Tensor, which: int) -> torch.Tensor:
    """Quantize-dequantize an activation the way the scheme's base GEMM sees it."""
    x = x.float()
    if not p.scheme.startswith("fp8"):
        return x
    if p.scheme == "fp8-tensor-static":
        s = (p.a1_scale if which == 1 else p.a2_scale).float().reshape(())
    elif p.scheme == "fp8-tensor-dynamic":
        s = (x.abs().amax() / FP8_MAX).clamp(min=1e-12)
    elif p.scheme == "fp8-token-dynamic":
        s = (x.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=1e-12)
    else:
        q, sg = group_quant_fp8(x, 128)
        return dequant_act(q, sg, 128)
    return fp8_cast(x / s).float() * s


def reference_moe(p: Problem, lora: LoraSetup | None, hidden: torch.Tensor | None = None,
                  mapping: torch.Tensor | None = None, quantized_base: bool = True,
                  lora_dequantized: bool = False) -> torch.Tensor:
    """fp32 reference: base GEMMs on the scheme's quantized activations, LoRA on unquantized ones (with
    ``lora_dequantized``, the w13 LoRA on the scheme's quantize-dequantized ones, as a fix that dequantizes gives)."""
    x = (p.hidden if hidden is None else hidden).float()
    xq = qdq(p, x, 1) if quantized_base else x
    x_lora = qdq(p, x, 1) if lora_dequantized else x
    M = x.shape[0]
    lids = [-1] * M
    if lora is not None:
        lids = [int(v) for v in (lora.mapping if mapping is None else mapping)]
    acts = torch.zeros(M, p.topk, p.I, dtype=torch.float32)
    for t in range(M):
        lid = lids[t]
        for j in range(p.topk):
            e = int(p.topk_ids[t, j])
            h = p.w1_f32[e] @ xq[t]
            if lid >= 0:
                h = h + torch.cat([lora.b13[s][lid, e].float() @ (lora.a13[s][lid, e].float() @ x_lora[t])
                                   for s in range(2)])
            acts[t, j] = torch.nn.functional.silu(h[: p.I]) * h[p.I:]
    actq = qdq(p, acts.reshape(M * p.topk, p.I), 2).reshape(M, p.topk, p.I) if quantized_base \
        else acts
    out = torch.zeros(M, p.K, dtype=torch.float32)
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


# What a right layer may differ from the fp32 reference by besides its LoRA input: bfloat16/float16 intermediates and
# the FP8 roundings they move (at most 0.035 for the reference fix over 144 problems of every scheme and corner).
OUTPUT_TOLERANCE = 0.05


def assert_output_matches_reference(p: Problem, lora: LoraSetup, out: torch.Tensor) -> None:
    """The layer output is the fp32 reference's, within a tolerance these inputs set. c1 lets the LoRA shrink get
    the activations dequantized from the FP8 tensor: that moves the output from the reference (LoRA on the real
    activations) by exactly what the FP8 round trip of the LoRA input moves it, 2 to 6.5% as the draw falls, so a
    fixed tolerance would pass or fail a dequantizing fix by the draw. The tolerance is that movement, computed on
    these very inputs, plus ``OUTPUT_TOLERANCE``; a LoRA input that is not the activations (FP8 without its scale,
    another group's or token's scale) is off by far more whatever the draw."""
    ref = reference_moe(p, lora)
    assert out.shape == ref.shape, f"output shape {tuple(out.shape)} != {tuple(ref.shape)}"
    lora_round_trip = rel_err(reference_moe(p, lora, lora_dequantized=True), ref)
    err = rel_err(out, ref)
    assert err < OUTPUT_TOLERANCE + lora_round_trip, (
        f"relative error {err:.3g} against the fp32 reference (allowed: {OUTPUT_TOLERANCE} plus the "
        f"{lora_round_trip:.3g} an FP8 round trip of the LoRA input accounts for)")


# ---------------------------------------------------------------------------------------------
# the unmodified (base) MoE data path, rebuilt step by step from the same reference pieces
# ---------------------------------------------------------------------------------------------


def quantize_act(p: Problem, x: torch.Tensor, which: int):
    """The scheme's activation quantization, as the base path does it: (FP8 tensor, scale), or (x, None)."""
    if not p.scheme.startswith("fp8"):
        return x, None
    q = torch.empty(x.shape, dtype=FP8)
    if p.scheme == "fp8-tensor-static":
        s = p.a1_scale if which == 1 else p.a2_scale
        R.static_fp8(q, x, s)
        return q, s
    if p.scheme == "fp8-tensor-dynamic":
        s = torch.zeros(1, dtype=torch.float32)
        R.dynamic_fp8(q, x, s)
        return q, s
    if p.scheme == "fp8-token-dynamic":
        s = torch.zeros(x.shape[0], 1, dtype=torch.float32)
        R.dynamic_token_fp8(q, x, s)
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
    a1q, s1 = quantize_act(p, p.hidden, 1)
    c1 = torch.empty(M, topk, N, dtype=p.dtype)
    R.reference_gemm(a1q, p.w1, c1, s1, p.w1_scale, None, None, eids, None, False, topk, cfg, **flags)
    zeros = [0] * 14
    if lora is not None:
        R.reference_fused_moe_lora(c1, p.hidden, lora.a13, lora.b13, p.topk_weights, None, eids, None,
                                   lora.mapping, lora.a13[0].shape[-2], topk, None, None,
                                   lora.adapter_enabled, *zeros, False, False, 0, True)
    cache2 = torch.empty(M * topk, I, dtype=p.dtype)
    if p.scheme == "fp8-block" and lora is None:
        q2 = torch.empty(M * topk, I, dtype=FP8)
        s2 = torch.empty(M * topk, I // 128, dtype=torch.float32)
        R.silu_mul_block_quant(q2, c1.view(-1, N), s2, 128)
    else:
        R.silu_and_mul(cache2, c1.view(-1, N))
        q2, s2 = quantize_act(p, cache2, 2)
    c3 = torch.empty(M, topk, K, dtype=p.dtype)
    R.reference_gemm(q2, p.w2, c3, s2, p.w2_scale, p.topk_weights, None, eids, None, True, 1, cfg,
                     **flags)
    if lora is not None:
        R.reference_fused_moe_lora(c3, cache2, lora.a2, lora.b2, p.topk_weights, None, eids, None,
                                   lora.mapping, lora.a2[0].shape[-2], topk, None, None,
                                   lora.adapter_enabled, *zeros, True, False, 0, True)
    out = torch.empty(M, K, dtype=p.dtype)
    R.moe_sum(c3, out)
    return out
