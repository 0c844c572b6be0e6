"""Scoring: criterion scores from test outcomes, conditional criteria, verdicts and the overall score."""

from __future__ import annotations

from dataclasses import replace

import pytest

from grader.core.records import ApplyReport, CriterionResult, RunReport
from grader.core.records import TestOutcome as Outcome  # a name pytest does not collect
from grader.core.rubric import RUBRICS_DIR, load_task
from grader.pipeline.score import (FULL_AT, MET_AT, UNMET_AT, apply_conditions, criteria_mean, overall_score, score_criteria,
                          score_from_outcomes, variant_case, status_for, verdict_for)
from grader.taskkit.validate import check_rules


@pytest.fixture(scope="module")
def task():
    """moe-swap-ab: c1 fix (core, weight 2), c2-c4 conditional on c1 (c3 core, weight 2), c5 preserve."""
    t = load_task(RUBRICS_DIR / "moe-swap-ab")
    assert [c.kind for c in t.criteria.values()] == ["fix", "conditional", "conditional", "conditional", "preserve"]
    assert {c.anchor for c in t.criteria.values() if c.kind == "conditional"} == {"c1"}
    assert t.core_criteria == ["c1", "c3"]
    return t


def out(name: str, status: str, message: str = "", **criteria: float) -> Outcome:
    return Outcome(f"tests/test_x.py::{name}", status, dict(criteria), doc=f"claim of {name}", message=message)


def result(cid: str, score: float | None, status: str | None = None) -> CriterionResult:
    if status is None:
        status = "not_evaluated" if score is None else status_for(score)
    return CriterionResult(cid, f"title {cid}", score, status, f"why {cid}", coverage=0.0 if score is None else 1.0)


def results(task, **scores) -> dict[str, CriterionResult]:
    return {cid: result(cid, scores.get(cid, 1.0)) for cid in task.criteria}


# --- one criterion -----------------------------------------------------------------------------------------------------


def test_weighted_share():
    outcomes = [out("a", "passed", c1=3), out("b", "failed", c1=1), out("c", "passed", c2=1)]
    r = score_from_outcomes("c1", "t", outcomes)
    # A failed check is never met, whatever its weight: the share orders partial credit only.
    assert r.score == 0.75 and r.status == "partial"
    assert [e.test for e in r.evidence] == ["tests/test_x.py::a", "tests/test_x.py::b"]
    assert r.evidence[0].claim == "claim of a" and r.evidence[0].weight == 3
    assert "3 of 4" in r.rationale and "b" in r.rationale


@pytest.mark.parametrize("passed, failed, score, status", [
    (3, 1, 0.75, "partial"),  # one failed case of four: not met
    (99, 1, 0.99, "partial"),
    (1, 3, 0.25, "unmet"),    # the unmet threshold is inclusive
    (1, 1, 0.5, "partial"),
    (2, 1, 0.6667, "partial"),
    (4, 0, 1.0, "met"),
    (0, 2, 0.0, "unmet"),
])
def test_thresholds(passed, failed, score, status):
    outcomes = [out(f"p{i}", "passed", c1=1) for i in range(passed)] + [
        out(f"f{i}", "failed", c1=1) for i in range(failed)]
    r = score_from_outcomes("c1", "t", outcomes)
    assert (r.score, r.status) == (score, status)


def test_status_for_boundaries():
    assert (MET_AT, UNMET_AT) == (1.0, 0.25)
    assert status_for(0.9999) == "partial" and status_for(0.2501) == "partial"
    assert status_for(1.0) == "met" and status_for(0.25) == "unmet"


def test_errors_count_as_failures():
    r = score_from_outcomes("c1", "t", [out("a", "passed", c1=1), out("b", "error", c1=1)])
    assert (r.score, r.status) == (0.5, "partial")


