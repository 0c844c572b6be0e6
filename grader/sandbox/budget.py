"""Time budgets of probe calls, judged against the controls: how long the base and the reference fix took on the
same call, on this machine.

A candidate's probe call that does not answer decides nothing by itself: the subject would then choose when a
check "did not run". Each call of a hidden test is known by its place (the test, the probe, how many times that test
called it before: ``CallCounter``); a calibration run of the judge over the reference fix records, for each call,
the reference's seconds and the base's seconds on the same arguments (``CallTimes``, written under the cache). When
a candidate is graded, a call's budget is ``FLOOR_S + FACTOR * t``, ``t`` the slowest control that finished it (plus
that control's start-up when the candidate's subject starts fresh for the call and the control's did not); a call
that starts the candidate's subject gets ``START_FLOOR_S`` more, since a subject forked cold imports what a warm
worker's had already imported when the controls were timed. A candidate over that budget fails the check
(``ProbeOverBudget``: it did not finish what a control finished); where no control finished the call, or none was
measured, the call keeps its plain limit and a time-out there is the honest ``ProbeTimeout`` (not evaluated).

The candidate's whole time is charged the same way: the calibration run also records its own seconds and the
checks it finished, and a candidate's judge gets ``WHOLE_FLOOR_S + WHOLE_FACTOR * t`` (``t`` the calibration run's
seconds; at most the operator's ``--timeout``). Time the candidate spends anywhere (late answers inside each call's
budget, sleeping between calls, a spin at import) counts against it: a check it did not reach, or a call its
whole budget cut short, is a failed check (``timeout: ...``) wherever the controls finished that check; only the
checks the controls could not finish either leave the run ``timed_out`` (unscored).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from grader.sandbox import protocol

FACTOR = 10.0
FLOOR_S = 30.0
START_FLOOR_S = 120.0
# The calibration run makes each call twice (reference, then base): half the per-call factor on its seconds.
WHOLE_FACTOR = 5.0
WHOLE_FLOOR_S = 120.0
CONTROLS = ("reference", "base")
RECORD_VERSION = 1


def budget_constants() -> tuple[float, float, float]:
    """The factor, the floor and the start-up floor: the constants, or the judge's own ``GRADER_BUDGET_FACTOR``,
    ``GRADER_BUDGET_FLOOR_S`` and ``GRADER_BUDGET_START_FLOOR_S`` (set only by the grader's tests; a subject cannot
    reach a judge's environment)."""
    return (float(os.environ.get(protocol.BUDGET_FACTOR, FACTOR)),
            float(os.environ.get(protocol.BUDGET_FLOOR_S, FLOOR_S)),
            float(os.environ.get(protocol.BUDGET_START_FLOOR_S, START_FLOOR_S)))


class CallCounter:
    """Names each probe call by its place in the run: ``<test> (<phase>) | <probe> #<n>``."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], int] = {}

    def next_key(self, probe: str) -> str:
        test = os.environ.get("PYTEST_CURRENT_TEST", "(outside a test)")
        count = self.seen.get((test, probe), 0)
        self.seen[(test, probe)] = count + 1
        return f"{test} | {probe} #{count}"


@dataclass(frozen=True)
class Budget:
    seconds: float
    controls: dict[str, float]  # the controls that finished the call: their seconds

    def explain(self) -> str:
        named = {"reference": "the reference fix", "base": "the base"}
        return " and ".join(f"{named[c]} answered it in {s:.2f} s" for c, s in sorted(self.controls.items()))


class CallTimes:
    """The controls' seconds per call, as one JSON record: ``{"calls": {key: {control: {"seconds", "fresh"} or
    None}}, "startup": {control: seconds}}``."""

    def __init__(self, record: dict | None = None) -> None:
        record = record if isinstance(record, dict) and record.get("version") == RECORD_VERSION else {}
        self.calls: dict[str, dict] = dict(record.get("calls", {}))
        self.startup: dict[str, float] = dict(record.get("startup", {}))
        # The calibration run as a whole: its seconds and the checks it finished.
        judge = record.get("judge")
        self.judge: dict = dict(judge) if isinstance(judge, dict) else {}

    @classmethod
    def load(cls, path: str | Path | None) -> CallTimes | None:
        if not path:
            return None
        try:
            return cls(json.loads(Path(path).read_text()))
        except (OSError, ValueError):
            return None

    def save(self, path: str | Path) -> None:
        draft = Path(f"{path}.draft")
        draft.write_text(json.dumps({"version": RECORD_VERSION, "calls": self.calls, "startup": self.startup,
                                     "judge": self.judge}, sort_keys=True))
        os.replace(draft, path)

    def note(self, key: str, control: str, seconds: float | None, fresh: bool) -> None:
        """``seconds`` None: the control did not finish the call (no answer in time, or its subject broke)."""
        self.calls.setdefault(key, {})[control] = None if seconds is None else \
            {"seconds": round(seconds, 4), "fresh": fresh}
        if fresh and seconds is not None and control not in self.startup:
            self.startup[control] = round(seconds, 4)

    def budget(self, key: str, fresh: bool) -> Budget | None:
        """The candidate's budget on call ``key`` (its subject starting fresh for it or not), or None where no
        control finished the call."""
        factor, floor, start_floor = budget_constants()
        finished = {}
        for control, seen in self.calls.get(key, {}).items():
            if control in CONTROLS and isinstance(seen, dict):
                start = self.startup.get(control, 0.0) if fresh and not seen.get("fresh") else 0.0
                finished[control] = float(seen["seconds"]) + start
        if not finished:
            return None
        return Budget(floor + (start_floor if fresh else 0.0) + factor * max(finished.values()), finished)

    def note_run(self, seconds: float, finished: list[str]) -> None:
        """The calibration run's own seconds and the checks it finished (passed, failed or skipped: reached)."""
        self.judge = {"seconds": round(seconds, 3), "finished": sorted(set(finished))}

    def whole_budget(self) -> float | None:
        """The candidate's whole time on this task, from the calibration run's; None where none was recorded."""
        seconds = self.judge.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            return None
        return float(os.environ.get(protocol.BUDGET_WHOLE_FLOOR_S, WHOLE_FLOOR_S)) + WHOLE_FACTOR * float(seconds)

    def finished_checks(self) -> frozenset[str]:
        finished = self.judge.get("finished")
        return frozenset(n for n in finished if isinstance(n, str)) if isinstance(finished, list) else frozenset()
