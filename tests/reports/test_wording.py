"""How a result is said: the verdict's wording (the same on the index, the page, the terminal and in the summary),
the one claim chosen for a failed criterion, and summaries that say what was verified and what decided the rest."""

from __future__ import annotations

from dataclasses import replace

from grader.core.records import ApplyReport, CandidateResult, CriterionResult, EvidenceEntry, FileReport, HunkReport
from grader.core.rubric import all_tasks
from grader.reports.describe import describe_file
from grader.core.records import Graded
from grader.reports.scorecard import build_index, reason
from grader.reports.summarize import summarize
from grader.reports.terminal import candidate_line
from grader.reports.wording import checks_not_run, deciding_failure, not_run_phrase, verdict_line, verdict_phrase

TASK = "xpu-kv-cache-dtypes"
FILE = "vllm/v1/attention/backends/triton_attn.py"


def entry(test: str, status: str, claim: str = "", message: str = "", kinds=()) -> EvidenceEntry:
    return EvidenceEntry(f"{TASK}/tests/test_k.py::{test}", status, 1.0, claim, list(kinds), 0.0, message)


def criterion(cid: str, status: str, score, evidence, rationale: str = "", coverage: float = 1.0,
              not_run=None) -> CriterionResult:
    title = all_tasks()[TASK].criteria[cid].title
    return CriterionResult(cid, title, score, status, rationale or f"{status}", evidence, coverage, not_run or {})


GPU_SKIP = "Skipped: needs a CUDA GPU: GPU evidence is switched off for this run"


def met(cid: str, skipped: int = 0) -> CriterionResult:
    evidence = [entry(f"test_{cid}", "passed", f"{cid} holds")]
    evidence += [entry(f"test_{cid}_gpu[{n}]", "skipped", message=GPU_SKIP, kinds=["gpu"]) for n in range(skipped)]
    return criterion(cid, "met", 1.0, evidence, coverage=1 / (1 + skipped) if skipped else 1.0,
                     not_run={"gpu": skipped} if skipped else None)


def candidate(verdict: str, score, criteria: dict[str, CriterionResult]) -> CandidateResult:
    apply = ApplyReport("applied", "git apply", [FileReport(FILE, "modified", [HunkReport("@@ -1 +1 @@", "applied")])])
    return CandidateResult("cand", TASK, "cand.diff", verdict, score, criteria, apply, "")


def summary_of(result: CandidateResult) -> str:
    return summarize(all_tasks()[TASK], result, None, "adds the condition `x.is_xpu()` in `f()`")


def all_met_but_gpu() -> CandidateResult:
    criteria = {cid: met(cid, skipped=2 if cid in ("c1", "c3") else 0) for cid in ("c1", "c2", "c3", "c4")}
    criteria["c5"] = criterion("c5", "not_evaluated", None,
                               [entry("test_c5_gpu", "skipped", message=GPU_SKIP, kinds=["gpu"])],
                               GPU_SKIP, 0.0, {"gpu": 1})
    return candidate("partial", 1.0, criteria)


def test_a_partial_short_of_full_only_by_checks_not_run_reads_as_all_met_where_evaluated():
    data = all_met_but_gpu()
    assert verdict_phrase(data) == "all met where evaluated; 5 GPU checks not run; c5 not evaluated"
    assert verdict_line(data) == "partial (all met where evaluated; 5 GPU checks not run; c5 not evaluated)"
    assert reason(data, {"c1"}) == verdict_phrase(data)
    (row,) = build_index([data], lambda cid: f"{cid}.html").tables[0].rows
    assert row.phrase == verdict_phrase(data)
    line = candidate_line(Graded(None, all_met_but_gpu()), 1, 1)
    assert "partial (all met where evaluated; 5 GPU checks not run" in line and "1.00" not in line
    summary = summary_of(all_met_but_gpu())
    assert summary.endswith("Verdict partial: all met where evaluated; 5 GPU checks not run; c5 not evaluated.")
    assert "Not evaluated: c5 (Every validation site agrees), because needs a CUDA GPU" in summary


def test_a_check_evidencing_two_criteria_counts_once_among_those_not_run():
    shared = entry("test_both_gpu", "skipped", message=GPU_SKIP, kinds=["gpu"])
    criteria = {"c1": criterion("c1", "met", 1.0, [shared, entry("a", "passed")]),
                "c2": criterion("c2", "not_evaluated", None, [shared])}
    assert checks_not_run(criteria) == {"gpu": 1}


def test_a_check_the_grader_did_not_run_is_named_as_the_graders_not_the_candidates():
    criteria = {"c1": criterion("c1", "met", 1.0, [entry("a", "passed"), entry("b", "not_run"), entry("c", "timeout")])}
    counts = checks_not_run(criteria)
    assert counts == {"not_run": 1, "timeout": 1}
    assert not_run_phrase(counts) == "1 check timed out, 1 check not run (the grader's fault)"


