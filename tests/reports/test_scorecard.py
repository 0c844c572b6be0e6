"""The HTML scorecards: the view model (reasons, totals, agreement, skip collapsing, hunk linking), the pages
written for every kind of result (escaped), and the pages in headless Chromium at 1280 and 390 px."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from grader.pipeline.labels import bundle_ids
from grader.core.records import (ApplyReport, CandidateResult, CriterionResult, EvidenceEntry, FileReport, HunkReport,
                                 Incomplete)
from grader.reports.report import page_name, write_html, write_junit, write_results_json
from grader.core.rubric import all_tasks
from grader.reports.scorecard import (CHROMIUM_FLAGS, agreement, build_candidate, build_diff, build_index, collapse_skips,
                              named_places, reason, system_chromium, verdict_sentence)

from conftest import SEED, run_info

TASK = "int8-kv-rounding"  # core: c1
FILE = "vllm/v1/attention/ops/triton_reshape_and_cache_flash.py"
HIDDEN = f"{TASK}/tests/test_int8_rounding.py"
GPU_SKIP = "Skipped: needs a CUDA GPU: GPU evidence is switched off for this run"


def check(test: str, status: str, claim: str = "", message: str = "", weight: float = 1.0) -> EvidenceEntry:
    return EvidenceEntry(f"{HIDDEN}::{test}", status, weight, claim, [], 0.0, message)


def pytest_failure(assertion: str, frames: list[tuple[str, int]] = ()) -> str:
    """A failure message the way pytest writes one: source, frames of a traceback, E lines, the test's place."""
    trace = "".join(f'E     File "<scratch>/import-root/{path}", line {line}, in kernel\n' for path, line in frames)
    return (f"    def test_it(subject):\n>       assert stored == expected, {assertion!r}\n"
            f"E       AssertionError: {assertion}\nE       assert 2 == 3\n{trace}\n{HIDDEN}:70: AssertionError")


def criterion(cid: str, status: str, score: float | None, evidence: list[EvidenceEntry], rationale: str = "",
              coverage: float = 1.0, not_run: dict | None = None) -> CriterionResult:
    return CriterionResult(cid, f"title of {cid}", score, status, rationale or f"{status} per its checks", evidence,
                           coverage, not_run or {})


DIFF = f"""diff --git a/{FILE} b/{FILE}
index 1111111..2222222 100644
--- a/{FILE}
+++ b/{FILE}
@@ -10,3 +10,5 @@ def store(x):
     a = 1
+    b = 2
+    c = 3
     d = 4
@@ -40,4 +42,4 @@ def kernel(x):
     e = 5
-    f = x.to(tl.int8)
+    f = tl.extra.cuda.libdevice.rint(x).to(tl.int8)
     g = 7
"""


def apply_report(second: str = "applied", detail: str = "", truncated: bool = False) -> ApplyReport:
    hunks = [HunkReport("@@ -10,3 +10,5 @@ def store(x):", "applied"), HunkReport("@@ -40,4 +42,4 @@ def kernel(x):",
                                                                             second, detail)]
    status = "applied" if second == "applied" else "partial"
    return ApplyReport(status, "git apply", [FileReport(FILE, "modified", hunks)], truncated,
                       "truncated hunks were dropped" if truncated else "")


def result(cid: str = "cand-1", verdict: str = "partial", criteria: dict | None = None, apply=None,
           task: str | None = TASK, score: float | None = 0.6,
           summary: str = "The patch rounds `x.to(tl.int8)` first. Value rounding is missing (\"c3. cut\").",
           **extra) -> CandidateResult:
    criteria = criteria if criteria is not None else {
        "c1": criterion("c1", "met", 1.0, [check("test_rounds", "passed", "Keys are rounded")]),
        "c2": criterion("c2", "met", 1.0, [check("test_clamped", "passed", "Stays clamped")]),
        "c3": criterion("c3", "unmet", 0.0, [check("test_values_rounded", "failed", "Values are rounded to nearest",
                                                   pytest_failure("value cache truncates 2.625 to 2"))]),
        "c4": criterion("c4", "not_evaluated", None, [check("test_fp8", "skipped", message=GPU_SKIP)] * 3,
                        "not evaluated: needs a CUDA GPU; 3 check(s) not run", 0.0, {"gpu": 3}),
        "c5": criterion("c5", "met", 1.0, [check("test_negative", "passed", "Negatives round")]),
    }
    return CandidateResult(cid, task, f"{cid}.diff", verdict, score, criteria,
                           apply if apply is not None else apply_report(), summary, **extra)


# ---------------------------------------------------------------- reasons


def test_reason_names_the_core_criterion_before_an_earlier_non_core_one():
    core_partial = result(criteria={
        "c1": criterion("c1", "partial", 0.5, [check("test_rounds", "failed", "Keys are rounded to nearest",
                                                    pytest_failure("2.625 stored as 2"))]),
        "c2": criterion("c2", "unmet", 0.0, [check("test_clamped", "failed", "Results stay clamped",
                                                   pytest_failure("300 stored as 44"))]),
    })
    text = reason(core_partial, {"c1"})
    assert text == "c1: \u201cKeys are rounded to nearest\u201d does not hold"
    # Without the rubric's core marks, unmet comes before partial.
    assert reason(core_partial, set()).startswith("c2: \u201cResults stay clamped\u201d")


def test_reason_skips_a_conditional_criterion_that_lost_only_to_its_anchor():
    anchored = result(criteria={
        "c2": criterion("c2", "unmet", 0.0, [check("t", "passed")], "anchor c1 (fix) is unmet: no credit"),
        "c3": criterion("c3", "partial", 0.5, [check("test_v", "failed", "Values round", pytest_failure("no"))]),
    })
    assert reason(anchored, {"c1"}) == "c3: \u201cValues round\u201d does not hold"


