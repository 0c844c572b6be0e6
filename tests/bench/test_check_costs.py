"""bench/check_costs.py and bench/ray_actor_cost.py: where a candidate's test seconds go, check by check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from check_costs import report  # noqa: E402


def candidate(cid: str, tests_s: float, checks: dict[str, float]) -> dict:
    evidence = [{"test": f"t/test_x.py::{name}", "duration_s": seconds} for name, seconds in checks.items()]
    return {"id": cid, "task": "t", "timings": {"tests_s": tests_s}, "criteria": {"c1": {"evidence": evidence}}}


def test_only_the_candidates_asked_for_and_their_copies_are_counted(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"candidates": [
        candidate("t/first", 10.0, {"starts_subject": 8.0, "quick": 1.0}),
        candidate("t/first-copy01", 12.0, {"starts_subject": 10.0, "quick": 1.0}),
        candidate("t/second", 4.0, {"starts_subject": 2.0, "quick": 1.0}),
        candidate("t/not-run", 0.0, {}),
    ]}))
    every = report(results, 1)
    assert "t: 3 candidate(s), tests 8.7 s, checks summed 7.7 s" in every
    asked = report(results, 1, ("t/first",))
    assert "t: 2 candidate(s), tests 11.0 s, checks summed 10.0 s" in asked
    assert asked[-1] == "      9.00 s    82%  starts_subject"


def test_the_actor_cost_bench_names_each_calls_costliest_check():
    from ray_actor_cost import costliest_check

    result = candidate("t/first", 10.0, {"starts_subject": 8.0, "quick": 1.0})
    assert costliest_check(result) == "starts_subject 8.00 s"
    assert costliest_check(candidate("t/none", 0.0, {})) == "no check ran"
