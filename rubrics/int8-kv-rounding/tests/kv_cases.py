"""Inputs and torch references for the int8-kv-rounding hidden tests, in the judge (no kernel code here).

Every input is chosen so the verdict does not depend on details the tests do not judge:
- INT8 inputs stay away from an exact .5 tie after scaling, so round-half-away and round-half-even agree and a
  1-2 ulp difference in the kernel's scale (GPU division) cannot flip a result: random data by 0.06, the fixed
  rows (exact scales 1 or 2) by 2**-10 at least (the near-tie row), every other fixed value by 0.05.
- Exactness cases fix the per-head scale at 1 (the head's absmax is 127) or 2 (absmax 254).
- FP8 inputs sit at 0, 15, 30, 70 or 85 percent of the way between neighbouring e4m3 values, never near the
  midpoint, so fp8 round-to-nearest is decided by a wide margin.
"""

from __future__ import annotations

import pytest
import torch

# The same test body on both devices: CPU through the corrected interpreter, CUDA natively (marked gpu).
DEVICES = [
    pytest.param("cpu", id="cpu", marks=pytest.mark.variant),
    pytest.param("cuda", id="cuda", marks=[pytest.mark.gpu, pytest.mark.variant]),
]

# Every key/value dtype the kernel takes (vLLM's activations are bf16 as often as fp16). bf16 keeps 8 significant
# bits: its rows are their own (``INT8_POSITIVE_ROWS_BF16``).
INPUT_DTYPE_LIST = (torch.float32, torch.float16, torch.bfloat16)
INPUT_DTYPE_NAMES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
INPUT_DTYPES = [pytest.param(d, id=INPUT_DTYPE_NAMES[d], marks=pytest.mark.cases(input_dtype=INPUT_DTYPE_NAMES[d]))
                for d in INPUT_DTYPE_LIST]

# The platforms a check names -> the subject's emulation of it (``int8_kv_probes``). "rocm" (an INT8 check: every
# ROCm GPU stores INT8 alike) runs as an MI300; FP8 checks name the two ROCm FP8 formats apart.
PLATFORMS = {"cuda": "cuda", "rocm": "rocm-gfx942", "rocm-gfx942": "rocm-gfx942", "rocm-gfx950": "rocm-gfx950"}
INT8_PLATFORMS = ["cuda", "rocm"]
# The FP8 format and range the base quantises to on each platform (vLLM's fp8_dtype() and get_fp8_min_max()).
FP8_FORMATS = {"cuda": ("float8_e4m3fn", 448.0), "rocm-gfx950": ("float8_e4m3fn", 448.0),
               "rocm-gfx942": ("float8_e4m3fnuz", 224.0)}

# Positive INT8 rows (8 values; the first fixes the scale). All exactly representable in fp32 and fp16.
INT8_POSITIVE_ROWS = {
    # scale 1: fractions below 4, where truncation and rounding differ by one step
    "scale1-small": [127.0, 0.3125, 0.6875, 1.1875, 1.8125, 2.375, 2.625, 3.5625],
    # scale 1: near the top of the int8 range
    "scale1-large": [127.0, 126.625, 125.375, 99.75, 64.4375, 10.875, 50.1875, 17.5625],
    # scale 2: the rounding must apply to the scaled value (5.5 / 2 = 2.75 -> 3)
    "scale2": [254.0, 5.5, 3.25, 100.75, 6.75, 1.25, 0.75, 203.5],
    # scale 1, values just off a .5 tie (2**-7 and 2**-10 from it, exact in fp32 and fp16): a rounding that is
    # right only a margin away from the tie (x + 0.499, floor(x + 0.5 - 1e-3)) shows here. The scale is exactly
    # 1, so the GPU's 1-2 ulp division error (about 1e-7 here) is far below the 2**-10 margin.
    "scale1-near-ties": [127.0, 0.5078125, 1.4990234375, 1.5009765625, 2.4921875, 2.5078125, 6.4921875, 9.5078125],
}
# How far each row's scaled values are from a .5 tie at least (the random data keeps 0.06; see random_positive_heads).
TIE_MARGIN = 2.0 ** -11
ROW_IDS = list(INT8_POSITIVE_ROWS)
# The same rows for bf16 inputs, whose 8 significant bits hold few of the values above: at scale 1 a value in
# [64, 128) is an integer or a tie, so the large row stays below 64; the scale-2 row stays below 128 for the same
# reason; the near ties are 2**-7 to 2**-4 from a tie (the closest bf16 allows there). Every value is exact in bf16.
INT8_POSITIVE_ROWS_BF16 = {
    "scale1-small": INT8_POSITIVE_ROWS["scale1-small"],
    "scale1-large": [127.0, 62.75, 61.25, 50.75, 40.25, 10.875, 33.75, 17.625],
    "scale2": [254.0, 5.5, 3.25, 100.5, 6.75, 1.25, 0.75, 125.5],
    "scale1-near-ties": [127.0, 0.5078125, 1.4921875, 1.5078125, 2.484375, 2.515625, 6.46875, 9.5625],
}