@pytest.mark.parametrize(("changes", "expected"), [
    ({"verdict": "error", "score": None, "error": "subject crashed\nTraceback ...", "criteria": {}},
     "error: subject crashed"),
    ({"run_status": "timed_out"}, "timed out; c3: \u201cValues are rounded to nearest\u201d does not hold"),
    ({"run_status": "interrupted"}, "interrupted; c3: "),
    ({"run_status": "environment_error", "error": "no base tree", "verdict": "error", "criteria": {}},
     "environment error: no base tree"),
    ({"verdict": "no_diff", "criteria": {}, "apply": ApplyReport("empty", message="the candidate has no diff")},
     "no diff to grade"),
    ({"verdict": "fail", "criteria": {}, "apply": ApplyReport("failed", message="error: corrupt patch at line 9")},
     "apply failed: error: corrupt patch at line 9"),
    ({"verdict": "fail", "criteria": {}, "apply": ApplyReport("rejected", message="path escapes the tree")},
     "apply rejected: path escapes the tree"),
    ({"apply": apply_report("truncated", "cut off after 3 lines; not applied", truncated=True)},
     "truncated preview: 1 of 2 hunks cut off; c3: "),
    ({"run_status": "apply_partial", "apply": apply_report("failed", "context not found (tried at line 40)")},
     "applied in part: 1 of 2 hunks failed; c3: "),
])
def test_reason_says_what_kept_the_row_from_full(changes, expected):
    said = reason(replace(result(), **changes), {"c1"})
    assert said.startswith(expected)
    # An error's text is said once, never again by the run's reason.
    assert said.count(changes.get("error", "\0").split("\n")[0]) <= 1


def test_reason_of_a_partial_without_failures_names_what_was_not_evaluated_and_full_has_none():
    only_gpu_missing = result(criteria={"c1": criterion("c1", "met", 1.0, []),
                                        "c4": criterion("c4", "not_evaluated", None, [], coverage=0.0)})
    assert reason(only_gpu_missing, {"c1"}) == "all met where evaluated; c4 not evaluated"
    skipped = [replace(check(f"test_gpu[{n}]", "skipped", message=GPU_SKIP), kinds=["gpu"]) for n in range(5)]
    thin = result(criteria={"c1": criterion("c1", "met", 1.0, [*skipped, check("test_t", "timeout")], coverage=0.6,
                                            not_run={"gpu": 5, "timeout": 1}),
                            "c4": criterion("c4", "met", 1.0, [])})
    assert reason(thin, {"c1"}) == "all met where evaluated; 5 GPU checks not run, 1 check timed out"
    full = result(verdict="full", criteria={"c1": criterion("c1", "met", 1.0, [])})
    assert reason(full, {"c1"}) == ""


# ---------------------------------------------------------------- index: totals, columns, agreement


def test_index_groups_by_task_counts_verdicts_and_puts_results_without_task_last():
    results = [result("b", "fail"), result("a", "partial"), result("c", "fail"),
               result("empty", "no_diff", criteria={}, task=None, apply=ApplyReport("empty"))]
    index = build_index(results, page_name)
    assert [t.task for t in index.tables] == [TASK, "(no task)"]
    table = index.tables[0]
    assert [r.id for r in table.rows] == ["a", "b", "c"]
    assert table.totals == [("partial", 1), ("fail", 2)]
    assert index.totals == [("partial", 1), ("fail", 2), ("no_diff", 1)]
    rubric = all_tasks()[TASK]
    assert [(c.id, c.title, c.core) for c in table.columns] == \
        [(c.id, c.title, c.core) for c in rubric.criteria.values()]
    assert index.tables[1].columns == []
    assert table.rows[0].page == page_name("a")
    assert not index.has_judge


def test_a_task_without_a_rubric_takes_its_columns_from_its_results():
    index = build_index([result("x", task="not-a-task")], page_name)
    assert [(c.id, c.title, c.core) for c in index.tables[0].columns] == \
        [(f"c{i}", f"title of c{i}", False) for i in range(1, 6)]


def test_agreement_with_the_judge():
    assert agreement("partial", "partial") == "agree"
    assert agreement("fail", "partial") == "disagree"
    assert agreement("error", "full") == "not_compared"
    assert agreement("full", None) is None
    judge = {"a": "partial", "b": "full", "z": "full"}
    index = build_index([result("a", "partial"), result("b", "fail"), result("c", "fail")], page_name, judge)
    assert [(r.judge, r.agreement) for r in index.tables[0].rows] == \
        [("partial", "agree"), ("full", "disagree"), (None, None)]
    assert index.tables[0].judged == (1, 2) and index.judged == (1, 2)


@pytest.mark.skipif(not (SEED / "judge-labels.json").is_file(), reason="the seed's judge labels are not here")
def test_judge_verdicts_from_the_seed_labels_meet_the_bundle_ids():
    labels = json.loads((SEED / "judge-labels.json").read_text())
    ids = bundle_ids(SEED / "graded-candidates.txt")
    judge = {ids[e["bundle_position"]]: e["overall"] for e in labels["entries"]}
    first = labels["entries"][0]
    cid = ids[first["bundle_position"]]
    other = "fail" if first["overall"] != "fail" else "full"
    rows = {row.id: row for row in build_index([result(cid, first["overall"]), result(ids[1], other)],
                                               page_name, judge).tables[0].rows}
    assert rows[cid].judge == first["overall"] and rows[cid].agreement == "agree"
    assert rows[ids[1]].judge == labels["entries"][1]["overall"]


# ---------------------------------------------------------------- candidate page: skips, sentences, requirements


def test_identical_skip_messages_collapse_into_one_line_with_a_count():
    evidence = [check(f"t{i}", "skipped", message=GPU_SKIP) for i in range(5)] + \
        [check("u", "skipped", message="Skipped: variant: needs a CUDA GPU"), check("v", "passed"),
         check("w", "skipped", message=GPU_SKIP)]
    groups = collapse_skips(evidence)
    assert [(g.message, g.count) for g in groups] == \
        [("needs a CUDA GPU: GPU evidence is switched off for this run", 6), ("variant: needs a CUDA GPU", 1)]
    assert groups[0].tests[-1].endswith("::w")
    page = build_candidate(result(), DIFF)
    c4 = next(c for c in page.criteria if c.id == "c4")
    assert c4.evidence == [] and [(g.count, g.message) for g in c4.skips] == \
        [(3, "needs a CUDA GPU: GPU evidence is switched off for this run")]
    assert c4.not_run == [("gpu", 3)]