def test_timeouts_count_neither_way_and_lower_coverage():
    r = score_from_outcomes("c1", "t", [out("a", "passed", c1=1), out("b", "timeout", "no answer", c1=3)])
    assert (r.score, r.status, r.coverage, r.not_run) == (1.0, "met", 0.25, {"timeout": 1})
    assert "evaluated on 1 of 4" in r.rationale
    only = score_from_outcomes("c1", "t", [out("b", "timeout", "timeout: no answer", c1=1)])
    assert only.status == "not_evaluated" and "timeout" in only.rationale


def test_skips_are_left_out_of_the_share():
    outcomes = [out("a", "passed", c1=1), out("g", "skipped", "environment: no CUDA GPU", c1=5)]
    r = score_from_outcomes("c1", "t", outcomes)
    assert (r.score, r.status) == (1.0, "met")
    assert "not run" in r.rationale
    assert len(r.evidence) == 2


def test_skipped_only_is_not_evaluated_with_the_reason():
    outcomes = [out("g1", "skipped", "environment: no CUDA GPU", c1=1),
                out("g2", "skipped", "environment: no CUDA GPU", c1=2),
                out("h", "passed", c2=1)]
    r = score_from_outcomes("c1", "t", outcomes)
    assert r.score is None and r.status == "not_evaluated"
    assert r.rationale == "environment: no CUDA GPU"


def test_no_test_at_all_is_not_evaluated():
    r = score_from_outcomes("c4", "t", [out("a", "passed", c1=1)])
    assert r.score is None and r.status == "not_evaluated" and r.rationale and r.evidence == []


def test_zero_weight_evidence_is_not_evaluated():
    r = score_from_outcomes("c1", "t", [out("a", "failed", c1=0)])
    assert r.score is None and r.status == "not_evaluated"


# --- conditional criteria ------------------------------------------------------------------------------------------------


def test_conditional_with_unmet_anchor_scores_zero(task):
    rs = results(task, c1=0.0, c2=1.0, c3=1.0, c4=0.5)
    rs = apply_conditions(task, rs)
    for cid in ("c2", "c3", "c4"):
        assert (rs[cid].score, rs[cid].status) == (0.0, "unmet")
        assert "c1" in rs[cid].rationale and "unmet" in rs[cid].rationale
        assert f"why {cid}" in rs[cid].rationale  # its own checks are still shown
    assert (rs["c1"].score, rs["c5"].score) == (0.0, 1.0)


def test_conditional_with_partial_anchor_keeps_its_own_score(task):
    rs = results(task, c1=0.5, c2=0.8)
    rs = apply_conditions(task, rs)
    assert (rs["c2"].score, rs["c2"].status) == (0.8, "partial")


def test_conditional_with_an_anchor_at_the_unmet_threshold_scores_zero(task):
    rs = results(task, c1=0.25, c2=0.8)
    rs = apply_conditions(task, rs)
    assert (rs["c2"].score, rs["c2"].status) == (0.0, "unmet") and "unmet" in rs["c2"].rationale


def test_conditional_with_met_anchor_keeps_its_score(task):
    rs = results(task, c1=0.8, c2=0.5, c3=None)
    rs = apply_conditions(task, rs)
    assert (rs["c2"].score, rs["c2"].status) == (0.5, "partial")
    assert rs["c3"].status == "not_evaluated"


def test_conditional_with_unevaluated_anchor_is_not_evaluated(task):
    rs = results(task, c1=None, c2=1.0, c3=0.0)
    rs = apply_conditions(task, rs)
    for cid in ("c2", "c3", "c4"):
        assert rs[cid].score is None and rs[cid].status == "not_evaluated"
        assert "c1" in rs[cid].rationale and "why c1" in rs[cid].rationale


def test_score_criteria_end_to_end(task):
    outcomes = [out("fix", "failed", c1=1), out("fix2", "failed", c1=1),
                out("cond", "passed", c2=1, c3=1, c4=1), out("keep", "passed", c5=1),
                out("gpu", "skipped", "environment: no CUDA GPU", c3=1)]
    rs = score_criteria(task, RunReport(outcomes, 1, False, "", 1.0))
    assert rs["c1"].status == "unmet"
    assert [rs[c].score for c in ("c2", "c3", "c4")] == [0.0, 0.0, 0.0]
    assert rs["c5"].status == "met"


