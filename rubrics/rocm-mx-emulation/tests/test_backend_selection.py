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