@pytest.mark.parametrize(("summary", "first"), [
    ("The patch edits `a.b()`. c5 is not met.", "The patch edits `a.b()`."),
    ('Core c1 is not met: "x. y" does not hold (a. b). Verdict fail.',
     'Core c1 is not met: "x. y" does not hold (a. b).'),
    ("One sentence only", "One sentence only"),
    ("", ""),
])
def test_the_verdict_sentence_is_the_summarys_first(summary, first):
    assert verdict_sentence(summary) == first


def test_candidate_page_carries_the_rubric_requirement_and_the_first_failing_assertion():
    page = build_candidate(result(), DIFF)
    rubric = all_tasks()[TASK].criteria
    by_id = {c.id: c for c in page.criteria}
    assert by_id["c3"].requires == rubric["c3"].requires and by_id["c1"].core
    assert by_id["c3"].first_failure.assertion == "value cache truncates 2.625 to 2"
    assert by_id["c1"].first_failure is None
    assert page.headline == "The patch rounds `x.to(tl.int8)` first."
    assert page.rest_of_summary.startswith("Value rounding is missing")


def test_a_failure_that_quotes_a_traceback_is_told_by_the_exception_the_traceback_raised():
    message = ("    def test_fallback(results):\n>       assert not problems, problems\n"
               "E       AssertionError: ['raised: Traceback (most recent call last):\n"
               f'E           File "<scratch>/import-root/{FILE}", line 43, in store\n'
               "E             block = min(triton.next_power_of_2(n), 2048)\n"
               "E                         ^^^^^^^^^^^^^^^^^^^^^^\n"
               "E         AttributeError: module 'triton' has no attribute 'next_power_of_2'\n"
               "E         ']\n\n"
               f"{HIDDEN}:542: AssertionError")
    page, ev = linked(message)
    assert ev.assertion == "AttributeError: module 'triton' has no attribute 'next_power_of_2'"
    assert page.criteria[0].first_failure.assertion == ev.assertion
    # A plain assertion keeps its own words.
    assert linked(pytest_failure("value cache truncates 2.625 to 2"))[1].assertion == \
        "value cache truncates 2.625 to 2"


# ---------------------------------------------------------------- linking evidence to hunks


def linked(message: str, apply=None, diff: str = DIFF):
    r = result(criteria={"c3": criterion("c3", "unmet", 0.0, [check("test_v", "failed", "Values round", message)])},
               apply=apply)
    page = build_candidate(r, diff)
    return page, page.criteria[0].evidence[0]


def test_a_traceback_line_inside_a_landed_hunk_links_to_that_hunk():
    # Hunk 2 landed at new lines 42..45; line 43 is its added line.
    page, ev = linked(pytest_failure("no", [(FILE, 43)]))
    hunk = page.diff.files[0].hunks[1]
    assert [(ref.target, ref.line) for ref in ev.places] == [(hunk.anchor, 43)]
    assert hunk.named_lines == {43} and [ref.evidence_anchor for ref in hunk.evidence] == [ev.anchor]
    assert next(line for line in hunk.lines if line.tree == 43).kind == "add"
    assert page.diff.files[0].criteria == ["c3"]


def test_pytest_style_path_and_line_link_too_and_a_line_outside_every_hunk_links_the_file():
    page, ev = linked(f"E   ValueError: bad\n\n../../import-root/{FILE}:11: ValueError\n{FILE}:300: in f")
    diff_file = page.diff.files[0]
    assert [(ref.target, ref.line) for ref in ev.places] == [(diff_file.hunks[0].anchor, 11),
                                                             (diff_file.anchor, 300)]
    assert ev.places[1].label.endswith("(outside the diff's hunks)")


@pytest.mark.parametrize("message", [
    f"{HIDDEN}:70: AssertionError",                               # the hidden test, not the candidate's file
    f"../grader/sandbox/{FILE}:43: ProbeRaised",                  # under the grader's own folder
    f'File "/x/my{FILE}", line 43',                               # a longer name that ends the same way
    f"{FILE}c:43",                                                # a longer name that starts the same way
    "E   AssertionError: value cache truncates",                 # no file at all
])
def test_messages_that_do_not_name_the_candidates_file_link_nothing(message):
    page, ev = linked(message)
    assert ev.places == [] and page.diff.files[0].criteria == [] and page.unlinked_evidence == 1


def test_a_hidden_test_path_does_not_stand_for_a_candidate_test_of_the_same_name():
    assert named_places(f"{HIDDEN}:70: AssertionError", "tests/test_int8_rounding.py", {TASK}) == []
    assert named_places("tests/test_int8_rounding.py:70: AssertionError", "tests/test_int8_rounding.py",
                        {TASK}) == [70]


def test_a_hunk_that_did_not_land_links_through_the_bases_lines_moved_by_the_hunks_above():
    # Hunk 1 landed and added 2 lines, hunk 2 was cut: the tree holds the base's old line 41 at line 43.
    page, ev = linked(pytest_failure("no", [(FILE, 43)]),
                      apply=apply_report("truncated", "cut off after 3 lines; not applied", truncated=True))
    hunk = page.diff.files[0].hunks[1]
    named = next(line for line in hunk.lines if line.tree == 43)
    assert (named.kind, named.old, named.text.strip()) == ("del", 41, "-    f = x.to(tl.int8)")
    assert [ref.target for ref in ev.places] == [hunk.anchor]
    # The cut hunk's added line is not in the tree, so nothing numbers it.
    assert next(line for line in hunk.lines if line.kind == "add").tree is None


def test_a_hunk_that_landed_elsewhere_is_numbered_where_it_landed():
    page, ev = linked(pytest_failure("no", [(FILE, 48)]), apply=apply_report("offset", "applied at line 47 "
                                                                                        "(offset 5 lines)"))
    hunk = page.diff.files[0].hunks[1]
    assert [line.tree for line in hunk.lines] == [47, None, 48, 49]
    assert [ref.target for ref in ev.places] == [hunk.anchor]