def int8_rows(dtype) -> dict[str, list[float]]:
    """The positive INT8 rows for inputs of ``dtype`` (every value exact in it)."""
    return INT8_POSITIVE_ROWS_BF16 if dtype == torch.bfloat16 else INT8_POSITIVE_ROWS


def int8_row(row_id: str, dtype, sign=1.0) -> torch.Tensor:
    """The positive INT8 row ``row_id`` for ``dtype`` inputs, as ``row`` makes it."""
    return row(int8_rows(dtype)[row_id], dtype, sign)

# Key and value head sizes that differ (the kernel pads to the larger one and masks each cache's lanes by its own
# size): (key dim, value dim). A kernel that rounds a cache's lanes under the other cache's mask leaves the lanes past
# the narrower head size truncated, which equal sizes never show. The 16-lane row holds two scale-1 rows (absmax 127),
# the 8-lane row the scale-2 one.
# "non-pow2" gives both caches 12 lanes (vLLM head sizes such as 80, 96 or 192 are no power of two): the kernel pads
# to 16, so a fix that rounds only when the head size equals its padded size leaves these heads truncated.
HEAD_LAYOUTS = {"key-wider": (16, 8), "value-wider": (8, 16), "non-pow2": (12, 12)}


def layout_rows(layout: str, dtype, sign=1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(key, value) of ``layout`` (``HEAD_LAYOUTS``), one token and one head each, times ``sign``: 16 lanes hold the
    small and the large scale-1 rows, 8 the scale-2 row, 12 the small row and four of the large one."""
    rows = int8_rows(dtype)
    pick = {16: rows["scale1-small"] + rows["scale1-large"], 8: rows["scale2"],
            12: rows["scale1-small"] + rows["scale1-large"][1:5]}
    dk, dv = HEAD_LAYOUTS[layout]
    return row(pick[dk], dtype, sign), row(pick[dv], dtype, sign)


# A row whose values are already integers after scaling: stored identically by any rounding mode.
BENIGN_ROW = [127.0, 1.0, 2.0, 3.0, -4.0, 0.0, 100.0, -127.0]


def row(values, dtype, sign=1.0) -> torch.Tensor:
    """[1 token, 1 head, dim] tensor of ``values`` (times ``sign``) in ``dtype``."""
    return (torch.tensor(values, dtype=torch.float32) * sign).to(dtype)[None, None, :]


def kernel_scale(x: torch.Tensor, qmax: float) -> torch.Tensor:
    """Per (token, head) scale as the kernel computes it in fp32: max(absmax / qmax, 1e-6)."""
    absmax = x.float().abs().amax(dim=-1)
    return torch.clamp(absmax / torch.tensor(qmax, dtype=torch.float32), min=1e-6)


def scaled(x: torch.Tensor, qmax: float) -> torch.Tensor:
    """x * (1 / scale) in fp32, the value the kernel quantises."""
    s = kernel_scale(x, qmax)
    return x.float() * (1.0 / s)[..., None]


def round_half_away(q: torch.Tensor) -> torch.Tensor:
    q = q.double()
    return torch.sign(q) * torch.floor(q.abs() + 0.5)


def int8_expected(x: torch.Tensor) -> torch.Tensor:
    """Round-to-nearest INT8 quantisation of ``x`` per (token, head), clamped to [-128, 127]."""
    q = scaled(x, 127.0)
    frac = (q.double().abs() - q.double().abs().floor() - 0.5).abs()
    assert bool((frac > TIE_MARGIN).all()), "test input too close to a .5 tie"
    return round_half_away(q).clamp(-128, 127).to(torch.int8)


def int8_truncated(x: torch.Tensor) -> torch.Tensor:
    """What a truncating store gives (for failure messages)."""
    return torch.trunc(scaled(x, 127.0).double()).clamp(-128, 127).to(torch.int8)


def random_positive_heads(tokens: int, heads: int, dim: int, gen: torch.Generator,
                          dtype=torch.float32) -> torch.Tensor:
    """Positive ``dtype`` data with a different, non-unit scale per head, kept away from .5 ties after scaling
    (the margin is checked on the values as ``dtype`` holds them).

    Drawn from ``gen`` (the judge's secret generator): the subject sees the values only as probe arguments."""
    x = (torch.rand(tokens, heads, dim, generator=gen) * 50.0 + 0.01).to(dtype)
    for _ in range(20):
        q = scaled(x, 127.0).double()
        frac = q - q.floor()
        bad = (frac - 0.5).abs() <= 0.06
        if not bool(bad.any()):
            return x
        s = kernel_scale(x, 127.0)[..., None].expand_as(x)
        # nudge the offending elements by a quarter step in the quantised domain (never the absmax element)
        # (bf16 may hold no value a quarter step away: then its next value up)
        nudged = (x.float() + 0.25 * s).to(dtype)
        nudged = torch.where(nudged == x, torch.nextafter(x, torch.full_like(x, float("inf"))), nudged)
        x = torch.where(bad & (x < x.amax(dim=-1, keepdim=True)), nudged, x)
    raise AssertionError("could not build tie-free random data")


# ---------------------------------------------------------------------------------------------------------
# FP8
# ---------------------------------------------------------------------------------------------------------
def fp8_positive_grid(fp8_dtype) -> torch.Tensor:
    """All positive finite values of ``fp8_dtype``, ascending, as float32."""
    vals = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fp8_dtype).float()
    vals = vals[torch.isfinite(vals) & (vals > 0)]
    return torch.unique(vals)


def fp8_offgrid_quantised(n: int, fp8_dtype, gen: torch.Generator, qmax: float | None = None) -> torch.Tensor:
    """``n`` signed values in the fp8 range up to ``qmax`` (the kernel's clamp; default the format's largest
    value) in the quantised domain, the first at +-qmax, never near a midpoint."""
    grid = fp8_positive_grid(fp8_dtype)
    if qmax is not None:
        grid = grid[grid <= qmax]
    fmax = float(grid[-1])
    fractions = torch.tensor([0.0, 0.15, 0.3, 0.7, 0.85])
    idx = torch.randint(0, len(grid) - 1, (n,), generator=gen)
    # make sure some values are small with a fractional part (between 1 and 8), where integer rounding shows
    small = torch.nonzero((grid >= 1.0) & (grid < 8.0)).flatten()
    idx[1:4] = small[torch.randint(0, len(small), (3,), generator=gen)]
    t = fractions[torch.randint(0, len(fractions), (n,), generator=gen)]
    t[1:4] = torch.tensor([0.3, 0.7, 0.15])
    q = grid[idx] + t * (grid[idx + 1] - grid[idx])
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)
    q = q * sign
    q[0] = fmax if bool(torch.rand(1, generator=gen) < 0.5) else -fmax
    return q


