"""c2, c3, c4: the OCP MX emulation experts with static FP8 activations (scheme w_mxfp4_a_fp8), on CPU.

The experts run through vLLM's modular MoE kernel: MXFP4 weights are dequantized (amd-quark stand-in from
conftest), the Triton GEMMs run under the Triton interpreter in float32, and the result is compared with a
torch reference MoE whose activations go through an FP8 quantize-dequantize round trip.
"""

from __future__ import annotations

import pytest
import torch

E, H, I, T, K = 16, 64, 32, 2, 2  # T * K * 4 <= E: naive block assignment, no moe_align_block_size op


def _moe_config():
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )

    return FusedMoEConfig(
        num_experts=E,
        experts_per_token=K,
        hidden_dim=H,
        intermediate_size=I,
        num_local_experts=E,
        num_logical_experts=E,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(),
        activation=MoEActivation.SILU,
        in_dtype=torch.float32,
        device="cpu",
        routing_method=RoutingMethodType.Renormalize,
        moe_backend="emulation",
    )


def _problem(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    p = dict(
        w1=torch.randint(0, 256, (E, 2 * I, H // 2), dtype=torch.uint8, generator=g),
        w2=torch.randint(0, 256, (E, H, I // 2), dtype=torch.uint8, generator=g),
        w1s=torch.randint(122, 126, (E, 2 * I, H // 32), dtype=torch.uint8, generator=g),
        w2s=torch.randint(122, 126, (E, H, I // 32), dtype=torch.uint8, generator=g),
        x=torch.randn(T, H, generator=g),
        ids=torch.tensor([[0, 11], [5, 11]], dtype=torch.int32),
        tw=torch.tensor([[0.6, 0.4], [0.3, 0.7]], dtype=torch.float32),
    )
    return p


def _dequant(w, s):
    from vllm.model_executor.layers.quantization.utils.mxfp4_utils import dequant_mxfp4

    return dequant_mxfp4(w, s, torch.float32)


def _qdq(x: torch.Tensor, scale: torch.Tensor | None, fp8_dtype: torch.dtype) -> torch.Tensor:
    """FP8 quantize-dequantize with a static scale, or (scale None) a dynamic per-tensor one."""
    fmax = torch.finfo(fp8_dtype).max
    s = (x.abs().max() / fmax) if scale is None else scale.reshape(-1)[0].float()
    if float(s) == 0.0:
        return torch.zeros_like(x)  # an all-zero tensor round-trips to zeros, whatever the scale rule
    return (x / s).clamp(-fmax, fmax).to(fp8_dtype).float() * s


def _reference(p, s1, s2, fp8_dtype, a2_mode: str, a1_quantized: bool = True):
    """Torch MoE: a1 QDQ with s1 (or none), GEMM1, SiLU-and-mul, a2 QDQ (static s2 / dynamic / none), GEMM2."""
    w1 = _dequant(p["w1"], p["w1s"])
    w2 = _dequant(p["w2"], p["w2s"])
    xq = _qdq(p["x"], s1, fp8_dtype) if a1_quantized else p["x"]
    inter = []
    for t in range(T):
        for k in range(K):
            h = xq[t] @ w1[p["ids"][t, k]].T
            inter.append(torch.nn.functional.silu(h[:I]) * h[I:])
    inter = torch.stack(inter)
    if a2_mode == "static":
        inter = _qdq(inter, s2, fp8_dtype)
    elif a2_mode == "dynamic":
        inter = _qdq(inter, None, fp8_dtype)
    out = torch.zeros(T, H)
    for t in range(T):
        for k in range(K):
            out[t] += p["tw"][t, k] * (inter[t * K + k] @ w2[p["ids"][t, k]].T)
    return out, inter


def _scales(p, fp8_dtype):
    """Static scales far from what a dynamic QDQ would use, so the two give clearly different results."""
    _, inter = _reference(p, None, None, fp8_dtype, "none")
    s1 = (p["x"].abs().max() / 6.0).reshape(1).float()
    s2 = (inter.abs().max() / 5.0).reshape(1).float()
    return s1, s2


def _w4a8_quant_config(p, s1, s2):
    from vllm.model_executor.layers.fused_moe.config import mxfp4_w4a8_moe_quant_config

    return mxfp4_w4a8_moe_quant_config(
        w1_scale=p["w1s"].clone(), w2_scale=p["w2s"].clone(), a1_scale=s1.clone(), a2_scale=s2.clone()
    )


def _emulation_cls():
    from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import Mxfp4MoeBackend, backend_to_kernel_cls

    return backend_to_kernel_cls(Mxfp4MoeBackend.EMULATION)[0]


def _run(rocm, p, quant_config):
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import Mxfp4MoeBackend, make_mxfp4_moe_kernel

    rocm.prepare_cpu_run()
    kernel = make_mxfp4_moe_kernel(
        moe_quant_config=quant_config,
        moe_config=_moe_config(),
        experts_cls=_emulation_cls(),
        mxfp4_backend=Mxfp4MoeBackend.EMULATION,
    )
    return kernel.apply(
        hidden_states=p["x"].clone(),
        w1=p["w1"],
        w2=p["w2"],
        topk_ids=p["ids"],
        topk_weights=p["tw"],
        activation=MoEActivation.SILU,
        global_num_experts=E,
        expert_map=None,
        apply_router_weight_on_input=False,
    )


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


TOL = 2e-3

PLATFORMS = [
    pytest.param(("rocm", "gfx942"), id="gfx942"),
    pytest.param(("rocm", "gfx90a"), id="gfx90a"),
    pytest.param(("rocm", "gfx950"), id="gfx950"),
]


def _set(rocm, plat):
    kind, arch = plat
    if kind == "rocm":
        rocm.set_rocm(arch)
    else:
        rocm.set_cuda(arch)
    rocm.fake_vllm_config()


# ----------------------------------------------------------------------------------------------------------
# c2: FP8 activation QDQ is implemented
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("plat", PLATFORMS)
def test_fp8_activation_emulation_matches_qdq_reference(rocm, plat):
    """Emulated MXFP4 MoE with static FP8 activations equals a torch FP8 quantize-dequantize reference."""
    _set(rocm, plat)
    fp8 = rocm.platform.fp8_dtype()
    p = _problem()
    s1, s2 = _scales(p, fp8)
    out = _run(rocm, p, _w4a8_quant_config(p, s1, s2))
    assert torch.isfinite(out).all()
    refs = {mode: _reference(p, s1, s2, fp8, mode)[0] for mode in ("static", "dynamic", "none")}
    errs = {mode: _rel_err(out, r) for mode, r in refs.items()}
    # c2 asks for the QDQ round trip itself; whether a2 uses its static scale is c4's question.
    assert min(errs["static"], errs["dynamic"]) < TOL, f"no FP8 QDQ reference matches: {errs}"


# Without static scales the FP8 QDQ takes a dynamic per-tensor scale (amax / fp8 max) for both activations,
# as vLLM's FP8 paths do for a missing scale; the same round trip must equal the torch reference. An all-zero
# input is included: its QDQ is zeros, not NaN from a zero scale.
DYNAMIC_INPUTS = ["random", "zeros"]


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("inputs", DYNAMIC_INPUTS)
@pytest.mark.parametrize("plat", PLATFORMS)
def test_dynamic_fp8_activation_emulation_matches_qdq_reference(rocm, plat, inputs):
    """Emulated MXFP4 MoE with FP8 activations and no static scales equals a dynamic per-tensor QDQ reference."""
    _set(rocm, plat)
    fp8 = rocm.platform.fp8_dtype()
    p = _problem(seed=3)
    if inputs == "zeros":
        p["x"] = torch.zeros_like(p["x"])
    from vllm.model_executor.layers.fused_moe.config import mxfp4_w4a8_moe_quant_config

    qc = mxfp4_w4a8_moe_quant_config(w1_scale=p["w1s"].clone(), w2_scale=p["w2s"].clone())
    out = _run(rocm, p, qc)
    assert torch.isfinite(out).all(), f"non-finite output for {inputs} inputs: {out}"
    ref = _reference(p, None, None, fp8, "dynamic")[0]
    if inputs == "zeros":
        assert torch.equal(out.float(), ref), f"all-zero input gave {out}"
        return
    err = _rel_err(out, ref)
    unquantized = _reference(p, None, None, fp8, "none", a1_quantized=False)[0]
    assert err < TOL, (
        f"output differs from the dynamic FP8 QDQ reference by {err:.3g} "
        f"(from the unquantized reference by {_rel_err(out, unquantized):.3g})"
    )


# ----------------------------------------------------------------------------------------------------------
# c3: the emulation experts' quant dtype is the platform FP8 dtype
# ----------------------------------------------------------------------------------------------------------

DTYPE_CASES = [
    pytest.param(("rocm", "gfx942"), torch.float8_e4m3fnuz, id="gfx942-fnuz"),
    pytest.param(("rocm", "gfx90a"), torch.float8_e4m3fn, id="gfx90a-fn"),
    pytest.param(("rocm", "gfx950"), torch.float8_e4m3fn, id="gfx950-fn"),
    pytest.param(("cuda", (9, 0)), torch.float8_e4m3fn, id="cuda-sm90-fn"),
]


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("plat,expected", DTYPE_CASES)
def test_emulation_quant_dtype_is_platform_fp8(rocm, plat, expected):
    """For w_mxfp4_a_fp8 the emulation experts' quant_dtype is the platform FP8 dtype."""
    _set(rocm, plat)
    p = _problem()
    s = torch.tensor([0.05])
    experts = _emulation_cls()(_moe_config(), _w4a8_quant_config(p, s, s))
    assert experts.quant_dtype == expected, f"quant_dtype={experts.quant_dtype!r}, expected {expected}"


@pytest.mark.criterion("c3")
def test_emulation_quant_dtype_mxfp6_weights_fp8_activations(rocm):
    """For w_mxfp6_e3m2_a_fp8 on gfx942 the emulation experts' quant_dtype is float8_e4m3fnuz."""
    _set(rocm, ("rocm", "gfx942"))
    from vllm.model_executor.layers.fused_moe.config import FusedMoEQuantConfig, FusedMoEQuantDesc

    s = torch.tensor([0.05])
    qc = FusedMoEQuantConfig(
        _a1=FusedMoEQuantDesc("fp8", None, s.clone(), None, None, None),
        _a2=FusedMoEQuantDesc("fp8", None, s.clone(), None, None, None),
        _w1=FusedMoEQuantDesc("mxfp6_e3m2", None, torch.zeros(E, 2 * I, H // 32, dtype=torch.uint8), None, None, None),
        _w2=FusedMoEQuantDesc("mxfp6_e3m2", None, torch.zeros(E, H, I // 32, dtype=torch.uint8), None, None, None),
    )
    experts = _emulation_cls()(_moe_config(), qc)
    assert experts.quant_dtype == torch.float8_e4m3fnuz, f"quant_dtype={experts.quant_dtype!r}"


# BF16-activation (weight-only MXFP4) models get the emulation backend on gfx942/gfx90a too (c1): their
# experts must report no activation quant dtype and run the MoE with the activations left unquantized.
WEIGHT_ONLY_PLATFORMS = [PLATFORMS[0], PLATFORMS[1]]


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("plat", WEIGHT_ONLY_PLATFORMS)
def test_weight_only_emulation_keeps_activations_unquantized(rocm, plat):
    """For weight-only MXFP4 (w_mxfp4) the emulation experts' quant_dtype is None and the MoE runs unquantized."""
    _set(rocm, plat)
    from vllm.model_executor.layers.fused_moe.config import mxfp4_w4a16_moe_quant_config

    p = _problem(seed=4)
    fp8 = rocm.platform.fp8_dtype()
    experts = _emulation_cls()(_moe_config(), mxfp4_w4a16_moe_quant_config(p["w1s"].clone(), p["w2s"].clone()))
    assert experts.quant_dtype is None, f"quant_dtype={experts.quant_dtype!r} for a weight-only scheme"
    out = _run(rocm, p, mxfp4_w4a16_moe_quant_config(p["w1s"].clone(), p["w2s"].clone()))
    ref = _reference(p, None, None, fp8, "none", a1_quantized=False)[0]
    err = _rel_err(out, ref)
    assert err < TOL, f"weight-only emulation differs from the unquantized-activation reference by {err:.3g}"


# The per-case tests above give partial credit; this one asks for every scheme at once, so emulation experts
# that get any scheme's quant dtype wrong (or cannot serve weight-only MXFP4) leave c3 below met, while experts
# that only serve weight-only MXFP4 right stay unmet.
@pytest.mark.criterion("c3", weight=2)
def test_emulation_quant_dtype_right_for_every_scheme(rocm):
    """Every FP8-activation case reports the platform FP8 dtype and every weight-only case runs unquantized."""
    cases = [(test_emulation_quant_dtype_is_platform_fp8, dict(plat=c.values[0], expected=c.values[1]), c.id)
             for c in DTYPE_CASES]
    cases.append((test_emulation_quant_dtype_mxfp6_weights_fp8_activations, {}, "gfx942-mxfp6"))
    cases += [(test_weight_only_emulation_keeps_activations_unquantized, dict(plat=c.values[0]), f"weight-only-{c.id}")
              for c in WEIGHT_ONLY_PLATFORMS]
    wrong = []
    for check, kwargs, label in cases:
        try:
            check(rocm, **kwargs)
        except Exception as exc:  # noqa: BLE001 - every wrong case is reported with the rest
            wrong.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
    assert not wrong, "; ".join(wrong)


# ----------------------------------------------------------------------------------------------------------
# c4: static input scales of both activations reach the emulation path and are applied
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.criterion("c4", weight=2)
@pytest.mark.parametrize("plat", [PLATFORMS[0], PLATFORMS[2]])
def test_static_scales_applied_to_both_activations(rocm, plat):
    """The output equals the reference that QDQs a1 with its static scale and a2 with its static scale."""
    _set(rocm, plat)
    fp8 = rocm.platform.fp8_dtype()
    p = _problem(seed=1)
    s1, s2 = _scales(p, fp8)
    out = _run(rocm, p, _w4a8_quant_config(p, s1, s2))
    static = _reference(p, s1, s2, fp8, "static")[0]
    dynamic = _reference(p, s1, s2, fp8, "dynamic")[0]
    err = _rel_err(out, static)
    assert err < TOL, (
        f"output differs from the static-a1/static-a2 reference by {err:.3g} "
        f"(from the dynamic-a2 reference by {_rel_err(out, dynamic):.3g})"
    )


@pytest.mark.criterion("c4")
def test_quantize_calls_receive_both_static_scales(rocm):
    """Spies on vLLM's activation-quantize entry points see the static a1 scale and the static a2 scale."""
    import sys

    _set(rocm, ("rocm", "gfx942"))
    fp8 = rocm.platform.fp8_dtype()
    p = _problem(seed=2)
    s1, s2 = _scales(p, fp8)
    qc = _w4a8_quant_config(p, s1, s2)

    seen: list[torch.Tensor] = []

    def record(scale):
        if isinstance(scale, torch.Tensor) and scale.numel() >= 1:
            seen.append(scale.detach().float().reshape(-1).clone())

    import vllm._custom_ops as ops
    import vllm.model_executor.layers.fused_moe.utils as fm_utils

    orig_mkqi = fm_utils.moe_kernel_quantize_input

    def spy_mkqi(A, A_scale, *args, **kwargs):
        record(A_scale)
        return orig_mkqi(A, A_scale, *args, **kwargs)

    orig_fp8 = ops.scaled_fp8_quant

    def spy_fp8(input, scale=None, *args, **kwargs):
        record(scale)
        return orig_fp8(input, scale, *args, **kwargs)

    rocm.mp.setattr(ops, "scaled_fp8_quant", spy_fp8)
    for name in (
        "vllm.model_executor.layers.fused_moe.utils",
        "vllm.model_executor.layers.fused_moe.experts.triton_moe",
        "vllm.model_executor.layers.fused_moe.experts.ocp_mx_emulation_moe",
    ):
        __import__(name)
        mod = sys.modules[name]
        if getattr(mod, "moe_kernel_quantize_input", None) is orig_mkqi:
            rocm.mp.setattr(mod, "moe_kernel_quantize_input", spy_mkqi)
        if getattr(mod, "scaled_fp8_quant", None) is orig_fp8:
            rocm.mp.setattr(mod, "scaled_fp8_quant", spy_fp8)

    _run(rocm, p, qc)

    def hit(s):
        return any(torch.allclose(v, s.reshape(-1)[0].expand_as(v), rtol=1e-6, atol=0) for v in seen)

    assert hit(s1), f"static a1 scale {float(s1):.6g} never reached a quantize call; saw {[v.tolist() for v in seen]}"
    assert hit(s2), f"static a2 scale {float(s2):.6g} never reached a quantize call; saw {[v.tolist() for v in seen]}"


# Checkpoints may store one static input scale per expert. With every expert's scale equal there is only one
# sensible per-tensor scale, so the output must match the static reference exactly as with a single scale;
# per-expert scale tensors must neither crash the emulation path nor be dropped for a dynamic QDQ.
@pytest.mark.criterion("c4", weight=2)
@pytest.mark.parametrize("plat", [PLATFORMS[0], PLATFORMS[2]])
def test_per_expert_static_scales_applied(rocm, plat):
    """Static a1/a2 scales given per expert (all equal) are applied like the single per-tensor scale."""
    _set(rocm, plat)
    fp8 = rocm.platform.fp8_dtype()
    p = _problem(seed=5)
    s1, s2 = _scales(p, fp8)
    qc = _w4a8_quant_config(p, s1.expand(E).contiguous(), s2.expand(E).contiguous())
    out = _run(rocm, p, qc)
    static = _reference(p, s1, s2, fp8, "static")[0]
    dynamic = _reference(p, s1, s2, fp8, "dynamic")[0]
    err = _rel_err(out, static)
    assert err < TOL, (
        f"with per-expert scales the output differs from the static-a1/static-a2 reference by {err:.3g} "
        f"(from the dynamic-a2 reference by {_rel_err(out, dynamic):.3g})"
    )
