"""Honest inputs and honest exits: a cut preview is ``input_truncated`` (never a fail from the base alone), a whole
diff whose hunk ends early or that has a binary section is not graded as if git had built it, exit codes and
their reasons tell the truth, weaker containment is said loudly, and the command line reads what it documents.

The command-line cases run the real CLI (``grade.py`` in a subprocess, or ``grader.cli.main`` in this process
where the sandbox probe is faked); those that grade real candidates are ``slow``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from grader import cli
from grader.pipeline.apply import apply_diff
from grader.core import records
from grader.core.records import ApplyReport, CriterionResult, FileReport, HunkReport
from grader.core.rubric import REPO_ROOT, all_tasks
from grader.pipeline.diffparse import parse_diff
from grader.reports.outcome import ci_outcome, exit_code, exit_reason
from grader.pipeline.preview import CUT_REASON, is_cut, unseen_evidence
from grader.reports.report import page_name
from grader.sandbox import contain
from grader.pipeline.score import score_from_outcomes, verdict_for

TASK_FILES = frozenset({"vllm/a.py", "vllm/b.py", "tests/test_a.py"})


def section(path: str, lines: int = 2, cut: bool = False) -> str:
    """One file's diff with a hunk of ``lines`` changed lines (its last line missing when ``cut``)."""
    body = [f"-old {i}\n+new {i}\n" for i in range(lines)]
    text = (f"diff --git a/{path} b/{path}\nindex 1111111..2222222 100644\n--- a/{path}\n+++ b/{path}\n"
            f"@@ -1,{lines} +1,{lines} @@\n" + "".join(body))
    return text[:-len("+new 0\n") - 1] + "\n" if cut else text


def unseen(diff: str) -> list[str]:
    parsed = parse_diff(diff)
    return unseen_evidence(TASK_FILES, parsed, ApplyReport("partial"))


# --- which evidence a cut preview shows whole ----------------------------------------------------------------


def test_a_preview_cut_after_every_evidence_file_is_graded():
    diff = section("vllm/a.py") + section("vllm/b.py") + section("vllm_notes/readme.md", 3, cut=True)
    assert is_cut(parse_diff(diff), at_preview_limit=False)
    assert unseen(diff) == []


def test_the_last_file_shown_and_task_files_that_may_follow_the_cut_are_not_whole():
    # Cut at the line limit exactly at a hunk's end: vllm/b.py is the last file shown and may continue.
    assert unseen(section("vllm/a.py") + section("vllm/b.py")) == ["vllm/b.py"]
    # vllm/b.py sorts after the last file shown, so the cut may have removed it.
    assert unseen(section("vllm/a.py", cut=True)) == ["vllm/a.py", "vllm/b.py"]
    # Not in git's path order: an absent task file could be anywhere.
    assert unseen(section("vllm/a.py") + section("docs/x.md", cut=True)) == ["vllm/b.py"]


def test_a_cut_hunk_outside_vllm_never_blocks_but_one_inside_does():
    assert unseen(section("vllm/a.py") + section("vllm/b.py") + section("vllm_x/y.py", cut=True)) == []
    assert "vllm/a.py" in unseen(section("vllm/a.py", cut=True) + section("vllm/b.py") + section("vllm_x/y.py"))


def test_a_preview_whose_visible_hunk_failed_is_not_whole():
    parsed = parse_diff(section("vllm/a.py") + section("vllm/b.py") + section("vllm_x/y.py", cut=True))
    failed = ApplyReport("partial", files=[FileReport("vllm/a.py", "modified", [HunkReport("@@", "failed")])])
    assert unseen_evidence(TASK_FILES, parsed, failed) == ["vllm/a.py"]


# --- verdicts and run states --------------------------------------------------------------------------------


def test_a_cut_preview_is_input_truncated_whatever_its_criteria_say():
    task = all_tasks()["int8-kv-rounding"]
    unmet = {cid: CriterionResult(cid, c.title, 0.0, "unmet", "x") for cid, c in task.criteria.items()}
    applied = ApplyReport("partial", truncated=True)
    assert verdict_for(task, applied, unmet, "input_truncated", cut_input=True) == "input_truncated"
    assert verdict_for(task, applied, unmet, "complete") == "fail"
    assert verdict_for(task, ApplyReport("rejected"), unmet, "input_truncated", cut_input=True) == "fail"


