"""c2, c4: static FP8 activation scales at the edges of their case space, on CPU.

Two corners the main numerics file (``test_emulation_numerics.py``, whose problem, torch reference and probe call
these checks reuse) leaves out:

* Static scales that saturate. A checkpoint's calibrated input scale is fixed while activations are not: values
  beyond ``scale * fp8 max`` must saturate at the FP8 range, as an FP8 quantization does, not overflow (a cast
  of an out-of-range value to float8_e4m3fnuz is NaN).
* Per-expert scales of any length. A checkpoint stores one input scale per local expert, so an expert-parallel
  rank holding two experts gets a two-element scale (and a layer of two local experts); it must be applied like
  any other per-expert scale.
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
    errs = {mode: numerics._rel_err(out, numerics._reference(p, s1, s2, fp8, mode)[0])
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
@pytest.mark.cases(activation_scale=["a1", "a2"], scale_shape="per-expert", evidence="output")
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
    ref = numerics._reference(p, s1, s2, fp8, "static")[0]
    err = numerics._rel_err(out, ref)
    assert err < numerics.TOL, (
        f"with {n} per-expert scales the output differs from the static-a1/static-a2 reference by {err:.3g}"
    )
