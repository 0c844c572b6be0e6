"""c1 and c5: which MXFP4 MoE backend the oracle and the quant methods pick, per (faked) GPU."""

from __future__ import annotations

import pytest
import torch

E = 8


def _moe_config(activation: str = "SWIGLUOAI", moe_backend: str = "auto"):
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )

    return FusedMoEConfig(
        num_experts=E,
        experts_per_token=2,
        hidden_dim=256,
        intermediate_size=256,
        num_local_experts=E,
        num_logical_experts=E,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(),
        activation=getattr(MoEActivation, activation),
        in_dtype=torch.bfloat16,
        device="cpu",
        routing_method=RoutingMethodType.Renormalize,
        moe_backend=moe_backend,
    )


def _act_key(name: str):
    from vllm.model_executor.layers.quantization.utils import quant_utils as q

    return {"bf16": None, "mxfp4_dynamic": q.kMxfp4Dynamic, "fp8_static": q.kFp8StaticTensorSym}[name]


def _select(activation_key_name: str, activation: str = "SWIGLUOAI", moe_backend: str = "auto"):
    from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import select_mxfp4_moe_backend

    return select_mxfp4_moe_backend(
        _moe_config(activation, moe_backend), activation_key=_act_key(activation_key_name)
    )


def _backend(name: str):
    from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import Mxfp4MoeBackend

    return getattr(Mxfp4MoeBackend, name)


def _emulation_cls():
    from vllm.model_executor.layers.fused_moe.experts.ocp_mx_emulation_moe import (
        OCP_MXQuantizationEmulationTritonExperts,
    )

    return OCP_MXQuantizationEmulationTritonExperts


def _setup(rocm, arch: str, aiter: bool):
    rocm.set_rocm(arch, aiter=aiter)
    rocm.fake_triton_kernels(True)
    rocm.fake_vllm_config()


# MI300 usually runs with AITER on, MI250 without: cover both switches.
NON_GFX950 = [pytest.param("gfx942", True, id="gfx942-aiter"), pytest.param("gfx90a", False, id="gfx90a")]
ACT_SCHEMES = ["bf16", "mxfp4_dynamic", "fp8_static"]

# quark scheme -> (weight config, input config)
QUARK_SCHEMES = {
    "bf16": ({"qscheme": "per_group", "dtype": "fp4"}, None),
    "mxfp4_dynamic": (
        {"qscheme": "per_group", "dtype": "fp4"},
        {"qscheme": "per_group", "dtype": "fp4", "is_dynamic": True},
    ),
    "fp8_static": (
        {"qscheme": "per_group", "dtype": "fp4"},
        {"qscheme": "per_tensor", "dtype": "fp8_e4m3", "is_dynamic": False},
    ),
}


@pytest.mark.criterion("c1")
@pytest.mark.parametrize("scheme", ACT_SCHEMES)
@pytest.mark.parametrize("arch,aiter", NON_GFX950)
def test_oracle_selects_emulation_on_non_gfx950(rocm, arch, aiter, scheme):
    """The MXFP4 MoE oracle picks the emulation backend on gfx942/gfx90a."""
    _setup(rocm, arch, aiter)
    backend, experts_cls = _select(scheme)
    assert backend == _backend("EMULATION"), f"{arch}, {scheme} activations: selected {backend}"
    assert experts_cls is not None and issubclass(experts_cls, _emulation_cls())


@pytest.mark.criterion("c1")
@pytest.mark.parametrize("scheme", ACT_SCHEMES)
@pytest.mark.parametrize("arch,aiter", NON_GFX950)
def test_quark_moe_method_uses_emulation_on_non_gfx950(rocm, arch, aiter, scheme):
    """Quark's OCP MX MoE method selects the emulation backend and experts on gfx942/gfx90a."""
    _setup(rocm, arch, aiter)
    from vllm.model_executor.layers.quantization.quark.quark_moe import QuarkOCP_MX_MoEMethod

    weight_cfg, input_cfg = QUARK_SCHEMES[scheme]
    method = QuarkOCP_MX_MoEMethod(dict(weight_cfg), None if input_cfg is None else dict(input_cfg), _moe_config("SILU"))
    assert method.mxfp4_backend == _backend("EMULATION"), f"{arch}, {scheme}: {method.mxfp4_backend}"
    assert method.experts_cls is not None and issubclass(method.experts_cls, _emulation_cls())


