"""Reports: results.json schema, JUnit XML, Markdown summary, exit codes and the HTML scorecards (their views and
browser tests: test_scorecard.py)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from grader.reports.outcome import exit_code
from grader.core.records import (SCHEMA_VERSION, ApplyReport, CandidateResult, CriterionResult, EvidenceEntry, FileReport,
                                 HunkReport)
from grader.reports.report import (grader_revision, markdown_summary, page_name, started_at, write_html, write_junit,
                           write_results_json)

from conftest import run_info

STATUSES = {"c1": ("met", 1.0), "c2": ("partial", 0.5), "c3": ("unmet", 0.0), "c4": ("not_evaluated", None),
            "c5": ("met", 0.8)}


def _result(cid: str, verdict: str = "partial") -> CandidateResult:
    criteria = {c: CriterionResult(c, f"title {c}", score, status, f"why {c}",
                                   [EvidenceEntry(f"t.py::test_{c}", "passed" if status == "met" else "failed", 1.0,
                                                  f"claim {c}", [], 0.5, "E  boom <x>")])
                for c, (status, score) in STATUSES.items()}
    apply = ApplyReport("applied", "git apply",
                        [FileReport("vllm/a.py", "modified", [HunkReport("@@ -1,2 +1,2 @@", "applied")])])
    return CandidateResult(cid, "int8-kv-rounding", f"{cid}.diff", verdict, 0.575, criteria, apply,
                           "A summary <b>with markup</b>.")


@pytest.fixture
def results() -> list[CandidateResult]:
    return [_result("b/second"), _result("a-first", "full")]


def test_results_json_is_versioned_and_sorted(tmp_path, results):
    path = write_results_json(tmp_path, results, run_info())
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION
    assert [c["id"] for c in doc["candidates"]] == ["a-first", "b/second"]
    first = doc["candidates"][0]
    for key in ("id", "task", "source", "verdict", "score", "criteria", "apply", "summary", "reference_summary"):
        assert key in first
    assert set(first["criteria"]["c1"]) >= {"score", "status", "evidence", "rationale"}


def junit_cases(path: Path) -> dict[tuple[str, str], object]:
    """Every testcase of a JUnit file as a real consumer (junitparser) reads it, by (classname, name)."""
    from junitparser import JUnitXml

    return {(case.classname, case.name): case for suite in JUnitXml.fromfile(str(path)) for case in suite}


def kinds(case) -> list[str]:
    return [type(r).__name__ for r in case.result]


def test_junit_has_a_verdict_case_and_one_case_per_criterion_with_stable_names(tmp_path, results):
    from junitparser import JUnitXml

    path = write_junit(tmp_path / "junit.xml", results, None, "2026-12-01T21:00:00+00:00")
    [suite] = list(JUnitXml.fromfile(str(path)))
    assert suite.name == "int8-kv-rounding" and suite.timestamp == "2026-12-01T21:00:00"
    cases = junit_cases(path)
    assert set(cases) == {(cls, name) for cls in ("a-first", "b.second")
                          for name in ("verdict", *(f"{c} title {c}" for c in STATUSES))}
    # Without --fail-under only a ``fail`` verdict fails: neither candidate's verdict case fails; the criteria's
    # cases read their states (partial and unmet fail, not_evaluated is skipped) in both alike.
    assert (suite.tests, suite.failures, suite.skipped, suite.errors) == (12, 4, 2, 0)
    assert kinds(cases[("a-first", "c4 title c4")]) == ["Skipped"]
    # Times are the evidence's measured durations: 0.5 s per check, five checks for the verdict.
    assert cases[("a-first", "c1 title c1")].time == 0.5 and cases[("a-first", "verdict")].time == 2.5
    assert suite.time == 2 * 2.5


def test_junit_verdict_fails_exactly_where_the_exit_code_does(tmp_path, results):
    failing = replace(results[0], id="int8-kv-rounding/low", verdict="fail", score=0.1)
    cut = replace(results[0], id="cut", verdict="input_truncated", run_status="input_truncated",
                  summary="The input was cut off: nothing was graded.")
    timed = replace(results[1], id="slow", verdict="partial", run_status="timed_out")
    everything = [*results, failing, cut, timed]
    for fail_under, failed in ((None, {"low"}), (0.5, {"low"}), (0.6, {"low", "a-first", "b.second"})):
        cases = junit_cases(write_junit(tmp_path / "junit.xml", everything, fail_under))
        verdicts = {cls: kinds(case) for (cls, name), case in cases.items() if name == "verdict"}
        assert {cls for cls, k in verdicts.items() if k == ["Failure"]} == failed, fail_under
        assert verdicts["cut"] == verdicts["slow"] == ["Skipped"]
        # A criterion's case reads its state alone, whatever the verdict's case; those of a skipped one are skipped.
        by_state = {"met": [], "partial": ["Failure"], "unmet": ["Failure"], "not_evaluated": ["Skipped"]}
        for (cls, name), case in cases.items():
            if name != "verdict" and cls not in ("cut", "slow"):
                assert kinds(case) == by_state[STATUSES[name.split()[0]][0]], (cls, name)
            elif name != "verdict":
                assert kinds(case) == ["Skipped"]
        assert exit_code(everything, fail_under) == 1  # "low" fails in every case, and 1 comes before 3
    assert "input cut off" in cases[("cut", "verdict")].result[0].text


def test_junit_stays_well_formed_for_any_text(tmp_path, results):
    hostile = replace(results[0], verdict="fail", summary="bad \x00\x1b[31m \ud800 & <x> ]]>")
    path = write_junit(tmp_path / "junit.xml", [hostile])
    ET.parse(path)
    assert "&lt;x&gt;" in path.read_text()


def test_markdown_summary_lists_every_candidate(results):
    text = markdown_summary(results)
    assert "| a-first | int8-kv-rounding | full | 0.57 | complete | met | partial | unmet | not_evaluated | met |" in text
    assert text.count("\n") == 4
    # A reason column: the index's reason, on one line, with no column break from the text it quotes.
    assert text.splitlines()[0].endswith("| reason |")
    assert text.splitlines()[2].endswith("| met | c3: \u201cclaim c3\u201d does not hold |")
    pipe = replace(results[0], id="p", error="a | b\nc", verdict="error")
    row = markdown_summary([pipe]).splitlines()[2]
    assert row.count(" | ") == 10 and "a \\| b" in row and "\n" not in row


def test_exit_codes(results):
    assert exit_code(results, None) == 0
    assert exit_code(results, 0.5) == 0
    assert exit_code(results, 0.6) == 1
    assert exit_code(results + [replace(results[0], verdict="error", id="z")], None) == 2


def test_html_escapes_and_links(tmp_path, results):
    index = write_html(tmp_path, results, run_info(candidates=2),
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

    schema = json.loads((Path(__file__).resolve().parents[2] / "grader" / "schema" / "results.schema.json").read_text())
    assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    run = run_info(grader=grader_revision(), started_at=started_at(), candidates=2)
    doc = json.loads(write_results_json(tmp_path, results, run).read_text())
    jsonschema.validate(doc, schema)
    broken = dict(doc, candidates=[dict(doc["candidates"][0], verdict="great")])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