def fp8_expected_bytes(x: torch.Tensor, fp8_dtype, shim, qmax: float | None = None) -> tuple[torch.Tensor,
                                                                                               torch.Tensor]:
    """The base kernel's FP8 result: clamp(x / scale, -qmax, qmax) cast to fp8 (round to nearest even), qmax
    the platform's FP8 range (default the format's largest value).

    Returns (bytes as uint8, scales). The cast is torch's (with satfinite saturation, a no-op after the
    clamp), not the Triton interpreter's, whose own fp32 -> fp8 conversion rounds wrongly.
    """
    fmax = float(torch.finfo(fp8_dtype).max) if qmax is None else qmax
    q = scaled(x, fmax).clamp(-fmax, fmax)
    return shim.torch_fp8_cast(q, fp8_dtype).view(torch.uint8), kernel_scale(x, fmax)


def gather(cache: torch.Tensor, slots, block_size: int, dim: int | None = None) -> torch.Tensor:
    """Rows of a [blocks, block_size, heads, dim] cache for the given slots (padding slots give None)."""
    out = []
    for s in slots:
        if s < 0:
            continue
        out.append(cache[s // block_size, s % block_size])
    stacked = torch.stack(out)
    return stacked if dim is None else stacked[..., :dim]


def untouched_mask(shape_blocks: int, block_size: int, slots) -> torch.Tensor:
    """Boolean [blocks, block_size] mask of cache rows no valid slot writes."""
    m = torch.ones(shape_blocks, block_size, dtype=torch.bool)
    for s in slots:
        if s >= 0:
            m[s // block_size, s % block_size] = False
    return m
