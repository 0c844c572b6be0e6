"""Calibration against an earlier judge: class mapping, pairing, whole/truncated split, confusion matrices,
agreement rates, explanations, notes and the two reports. Small hand-made inputs; nothing is graded."""

from __future__ import annotations

import json

import pytest

from grader.taskkit.calibrate import (CLASSES, NotesError, Pair, agreement, build_pairs, by_criterion, by_task, calibrate,
                              confusion, explain, grader_class, headline_text, judge_class, load_notes, short_message,
                              split_pairs, verdict_agreement, write_reports)
from grader.cli import build_parser
from grader.core.records import ApplyReport, CandidateResult, CriterionResult, EvidenceEntry, FileReport, HunkReport

STEM = "bundle"
# Labels name bundle entries by position; these tests give them ids of their own.
IDS = {position: f"{STEM}-{position:03d}" for position in range(10)}


def check(test: str, status: str, claim: str = "", message: str = "") -> EvidenceEntry:
    return EvidenceEntry(test, status, 1.0, claim, [], 0.0, message)


def crit(score, status=None, rationale="", evidence=None, cid="c1") -> CriterionResult:
    if status is None:
        status = "not_evaluated" if score is None else "met" if score >= 0.75 else "unmet" if score <= 0.25 \
            else "partial"
    return CriterionResult(cid, "t", score, status, rationale, evidence or [])


def result(position: int, task: str | None, scores: dict, verdict="partial", truncated=False, apply_status="applied",
           files=None) -> CandidateResult:
    return CandidateResult(f"{STEM}-{position:03d}", task, "b.txt", verdict, 0.5,
                           {c: s if isinstance(s, CriterionResult) else crit(s, cid=c) for c, s in scores.items()},
                           ApplyReport(apply_status, files=files or [], truncated=truncated), "",
                           reference_summary=f"judge paragraph {position}")


def graded_with(criteria: dict | None = None, files=None) -> CandidateResult:
    """A result for ``explain``: its criteria and the files of its apply report."""
    return CandidateResult("x", "a", "x.diff", "partial", 0.5, criteria or {}, ApplyReport("applied", files=files or []),
                           "")


def entry(position: int, task: str, overall: str, **labels) -> dict:
    return {"bundle_position": position, "task": task, "overall": overall,
            **{c: labels.get(c) for c in ("c1", "c2", "c3", "c4", "c5")}}


# Met only when every evaluated check passes (grader.pipeline.score.MET_AT, 1.0).
@pytest.mark.parametrize("score,expected", [(1.0, "met"), (0.9999, "partial"), (0.75, "partial"), (0.5, "partial"),
                                            (0.2501, "partial"), (0.25, "unmet"), (0.0, "unmet")])
def test_grader_class_thresholds(score, expected):
    assert grader_class(crit(score)) == expected


def test_grader_class_not_evaluated_is_none():
    assert grader_class(crit(None)) is None
    assert grader_class(crit(0.4, "not_evaluated")) is None
    assert grader_class(None) is None


@pytest.mark.parametrize("label,expected", [(1, "met"), (1.0, "met"), (0.5, "partial"), (0, "unmet"), (None, None)])
def test_judge_class(label, expected):
    assert judge_class(label) == expected


def test_build_pairs_excludes_and_matches_by_bundle_position():
    entries = [entry(0, "a", "partial", c1=1, c2=0.5, c3=0, c4=None, c5=1),
               entry(1, "a", "fail", c1=1),            # no result at all
               entry(2, "b", "full", c1=1),            # the grader inferred another task
               entry(3, "a", "partial", c1=1)]         # grading broke
    results = {r.id: r for r in [
        result(0, "a", {"c1": 1.0, "c2": 0.0, "c3": 0.1, "c4": 1.0, "c5": None}),
        result(2, "a", {"c1": 1.0}),
        result(3, "a", {"c1": None}, verdict="error"),
    ]}
    pairs, verdicts = build_pairs(entries, results, IDS)
    first = {p.criterion: p for p in pairs if p.id == "bundle-000"}
    assert (first["c1"].judge, first["c1"].grader, first["c1"].excluded) == ("met", "met", None)
    assert (first["c2"].judge, first["c2"].grader, first["c2"].agrees) == ("partial", "unmet", False)
    assert first["c3"].agrees
    assert first["c4"].excluded == "not_stated"
    assert first["c5"].excluded == "not_evaluated"
    assert {p.excluded for p in pairs if p.id == "bundle-001" and p.criterion == "c1"} == {"missing_result"}
    assert {p.excluded for p in pairs if p.id == "bundle-002" and p.criterion == "c1"} == {"task_mismatch"}
    assert {p.excluded for p in pairs if p.id == "bundle-003" and p.criterion == "c1"} == {"error"}
    assert [v.excluded for v in verdicts] == [None, "missing_result", "task_mismatch", "error"]