def test_environment_error_explains_unevaluated(task):
    run = RunReport([out("keep", "passed", c5=1)], None, False, "", 0.0, environment_error="torch import failed")
    rs = score_criteria(task, run)
    assert rs["c1"].status == "not_evaluated" and "torch import failed" in rs["c1"].rationale
    assert rs["c2"].status == "not_evaluated"
    assert rs["c5"].status == "met" and "torch import failed" not in rs["c5"].rationale


# --- verdicts and the overall score -------------------------------------------------------------------------------------


APPLIED = ApplyReport("applied", "git apply")


def test_verdict_no_diff(task):
    assert verdict_for(task, ApplyReport("empty"), results(task), "complete") == "no_diff"


@pytest.mark.parametrize("status", ["failed", "rejected"])
def test_verdict_fail_when_apply_failed(task, status):
    assert verdict_for(task, ApplyReport(status), results(task), "complete") == "fail"


@pytest.mark.parametrize("core", ["c1", "c3"])
def test_verdict_fail_on_core_below_unmet(task, core):
    assert verdict_for(task, APPLIED, results(task, **{core: 0.2}), "complete") == "fail"
    assert verdict_for(task, APPLIED, results(task, **{core: 0.25}), "complete") == "partial"  # fail is strictly below


def test_low_non_core_criterion_is_not_fail(task):
    assert verdict_for(task, APPLIED, results(task, c2=0.0, c4=0.0, c5=0.0), "complete") == "partial"


def test_core_not_evaluated_is_not_fail(task):
    assert verdict_for(task, APPLIED, results(task, c1=None, c3=None), "complete") == "partial"


def test_verdict_full_needs_all_five(task):
    assert FULL_AT == 1.0
    assert verdict_for(task, APPLIED, results(task), "complete") == "full"
    assert verdict_for(task, APPLIED, results(task, c1=0.99), "complete") == "partial"
    assert verdict_for(task, ApplyReport("partial", "git apply", truncated=True), results(task), "complete") == "full"
    assert verdict_for(task, APPLIED, results(task, c5=0.89), "complete") == "partial"
    assert verdict_for(task, APPLIED, results(task, c4=None), "complete") == "partial"


def test_full_needs_a_complete_run_and_full_coverage(task):
    assert verdict_for(task, APPLIED, results(task), "timed_out") == "incomplete"
    assert verdict_for(task, APPLIED, results(task, c1=0.0), "interrupted") == "incomplete"
    assert verdict_for(task, APPLIED, results(task), "apply_partial") == "partial"
    assert verdict_for(task, APPLIED, results(task), "environment_error") == "error"
    rs = results(task)
    rs["c2"] = replace(rs["c2"], coverage=0.5)
    assert verdict_for(task, APPLIED, rs, "complete") == "partial"


def test_criteria_mean_weighted_over_evaluated(task):
    rs = results(task, c1=1.0, c2=None, c3=0.5, c4=0.0, c5=1.0)
    # weights: c1 2, c3 2, c4 1, c5 1 -> (2 + 1 + 0 + 1) / 6
    assert criteria_mean(task, rs) == round(4 / 6, 4)
    assert criteria_mean(task, results(task, c1=None, c2=None, c3=None, c4=None, c5=None)) is None


def test_overall_score_orders_as_the_verdict(task):
    """Every fail scores below every partial, every partial below full, whatever the criteria's mean."""
    best_fail = overall_score(task, results(task, c1=0.2), "fail")
    worst_partial = overall_score(task, results(task, c1=0.3, c2=0.0, c3=0.3, c4=0.0, c5=0.0), "partial")
    best_partial = overall_score(task, results(task, c5=0.99), "partial")
    assert 0.0 <= best_fail < 0.25 <= worst_partial < best_partial < 1.0
    assert overall_score(task, results(task), "full") == 1.0
    assert overall_score(task, results(task, c1=None, c2=None, c3=None, c4=None, c5=None), "fail") == 0.0


