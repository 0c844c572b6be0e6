"""The judge's own analysis of candidate text has a budget (issue 49): whole-file reads of the patched tree
through ``vllm_tree`` hold to a size, and a static check (or a fixture that reads the tree) to a time; past either,
the check it serves fails (``AnalysisBudgetExceeded`` is an AssertionError), never a skip and never a spin until
the run's limit. Real files and a real exponential walk over a crafted expression chain."""

from __future__ import annotations

import ast
import importlib.util
import time

import pytest

from grader.core.rubric import RUBRICS_DIR


def rubric_conftest(monkeypatch):
    monkeypatch.syspath_prepend(str(RUBRICS_DIR))
    spec = importlib.util.spec_from_file_location("rubric_conftest_under_test", RUBRICS_DIR / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def exponential_walk(node: ast.AST) -> int:
    """A walk a careless static check might write: each BinOp visits its left side twice."""
    if isinstance(node, ast.BinOp):
        return exponential_walk(node.left) + exponential_walk(node.left) + exponential_walk(node.right)
    return 1


def test_a_crafted_chain_that_makes_a_walk_exponential_fails_within_the_budget(monkeypatch):
    conftest = rubric_conftest(monkeypatch)
    monkeypatch.setattr(conftest, "ANALYSIS_SECONDS", 1.0)
    tree = ast.parse("x = " + " + ".join(["a"] * 60))
    started = time.monotonic()
    with pytest.raises(AssertionError, match="analysis budget"):
        with conftest.analysis_time_budget("the static check test_crafted"):
            exponential_walk(tree.body[0].value)
    assert time.monotonic() - started < 30


def test_the_budget_is_disarmed_after_the_analysis(monkeypatch):
    conftest = rubric_conftest(monkeypatch)
    monkeypatch.setattr(conftest, "ANALYSIS_SECONDS", 0.5)
    with conftest.analysis_time_budget("quick"):
        pass
    time.sleep(0.8)  # no alarm left behind to fire in the next check


def test_a_file_over_the_size_budget_fails_its_reader(tmp_path, monkeypatch):
    conftest = rubric_conftest(monkeypatch)
    monkeypatch.setattr(conftest, "ANALYSIS_BYTES", 1000)
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "small.py").write_text("x = 1\n")
    (tmp_path / "vllm" / "huge.py").write_text("#" * 5000)
    root = conftest.BudgetedPath(tmp_path)
    assert (root / "vllm" / "small.py").read_text() == "x = 1\n"
    with pytest.raises(AssertionError, match="analysis budget"):
        (root / "vllm" / "huge.py").read_text()
    with pytest.raises(AssertionError, match="analysis budget"):
        next(p for p in (root / "vllm").glob("huge.py")).read_bytes()


def test_time_waiting_on_a_subject_is_not_the_judges_analysis(monkeypatch):
    """A static check that also calls probes: the calls are held to their own budgets, the analysis clock stops."""
    from grader.sandbox.client import analysis_clock_paused

    conftest = rubric_conftest(monkeypatch)
    monkeypatch.setattr(conftest, "ANALYSIS_SECONDS", 1.0)
    with conftest.analysis_time_budget("a static check with probe calls"):
        with analysis_clock_paused():
            time.sleep(1.5)  # a probe call longer than the whole analysis budget
        time.sleep(0.3)
    with pytest.raises(AssertionError, match="analysis budget"):
        with conftest.analysis_time_budget("the same check, its own work too long"):
            with analysis_clock_paused():
                time.sleep(0.2)
            time.sleep(1.5)