def test_without_an_apply_report_for_a_hunk_only_the_file_is_linked():
    page, ev = linked(pytest_failure("no", [(FILE, 43)]), apply=ApplyReport("failed", message="x"))
    assert all(line.tree is None for h in page.diff.files[0].hunks for line in h.lines)
    assert [ref.target for ref in ev.places] == [page.diff.files[0].anchor]


def traced(ran, diff: str = DIFF, message: str = "E   AssertionError: value cache truncates"):
    entry = replace(check("test_v", "failed", "Values round", message), ran=ran)
    page = build_candidate(result(criteria={"c3": criterion("c3", "unmet", 0.0, [entry])}), diff)
    return page, page.criteria[0].evidence[0]


def test_a_failing_check_links_to_every_hunk_whose_added_lines_ran_in_it():
    # Hunk 1 adds tree lines 11 and 12; hunk 2 adds line 43. Line 11 ran; line 10 is context, not added.
    page, ev = traced({FILE: [11, 43]})
    first, second = page.diff.files[0].hunks
    assert [(ref.target, ref.label) for ref in ev.ran_hunks] == [
        (first.anchor, "triton_reshape_and_cache_flash.py hunk 1"),
        (second.anchor, "triton_reshape_and_cache_flash.py hunk 2")]
    assert [ref.evidence_anchor for ref in first.ran_in] == [ev.anchor] and ev.none_ran == ""
    assert (first.ran_lines, second.ran_lines) == ({11}, {43})
    assert page.unlinked_evidence == 0 and page.hunk_linked_checks == 1


def test_a_traced_check_where_no_added_line_ran_says_so_and_an_untraced_one_says_nothing():
    page, ev = traced({})
    assert ev.ran_hunks == [] and ev.none_ran == "none of the diff's lines ran in this check"
    assert page.unlinked_evidence == 0 and page.none_ran_checks == 1
    # Lines of another file, or of no hunk, are not a hunk of this diff either.
    assert traced({"vllm/other.py": [11]})[1].none_ran and traced({FILE: [300]})[1].none_ran
    page, ev = traced(None)
    assert ev.ran_hunks == [] and ev.none_ran == "" and page.unlinked_evidence == 1


def test_where_the_diff_also_changes_untraceable_files_none_ran_says_which_lines_were_traced():
    cuda = "vllm/k.cu"
    diff = DIFF + f"diff --git a/{cuda} b/{cuda}\n--- a/{cuda}\n+++ b/{cuda}\n@@ -1,1 +1,1 @@\n-int a;\n+int b;\n"
    assert traced({}, diff)[1].none_ran == ("none of the diff's Python lines ran in this check "
                                            "(its changes to k.cu cannot be traced)")
    only_cuda = diff[diff.index(f"diff --git a/{cuda}"):]
    assert "no line of this diff can be traced" in traced({}, only_cuda)[1].none_ran
    tests_only = f"diff --git a/tests/t.py b/tests/t.py\n--- a/tests/t.py\n+++ b/tests/t.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert traced({}, tests_only)[1].none_ran == "none of the diff's lines ran in this check"


def test_the_candidate_page_shows_the_hunks_that_ran_and_the_none_ran_sentence(tmp_path):
    ran = replace(check("test_v", "failed", "Values round"), ran={FILE: [43]})
    idle = replace(check("test_w", "failed", "Keys round"), ran={})
    r = result("ran", "fail", criteria={"c3": criterion("c3", "unmet", 0.0, [ran, idle])})
    write_html(tmp_path, [r], run_info(), {"ran": DIFF})
    html = (tmp_path / "candidates" / page_name("ran")).read_text()
    assert '<a class="place ran-link" href="#hunk-1-2">triton_reshape_and_cache_flash.py hunk 2</a>' in html
    assert 'its added lines ran in failing <a href="#ev-c3-1">c3 test_v</a>' in html
    assert "none of the diff&#39;s lines ran in this check" in html


def test_a_failing_check_whose_traced_re_run_did_not_reproduce_says_so_and_links_nowhere(tmp_path):
    note = "re-run did not reproduce: the traced re-run of this check passed, so the lines it ran are not shown"
    flaky = replace(check("test_v", "failed", "Values round"), rerun=note)
    page = build_candidate(result(criteria={"c3": criterion("c3", "unmet", 0.0, [flaky])}), DIFF)
    ev = page.criteria[0].evidence[0]
    assert (ev.rerun, ev.ran_hunks, ev.none_ran, page.none_ran_checks) == (note, [], "", 0)
    # A passing check carries no note even if its record held one.
    passing = replace(check("test_w", "passed", "Keys round"), rerun=note)
    assert build_candidate(result(criteria={"c3": criterion("c3", "met", 1.0, [passing])}),
                           DIFF).criteria[0].evidence[0].rerun == ""
    write_html(tmp_path, [result("flaky", "fail", criteria={"c3": criterion("c3", "unmet", 0.0, [flaky])})],
               {"grader_version": "x", "gpu": "off", "candidates": 1}, {"flaky": DIFF})
    html = (tmp_path / "candidates" / page_name("flaky")).read_text()
    assert '<div class="places rerun-note">re-run did not reproduce: the traced re-run of this check passed' in html


def test_the_diff_view_keeps_stray_lines_and_hunks_the_preview_cut_inside_the_header():
    apply = ApplyReport("partial", files=[
        FileReport(FILE, "modified", [HunkReport("@@ -10,3 +10,5 @@ def store(x):", "applied"),
                                      HunkReport("@@ -40,4 +42,4 @@ def kernel(x):", "applied")]),
        FileReport("vllm/b.py", "modified",
                   [HunkReport("", "truncated", "cut off inside the file header; no hunk shown")])], truncated=True)
    view = build_diff("A preamble line\n" + DIFF + "diff --git a/vllm/b.py b/vllm/b.py\n", apply)
    assert view.stray_lines == 1
    assert [f.path for f in view.files] == [FILE, "vllm/b.py"]
    assert [h.status for h in view.files[0].hunks] == ["applied", "applied"]
    assert [u.detail for u in view.files[1].unshown] == ["cut off inside the file header; no hunk shown"]
    assert view.hunk_statuses == [("applied", 2)]


# ---------------------------------------------------------------- the pages as written