@pytest.mark.criterion("c1")
@pytest.mark.parametrize("arch,aiter", NON_GFX950)
def test_gpt_oss_moe_method_uses_emulation_on_non_gfx950(rocm, arch, aiter):
    """The gpt-oss MXFP4 MoE method selects the emulation backend on gfx942/gfx90a."""
    _setup(rocm, arch, aiter)
    import vllm.model_executor.layers.quantization.mxfp4 as mxfp4_quant

    cls = getattr(mxfp4_quant, "GptOssMxfp4MoEMethod", None)
    if cls is None:  # the class name is not part of the task; find the method built on the oracle
        cls = next(
            v
            for k, v in vars(mxfp4_quant).items()
            if isinstance(v, type) and "gptoss" in k.lower() and "moemethod" in k.lower()
        )
    method = cls(_moe_config("SWIGLUOAI"))
    assert method.mxfp4_backend == _backend("EMULATION"), f"{arch}: {method.mxfp4_backend}"


# ----------------------------------------------------------------------------------------------------------
# c5: gfx950 keeps its native selection; CUDA selection is unchanged
# ----------------------------------------------------------------------------------------------------------

GFX950_CASES = [
    # (aiter, activation scheme, MoE activation, moe_backend, expected backend)
    pytest.param(True, "mxfp4_dynamic", "SILU", "auto", "AITER_MXFP4_MXFP4", id="aiter-w4a4"),
    pytest.param(False, "mxfp4_dynamic", "SILU", "auto", "TRITON_UNFUSED", id="noaiter-w4a4"),
    pytest.param(True, "bf16", "SWIGLUOAI", "auto", "AITER_MXFP4_BF16", id="aiter-w4a16"),
    pytest.param(False, "bf16", "SWIGLUOAI", "auto", "TRITON", id="noaiter-w4a16"),
    pytest.param(True, "fp8_static", "SWIGLUOAI", "auto", "AITER_MXFP4_FP8", id="aiter-w4a8"),
    pytest.param(False, "fp8_static", "SWIGLUOAI", "auto", "TRITON_UNFUSED", id="noaiter-w4a8"),
]


@pytest.mark.criterion("c5", weight=2)
@pytest.mark.parametrize("aiter,scheme,activation,moe_backend,expected", GFX950_CASES)
def test_gfx950_keeps_native_selection(rocm, aiter, scheme, activation, moe_backend, expected):
    """On gfx950 the oracle still selects the native MXFP4 MoE backend."""
    _setup(rocm, "gfx950", aiter)
    backend, experts_cls = _select(scheme, activation, moe_backend)
    assert backend == _backend(expected), f"gfx950 aiter={aiter} {scheme}: selected {backend}"
    assert experts_cls is not None


@pytest.mark.criterion("c5")
def test_gfx950_explicit_emulation_backend(rocm):
    """On gfx950, --moe-backend emulation still selects the emulation backend."""
    _setup(rocm, "gfx950", False)
    backend, experts_cls = _select("mxfp4_dynamic", "SILU", "emulation")
    assert backend == _backend("EMULATION")
    assert experts_cls is not None


@pytest.mark.criterion("c5", weight=2)
def test_gfx950_quark_w4a8_keeps_aiter(rocm):
    """Quark's W4A8 (static FP8 activation) MoE on gfx950 with AITER keeps the AITER backend."""
    _setup(rocm, "gfx950", True)
    from vllm.model_executor.layers.quantization.quark.quark_moe import QuarkOCP_MX_MoEMethod

    weight_cfg, input_cfg = QUARK_SCHEMES["fp8_static"]
    method = QuarkOCP_MX_MoEMethod(dict(weight_cfg), dict(input_cfg), _moe_config("SWIGLUOAI"))
    assert method.mxfp4_backend == _backend("AITER_MXFP4_FP8"), method.mxfp4_backend


CUDA_CASES = [
    pytest.param("SWIGLUOAI", "TRITON", id="sm90-swigluoai"),
    pytest.param("SILU", "MARLIN", id="sm90-silu"),
]


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("activation,expected", CUDA_CASES)
def test_cuda_selection_unchanged(rocm, activation, expected):
    """On a CUDA SM90 GPU the oracle's MXFP4 MoE selection is unchanged."""
    rocm.set_cuda((9, 0))
    rocm.fake_triton_kernels(True)
    rocm.fake_vllm_config()
    backend, experts_cls = _select("bf16", activation)
    assert backend == _backend(expected), f"SM90 {activation}: selected {backend}"
    assert experts_cls is not None


# The fix touches TritonExperts, which every Triton MoE path shares, not only emulation. Outside emulation the
# first GEMM must still get the scale of the already-quantized activations (a1q_scale); the oracle's CUDA and
# gfx950 choices are only unchanged if the kernels behind them are. The spy stops the run at that GEMM.
class _StopAtFirstGemm(Exception):
    pass


