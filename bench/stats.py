"""Statistics shared by the kernel benchmarks and the minimax-qk-norm speed test: pure functions of sample lists.

A speed claim here is a ratio of medians with a seeded percentile-bootstrap confidence interval: two trees
differ only where that interval excludes 1.0. Everything is deterministic for a given seed, so a rerun on the
same samples prints the same intervals.

Bimodality rule (``split_modes``): sort the samples and look for the widest gap between neighbours that leaves
at least ``max(2, ceil(min_share * n))`` samples on each side. The samples are bimodal when that gap is at least
``min_rel_gap`` of the lower group's median AND at least ``min_spread_ratio`` times the larger IQR of the two
groups: two tight clusters far apart, not one wide or long-tailed distribution. Fewer than twice the minimum
group size is too few samples to tell, and is never flagged.
"""

from __future__ import annotations

import math
import random
import statistics
import zlib
from typing import Sequence

RESAMPLES = 2000
CONFIDENCE = 0.95
MIN_SHARE = 0.1
MIN_REL_GAP = 0.2
MIN_SPREAD_RATIO = 2.0


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def quartiles(samples: Sequence[float]) -> tuple[float, float]:
    """First and third quartile (inclusive method: the sample's own range, defined for two or more samples)."""
    if len(samples) < 2:
        only = samples[0]
        return only, only
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, q3


def iqr(samples: Sequence[float]) -> float:
    q1, q3 = quartiles(samples)
    return q3 - q1


def seed_of(key: str) -> int:
    """A stable seed from a text key (``hash()`` of a string changes between processes)."""
    return zlib.crc32(key.encode())


def ratio_of_medians(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    return median(numerator) / median(denominator)


def bootstrap_ratio_ci(numerator: Sequence[float], denominator: Sequence[float], *, paired: bool = False,
                       resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of median(numerator) / median(denominator).

    Unpaired: each list is resampled on its own (independent measurements of two trees). Paired: both lists
    have one sample per round and rounds are resampled together, keeping what a round shares (machine load
    at that moment) in both."""
    if not numerator or not denominator:
        raise ValueError("a ratio needs samples on both sides")
    if paired and len(numerator) != len(denominator):
        raise ValueError(f"paired samples of different lengths: {len(numerator)} and {len(denominator)}")
    rng = random.Random(seed)
    ratios = []
    if paired:
        rounds = range(len(numerator))
        for _ in range(resamples):
            picked = rng.choices(rounds, k=len(numerator))
            ratios.append(ratio_of_medians([numerator[i] for i in picked], [denominator[i] for i in picked]))
    else:
        for _ in range(resamples):
            ratios.append(ratio_of_medians(rng.choices(numerator, k=len(numerator)),
                                           rng.choices(denominator, k=len(denominator))))
    ratios.sort()
    tail = (1.0 - confidence) / 2
    low = ratios[min(resamples - 1, math.floor(tail * resamples))]
    high = ratios[max(0, math.ceil((1.0 - tail) * resamples) - 1)]
    return low, high


def split_modes(samples: Sequence[float], *, min_share: float = MIN_SHARE, min_rel_gap: float = MIN_REL_GAP,
                min_spread_ratio: float = MIN_SPREAD_RATIO) -> tuple[list[float], list[float]] | None:
    """The (low, high) groups of a bimodal sample by the rule in the module docstring, or None if unimodal."""
    ordered = sorted(samples)
    n = len(ordered)
    min_group = max(2, math.ceil(min_share * n))
    if n < 2 * min_group:
        return None
    split = max(range(min_group, n - min_group + 1), key=lambda i: ordered[i] - ordered[i - 1])
    low, high = ordered[:split], ordered[split:]
    gap = high[0] - low[-1]
    if gap < min_rel_gap * median(low) or gap < min_spread_ratio * max(iqr(low), iqr(high)):
        return None
    return low, high


def is_bimodal(samples: Sequence[float], **rule) -> bool:
    return split_modes(samples, **rule) is not None


def speedup(base: Sequence[float], tree: Sequence[float], *, seed: int, paired: bool = False) -> dict:
    """How much faster ``tree`` is than ``base`` (times, lower is faster): median(base) / median(tree), its
    interval, and the claim the interval supports."""
    point = ratio_of_medians(base, tree)
    low, high = bootstrap_ratio_ci(base, tree, paired=paired, seed=seed)
    return {"speedup": point, "ci95": [low, high], "claim": claim(point, low, high)}


def claim(point: float, low: float, high: float) -> str:
    """'X.XXx faster (95% CI a-b)' or 'X.XXx slower (...)' where the speedup interval excludes 1.0, else
    'no difference measured'. Slower is stated as the factor of extra time (1 / speedup). Two decimals, more
    (up to four) where two would print the interval's near end as 1.00."""
    if low > 1.0:
        d = decimals_showing(low)
        return f"{point:.{d}f}x faster (95% CI {low:.{d}f}-{high:.{d}f})"
    if high < 1.0:
        d = decimals_showing(1 / high)
        return f"{1 / point:.{d}f}x slower (95% CI {1 / high:.{d}f}-{1 / low:.{d}f})"
    return f"no difference measured ({point:.2f}x, 95% CI {low:.2f}-{high:.2f})"


def decimals_showing(factor: float) -> int:
    """Decimals (2 to 4) at which a factor above 1.0 no longer prints as 1.00."""
    digits = 2
    while digits < 4 and round(factor, digits) <= 1.0:
        digits += 1
    return digits
