"""c2, c4: the FP8 QDQ's scales at the edges of their case space, and its side effects, on CPU.

Corners the main numerics file (``test_emulation_numerics.py``, whose problem, torch reference and probe call
these checks reuse) leaves out:

* Static scales that saturate. A checkpoint's calibrated input scale is fixed while activations are not: values
  beyond ``scale * fp8 max`` must saturate at the FP8 range, as an FP8 quantization does, not overflow (a cast
  of an out-of-range value to float8_e4m3fnuz is NaN).
* Per-expert scales of any length. A checkpoint stores one input scale per local expert, so an expert-parallel
  rank holding two experts gets a two-element scale (and a layer of two local experts); it must be applied like
  any other per-expert scale. Unequal per-expert scales collapse to their largest.
* The layer's input left as it was given, and the activations' dtype kept by the round trip (bfloat16 and float16
  layers, their GEMMs recorded rather than run).
"""

from __future__ import annotations

import pytest
import torch

from rubric_support import load_beside

numerics = load_beside(__file__, "test_emulation_numerics")

# Scales this many times smaller than the activation's range make the values above a quarter of it saturate.
SATURATION = 4.0


def _saturating_scales(p, fp8_dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Static a1 and a2 scales under which a large share of both activations lies beyond the FP8 range."""
    _, inter = numerics._reference(p, None, None, fp8_dtype, "none")
    fmax = torch.finfo(fp8_dtype).max
    s1 = (p["x"].abs().max() / (fmax * SATURATION)).reshape(1).float()
    s2 = (inter.abs().max() / (fmax * SATURATION)).reshape(1).float()
    return s1, s2


STATIC_RANGES = {"in-range": numerics._scales, "saturating": _saturating_scales}


@pytest.mark.criterion("c2")
@pytest.mark.cases(scales="static", scheme="w_mxfp4_a_fp8", inputs="random")
@pytest.mark.parametrize("static_range", list(STATIC_RANGES))
@pytest.mark.parametrize("plat", numerics.PLATFORMS)
def test_static_fp8_qdq_saturates_at_fp8_range(subject, secret_generator, plat, static_range):
    """With static scales, in range or saturating, the output equals a QDQ reference that clamps to the FP8 range
    before the cast."""
    fp8 = numerics._fp8_of(plat)
    p = numerics._problem(secret_generator)
    s1, s2 = STATIC_RANGES[static_range](p, fp8)
    out = numerics._run(subject, plat, p, numerics._w4a8(p, s1, s2))["output"]
    bad = int((~torch.isfinite(out)).sum())
    assert bad == 0, f"{bad} of {out.numel()} outputs are not finite with {static_range} static scales"
    # As in the main c2 check, a2 may be QDQ'd statically or dynamically here: whether a2 uses its static scale is
    # c4's question. Both references clamp to the FP8 range before the cast.
    # In range, the two e4m3 formats differ only by the draw's subnormals (numerics.E4M3_FORMATS): the format is
    # asked where it shows, here by the saturating scales.
    formats = numerics.E4M3_FORMATS if static_range == "in-range" else (fp8,)
    errs = {mode: min(numerics._rel_err(out, numerics._reference(p, s1, s2, f, mode, fmax=m)[0])
                      for f in formats for m in numerics._fp8_maxes(f))
            for mode in ("static", "dynamic")}
    assert min(errs.values()) < numerics.TOL, (
        f"with {static_range} static scales no saturating FP8 QDQ reference matches the output: {errs}"
    )


# Per-expert scales as many as the experts a rank holds: two (an expert-parallel rank holding experts 0 and 1 of
# the model's E) and all E. A checkpoint's per-expert input scale has one entry per local expert, so the layer the
# experts are built for says that many local experts, and holds that many experts' weights; the tokens are routed to
# the local experts only (on the first rank the global ids 0 and 1 are the local ones, so no expert map is needed).
# Every expert's scale is equal, so the one sensible per-tensor scale is that value.
LOCAL_EXPERTS = {"two": 2, "all": numerics.E}
TWO_EXPERT_ROUTING = torch.tensor([[0, 1], [1, 0]], dtype=torch.int32)


def _on_rank_holding(p: dict, n: int) -> tuple[dict, dict]:
    """The problem as a rank holding experts 0..n-1 sees it, and the layer's dimensions there."""
    if n == numerics.E:
        return p, numerics.DIMS
    local = {k: p[k][:n].contiguous() for k in ("w1", "w2", "w1s", "w2s")}
    return {**p, **local, "ids": TWO_EXPERT_ROUTING.clone()}, {**numerics.DIMS, "local_E": n}


@pytest.mark.criterion("c4")
@pytest.mark.cases(activation_scale=["a1", "a2"], scale_shape="per-expert", evidence="output", scale_values="equal")
@pytest.mark.parametrize("local_experts", list(LOCAL_EXPERTS))
@pytest.mark.parametrize("plat", [numerics.PLATFORMS[0], numerics.PLATFORMS[2]])
def test_per_expert_scales_of_every_length_applied(subject, secret_generator, plat, local_experts):
    """Equal per-expert static a1/a2 scales, one per local expert (two of them or all E), are applied like the
    single scale."""
    fp8 = numerics._fp8_of(plat)
    n = LOCAL_EXPERTS[local_experts]
    p, dims = _on_rank_holding(numerics._problem(secret_generator), n)
    s1, s2 = numerics._scales(p, fp8)
    quant = numerics._w4a8(p, s1.expand(n).contiguous(), s2.expand(n).contiguous())
    out = numerics._run(subject, plat, p, quant, dims=dims)["output"]
    err = numerics._err_in_either_format(out, lambda f: numerics._reference(p, s1, s2, f, "static")[0])
    assert err < numerics.TOL, (
        f"with {n} per-expert scales the output differs from the static-a1/static-a2 reference by {err:.3g}"
    )


# The QDQ is the emulation's own round trip: it must work on a copy. The layer's input tensor is still read after
# the experts (shared experts, the residual, the LoRA input kept unquantized), so an in-place QDQ corrupts it while
# the MoE output stays right. Static and dynamic scales, on every platform.
@pytest.mark.criterion("c2")
@pytest.mark.cases(scheme="w_mxfp4_a_fp8", inputs="random", layer_input="unchanged")
@pytest.mark.parametrize("scales", ["static", "dynamic"])
@pytest.mark.parametrize("plat", numerics.PLATFORMS)
def test_fp8_qdq_leaves_the_layer_input_unchanged(subject, secret_generator, plat, scales):
    """After the emulated MoE, the layer's input activations hold the values they were given."""
    fp8 = numerics._fp8_of(plat)
    p = numerics._problem(secret_generator)
    quant = numerics._w4a8(p, *numerics._scales(p, fp8)) if scales == "static" else numerics._w4a8(p)
    after = numerics._run(subject, plat, p, quant)["input_after"]
    assert isinstance(after, torch.Tensor) and after.shape == p["x"].shape
    changed = int((after != p["x"]).sum())
    assert changed == 0, (
        f"with {scales} scales the MoE changed {changed} of {after.numel()} values of its input activations "
        f"(largest change {float((after - p['x']).abs().max()):.3g})"
    )


# Per-expert scales need not be equal: calibration gives each expert its own. The emulation's QDQ is per tensor, so
# they collapse to one, and the one vLLM's MoE weight loading keeps when it collapses per-expert input scales (quark's
# MoE methods: the max of a1's and of a2's) is the one that clips no expert's calibrated range. For a1, quantized once
# before the tokens reach their experts, that is the only choice; a2 (one row per token and expert) may instead take
# each row's own expert's scale. Expert 0 gets 0.3 of the largest scale and the largest belongs to an expert no token
# is routed to, so the first scale, the mean or the routed experts' largest all differ from it. No factor between two
# of them is a power of two: an FP8 QDQ with a scale twice another rounds every (normal) value alike.
UNEQUAL_FACTORS = torch.linspace(0.3, 1.0, numerics.E)


def _reference_a2_per_expert(p, s1, s2_experts, fp8):
    """The reference MoE with a1 QDQ'd with ``s1`` and each a2 row with its own expert's scale."""
    _, inter = numerics._reference(p, s1, None, fp8, "none")
    w2 = numerics._dequant(p["w2"], p["w2s"])
    out = torch.zeros(numerics.T, numerics.H)
    for t in range(numerics.T):
        for k in range(numerics.K):
            e = int(p["ids"][t, k])
            row = numerics._qdq(inter[t * numerics.K + k], s2_experts[e].reshape(1), fp8)
            out[t] += p["tw"][t, k] * (row @ w2[e].T)
    return out


@pytest.mark.criterion("c4")
@pytest.mark.cases(activation_scale=["a1", "a2"], scale_shape="per-expert", evidence="output",
                   scale_values="unequal", local_experts="all")
@pytest.mark.parametrize("plat", [numerics.PLATFORMS[0], numerics.PLATFORMS[2]])
def test_unequal_per_expert_scales_collapse_to_the_largest(subject, secret_generator, plat):
    """Per-expert static a1/a2 scales that differ are applied as their largest (a2: or each row's expert's own)."""
    fp8 = numerics._fp8_of(plat)
    p = numerics._problem(secret_generator)
    s1, s2 = numerics._scales(p, fp8)
    s1_experts, s2_experts = s1 * UNEQUAL_FACTORS, s2 * UNEQUAL_FACTORS
    out = numerics._run(subject, plat, p, numerics._w4a8(p, s1_experts, s2_experts))["output"]
    refs = {"a2 largest": lambda f: numerics._reference(p, s1, s2, f, "static")[0],
            "a2 per expert": lambda f: _reference_a2_per_expert(p, s1, s2_experts, f)}
    errs = {name: numerics._err_in_either_format(out, ref) for name, ref in refs.items()}
    first = numerics._reference(p, s1_experts[:1], s2_experts[:1], fp8, "static")[0]
    assert min(errs.values()) < numerics.TOL, (
        f"with unequal per-expert scales the output matches no reference that applies a1's largest scale: {errs} "
        f"(from the reference of expert 0's scales: {numerics._rel_err(out, first):.3g})"
    )


# The QDQ is a round trip: its result is in the activations' dtype, so the GEMM that follows runs as the layer does.
# A QDQ that hands back its float32 working copy gives a bfloat16 or float16 layer's GEMMs float32 activations beside
# weights of the layer's dtype (on the GPU, a Triton dot of mismatched operands). The layer runs in bfloat16 and
# float16 with its GEMMs recorded rather than run (the interpreter's half precision is unreliable).
@pytest.mark.criterion("c2")
@pytest.mark.cases(scheme="w_mxfp4_a_fp8", inputs="random")
@pytest.mark.parametrize("scales", ["static", "dynamic"])
@pytest.mark.parametrize("layer_dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("plat", [numerics.PLATFORMS[0], numerics.PLATFORMS[2]])
def test_fp8_qdq_keeps_the_activation_dtype(subject, secret_generator, plat, layer_dtype, scales):
    """In a bfloat16 or float16 layer both GEMMs of the emulated MoE get activations of the layer's dtype."""
    fp8 = numerics._fp8_of(plat)
    p = numerics._problem(secret_generator)
    quant = numerics._w4a8(p, *numerics._scales(p, fp8)) if scales == "static" else numerics._w4a8(p)
    got = subject.call("rocm_mx_numerics.run_emulation", device=numerics.devices.of(plat), dims=numerics.DIMS,
                       problem={k: p[k] for k in ("x", "w1", "w2", "ids", "tw")}, quant=quant,
                       layer_dtype=layer_dtype)
    gemms = got["gemm_inputs"]
    assert len(gemms) == 2, f"the emulated MoE ran {len(gemms)} GEMMs, not 2: {gemms}"
    wrong = [g for g in gemms if g["a"] != layer_dtype]
    assert not wrong, f"a {layer_dtype} layer's GEMMs got activations of another dtype: {gemms}"
