"""The FP8 per-token-head path is unchanged: same bytes and scales as the base kernel (c4).

The expected bytes are the base kernel's formula computed here (``kv_cases.fp8_expected_bytes``, cast by torch);
the subject only runs the candidate's kernel on the inputs drawn here.
"""

from __future__ import annotations


import pytest
import torch

from rubric_support import load_beside


cases = load_beside(__file__, "kv_cases")
shim = load_beside(__file__, "kv_interp_shim")
DEVICES, INPUT_DTYPES = cases.DEVICES, cases.INPUT_DTYPES

# (tokens, heads, key dim, value dim, slots, per-head scale or None for random scales)
LAYOUTS = {
    "scale1": (1, 1, 16, 16, [1], 1.0),
    "scale0.25-2heads": (1, 2, 16, 16, [3], 0.25),
    "random-scales": (3, 2, 16, 8, [6, -1, 1], None),
}


def _inputs(layout: str, fp8_dtype, in_dtype, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, heads, dk, dv, _, scale = LAYOUTS[layout]

    def one(dim: int) -> torch.Tensor:
        q = torch.stack([
            torch.stack([cases.fp8_offgrid_quantised(dim, fp8_dtype, gen) for h in range(heads)])
            for t in range(tokens)
        ])
        if scale is None:
            per_head = torch.exp(torch.empty(tokens, heads, 1).uniform_(-3.0, 2.0, generator=gen))
        else:
            per_head = torch.full((tokens, heads, 1), scale)
        return (q * per_head).to(in_dtype)

    return one(dk), one(dv)


@pytest.mark.criterion("c4")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_dtype", INPUT_DTYPES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_fp8_bytes_and_scales_unchanged(kv_store, fp8_dtype, device, in_dtype, layout, secret_generator):
    """FP8 key and value caches hold the base's bytes (clamp then fp8 cast, no integer rounding) and scales."""
    block_size = 4
    key, value = _inputs(layout, fp8_dtype, in_dtype, secret_generator)
    slots = LAYOUTS[layout][4]
    kc, vc, ks, vs, _ = kv_store.run(key, value, fp8_dtype, device, slots=slots, block_size=block_size)
    valid = [i for i, s in enumerate(slots) if s >= 0]
    for name, cache, scales, x in (("key", kc, ks, key), ("value", vc, vs, value)):
        want_bytes, want_scale = cases.fp8_expected_bytes(x[valid], fp8_dtype, shim)
        got = cases.gather(cache, slots, block_size).view(torch.uint8)
        if not torch.equal(got, want_bytes):
            bad = (got != want_bytes).nonzero()[:6].tolist()
            raise AssertionError(
                f"{name} FP8 cache differs from the base at {bad}: stored "
                f"{[float(got[tuple(i)].view(fp8_dtype).float()) for i in bad]} want "
                f"{[float(want_bytes[tuple(i)].view(fp8_dtype).float()) for i in bad]} "
                f"(pre-cast {[float(cases.scaled(x[valid], float(torch.finfo(fp8_dtype).max))[tuple(i)]) for i in bad]})"
            )
        torch.testing.assert_close(cases.gather(scales, slots, block_size), want_scale, rtol=1e-6, atol=0)
    untouched = cases.untouched_mask(kc.shape[0], block_size, slots)
    assert bool((kc.view(torch.uint8)[untouched] == kv_store.FP8_SENTINEL_BYTE).all()), "unused FP8 rows written"
    assert bool((vc.view(torch.uint8)[untouched] == kv_store.FP8_SENTINEL_BYTE).all()), "unused FP8 rows written"