def test_a_timeout_is_named_before_a_gpu_skip_in_the_reason():
    outcomes = [records.TestOutcome("t::gpu", "skipped", {"c1": 1.0}, ["gpu"], message="needs a CUDA GPU: no CUDA GPU"),
                records.TestOutcome("t::cpu", "timeout", {"c1": 1.0}, message="the test did not finish before the time limit")]
    result = score_from_outcomes("c1", "title", outcomes)
    assert result.status == "not_evaluated"
    assert result.rationale.startswith("the test did not finish before the time limit"), result.rationale


def test_no_cuda_is_not_called_switched_off():
    text = (REPO_ROOT / "rubrics" / "conftest.py").read_text()
    assert "no CUDA GPU on this machine" in text and "(--gpu off)" in text


# --- whole diffs: the tree is what git builds --------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    root.mkdir()
    (root / "a.py").write_text("".join(f"old {i}\n" for i in range(2)))
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    return root


def test_a_whole_diff_whose_every_hunk_ends_early_is_not_applied(tree):
    cut = section("a.py", cut=True)
    whole = apply_diff(cut, tree, contained=False, cut_preview=False)
    assert whole.status == "failed" and "git apply refuses" in whole.message
    preview = apply_diff(cut, tree, contained=False, cut_preview=True)
    assert preview.status == "partial" and preview.truncated


# --- exit codes and CI outcomes ---------------------------------------------------------------------------------


def record(cid: str, verdict: str, score: float | None, run_status: str = "complete") -> records.CandidateResult:
    return records.CandidateResult(cid, "t", f"{cid}.diff", verdict, score, {}, None, "", run_status=run_status)


@pytest.mark.parametrize("records,fail_under,code", [
    ([record("a", "full", 1.0), record("b", "fail", 0.1)], None, 1),
    ([record("a", "partial", 1.0)], 0.9, 0),
    ([record("a", "partial", 0.5)], 0.9, 1),
    ([record("a", "partial", 0.0, "timed_out")], None, 3),
    ([record("a", "partial", 0.0, "timed_out")], 0.9, 3),
    ([record("a", "input_truncated", None, "input_truncated")], 0.9, 3),
    ([record("a", "no_task", None)], None, 4),
    ([record("a", "no_task", None), record("b", "partial", 0.0, "timed_out")], None, 3),
    ([record("a", "partial", 0.5), record("b", "partial", 0.0, "timed_out")], 0.9, 1),
    ([record("a", "error", None), record("b", "full", 1.0)], None, 2),
])
def test_exit_codes_follow_the_documented_order(records, fail_under, code):
    assert exit_code(records, fail_under) == code
    assert exit_reason(records, fail_under, None).startswith(f"{code}: ")


def test_the_verdict_case_fails_exactly_where_the_exit_code_does():
    reference_on_cpu = record("ref", "partial", 1.0)
    assert ci_outcome(reference_on_cpu, 0.9) == ci_outcome(reference_on_cpu, None) == "passed"
    assert ci_outcome(record("x", "fail", 0.95), None) == "failed"
    assert ci_outcome(record("x", "input_truncated", None, "input_truncated"), 0.9) == "skipped"
    assert ci_outcome(record("x", "partial", 1.0, "timed_out"), 0.9) == "skipped"


# --- the command line -------------------------------------------------------------------------------------------