def test_empty_candidate_without_task_is_compared_as_no_diff():
    empty = result(0, None, {}, verdict="no_diff", apply_status="empty")
    pairs, verdicts = build_pairs([entry(0, "a", "no_diff")], {"bundle-000": empty}, IDS)
    assert {p.excluded for p in pairs} == {"not_stated"}
    assert verdict_agreement(verdicts)["agree"] == 1


def test_split_by_apply_truncated():
    entries = [entry(0, "a", "full", c1=1), entry(1, "a", "full", c1=1), entry(2, "a", "full", c1=1)]
    results = {r.id: r for r in [result(0, "a", {"c1": 1.0}, truncated=True), result(1, "a", {"c1": 0.0}),
                                    result(2, "a", {"c1": 1.0}, apply_status="partial")]}
    pairs, verdicts = build_pairs(entries, results, IDS, ("c1",))
    whole, truncated = split_pairs(pairs)
    assert [p.id for p in whole] == ["bundle-001", "bundle-002"]
    assert [p.id for p in truncated] == ["bundle-000"]
    vwhole, vtrunc = split_pairs(verdicts)
    assert [v.id for v in vtrunc] == ["bundle-000"]


def _pair(judge, grader, criterion="c1", task="a", excluded=None) -> Pair:
    return Pair("x", task, criterion, judge, grader, False, excluded)


def test_confusion_is_judge_by_grader_over_compared_pairs():
    pairs = [_pair("met", "met"), _pair("met", "unmet"), _pair("met", "unmet"), _pair("partial", "met"),
             _pair("unmet", None, excluded="not_evaluated"), _pair(None, "met", excluded="not_stated")]
    m = confusion(pairs)
    assert list(m) == list(CLASSES) and all(list(row) == list(CLASSES) for row in m.values())
    assert m["met"] == {"met": 1, "partial": 0, "unmet": 2}
    assert m["partial"] == {"met": 1, "partial": 0, "unmet": 0}
    assert sum(sum(row.values()) for row in m.values()) == 4


def test_agreement_rates_and_direction():
    pairs = [_pair("met", "met"), _pair("met", "unmet"), _pair("unmet", "partial"), _pair("partial", "partial"),
             _pair("met", None, excluded="not_evaluated")]
    a = agreement(pairs)
    assert a == {"agree": 2, "total": 4, "rate": 0.5, "grader_lower": 1, "grader_higher": 1}
    assert agreement([])["rate"] is None


def test_by_criterion_and_by_task():
    pairs = [_pair("met", "met", "c1", "a"), _pair("met", "unmet", "c2", "a"), _pair("unmet", "unmet", "c1", "b"),
             _pair(None, "met", "c2", "b", excluded="not_stated")]
    crit_stats = by_criterion(pairs, ("c1", "c2"))
    assert (crit_stats["c1"]["agree"], crit_stats["c1"]["total"]) == (2, 2)
    assert crit_stats["c2"]["rate"] == 0.0 and crit_stats["c2"]["excluded"] == {"not_stated": 1}
    assert crit_stats["c2"]["confusion"]["met"]["unmet"] == 1
    tasks = by_task(pairs, ("c1", "c2"))
    assert tasks["a"]["all"]["rate"] == 0.5
    assert tasks["b"]["by_criterion"]["c1"]["confusion"]["unmet"]["unmet"] == 1
    assert tasks["b"]["by_criterion"]["c2"]["total"] == 0