@pytest.mark.parametrize("verdict", ["incomplete", "error", "input_truncated", "no_diff", "no_task"])
def test_unfinished_and_unjudged_verdicts_are_unscored(task, verdict):
    assert overall_score(task, results(task), verdict) is None


# --- validate-rubrics rules -------------------------------------------------------------------------------------------


def statuses_to_results(task, spec: dict[str, float | None]) -> dict[str, CriterionResult]:
    return {cid: result(cid, spec.get(cid)) for cid in task.criteria}


GOOD_BASE = {"c1": 0.0, "c2": 0.0, "c3": 0.0, "c4": 0.0, "c5": 1.0}
GOOD_REF = {"c1": 1.0, "c2": 1.0, "c3": 1.0, "c4": 1.0, "c5": 1.0}


def test_check_rules_accepts_a_sound_rubric(task):
    v = check_rules(task, statuses_to_results(task, GOOD_BASE), statuses_to_results(task, GOOD_REF))
    assert v.problems == [] and v.unevaluated == []
    assert v.base["c1"] == "unmet" and v.reference["c1"] == "met"


def test_check_rules_fix_met_on_base(task):
    v = check_rules(task, statuses_to_results(task, {**GOOD_BASE, "c1": 1.0}), statuses_to_results(task, GOOD_REF))
    assert len(v.problems) == 1 and v.problems[0].startswith("c1 (fix)") and "base is met" in v.problems[0]


def test_check_rules_preserve_unmet_on_base(task):
    v = check_rules(task, statuses_to_results(task, {**GOOD_BASE, "c5": 0.0}), statuses_to_results(task, GOOD_REF))
    assert len(v.problems) == 1 and v.problems[0].startswith("c5 (preserve)") and "must be met" in v.problems[0]


def test_check_rules_reference_must_score_high(task):
    v = check_rules(task, statuses_to_results(task, GOOD_BASE), statuses_to_results(task, {**GOOD_REF, "c3": 0.8}))
    assert len(v.problems) == 1 and v.problems[0].startswith("c3 (conditional)") and "0.8" in v.problems[0]


def test_check_rules_reference_must_meet_every_case_not_a_high_share(task):
    """Met is MET_AT: a reference that fails one case of a criterion (0.95 of its weight passing, above the old 0.9
    bar) does not validate it, and a base that fails one case of a preserve criterion breaks it."""
    v = check_rules(task, statuses_to_results(task, GOOD_BASE), statuses_to_results(task, {**GOOD_REF, "c1": 0.95}))
    assert len(v.problems) == 1 and v.problems[0].startswith("c1 (fix): reference scores 0.95 (partial), must be met")
    v = check_rules(task, statuses_to_results(task, {**GOOD_BASE, "c5": 0.95}), statuses_to_results(task, GOOD_REF))
    assert v.problems == ["c5 (preserve): base is partial, must be met"]


def test_check_rules_conditional_ignores_base(task):
    base = {**GOOD_BASE, "c2": 1.0, "c4": None}
    v = check_rules(task, statuses_to_results(task, base), statuses_to_results(task, GOOD_REF))
    assert v.problems == [] and v.unevaluated == []


def test_check_rules_unevaluated_is_reported_not_passed(task):
    v = check_rules(task, statuses_to_results(task, {**GOOD_BASE, "c5": None}),
                    statuses_to_results(task, {**GOOD_REF, "c3": None}))
    assert v.problems == []
    assert [u.split(":")[0] for u in v.unevaluated] == ["c3", "c5"]
    assert "why c3" in v.unevaluated[0] and "why c5" in v.unevaluated[1]


