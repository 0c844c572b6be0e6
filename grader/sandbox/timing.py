"""Speed measured outside the candidate: the judge's own wall clock around whole probe calls, interleaved.

A subject's report of its own timings is the candidate's to forge (its process can patch any clock or rewrite any
comparison). Here the judge times each call from its side of the channel: send, the subject's batch of calls
ending in a device synchronize, the answer. A batch long enough that the channel's round trip is noise makes the
wall time the batch's. The candidate and the baseline (the base tree, in a subject of its own) are called in
alternating rounds (forward on even rounds, backward on odd), so load on the machine hits both alike. What each
call returns is kept for the judge to check against the inputs it drew: a batch that skipped its work fails there.
Nothing the subject reports about time enters the samples.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Samples:
    """Per side: the judge-measured seconds of each round's call, and what each call returned."""

    seconds: list[float] = field(default_factory=list)
    answers: list = field(default_factory=list)


def interleaved(sides: dict[str, Callable[[int], object]], rounds: int) -> dict[str, Samples]:
    """Call ``sides[name](round)`` once per round for every side, alternating the order; time each call here."""
    names = list(sides)
    samples = {name: Samples() for name in names}
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else reversed(names):
            started = time.perf_counter()
            answer = sides[name](round_)
            samples[name].seconds.append(time.perf_counter() - started)
            samples[name].answers.append(answer)
    return samples