def grade(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "grade.py"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_grade_alone_prints_the_usage_with_the_path_form_first():
    done = grade()
    assert done.returncode == 2
    assert done.stderr.splitlines()[0].startswith("usage: grade.py PATH"), done.stderr
    assert "required: command" not in done.stderr


def test_options_and_paths_intermixed(tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"{name}.diff").write_text("")
    done = grade(str(tmp_path / "a.diff"), "--task", "int8-kv-rounding", str(tmp_path / "b.diff"),
                 "--out", str(tmp_path / "out"))
    assert "unrecognized arguments" not in done.stderr, done.stderr
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert sorted(c["id"] for c in doc["candidates"]) == ["a", "b"]
    assert {c["task"] for c in doc["candidates"]} == {"int8-kv-rounding"}
    assert {c["rubric_version"] for c in doc["candidates"]} == {all_tasks()["int8-kv-rounding"].version}


def test_a_diff_whose_task_cannot_be_told_is_no_task_with_a_hint(tmp_path):
    (tmp_path / "docs.diff").write_text(section("docs/unrelated.md"))
    done = grade(str(tmp_path / "docs.diff"), "--out", str(tmp_path / "out"))
    assert done.returncode == 4, done.stderr
    [result] = json.loads((tmp_path / "out" / "results.json").read_text())["candidates"]
    assert result["verdict"] == "no_task" and result["error"] is None
    assert result["summary"].count("pass --task") == 1
    assert result["summary"].count("no touched file") == 1, result["summary"]
    assert "exit 4: the task of 1 candidate(s) could not be told (pass --task)" in done.stderr


def parsers() -> dict[str, argparse.ArgumentParser]:
    top = cli.build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    return {"grade (standalone)": cli.grade_parser(), **sub.choices}


@pytest.mark.parametrize("name", list(parsers()))
def test_every_option_has_help_that_shows_its_default(name):
    parser = parsers()[name]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{name}: {action.dest} has no help"
        if action.option_strings:
            shown = parser.formatter_class(parser.prog)._get_help_string(action)
            assert "default" in shown or "required" in shown, f"{name}: {action.dest}: {shown!r}"


def test_results_carry_the_rubric_version_in_the_schema():
    schema = json.loads((REPO_ROOT / "grader" / "schema" / "results.schema.json").read_text())
    candidate = schema["$defs"]["candidate"]
    assert "rubric_version" in candidate["required"]
    assert {"input_truncated", "no_task"} <= set(candidate["properties"]["verdict"]["enum"])


# --- weaker containment is said loudly ----------------------------------------------------------------------


def weaker(caps: contain.Capabilities) -> contain.Capabilities:
    return replace(caps, drop_uid=False, drop_uid_reason="the grader is not root (uid 1000): the subject keeps "
                                                         "this uid", memory_cgroup=None,
                   memory_reason="no memory cgroup (v1) for this process")


@pytest.fixture
def weak_machine(monkeypatch):
    caps = weaker(contain.probe())
    monkeypatch.setattr(contain, "probe", lambda refresh=False: caps)
    return caps


def test_weaker_containment_warns_once_and_marks_every_report(tmp_path, weak_machine, capsys):
    (tmp_path / "empty.diff").write_text("")
    out = tmp_path / "out"
    code = cli.main([str(tmp_path / "empty.diff"), "--task", "int8-kv-rounding", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: weaker containment")]
    assert len(warnings) == 1 and "caller's uid" in warnings[0] and "no memory bound" in warnings[0]
    run = json.loads((out / "results.json").read_text())["run"]
    assert run["containment_degraded"] is True and "caller's uid" in run["containment_warning"]
    assert "Weaker containment" in (out / "index.html").read_text()
    assert "Weaker containment" in (out / "candidates" / page_name("empty")).read_text()


def test_contain_strict_refuses_without_the_full_sandbox(tmp_path, weak_machine, capsys):
    (tmp_path / "empty.diff").write_text("")
    code = cli.main([str(tmp_path / "empty.diff"), "--task", "int8-kv-rounding", "--contain", "strict",
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "--contain strict" in err and "caller's uid" in err
    assert not (tmp_path / "out" / "results.json").exists()


def test_the_full_sandbox_is_not_flagged(tmp_path, monkeypatch, capsys):
    caps = contain.probe()
    if not (caps.drop_uid and caps.memory_cgroup and caps.net and caps.private_tmp and caps.ipc_pid):
        pytest.skip("this machine does not give the full sandbox")
    (tmp_path / "empty.diff").write_text("")
    assert cli.main([str(tmp_path / "empty.diff"), "--task", "int8-kv-rounding", "--contain", "strict",
                     "--out", str(tmp_path / "out")]) == 0
    assert "warning: weaker containment" not in capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "results.json").read_text())["run"]["containment_degraded"] is False


def test_a_cut_reason_starts_with_the_cut():
    from grader.pipeline.preview import cut_reason

    assert cut_reason(["vllm/a.py"], True).startswith(CUT_REASON)