def test_verdict_agreement():
    entries = [entry(0, "a", "full"), entry(1, "a", "fail"), entry(2, "a", "no_diff"), entry(3, "a", "partial")]
    results = {r.id: r for r in [result(0, "a", {}, verdict="full"), result(1, "a", {}, verdict="partial"),
                                    result(2, "a", {}, verdict="no_diff"), result(3, "a", {}, verdict="error")]}
    _, verdicts = build_pairs(entries, results, IDS)
    v = verdict_agreement(verdicts)
    assert (v["agree"], v["total"], v["rate"]) == (2, 3, 0.6667)
    assert v["confusion"]["fail"]["partial"] == 1 and v["excluded"] == {"error": 1}


def test_short_message_prefers_the_E_line():
    assert short_message("ctx\n>   raise X\nE   ValueError: no fp8\n\nfile.py:3: ValueError") == "ValueError: no fp8"
    assert short_message("just a line\nlast") == "last"
    assert len(short_message("E   " + "x" * 500)) == 220


def test_explain_failing_assertion_and_passing_checks():
    failing = crit(0.0, rationale="0 of 1 weighted checks pass", evidence=[
        check("t.py::test_accepts[fp8]", "failed", "accepts fp8", "E   AssertionError: rejected fp8")])
    cause, text, fails = explain(Pair("x", "a", "c1", "met", "unmet", False), failing, graded_with())
    assert cause == "failing_assertion"
    assert "test_accepts[fp8] fails with: AssertionError: rejected fp8" in text and "judge said met" in text
    assert fails[0]["claim"] == "accepts fp8"
    passing = crit(1.0, evidence=[check("t.py::test_ok", "passed")])
    cause, text, _ = explain(Pair("x", "a", "c1", "unmet", "met", False), passing, graded_with())
    assert cause == "all_checks_pass" and "test_ok" in text


def test_explain_crash_anchor_and_apply():
    crash = crit(0.0, evidence=[check("t.py::test_a", "failed", message="E   ImportError: no x")])
    assert explain(Pair("x", "a", "c1", "met", "unmet", False), crash, graded_with())[0] == "crash"
    anchored = crit(0.0, rationale="anchor c1 (title) is unmet: the change adds no such mechanism", cid="c2")
    assert explain(Pair("x", "a", "c2", "met", "unmet", False), anchored, graded_with())[0] == "anchor_unmet"
    text = explain(Pair("x", "a", "c2", "met", "unmet", False), anchored, graded_with({"c1": crash}))[1]
    assert "anchor c1 (title) is unmet (test_a fails: ImportError: no x)" in text
    files = [FileReport("vllm/a.py", "modified", [HunkReport("@@ -1 +1 @@", "failed")])]
    cause, text, _ = explain(Pair("x", "a", "c1", "met", "unmet", False), crash, graded_with(files=files))
    assert cause == "apply_incomplete" and "vllm/a.py" in text


def test_load_notes(tmp_path):
    assert load_notes(None) == {} and load_notes(tmp_path / "absent.toml") == {}
    path = tmp_path / "notes.toml"
    path.write_text('["bundle-001.c2"]\nverdict = "judge_wrong"\nnote = "the test shows it"\n')
    assert load_notes(path) == {"bundle-001.c2": {"verdict": "judge_wrong", "note": "the test shows it"}}
    path.write_text('"bundle-001.c2" = {verdict = "maybe"}\n')
    with pytest.raises(NotesError):
        load_notes(path)


@pytest.fixture
def doc():
    labels = {"criteria": {"a": {c: {"name": f"name {c}", "meaning": "m"} for c in ("c1", "c2")}},
              "entries": [entry(0, "a", "full", c1=1, c2=1), entry(1, "a", "partial", c1=1, c2=0.5),
                          entry(2, "a", "fail", c1=0, c2=None)]}
    results = [
        result(0, "a", {"c1": 1.0, "c2": crit(0.0, rationale="0 of 1 weighted checks pass; failing: test_b", evidence=[
            check("t.py::test_b", "failed", "b <holds>", "E   AssertionError: <b>")], cid="c2")},
            verdict="fail"),
        result(1, "a", {"c1": 0.0, "c2": 0.5}, truncated=True),
        result(2, "a", {"c1": 0.0, "c2": 1.0}, verdict="fail"),
    ]
    notes = {"bundle-000.c2": {"verdict": "grader_wrong", "note": "test too strict"},
             "bundle-099.c1": {"verdict": "ambiguous", "note": "stale"}}
    return calibrate(results, labels, IDS, notes, {"bundle-000": "diff --git a/x b/x\n+<script>\n"},
                     {"bundle": "b.txt", "labels": "l.json", "results": "r.json", "notes": None})