def test_input_truncated_and_no_task_read_as_their_verdicts():
    for verdict, words in (("input_truncated", "input truncated"), ("no_task", "no task")):
        result = candidate(verdict, None, {})
        assert verdict_line(result) == words
        assert f"{verdict} -" in candidate_line(Graded(None, result), 1, 1)


def test_other_verdicts_read_as_verdict_and_score():
    data = candidate("fail", 0.0, {"c1": criterion("c1", "unmet", 0.0, [entry("t", "failed", "claim")])})
    assert verdict_line(data) == "fail 0.00" and build_index([data], str).tables[0].rows[0].phrase == ""


def test_a_full_result_says_what_was_verified_in_the_rubrics_words():
    criteria = {cid: met(cid) for cid in ("c1", "c2", "c3", "c4", "c5")}
    summary = summary_of(candidate("full", 1.0, criteria))
    titles = [c.title for c in all_tasks()[TASK].criteria.values()]
    assert "Every criterion is verified: " + "; ".join(titles) + "." in summary
    assert summary.startswith("The patch changes the Triton attention backend's KV cache dtype check: it adds")
    assert summary.endswith("Verdict full (1.00).")


def test_each_unmet_criterion_is_told_by_its_claim_case_and_observation_and_the_index_names_the_same_claim(
        monkeypatch):
    import grader.reports.summarize

    # The whole form, uncapped; the terse one and the cap are tested below.
    monkeypatch.setattr(grader.reports.summarize, "SUMMARY_WORDS", 1000)
    monkeypatch.setattr(grader.reports.summarize, "FIXED_CAP", 1000)
    timeout = entry("test_slow", "timeout", "Times out first", "timeout: no answer")
    c1 = criterion("c1", "unmet", 0.0, [timeout, entry("test_fp8[fp8_e5m2]", "failed", "The backend accepts fp8.",
                                                       "E   AssertionError: rejected kv_cache_dtype='fp8_e5m2' on XPU"),
                                        entry("test_fp8[fp8]", "failed", "The backend accepts fp8.")])
    c5 = criterion("c5", "partial", 0.5, [entry("test_a", "passed"), replace(
        entry("test_b", "failed", "Both sites agree", "E   AssertionError: " + "the store disagrees, " * 12),
        ran={})])
    criteria = {"c1": c1, "c2": met("c2"), "c3": met("c3"), "c4": met("c4"), "c5": c5}
    result = candidate("fail", 0.6, criteria)
    summary = summary_of(result)
    assert ('Core criterion c1 (fp8 KV cache accepted on XPU) is not met: "The backend accepts '
            "fp8\" fails for fp8_e5m2 (rejected kv_cache_dtype='fp8_e5m2' on XPU).") in summary
    assert "c5 (Every validation site agrees) is only partly met: \"Both sites agree\" fails " \
           "(the store disagrees" in summary
    assert "none of the diff's lines ran there" in summary
    # One clause of evidence each: no count of checks stands in for what was observed.
    assert "checks pass" not in summary
    assert "..." not in summary and "Times out first" not in summary
    assert deciding_failure(result.criteria["c1"].evidence).test.endswith("[fp8_e5m2]")
    assert reason(result, {"c1", "c2"}) == "c1: \u201cThe backend accepts fp8\u201d does not hold"


def test_descriptions_never_cut_a_fragment_or_leave_a_count_without_its_noun():
    before = "def test_a():\n    pass\n"
    assert describe_file("tests/test_k.py", before, "def test_a():\n    assert 1\n") == ["edits 1 test in `test_k.py`"]
    long_condition = " and ".join(f"platform.check_{n}()" for n in range(8))
    (text,) = describe_file("vllm/g.py", "def g():\n    return 1\n",
                            f"def g():\n    if {long_condition}:\n        return 2\n    return 1\n")
    # A condition too long to quote is told by what it tests, never by a count of conditions.
    assert text == "now also checks `platform.check_0()` and `platform.check_1()` in `g()`" and "..." not in text


