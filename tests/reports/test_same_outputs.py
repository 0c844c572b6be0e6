"""scripts/same_outputs.py: two outputs of the same grading agree whatever their runs' start, wall time, test
durations and (across revisions) grader revision; any change a reader would see is a difference."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

from grader.core.records import (ApplyReport, CandidateResult, CriterionResult, EvidenceEntry, FileReport,
                                 GraderRevision, HunkReport)
from grader.reports.report import write_html, write_junit, write_results_json

from conftest import run_info

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "same_outputs.py"
spec = importlib.util.spec_from_file_location("same_outputs", SCRIPT)
same_outputs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(same_outputs)


def graded(verdict: str = "partial", duration: float = 1.0, budget: str = "30.1") -> CandidateResult:
    message = f"E  no answer within its budget ({budget} s), where the reference answered it in 0.01 s"
    criteria = {"c1": CriterionResult("c1", "title", 0.5, "partial", "why",
                                      [EvidenceEntry("t.py::test_a", "failed", 1.0, "claim", [], duration, message)])}
    apply = ApplyReport("applied", "git apply", [FileReport("vllm/a.py", "modified",
                                                            [HunkReport("@@ -1 +1 @@", "applied")])])
    return CandidateResult("c", "int8-kv-rounding", "c.diff", verdict, 0.5, criteria, apply, "A summary.")


def output(folder: Path, result: CandidateResult, run) -> Path:
    write_results_json(folder, [result], run)
    write_html(folder, [result], run, {"c": "diff --git a/x b/x\n"})
    write_junit(folder / "junit.xml", [result], None, run.started_at)
    return folder


def test_outputs_of_the_same_grading_agree_but_for_their_runs(tmp_path):
    a = output(tmp_path / "a", graded(duration=0.5), run_info())
    later = run_info(started_at="2026-12-05T01:02:03+00:00", timings={"wall_s": 99.0}, jobs=4)
    b = output(tmp_path / "b", graded(duration=7.0, budget="31.4"), later)
    assert same_outputs.output_differences(a, b) == []
    other_revision = run_info(grader=GraderRevision("x", "def", False))
    c = output(tmp_path / "c", graded(), other_revision)
    assert same_outputs.output_differences(a, c)
    assert same_outputs.output_differences(a, c, across_revisions=True) == []


def test_a_changed_verdict_or_page_is_a_difference(tmp_path):
    a = output(tmp_path / "a", graded(), run_info())
    b = output(tmp_path / "b", replace(graded(), verdict="fail"), run_info())
    found = same_outputs.output_differences(a, b)
    assert any(line.startswith("results.json.candidates[0].verdict") for line in found)
    assert any(line.startswith("candidates/") for line in found) and any("junit.xml" in line for line in found)
    d = output(tmp_path / "d", graded(budget="30.1 s) and 2"), run_info())  # a word more is not a duration
    assert same_outputs.output_differences(a, d)
    (b / "extra.html").write_text("x")
    assert f"only in {b}: extra.html" in same_outputs.output_differences(a, b)