def test_calibrate_document(doc):
    for key in ("schema", "inputs", "thresholds", "counts", "headline", "whole", "truncated", "disagreements",
                "verdict_disagreements", "truncated_disagreements", "notes"):
        assert key in doc
    for split in ("whole", "truncated"):
        assert set(doc[split]) == {"agreement", "by_criterion", "by_task", "excluded", "verdict"}
    # whole diffs: 000 (c1 agree, c2 disagree) and 002 (c1 agree, c2 not stated); 001 is truncated
    assert doc["headline"]["criteria"]["agree"] == 2 and doc["headline"]["criteria"]["total"] == 3
    assert doc["headline"]["by_criterion"]["c2"] == {"agree": 0, "total": 1, "rate": 0.0}
    assert doc["headline"]["verdict"] == {"agree": 1, "total": 2, "rate": 0.5}
    assert doc["headline"]["not_stated"] == 1
    assert doc["counts"]["whole_candidates"] == 2 and doc["counts"]["truncated_candidates"] == 1
    [d] = doc["disagreements"]
    assert set(d) >= {"id", "task", "criterion", "grader", "judge", "direction", "cause", "explanation", "note", "diff"}
    assert (d["id"], d["criterion"], d["cause"], d["direction"]) == ("bundle-000", "c2", "failing_assertion",
                                                                    "grader_lower")
    assert d["judge"]["paragraph"] == "judge paragraph 0" and d["note"]["verdict"] == "grader_wrong"
    assert doc["truncated_disagreements"] == [{"id": "bundle-001", "task": "a", "criterion": "c1",
                                               "grader": "unmet", "judge": "met"}]
    assert doc["notes"] == {"by_verdict": {"grader_wrong": 1}, "without_note": 0, "unmatched": ["bundle-099.c1"]}
    assert json.loads(json.dumps(doc)) == doc
    assert "verdict 50% (1/2)" in headline_text(doc)


def test_reports_render(tmp_path, doc):
    json_path, html_path = write_reports(tmp_path, doc)
    assert json.loads(json_path.read_text())["schema"] == doc["schema"]
    html = html_path.read_text()
    assert "bundle-000" in html and "test too strict" in html and "judge paragraph 0" in html
    assert "&lt;script&gt;" in html and "<script>" not in html        # escaped diff and messages
    assert "AssertionError: &lt;b&gt;" in html
    assert "Truncated previews" in html and "name c2" in html


def test_cli_has_calibrate():
    args = build_parser().parse_args(["calibrate", "b.txt", "--labels", "l.json", "--results", "r.json"])
    assert args.command == "calibrate" and args.results.name == "r.json" and args.notes is None


def test_calibrate_command_end_to_end_with_results(tmp_path):
    from grader.pipeline.labels import bundle_ids
    from grader.cli import main

    bundle = tmp_path / "mini.txt"
    bundle.write_text("https://example.org/repo\nno diff captured (empty)\n\nno diff captured (skipped)\n")
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"criteria": {}, "entries": [
        {"bundle_position": i, "task": "a", "overall": "no_diff"} for i in range(2)]}))
    ids = bundle_ids(bundle)
    graded = [CandidateResult(ids[i], "a", "mini.txt", "no_diff", None, {}, ApplyReport("empty"), "")
              for i in range(2)]
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"candidates": [r.to_json() for r in graded]}))
    notes = tmp_path / "notes.toml"
    notes.write_text("")
    out = tmp_path / "out"
    assert main(["calibrate", str(bundle), "--labels", str(labels), "--results", str(results), "--out", str(out),
                 "--notes", str(notes)]) == 0
    written = json.loads((out / "calibration.json").read_text())
    assert written["headline"]["verdict"] == {"agree": 2, "total": 2, "rate": 1.0}
    assert (out / "calibration.html").is_file()