HOSTILE_ID = 'x"><script>alert(1)</script>'
HOSTILE_DIFF = DIFF.replace("    e = 5", "    e = '</script><img src=x onerror=alert(2)>'")


def every_kind_of_result() -> list[CandidateResult]:
    hostile = result(HOSTILE_ID, "fail", criteria={"c3": criterion("c3", "unmet", 0.0, [
        check("t<b>", "failed", "claim </script><b>", "E   AssertionError: <img src=x onerror=alert(3)>")])},
                     summary="Summary </script><script>alert(4)</script>.")
    cut = apply_report("truncated", "cut off after 3 lines; not applied", truncated=True)
    return [
        result("full-one", "full", criteria={c: criterion(c, "met", 1.0, [check(f"t_{c}", "passed", "ok")])
                                             for c in ("c1", "c2", "c3", "c4", "c5")}, score=1.0),
        result("partial-one", score=0.8), hostile,
        result("errored", "error", criteria={}, error="subject crashed: ImportError", score=None),
        result("timed", "partial", run_status="timed_out", score=0.7),
        result("cut", "fail", apply=cut, score=0.3),
        result("apply-failed", "fail", criteria={}, apply=ApplyReport("failed", message="corrupt patch at line 3"),
               score=0.0),
        result("half-applied", "partial", run_status="apply_partial", score=0.5,
               apply=apply_report("failed", "context not found (tried at line 40)")),
        result("empty", "no_diff", criteria={}, task=None, apply=ApplyReport("empty", message="no diff"), score=None),
    ]


def write_every_kind(out: Path, judge: dict | None = None) -> Path:
    results = every_kind_of_result()
    diffs = {r.id: HOSTILE_DIFF if r.id == HOSTILE_ID else DIFF for r in results if r.id != "empty"}
    run = run_info(candidates=len(results) + 1, incomplete=Incomplete("interrupted by SIGINT", ["never</script>"]))
    return write_html(out, results, run, diffs, judge)


def test_every_page_is_written_escaped_and_loads_only_its_own_files(tmp_path):
    index = write_every_kind(tmp_path)
    pages = [index] + sorted((tmp_path / "candidates").iterdir())
    assert len(pages) == 10
    for page in pages:
        html = page.read_text()
        assert "<script>alert" not in html and "<img src=x" not in html, page.name
        # No inline script at all (the policy forbids one): nothing of a result is ever inside a script element.
        assert re.findall(r"<script[^>]*>", html) == ['<script defer src="' + ("static/" if page == index else
                                                                               "../static/") + 'scorecard.js">']
        assert 'name="viewport"' in html and "Content-Security-Policy" in html
        assert not re.search(r'(?:src|href)="(?:https?:)?//', html), "a page loads something from elsewhere"
        assert "This run is incomplete" in html and "never&lt;/script&gt;" in html
    assert (tmp_path / "static" / "scorecard.css").is_file() and (tmp_path / "static" / "scorecard.js").is_file()
    hostile = (tmp_path / "candidates" / page_name(HOSTILE_ID)).read_text()
    assert "x&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in hostile
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in hostile


def test_the_index_shows_criterion_titles_core_marks_reasons_and_no_judge_column_without_a_judge(tmp_path):
    html = write_every_kind(tmp_path).read_text()
    for criterion_ in all_tasks()[TASK].criteria.values():
        assert f'<span class="ctitle">{criterion_.title}</span>' in html
    assert html.count('<span class="core"') == 2  # c1 of the task, and the legend below the tables
    assert "truncated preview: 1 of 2 hunks cut off" in html and "apply failed: corrupt patch at line 3" in html
    assert "error: subject crashed: ImportError" in html
    assert 'data-key="judge"' not in html and 'id="filter-agreement"' not in html
    judged = write_every_kind(tmp_path / "judged", {"full-one": "full", "partial-one": "fail"}).read_text()
    assert judged.count('data-key="judge"') == 2  # both tables
    assert "✓ agrees" in judged and "✗ differs" in judged
    page = (tmp_path / "judged" / "candidates" / page_name("partial-one")).read_text()
    assert '<span class="judge-verdict">fail</span> <span class="agree a-disagree">✗ differs</span>' in page


def test_a_candidate_page_shows_hunk_badges_and_links_evidence_to_its_hunk(tmp_path):
    r = result("linked", "fail", criteria={"c3": criterion("c3", "unmet", 0.0, [
        check("test_v", "failed", "Values round", pytest_failure("truncates", [(FILE, 43)]))])},
        apply=apply_report("fuzz", "applied at line 42 with fuzz 1"))
    write_html(tmp_path, [r], run_info(), {"linked": DIFF})
    html = (tmp_path / "candidates" / page_name("linked")).read_text()
    assert '<span class="badge h-applied">applied</span>' in html and '<span class="badge h-fuzz">fuzz</span>' in html
    assert '<a class="place" href="#hunk-1-2">triton_reshape_and_cache_flash.py:43</a>' in html
    assert '<a href="#ev-c3-1">c3 test_v (line 43)</a>' in html
    # Old and new numbers in columns of their own: an added line has only a new one.
    assert re.search(r'<span class="add named" data-new="43"><span class="ln" aria-hidden="true"></span>'
                     r'<span class="ln" aria-hidden="true" data-n="43"></span>\+    f = tl\.extra', html)
    assert re.search(r'data-old="40" data-new="42"><span class="ln" aria-hidden="true" data-n="40"></span>'
                     r'<span class="ln" aria-hidden="true" data-n="42"></span>     e = 5', html)
    assert 'failing checks of <a href="#crit-c3">c3</a> name this file' in html
    assert all_tasks()[TASK].criteria["c3"].requires in html.replace("&#39;", "'").replace("&#34;", '"')


# ---------------------------------------------------------------- in a browser

CHROMIUM = system_chromium()


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (make browser installs it)")
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS))
        yield launched
        launched.close()


def open_page(browser, path: Path, width: int, javascript: bool = True):
    context = browser.new_context(viewport={"width": width, "height": 900}, java_script_enabled=javascript)
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    return page, problems


