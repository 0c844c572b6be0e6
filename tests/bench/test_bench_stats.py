"""bench/stats.py on synthetic samples (CPU, no GPU or vLLM): medians, IQR, bootstrap intervals, the bimodal rule."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

STATS_PATH = Path(__file__).resolve().parents[2] / "bench" / "stats.py"


@pytest.fixture(scope="module")
def stats():
    spec = importlib.util.spec_from_file_location("bench_stats_under_test", STATS_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def normal_samples(mean: float, sd: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(mean, sd) for _ in range(n)]


def test_median_and_iqr_of_a_known_sample(stats):
    samples = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert stats.median(samples) == 3.0
    assert stats.quartiles(samples) == (2.0, 4.0)
    assert stats.iqr(samples) == 2.0
    assert stats.iqr([7.0]) == 0.0


def test_clear_2x_difference_gives_an_interval_excluding_one(stats):
    slow = normal_samples(100.0, 3.0, 25, seed=1)
    fast = normal_samples(50.0, 1.5, 25, seed=2)
    low, high = stats.bootstrap_ratio_ci(slow, fast, seed=7)
    assert 1.0 < low <= stats.ratio_of_medians(slow, fast) <= high
    assert 1.8 < low and high < 2.2
    result = stats.speedup(slow, fast, seed=7)
    assert result["claim"].startswith(f"{result['speedup']:.2f}x faster (95% CI ")


def test_identical_distributions_give_an_interval_including_one(stats):
    a = normal_samples(100.0, 3.0, 25, seed=3)
    b = normal_samples(100.0, 3.0, 25, seed=4)
    low, high = stats.bootstrap_ratio_ci(a, b, seed=7)
    assert low < 1.0 < high
    assert stats.speedup(a, b, seed=7)["claim"].startswith("no difference measured")


def test_slower_tree_is_claimed_slower_by_the_inverse_factor(stats):
    base = normal_samples(50.0, 1.0, 30, seed=5)
    tree = normal_samples(100.0, 2.0, 30, seed=6)
    result = stats.speedup(base, tree, seed=1)
    assert result["ci95"][1] < 1.0
    assert result["claim"].startswith(f"{1 / result['speedup']:.2f}x slower")


def test_bootstrap_is_deterministic_for_a_seed_and_depends_on_it(stats):
    a = normal_samples(100.0, 10.0, 25, seed=8)
    b = normal_samples(90.0, 10.0, 25, seed=9)
    assert stats.bootstrap_ratio_ci(a, b, seed=11) == stats.bootstrap_ratio_ci(a, b, seed=11)
    assert stats.bootstrap_ratio_ci(a, b, seed=11) != stats.bootstrap_ratio_ci(a, b, seed=12)
    assert stats.seed_of("point E=256 M=1") == stats.seed_of("point E=256 M=1")


def test_paired_resampling_keeps_rounds_together(stats):
    # Each round shares a load factor between both trees: paired, the ratio is exactly 0.5 in every resample.
    rng = random.Random(10)
    load = [rng.uniform(1.0, 3.0) for _ in range(40)]
    candidate = [25.0 * f for f in load]
    baseline = [50.0 * f for f in load]
    paired = stats.bootstrap_ratio_ci(candidate, baseline, paired=True, seed=3)
    unpaired = stats.bootstrap_ratio_ci(candidate, baseline, paired=False, seed=3)
    assert paired[1] - paired[0] < unpaired[1] - unpaired[0]
    assert paired[0] == pytest.approx(0.5, rel=0.05) and paired[1] == pytest.approx(0.5, rel=0.05)
    with pytest.raises(ValueError):
        stats.bootstrap_ratio_ci([1.0, 2.0], [1.0], paired=True)


def test_bimodal_sample_is_flagged_and_split(stats):
    low = normal_samples(29.0, 0.5, 12, seed=13)
    high = normal_samples(59.0, 1.0, 13, seed=14)
    mixed = low + high
    random.Random(0).shuffle(mixed)
    assert stats.is_bimodal(mixed)
    groups = stats.split_modes(mixed)
    assert sorted(groups[0]) == sorted(low) and sorted(groups[1]) == sorted(high)


def test_unimodal_samples_are_not_flagged(stats):
    assert not stats.is_bimodal(normal_samples(40.0, 2.0, 30, seed=15))
    rng = random.Random(16)
    long_tailed = [40.0 * rng.lognormvariate(0.0, 0.15) for _ in range(30)]
    assert not stats.is_bimodal(long_tailed)


def test_a_few_outliers_or_too_few_samples_are_not_called_bimodal(stats):
    # one slow sample in 25 is below the minimum group size (3 of 25)
    samples = normal_samples(30.0, 0.5, 24, seed=17) + [60.0]
    assert not stats.is_bimodal(samples)
    assert not stats.is_bimodal([29.2, 58.3, 61.1])  # the rerun's three passes: too few to tell


def test_a_small_but_clear_difference_is_printed_with_enough_decimals(stats):
    text = stats.claim(1.002, 1.0012, 1.0031)
    assert text == "1.002x faster (95% CI 1.001-1.003)"
    assert stats.claim(0.5, 0.45, 0.55).startswith("2.00x slower (95% CI 1.82-2.22)")