def test_a_summary_over_its_length_keeps_every_unmet_claim_and_case_and_the_first_observation_only(monkeypatch):
    import grader.reports.summarize

    monkeypatch.setattr(grader.reports.summarize, "FIXED_CAP", 1000)  # the terse form alone; the cap is tested below
    c1 = criterion("c1", "unmet", 0.0, [entry("test_fp8[fp8_e5m2]", "failed", "The backend accepts fp8 " * 8,
                                              "E   AssertionError: rejected kv_cache_dtype='fp8_e5m2' on XPU")])
    c5 = criterion("c5", "partial", 0.5, [entry("test_a", "passed"),
                                          entry("test_b[sm75]", "failed", "Both sites agree", "E   AssertionError: no")])
    result = candidate("fail", 0.6, {"c1": c1, "c2": met("c2"), "c3": met("c3"), "c4": met("c4"), "c5": c5})
    summary = summary_of(result)
    whole = grader.reports.summarize.render_summary(all_tasks()[TASK], result, None, "adds the condition `x.is_xpu()` in `f()`",
                                            terse=False)
    assert len(summary.split()) < len(whole.split()) and len(whole.split()) > grader.reports.summarize.SUMMARY_WORDS
    claim = ("The backend accepts fp8 " * 8).strip()
    assert (f"Core criterion c1 is not met: \"{claim}\" fails for fp8_e5m2 (rejected "
            "kv_cache_dtype='fp8_e5m2' on XPU).") in summary
    assert 'c5 is only partly met: "Both sites agree" fails for sm75.' in summary
    assert summary.endswith("Verdict fail (0.60).")
    assert reason(result, {"c1", "c2"}) == f"c1: \u201c{claim}\u201d does not hold"  # the index names the same claim


def failing_result(reference_summary: str | None = None) -> CandidateResult:
    c1 = criterion("c1", "unmet", 0.0, [entry("test_fp8[fp8_e5m2]", "failed", "The backend accepts fp8",
                                              "E   AssertionError: rejected kv_cache_dtype='fp8_e5m2' on XPU")])
    c5 = criterion("c5", "partial", 0.5, [entry("test_a", "passed"),
                                          entry("test_b[sm75]", "failed", "Both sites agree", "E   AssertionError: no")])
    criteria = {"c1": c1, "c2": met("c2"), "c3": met("c3"), "c4": met("c4"), "c5": c5}
    return replace(candidate("fail", 0.1, criteria), reference_summary=reference_summary)


LONG_CHANGE = "; ".join(f"adds the condition `x.check_{n}()` in `f{n}()`" for n in range(6))


def test_a_summary_is_never_longer_than_the_judges_paragraph_plus_a_fifth():
    import grader.reports.summarize

    for judge_words in (3, 8, 20, 35, 49, 87):
        judge = " ".join(["word"] * judge_words)
        for change in ("adds the condition `x.is_xpu()` in `f()`", LONG_CHANGE):
            for result in (failing_result(judge), replace(all_met_but_gpu(), reference_summary=judge)):
                summary = summarize(all_tasks()[TASK], result, None, change)
                assert len(summary.split()) <= max(int(judge_words * 1.2), grader.reports.summarize.MIN_CAP), summary
                assert summary.endswith(".") and summary.split()[0] in ("The", "Verdict"), summary
    # Without a judge's paragraph the cap is the fixed one.
    summary = summarize(all_tasks()[TASK], failing_result(), None, LONG_CHANGE)
    assert len(summary.split()) <= grader.reports.summarize.FIXED_CAP


def test_under_its_cap_a_summary_keeps_the_change_the_deciding_evidence_and_the_verdict():
    summary = summarize(all_tasks()[TASK], failing_result(" ".join(["word"] * 45)), None,
                        "adds the condition `x.is_xpu()` in `f()`")
    assert summary.startswith("The patch changes") and "`x.is_xpu()`" in summary
    assert "Core criterion c1 is not met: \"The backend accepts fp8\" fails for fp8_e5m2" in summary
    assert summary.endswith("Verdict fail (0.10).")
    # What was verified gives way first.
    assert "Verified" not in summary


def test_a_reason_cut_to_fit_is_cut_where_a_clause_ends_never_inside_a_list():
    from grader.reports.summarize import fit_words

    anchored = "c2, c3, c4 and c5 get no credit while their anchor c1 is unmet."
    kept = fit_words(["The patch does one thing here.", anchored, "Verdict fail (0.00)."], 11)
    assert kept == ["The patch does one thing here.", "Verdict fail (0.00)."]
    evidence = 'Core criterion c1 is not met: "A long claim about what the kernel must do" fails for tp1.'
    cut = fit_words(["The patch does one thing.", evidence, "Verdict fail (0.00)."], 16)
    assert cut == ["The patch does one thing.", "Core criterion c1 is not met.", "Verdict fail (0.00)."]


def test_a_judge_label_of_a_few_words_still_leaves_room_for_what_happened():
    cut = replace(failing_result("Looks fine."), verdict="input_truncated", run_status="input_truncated", score=None,
                  criteria={c: met(c) for c in ("c1", "c2", "c3", "c4", "c5")})
    summary = summarize(all_tasks()[TASK], cut, None, "adds the condition `x.is_xpu()` in `f()`")
    assert summary.startswith("The input was cut off, after every file the criteria read")
    assert summary.endswith("Verdict input truncated.")