def visible_ids(page, task: str = TASK) -> list[str]:
    return page.eval_on_selector_all(f'section.task[data-task="{task}"] tbody tr:not([hidden]) th.cand',
                                     "cells => cells.map(c => c.textContent.trim())")


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_pages_load_clean_and_never_scroll_sideways(browser, tmp_path, width):
    index = write_every_kind(tmp_path, {"full-one": "full", "partial-one": "fail"})
    for path in [index] + sorted((tmp_path / "candidates").iterdir()):
        page, problems = open_page(browser, path, width)
        assert problems == [], (path.name, problems)
        overflow = page.evaluate("document.documentElement.scrollWidth - innerWidth")
        assert overflow <= 0, f"{path.name} at {width} px scrolls {overflow} px sideways"
        assert page.evaluate("document.title")
        page.context.close()


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_sorting_and_filtering_reorder_and_hide_rows(browser, tmp_path, width):
    index = write_every_kind(tmp_path)
    page, problems = open_page(browser, index, width)
    listed = visible_ids(page)
    assert listed == sorted(listed) and len(listed) == 8
    scores = "rows => rows.map(r => Number(r.children[2].getAttribute('data-sort')))"
    selector = f'section.task[data-task="{TASK}"] tbody tr'
    if width >= 1280:
        header = page.locator(f'section.task[data-task="{TASK}"] th[data-key="verdict"] button')
        header.click()
        ranks = page.eval_on_selector_all(selector, "rows => rows.map(r => Number(r.children[1].dataset.sort))")
        assert ranks == sorted(ranks) and visible_ids(page)[0] == "full-one"
        header.click()
        ranks = page.eval_on_selector_all(selector, "rows => rows.map(r => Number(r.children[1].dataset.sort))")
        assert ranks == sorted(ranks, reverse=True)
    page.select_option("#sort-key", "score")
    page.select_option("#sort-order", "descending")
    assert page.eval_on_selector_all(selector, scores) == [1.0, 0.8, 0.7, 0.6, 0.5, 0.3, 0.0, -1]
    assert visible_ids(page)[:3] == ["full-one", "partial-one", "timed"]
    page.fill("#filter-text", "timed")
    assert visible_ids(page) == ["timed"]
    assert page.locator("#filter-count").text_content() == "1 of 9 candidates shown"
    assert page.locator('section.task[data-task="(no task)"]').is_hidden()
    page.fill("#filter-text", "")
    page.select_option("#filter-verdict", "fail")
    assert sorted(visible_ids(page)) == sorted(["apply-failed", "cut", HOSTILE_ID])
    page.select_option("#filter-verdict", "")
    page.select_option("#filter-run", "apply_partial")
    assert visible_ids(page) == ["half-applied"]
    page.select_option("#filter-run", "")
    page.select_option("#filter-task", "(no task)")
    assert visible_ids(page) == [] and visible_ids(page, "(no task)") == ["empty"]
    assert problems == []
    page.context.close()


@pytest.mark.browser
def test_without_javascript_every_row_shows_and_the_filter_form_stays_hidden(browser, tmp_path):
    page, problems = open_page(browser, write_every_kind(tmp_path), 1280, javascript=False)
    assert len(visible_ids(page)) == 8 and page.locator("#filters").is_hidden()
    assert page.locator("table.results").first.is_visible()
    assert problems == []
    page.context.close()


# ---------------------------------------------------------------- diff navigation, linked checks, URL state

OTHER = "vllm/v1/attention/ops/other.py"


def long_diff(lines: int = 320) -> str:
    """DIFF and a second file long enough to make the diff long."""
    body = "".join(f"+    x{n} = {n}\n" for n in range(lines))
    return DIFF + (f"diff --git a/{OTHER} b/{OTHER}\nindex 3333333..4444444 100644\n--- a/{OTHER}\n+++ b/{OTHER}\n"
                   f"@@ -1,1 +1,{lines + 1} @@\n def f():\n{body}")


def ran_result(cid: str = "ran", ran_lines: dict[str, list[int]] | None = None) -> CandidateResult:
    ran = replace(check("test_v", "failed", "Values round", "E   AssertionError: value cache truncates"),
                  ran=ran_lines or {FILE: [43]})
    idle = replace(check("test_w", "failed", "Keys round", "E   AssertionError: key cache truncates"), ran={})
    apply = ApplyReport("applied", "git apply", [
        FileReport(FILE, "modified", [HunkReport("@@ -10,3 +10,5 @@ def store(x):", "applied"),
                                      HunkReport("@@ -40,4 +42,4 @@ def kernel(x):", "applied")]),
        FileReport(OTHER, "modified", [HunkReport("@@ -1,1 +1,321 @@", "applied")])])
    return result(cid, "fail", criteria={"c3": criterion("c3", "unmet", 0.0, [ran, idle])}, apply=apply)


def test_a_long_diff_gets_a_file_list_and_collapses_the_files_no_failing_check_touched(tmp_path):
    page = build_candidate(ran_result(), long_diff())
    first, second = page.diff.files
    assert (first.open, second.open) == (True, False) and page.diff.collapsed
    assert (first.added, first.removed, first.ran_in_failing, second.added) == (3, 1, 1, 320)
    assert all(f.open for f in build_candidate(ran_result(), long_diff(20)).diff.files)
    write_html(tmp_path, [ran_result()], run_info(), {"ran": long_diff()})
    html = (tmp_path / "candidates" / page_name("ran")).read_text()
    assert '<nav class="diff-toc"' in html and f'<a href="#{second.anchor}"><code>{OTHER}</code></a>' in html
    assert html.count('<details class="file-body" open>') == 1 and html.count('<details class="file-body">') == 1


def write_every_report(out: Path, results: list[CandidateResult]) -> list[Path]:
    """results.json, the pages and the JUnit file of ``results``, with the run facts of a merge (no clock)."""
    run = run_info(candidates=len(results))
    diffs = {r.id: long_diff() if r.id == "ran" else HOSTILE_DIFF if r.id == HOSTILE_ID else DIFF for r in results}
    write_results_json(out, results, run)
    write_html(out, results, run, diffs)
    write_junit(out / "junit.xml", results, 0.5, run.started_at)
    return sorted(p for p in out.rglob("*") if p.is_file())


