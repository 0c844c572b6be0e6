"""Reports: results.json schema, JUnit XML, Markdown summary, exit codes and the HTML scorecards (their views and
browser tests: test_scorecard.py)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from grader.cli import exit_code
from grader.core.records import SCHEMA_VERSION, ApplyReport, CandidateResult, CriterionResult, FileReport, HunkReport
from grader.report import (grader_revision, markdown_summary, page_name, started_at, write_html, write_junit,
                           write_results_json)

STATUSES = {"c1": ("met", 1.0), "c2": ("partial", 0.5), "c3": ("unmet", 0.0), "c4": ("not_evaluated", None),
            "c5": ("met", 0.8)}


def _result(cid: str, verdict: str = "partial") -> dict:
    criteria = {c: CriterionResult(c, f"title {c}", score, status, f"why {c}",
                                   [{"test": f"t.py::test_{c}", "status": "passed" if status == "met" else "failed",
                                     "weight": 1.0, "claim": f"claim {c}", "kinds": [], "message": "E  boom <x>",
                                     "duration_s": 0.5}])
                for c, (status, score) in STATUSES.items()}
    apply = ApplyReport("applied", "git apply",
                        [FileReport("vllm/a.py", "modified", [HunkReport("@@ -1,2 +1,2 @@", "applied")])])
    return CandidateResult(cid, "int8-kv-rounding", f"{cid}.diff", verdict, 0.575, criteria, apply,
                           "A summary <b>with markup</b>.").to_json()


@pytest.fixture
def results() -> list[dict]:
    return [_result("b/second"), _result("a-first", "full")]


def test_results_json_is_versioned_and_sorted(tmp_path, results):
    path = write_results_json(tmp_path, results, {"timings": {"wall_s": 1.0}})
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    assert [c["id"] for c in doc["candidates"]] == ["a-first", "b/second"]
    first = doc["candidates"][0]
    for key in ("id", "task", "source", "verdict", "score", "criteria", "apply", "summary", "reference_summary"):
        assert key in first
    assert set(first["criteria"]["c1"]) >= {"score", "status", "evidence", "rationale"}


def test_junit_has_a_verdict_case_and_one_case_per_criterion(tmp_path, results):
    root = ET.parse(write_junit(tmp_path / "junit.xml", results)).getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == 2 * 6
    suite = root.find("testsuite")
    # failures: c2 and c3 of both candidates, and the partial candidate's verdict; skipped: c4 of both.
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped"), suite.get("errors")) == ("12", "5", "2", "0")
    c4 = next(c for c in cases if c.get("name") == "c4 title c4")
    assert c4.find("skipped") is not None
    assert all(c.get("time") is not None for c in cases)


def test_junit_marks_checks_that_did_not_run_and_no_error_for_no_diff(tmp_path, results):
    partly = dict(results[1])
    partly["criteria"] = {k: dict(v) for k, v in partly["criteria"].items()}
    partly["criteria"]["c1"]["not_run"] = {"gpu": 5}
    empty = dict(results[0], id="empty", verdict="no_diff", score=None)
    root = ET.parse(write_junit(tmp_path / "junit.xml", [partly, empty])).getroot()
    names = [c.get("name") for c in root.findall(".//testcase")]
    assert "c1 title c1: 5 gpu check(s) not run" in names
    assert root.find("testsuite").get("errors") == "0"


def test_markdown_summary_lists_every_candidate(results):
    text = markdown_summary(results)
    assert "| a-first | int8-kv-rounding | full | 0.57 | complete | met | partial | unmet | not_evaluated | met |" in text
    assert text.count("\n") == 4


def test_exit_codes(results):
    assert exit_code(results, None) == 0
    assert exit_code(results, 0.5) == 0
    assert exit_code(results, 0.6) == 1
    assert exit_code(results + [dict(results[0], verdict="error", id="z")], None) == 2


def test_html_escapes_and_links(tmp_path, results):
    index = write_html(tmp_path, results, {"grader_version": "x", "gpu": "off", "candidates": 2},
                       {"a-first": "+added <line>\n-removed\n"})
    html = index.read_text()
    assert f'href="candidates/{page_name("b/second")}"' in html
    page = (tmp_path / "candidates" / page_name("a-first")).read_text()
    assert "&lt;b&gt;with markup&lt;/b&gt;" in page
    assert "+added &lt;line&gt;" in page and "<line>" not in page


def test_ids_that_differ_only_in_unsafe_characters_get_their_own_page():
    ids = ["a/b", "a_b", "a b", "a:b", "a/b/", "."]
    names = {page_name(i) for i in ids}
    assert len(names) == len(ids)
    assert all("/" not in n and not n.startswith(".") for n in names)


def test_results_json_validates_against_the_shipped_schema(tmp_path, results):
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[1] / "grader" / "schema" / "results.schema.json").read_text())
    assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    run_info = {"grader_version": "x", "grader": grader_revision(), "started_at": started_at(), "gpu": "off",
                "candidates": 2, "containment": "on", "fail_under": None, "exit_code": 0, "exit_reason": "0: graded",
                "timings": {"wall_s": 1.0}}
    doc = json.loads(write_results_json(tmp_path, results, run_info).read_text())
    jsonschema.validate(doc, schema)
    broken = dict(doc, candidates=[dict(doc["candidates"][0], verdict="great")])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