NON_EMULATION_PLATFORMS = [pytest.param(("cuda", (9, 0)), id="cuda-sm90"), pytest.param(("rocm", "gfx950"), id="gfx950")]


@pytest.mark.criterion("c5")
@pytest.mark.parametrize("plat", NON_EMULATION_PLATFORMS)
def test_non_emulation_triton_moe_passes_activation_scale(rocm, plat):
    """Non-emulation TritonExperts (FP8 W8A8, dynamic activations) hands a1q_scale to the first GEMM."""
    # Imported while the harness still plays ROCm: on a CUDA platform vLLM's import-time probes would ask
    # the compiled extension (absent here) about CUTLASS.
    import vllm.model_executor.layers.fused_moe.experts.triton_moe as triton_moe
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config

    kind, where = plat
    if kind == "cuda":
        rocm.set_cuda(where)
    else:
        rocm.set_rocm(where)
    rocm.prepare_cpu_run()
    fp8 = rocm.platform.fp8_dtype()
    hidden, inter, tokens = 64, 32, 1  # tokens * top_k * 4 <= E: naive block assignment
    g = torch.Generator().manual_seed(6)
    w1 = torch.randn(E, 2 * inter, hidden, generator=g).to(fp8)
    w2 = torch.randn(E, hidden, inter, generator=g).to(fp8)
    quant_config = fp8_w8a8_moe_quant_config(w1_scale=torch.ones(E), w2_scale=torch.ones(E))
    experts = triton_moe.TritonExperts(_moe_config("SILU"), quant_config)
    assert not experts.expects_unquantized_inputs  # no LoRA, no all2all: the prepare step quantized already
    a1q_scale = torch.tensor([0.0371])
    seen = []

    def spy(A, B, C, A_scale, *args, **kwargs):
        seen.append(A_scale)
        raise _StopAtFirstGemm

    rocm.mp.setattr(triton_moe, "invoke_fused_moe_triton_kernel", spy)
    x = (torch.randn(tokens, hidden, generator=g) / 0.0371).clamp(-200, 200).to(fp8)
    workspace = torch.empty(tokens * 2 * 4 * (2 * inter + hidden))
    with pytest.raises(_StopAtFirstGemm):
        experts.apply(
            output=torch.empty(tokens, hidden),
            hidden_states=x,
            w1=w1,
            w2=w2,
            topk_weights=torch.full((tokens, 2), 0.5),
            topk_ids=torch.tensor([[0, 3]], dtype=torch.int32),
            activation=MoEActivation.SILU,
            global_num_experts=E,
            expert_map=None,
            a1q_scale=a1q_scale,
            a2_scale=None,
            workspace13=workspace.clone(),
            workspace2=workspace.clone(),
            expert_tokens_meta=None,
            apply_router_weight_on_input=False,
        )
    assert seen and isinstance(seen[0], torch.Tensor) and torch.equal(seen[0].reshape(-1).float(), a1q_scale), (
        f"the first GEMM got A scale {seen[0] if seen else 'nothing'}, not the activations' scale {a1q_scale}"
    )


# The per-case tests of c5 give partial credit; this one asks that everything c5 protects is unchanged at once
# (gfx950 and CUDA selection, the non-emulation Triton path), so one broken case leaves c5 below met while a
# change that only keeps the CUDA choices stays unmet.
@pytest.mark.criterion("c5", weight=6)
def test_gfx950_cuda_and_triton_paths_all_unchanged(rocm):
    """Every gfx950 and CUDA selection case and the non-emulation Triton GEMM scale are as before, together."""
    cases = [(test_gfx950_keeps_native_selection, dict(zip(("aiter", "scheme", "activation", "moe_backend",
                                                            "expected"), c.values)), f"gfx950-{c.id}")
             for c in GFX950_CASES]
    cases.append((test_gfx950_explicit_emulation_backend, {}, "gfx950-explicit-emulation"))
    cases.append((test_gfx950_quark_w4a8_keeps_aiter, {}, "gfx950-quark-w4a8"))
    cases += [(test_cuda_selection_unchanged, dict(activation=c.values[0], expected=c.values[1]), f"cuda-{c.id}")
              for c in CUDA_CASES]
    cases += [(test_non_emulation_triton_moe_passes_activation_scale, dict(plat=c.values[0]), f"triton-{c.id}")
              for c in NON_EMULATION_PLATFORMS]
    wrong = []
    for check, kwargs, label in cases:
        try:
            check(rocm, **kwargs)
        except Exception as exc:  # noqa: BLE001 - every broken case is reported with the rest
            wrong.append(f"{label}: {type(exc).__name__}: {str(exc)[:200]}")
    assert not wrong, "; ".join(wrong)