def test_check_rules_refuse_a_fix_criterion_the_base_leaves_not_evaluated(task):
    """A hang on the base (issue 28's LRU loop) once read as "not evaluated" and the rubric as ok."""
    v = check_rules(task, statuses_to_results(task, {**GOOD_BASE, "c1": None}), statuses_to_results(task, GOOD_REF))
    assert len(v.problems) == 1 and v.problems[0].startswith("c1 (fix): the base leaves it not evaluated (why c1)")
    # Where the reference cannot be evaluated here either (no GPU), it is only reported.
    v = check_rules(task, statuses_to_results(task, {**GOOD_BASE, "c1": None}),
                    statuses_to_results(task, {**GOOD_REF, "c1": None}))
    assert v.problems == [] and [u.split(":")[0] for u in v.unevaluated] == ["c1"]


def test_a_variant_skipped_where_another_variant_runs_does_not_lower_coverage():
    cpu = replace(out("k[cpu]", "passed", c1=1), kinds=["variant"])
    cuda = replace(out("k[cuda]", "skipped", "Skipped: variant: needs a CUDA GPU", c1=1), kinds=["gpu", "variant"])
    r = score_from_outcomes("c1", "t", [cpu, cuda])
    assert (r.score, r.coverage, r.not_run) == (1.0, 1.0, {})
    plain_gpu = replace(out("g", "skipped", "Skipped: needs a CUDA GPU", c1=1), kinds=["gpu"])
    r = score_from_outcomes("c1", "t", [cpu, plain_gpu])
    assert (r.coverage, r.not_run) == (0.5, {"gpu": 1})
    # When no variant ran (no GPU, and the interpreter cannot run it either), the skipped variants are missing.
    cpu_skipped = replace(out("k[cpu]", "skipped", "Skipped: environment: interpreter gap", c1=1), kinds=["variant"])
    other = out("s", "passed", c1=1)
    r = score_from_outcomes("c1", "t", [cpu_skipped, cuda, other])
    assert (r.coverage, r.not_run) == (round(1 / 3, 4), {"gpu": 1, "skipped": 1})


def test_a_variant_stands_in_only_for_its_own_case():
    """A GPU run skips the interpreter's variants; where a case (a ROCm platform) has no compiled variant that
    ran, its skipped variant is missing evidence, even while the criterion's CUDA cases ran."""
    cuda_case = replace(out("k[s1-cuda-cuda]", "passed", c1=1), kinds=["gpu", "variant"])
    cuda_case_cpu = replace(out("k[s1-cuda-cpu]", "skipped", "Skipped: variant: compiled run", c1=1),
                            kinds=["variant"])
    rocm_cpu = replace(out("k[s1-rocm-cpu]", "skipped", "Skipped: variant: compiled run", c1=1), kinds=["variant"])
    rocm_cuda = replace(out("k[s1-rocm-cuda]", "skipped", "Skipped: variant: interpreter only", c1=1),
                        kinds=["gpu", "variant"])
    r = score_from_outcomes("c1", "t", [cuda_case, cuda_case_cpu, rocm_cpu, rocm_cuda])
    assert (r.score, r.coverage, r.not_run) == (1.0, round(1 / 3, 4), {"gpu": 1, "skipped": 1})
    assert variant_case("k[s1-rocm-cpu]") == variant_case("k[s1-rocm-cuda]") == "k[s1-rocm]"
    assert variant_case("k") == "k"
    assert variant_case("f.py::test_numerics_interpreted_in_every_case") == "f.py::test_numerics_in_every_case"
    assert variant_case("f.py::test_numerics_interpreted[c1]") == variant_case("f.py::test_numerics[c1]")


def test_the_scoring_page_quotes_the_rule_as_the_code_has_it():
    """docs/scoring.md states the rule once: its constants are score.py's and it names every verdict."""
    from grader.pipeline import score
    from grader.core.records import VERDICTS
    from grader.core.rubric import REPO_ROOT

    page = (REPO_ROOT / "docs" / "scoring.md").read_text()
    for name in ("MET_AT", "UNMET_AT", "PARTIAL_BAND", "FAIL_BAND"):
        assert f"`{name} = {getattr(score, name)}`" in page, name
    assert all(f"| `{verdict}` |" in page for verdict in VERDICTS)
