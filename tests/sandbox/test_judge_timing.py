"""Speed measured outside the candidate (``grader.sandbox.timing``): the judge times whole probe calls from its side
of the channel, the candidate and the base each in a subject of its own, interleaved, and checks what the timed
calls returned against the inputs it drew from the secret. A candidate that is really slower and forges every
clock and report it can reach in its own process still measures slower; one that skips its work fails the output
check. Toy trees stand in for a GPU kernel: ``toylib.work(c)`` is ``c * S`` computed by a loop whose length is the
implementation's cost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from judge_harness import run_judge, tree_with

STEPS = 20000
PROBE = """
import time
import toylib


def run(coeffs):
    started = time.perf_counter()
    outputs = [toylib.work(c) for c in coeffs]
    return {"outputs": outputs, "reported_s": time.perf_counter() - started}
"""
HIDDEN_TESTS = f"""
import hashlib, os, random, statistics
import pytest
from grader.sandbox import timing
from grader.sandbox.client import subject

S = sum(i % 7 for i in range({STEPS}))
ROUNDS, BATCH = 12, 20


@pytest.mark.criterion("c1")
def test_faster_than_the_base():
    secret = os.environ["GRADER_SECRET"]
    rng = random.Random(int.from_bytes(hashlib.sha256(secret.encode()).digest()[:8], "big"))
    inputs = [[rng.uniform(1, 2) for _ in range(BATCH)] for _ in range(ROUNDS)]
    candidate, base = subject("candidate", "speed"), subject("base", "speed")
    for side in (candidate, base):  # warm: imports, first calls
        side.call("toy_speed.run", coeffs=inputs[0])
    samples = timing.interleaved({{"candidate": lambda r: candidate.call("toy_speed.run", coeffs=inputs[r]),
                                  "baseline": lambda r: base.call("toy_speed.run", coeffs=inputs[r])}}, ROUNDS)
    for name, seen in samples.items():
        for r, answer in enumerate(seen.answers):
            assert answer["outputs"] == pytest.approx([c * S for c in inputs[r]], rel=1e-9), \\
                f"{{name}}, round {{r}}: the timed calls did not compute what was asked"
    ratio = statistics.median(samples["candidate"].seconds) / statistics.median(samples["baseline"].seconds)
    assert ratio <= 0.9, f"the candidate takes {{ratio:.2f}}x the base's time, as the judge measured it"
"""
BASE = f"""
def work(c):
    total = 0
    for i in range({STEPS}):
        total += i % 7
    return c * total
"""
FAST = f"""
def work(c):
    full, rest = divmod({STEPS}, 7)
    return c * (full * 21 + sum(range(rest)))
"""
# Four times the base's work for real, and every clock and report in its own process forged to say a tenth.
FORGED_SLOW = f"""
import sys, time

_real = time.perf_counter
_start = _real()
time.perf_counter = lambda: _start + (_real() - _start) / 40
time.monotonic = time.perf_counter


def _forge_the_report():
    probe = sys.modules.get("toy_speed")
    if probe is not None and not getattr(probe.run, "forged", False):
        honest = probe.run
        def forged(coeffs):
            answer = honest(coeffs)
            return dict(answer, reported_s=answer["reported_s"] / 10)
        forged.forged = True
        probe.run = forged


def work(c):
    _forge_the_report()
    total = 0
    for _ in range(4):
        for i in range({STEPS}):
            total += i % 7
    return c * total / 4
"""
# Fast because it does nothing: an answer of the right shape, not of the inputs.
SKIPS_ITS_WORK = """
def work(c):
    return 1.0
"""


def graded(tmp_path: Path, candidate_source: str):
    base = tree_with(tmp_path / "base", toylib=BASE)
    candidate = tree_with(tmp_path / "candidate", toylib=candidate_source)
    return run_judge(tmp_path / "judge-run", candidate, base, HIDDEN_TESTS, {"toy_speed": PROBE})[
        "test_faster_than_the_base"]


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADER_CACHE", str(tmp_path / "cache"))


def test_a_faster_candidate_measures_faster(tmp_path, own_cache):
    outcome = graded(tmp_path, FAST)
    assert outcome.status == "passed", outcome.message[-2000:]


def test_a_slower_candidate_that_forges_its_clocks_and_reports_measures_slower(tmp_path, own_cache):
    outcome = graded(tmp_path, FORGED_SLOW)
    assert outcome.status == "failed", outcome
    assert "as the judge measured it" in outcome.message, outcome.message[-2000:]


def test_a_candidate_that_skips_the_timed_work_fails_the_output_check(tmp_path, own_cache):
    outcome = graded(tmp_path, SKIPS_ITS_WORK)
    assert outcome.status == "failed", outcome
    assert "did not compute what was asked" in outcome.message, outcome.message[-2000:]