def test_reports_from_results_json_read_back_are_the_reports_of_the_records(tmp_path):
    """The writers read records only: results.json read back (what a merge does) gives the same files, byte for
    byte, as the records it was written from, and a result still in its JSON form is refused, not half-read."""
    records = [*every_kind_of_result(), ran_result()]
    written = write_every_report(tmp_path / "graded", records)
    document = json.loads((tmp_path / "graded" / "results.json").read_text())
    read_back = [CandidateResult.from_json(c) for c in document["candidates"]]
    again = write_every_report(tmp_path / "read-back", read_back)
    assert [p.relative_to(tmp_path / "graded") for p in written] == [p.relative_to(tmp_path / "read-back")
                                                                      for p in again]
    assert len(written) > len(records) + 2
    for first, second in zip(written, again):
        assert first.read_bytes() == second.read_bytes(), first.name
    with pytest.raises(AttributeError):
        write_junit(tmp_path / "dicts.xml", document["candidates"])
    with pytest.raises(AttributeError):
        build_index(document["candidates"], page_name)


def test_the_index_marks_cut_previews_for_the_input_filter(tmp_path):
    html = write_every_kind(tmp_path).read_text()
    assert html.count('data-input="cut"') == 1 and 'id="filter-input"' in html


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_a_failing_check_links_to_the_hunk_that_ran_and_back(browser, tmp_path, width):
    write_html(tmp_path, [ran_result()], run_info(), {"ran": long_diff()})
    page, problems = open_page(browser, tmp_path / "candidates" / page_name("ran"), width)
    link = page.locator("a.ran-link")
    assert link.text_content() == "triton_reshape_and_cache_flash.py hunk 2"
    link.focus()
    page.keyboard.press("Enter")
    assert page.evaluate("location.hash") == "#hunk-1-2"
    assert page.locator("#hunk-1-2").is_visible() and page.locator("#hunk-1-2 .ran-by").is_visible()
    page.locator('#hunk-1-2 .ran-by a[href="#ev-c3-1"]').click()
    assert page.evaluate("location.hash") == "#ev-c3-1" and page.locator("#ev-c3-1").is_visible()
    assert "none of the diff's lines ran in this check" in page.locator("#ev-c3-2").text_content()
    overflow = page.evaluate("document.documentElement.scrollWidth - innerWidth")
    assert overflow <= 0 and problems == []
    page.context.close()


@pytest.mark.browser
def test_a_link_into_a_collapsed_file_opens_it(browser, tmp_path):
    write_html(tmp_path, [ran_result(ran_lines={OTHER: [2]})], run_info(), {"ran": long_diff()})
    path = tmp_path / "candidates" / page_name("ran")
    page, problems = open_page(browser, path, 1280)
    assert page.locator("#hunk-2-1").is_visible()  # the file it ran in is open: a failing check links it
    page.goto(path.resolve().as_uri() + "#hunk-1-1")
    page.wait_for_load_state("load")
    assert page.locator("#hunk-1-1").is_visible() and problems == []
    page.context.close()


@pytest.mark.browser
def test_filter_and_sort_live_in_the_url_and_come_back_on_load(browser, tmp_path):
    index = write_every_kind(tmp_path)
    page, problems = open_page(browser, index, 1280)
    page.select_option("#filter-verdict", "fail")
    page.select_option("#sort-key", "score")
    page.select_option("#sort-order", "descending")
    query = page.evaluate("location.search")
    assert query == "?verdict=fail&sort=score&order=descending"
    page.goto(index.resolve().as_uri() + "?input=cut&text=cut")
    page.wait_for_load_state("load")
    assert page.input_value("#filter-input") == "cut" and page.input_value("#filter-text") == "cut"
    assert visible_ids(page) == ["cut"]
    page.goto(index.resolve().as_uri() + query)
    page.wait_for_load_state("load")
    assert page.input_value("#filter-verdict") == "fail" and page.input_value("#sort-key") == "score"
    assert visible_ids(page) == [HOSTILE_ID, "cut", "apply-failed"]  # fail rows, best score first
    page.select_option("#filter-input", "whole")
    assert "input=whole" in page.evaluate("location.search") and "cut" not in visible_ids(page)
    assert problems == []
    page.context.close()


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_criterion_headers_never_break_inside_a_word(browser, tmp_path, width):
    page, problems = open_page(browser, write_every_kind(tmp_path), width)
    broken = page.evaluate("""() => {
      const split = [];
      for (const title of document.querySelectorAll('th.crit .ctitle')) {
        if (!title.offsetParent) continue;
        const text = title.firstChild, words = /[^\\s-]+/g;
        let m;
        while ((m = words.exec(text.data))) {
          const range = document.createRange();
          range.setStart(text, m.index); range.setEnd(text, m.index + m[0].length);
          const lines = new Set(Array.from(range.getClientRects(), r => Math.round(r.top)));
          if (lines.size > 1) split.push(m[0]);
        }
      }
      return split;
    }""")
    assert broken == [] and problems == []
    page.context.close()


# ---------------------------------------------------------------- layout with the widest content a run gives


def widest_results() -> list[CandidateResult]:
    """Rows as wide as real ones get: bundle ids, every run status, the phrase of a partial that is all met where
    evaluated, a judge column and long reasons."""
    met_here = {c: criterion(c, "met", 1.0, [check(f"t_{c}", "passed", "ok"),
                                             check(f"t_{c}_gpu", "skipped", message=GPU_SKIP)], coverage=0.5,
                             not_run={"gpu": 1}) for c in ("c1", "c2", "c3", "c4", "c5")}
    long_reason = ("a very long failing claim about what the rubric requires of the key and value caches " * 3)
    rows = [result("graded-candidates-7997c44f4c~2", "partial", criteria=met_here, score=0.97),
            result("graded-candidates-0123456789", "incomplete", run_status="timed_out", score=None),
            result("graded-candidates-abcdef0123", "error", criteria={}, run_status="environment_error",
                   error="the task's control failed: " + long_reason, score=None),
            result("graded-candidates-fedcba9876", "input_truncated", run_status="input_truncated", score=None),
            result("graded-candidates-5555555555", "fail", score=0.1,
                   criteria={"c1": criterion("c1", "unmet", 0.0, [check("t", "failed", long_reason, "E boom")])})]
    return rows


