"""Probes for rocm-mx-emulation, run in the subject: the OCP MX emulation experts on a faked GPU.

``run_emulation`` builds the experts through ``make_mxfp4_moe_kernel`` (MXFP4 weights dequantized by the amd-quark
stand-in, the Triton GEMMs under the interpreter in float32) on the judge's problem and returns the MoE output;
``emulation_quant_dtype`` reports the experts' ``quant_dtype``. The judge compares them with its own reference.
"""

from __future__ import annotations

import sys

import torch

import rocm_mx_harness

ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp4"
SPIED_MODULES = (
    "vllm.model_executor.layers.fused_moe.utils",
    "vllm.model_executor.layers.fused_moe.experts.triton_moe",
    "vllm.model_executor.layers.fused_moe.experts.ocp_mx_emulation_moe",
)


def _moe_config(dims: dict, in_dtype: torch.dtype = torch.float32):
    """The layer's config: ``E`` experts in the model, of which this rank holds ``local_E`` (default: all)."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )

    return FusedMoEConfig(
        num_experts=dims["E"],
        experts_per_token=dims["K"],
        hidden_dim=dims["H"],
        intermediate_size=dims["I"],
        num_local_experts=dims.get("local_E", dims["E"]),
        num_logical_experts=dims["E"],
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(),
        activation=MoEActivation.SILU,
        in_dtype=in_dtype,
        device="cpu",
        routing_method=RoutingMethodType.Renormalize,
        moe_backend="emulation",
    )


# MXFP6 schemes built from their descriptors: the weight dtype, and whether the activations are FP8 (with static
# a1/a2 scales) or left unquantized (weight-only).
MXFP6_SCHEMES = {"w6a8": ("mxfp6_e3m2", True), "w6e2m3a8": ("mxfp6_e2m3", True),
                 "w6a16": ("mxfp6_e3m2", False), "w6e2m3a16": ("mxfp6_e2m3", False)}


def _quant_config(quant: dict):
    """``{"scheme": "w4a8", "w1_scale", "w2_scale", "a1_scale"?, "a2_scale"?}`` (no activation scales: the
    config without them), ``{"scheme": "w4a16", "w1_scale", "w2_scale"}`` or an MXFP6 scheme of ``MXFP6_SCHEMES``
    (``a1_scale`` and ``a2_scale`` too where its activations are FP8)."""
    from vllm.model_executor.layers.fused_moe import config as c

    scheme = quant["scheme"]
    if scheme == "w4a8":
        scales = {k: quant[k].clone() for k in ("a1_scale", "a2_scale") if quant.get(k) is not None}
        return c.mxfp4_w4a8_moe_quant_config(w1_scale=quant["w1_scale"].clone(), w2_scale=quant["w2_scale"].clone(),
                                             **scales)
    if scheme == "w4a16":
        return c.mxfp4_w4a16_moe_quant_config(quant["w1_scale"].clone(), quant["w2_scale"].clone())
    if scheme in MXFP6_SCHEMES:
        weight, fp8_activations = MXFP6_SCHEMES[scheme]
        def activation(key: str):
            if not fp8_activations:
                return c.FusedMoEQuantDesc()
            return c.FusedMoEQuantDesc("fp8", None, quant[key].clone(), None, None, None)

        a1, a2 = activation("a1_scale"), activation("a2_scale")
        return c.FusedMoEQuantConfig(
            _a1=a1, _a2=a2,
            _w1=c.FusedMoEQuantDesc(weight, None, quant["w1_scale"].clone(), None, None, None),
            _w2=c.FusedMoEQuantDesc(weight, None, quant["w2_scale"].clone(), None, None, None),
        )
    raise ValueError(f"unknown scheme {scheme!r}")


def _emulation_cls():
    oracle = sys.modules[ORACLE]
    return oracle.backend_to_kernel_cls(oracle.Mxfp4MoeBackend.EMULATION)[0]


def _setup(h, device: dict) -> None:
    h.apply(device)
    h.fake_vllm_config()


def emulation_quant_dtype(device: dict, dims: dict, quant: dict) -> dict:
    """The emulation experts' ``quant_dtype`` on ``device`` for ``quant``, as ``{"type", "value"}``."""
    with rocm_mx_harness.device(ORACLE) as h:
        _setup(h, device)
        experts = _emulation_cls()(_moe_config(dims), _quant_config(quant))
        return rocm_mx_harness.describe_type(experts.quant_dtype)