def write_widest(out: Path) -> Path:
    rows = widest_results()
    judge = {r.id: "partial" for r in rows}
    return write_html(out, rows, run_info(candidates=len(rows)), {r.id: DIFF for r in rows}, judge)


OVERFLOWING = """selector => Array.from(document.querySelectorAll(selector)).filter(
    e => e.scrollWidth > e.clientWidth + 1).map(e => e.outerHTML.slice(0, 120))"""


@pytest.mark.browser
def test_the_reason_column_is_whole_at_1280(browser, tmp_path):
    page, problems = open_page(browser, write_widest(tmp_path), 1280)
    assert page.eval_on_selector_all(".table-scroll", "els => els.filter(e => e.scrollWidth > e.clientWidth)") == []
    right = page.evaluate("innerWidth")
    edges = page.eval_on_selector_all("td.reason", "cells => cells.map(c => c.getBoundingClientRect().right)")
    assert edges and max(edges) <= right
    assert problems == []
    page.context.close()


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_no_score_or_label_overlaps_what_is_beside_it(browser, tmp_path, width):
    index = write_widest(tmp_path)
    for path in [index] + sorted((tmp_path / "candidates").iterdir()):
        page, problems = open_page(browser, path, width)
        # A cell, a badge or a fact whose content is wider than its box draws over its neighbour.
        for selector in ("table.results tbody td", ".verdict-line .fact", ".verdict-line .badge", ".badge"):
            assert page.evaluate(OVERFLOWING, selector) == [], (path.name, width, selector)
        # The score's number starts after its label ends (a card on a phone writes the label before it).
        overlaps = page.evaluate("""() => Array.from(document.querySelectorAll('td[data-label=score], .fact'))
            .filter(e => { const r = e.getBoundingClientRect(); return r.width > 0 && e.scrollWidth > r.width + 1; })
            .length""")
        assert overlaps == 0, (path.name, width)
        assert problems == []
        page.context.close()


@pytest.mark.browser
def test_a_header_click_is_kept_in_the_url_and_restored(browser, tmp_path):
    index = write_every_kind(tmp_path)
    page, problems = open_page(browser, index, 1280)
    page.locator(f'section.task[data-task="{TASK}"] th[data-key="c3"] button').click()
    page.locator(f'section.task[data-task="{TASK}"] th[data-key="c3"] button').click()
    assert "sort=c3" in page.url and "order=descending" in page.url
    order = visible_ids(page)
    again, _ = open_page(browser, Path(index), 1280)
    again.goto(page.url)
    again.wait_for_load_state("load")
    assert visible_ids(again) == order
    assert again.locator("#sort-key").input_value() == "c3"
    assert problems == []
    page.context.close()
    again.context.close()


@pytest.mark.browser
def test_a_supplied_judge_paragraph_stands_beside_the_summary(browser, tmp_path):
    judged = replace(result("judged"), reference_summary="The judge says the value cache still truncates.")
    write_html(tmp_path, [judged], run_info(), {"judged": DIFF})
    path = tmp_path / "candidates" / page_name("judged")
    html = path.read_text()
    assert "<details class=\"reference\"" not in html
    page, problems = open_page(browser, path, 1280)
    ours = page.locator(".summary-ours").bounding_box()
    theirs = page.locator(".summary-judge").bounding_box()
    assert theirs["x"] >= ours["x"] + ours["width"] - 1 and abs(theirs["y"] - ours["y"]) < 2
    assert page.locator(".summary-judge").is_visible()
    page.context.close()
    phone, _ = open_page(browser, path, 390)
    assert phone.locator(".summary-judge").bounding_box()["y"] > phone.locator(".summary-ours").bounding_box()["y"]
    assert problems == []
    phone.context.close()


def test_pages_of_two_runs_of_a_candidate_differ_only_in_timings(tmp_path):
    def run(stamp: str, pid: int, scratch: str, took: str) -> CandidateResult:
        log = (f"INFO 12-04 {stamp} [config.py:1234] resolved architecture\n"
               f"  File \"/tmp/{scratch}/import-root/{FILE}\", line 43, in kernel\n"
               f"    f = x.to(tl.int8)\n        ^^^^^^^^^^^^^^\n"
               f"E   AssertionError: truncates at 0x7f3a{pid:08x} (pid={pid}) after {took}s")
        failing = criterion("c3", "unmet", 0.0, [check("test_values_rounded", "failed", "Values round", log)])
        return result("twice", criteria={"c3": failing}, summary=f"The patch rounds keys. Took {took}s.",
                      error=f"environment error at 2026-12-04T{stamp}+00:00 in /tmp/{scratch}")

    pages = []
    for n, args in enumerate((("20:01:02.123", 4242, "grader-abc1x", "0.53"),
                              ("21:11:12.456", 917, "grader-zz9q2", "1.27"))):
        write_html(tmp_path / str(n), [run(*args)], run_info(), {"twice": DIFF})
        pages.append((tmp_path / str(n) / "candidates" / page_name("twice")).read_text())
    assert pages[0] == pages[1]
    assert "^^^^" not in pages[0] and "12-04 20:01" not in pages[0]
    # The message's place in the diff still links, through the scratch path.
    assert "triton_reshape_and_cache_flash.py:43" in pages[0]


def test_coverage_and_skipped_counts_agree_where_skipped_variants_stood_in(tmp_path):
    stood_in = criterion("c1", "met", 1.0, [check("t_cpu", "passed", "ok")] +
                         [check(f"t_gpu_{n}", "skipped", message="variant: the CPU case ran") for n in range(6)])
    write_html(tmp_path, [result("variants", "full", criteria={"c1": stood_in}, score=1.0)], run_info(),
               {"variants": DIFF})
    html = (tmp_path / "candidates" / page_name("variants")).read_text()
    assert "100% of the weighted checks ran" in html and "6 skipped" in html
    assert "6 skipped: variants of checks that ran here, not counted" in html