def _install_spies(h, seen: list) -> None:
    """Record every scale given to ``moe_kernel_quantize_input`` (each module binding) and ``scaled_fp8_quant``."""
    import vllm._custom_ops as ops
    import vllm.model_executor.layers.fused_moe.utils as fm_utils

    def record(scale):
        if isinstance(scale, torch.Tensor) and scale.numel() >= 1:
            seen.append(scale.detach().float().reshape(-1).clone())

    orig_mkqi = fm_utils.moe_kernel_quantize_input

    def spy_mkqi(A, A_scale, *args, **kwargs):
        record(A_scale)
        return orig_mkqi(A, A_scale, *args, **kwargs)

    orig_fp8 = ops.scaled_fp8_quant

    def spy_fp8(input, scale=None, *args, **kwargs):
        record(scale)
        return orig_fp8(input, scale, *args, **kwargs)

    h.patches.set(ops, "scaled_fp8_quant", spy_fp8)
    for name in SPIED_MODULES:
        __import__(name)
        mod = sys.modules[name]
        if getattr(mod, "moe_kernel_quantize_input", None) is orig_mkqi:
            h.patches.set(mod, "moe_kernel_quantize_input", spy_mkqi)
        if getattr(mod, "scaled_fp8_quant", None) is orig_fp8:
            h.patches.set(mod, "scaled_fp8_quant", spy_fp8)


def _record_gemm_inputs(h, gemms: list) -> None:
    """Replace the Triton MoE GEMM by a recorder of the dtypes of its activations (A) and weights (B); it writes
    zeros. The interpreter's bfloat16 and float16 are unreliable, so a layer of those dtypes is observed this way."""
    import vllm.model_executor.layers.fused_moe.experts.triton_moe as triton_moe

    def record(A, B, C, *args, **kwargs):
        gemms.append({"a": str(A.dtype).removeprefix("torch."), "b": str(B.dtype).removeprefix("torch.")})
        C.zero_()

    h.patches.set(triton_moe, "invoke_fused_moe_triton_kernel", record)


def run_emulation(device: dict, dims: dict, problem: dict, quant: dict, spy: bool = False,
                  layer_dtype: str | None = None) -> dict:
    """The emulation experts' MoE output for ``problem`` (``x``, ``w1``, ``w2``, ``ids``, ``tw``) on ``device``,
    and the layer input as the call left it (``input_after``); with ``spy``, also every scale the
    activation-quantize entry points were given (``seen_scales``). With ``layer_dtype`` (``"bfloat16"``,
    ``"float16"``) the layer runs in that dtype and its GEMMs are not run but recorded (``gemm_inputs``)."""
    with rocm_mx_harness.device(ORACLE) as h:
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation

        _setup(h, device)
        oracle = sys.modules[ORACLE]
        quant_config = _quant_config(quant)
        seen: list = []
        if spy:
            _install_spies(h, seen)
        gemms: list = []
        in_dtype = torch.float32
        if layer_dtype is not None:
            in_dtype = getattr(torch, layer_dtype)
            _record_gemm_inputs(h, gemms)
        h.prepare_cpu_run()
        kernel = oracle.make_mxfp4_moe_kernel(
            moe_quant_config=quant_config,
            moe_config=_moe_config(dims, in_dtype),
            experts_cls=_emulation_cls(),
            mxfp4_backend=oracle.Mxfp4MoeBackend.EMULATION,
        )
        x = problem["x"].to(in_dtype)
        out = kernel.apply(
            hidden_states=x,
            w1=problem["w1"],
            w2=problem["w2"],
            topk_ids=problem["ids"],
            topk_weights=problem["tw"],
            activation=MoEActivation.SILU,
            global_num_experts=dims["E"],
            expert_map=None,
            apply_router_weight_on_input=False,
        )
        return {"output": out.detach().clone() if isinstance(out, torch.Tensor) else None,
                "output_repr": None if isinstance(out, torch.Tensor) else repr(out)[:300],
                "seen_scales": seen, "input_after": x.detach().clone(), "gemm_inputs": gemms}
