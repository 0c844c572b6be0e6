"""Honest states: a timeout, an interrupt, an environment fault or a partial apply never passes for a candidate's
result; the command line refuses what it cannot honour before any work; exit codes are as documented.

The time-out, interrupt-then-resume and two-writers cases run the real CLI on xpu-kv-cache-dtypes samples.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SEED, needs_seed
from grader.core import environment
from grader.drive.one_candidate import run_status
from grader.core import records
from grader.core.records import ApplyReport, FileReport, HunkReport, RunReport
from grader.core.rubric import REPO_ROOT
from grader.pipeline.run import environment_problem
from grader.pipeline.score import verdict_for
from grader.drive.store import ResultStore

TASK = "xpu-kv-cache-dtypes"
REFERENCE = REPO_ROOT / "reference_impl" / f"{TASK}.diff"
SAMPLES = sorted((REPO_ROOT / "candidates" / TASK).glob("*.diff"))


def grade(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "grade.py", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)


def results_of(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


# --- the command line refuses before any work --------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["--task", "nosuch", str(REFERENCE)],
    ["bases", "--task", "nosuch"],
    ["validate-rubrics", "--task", "nosuch"],
    ["mutate", "--task", "nosuch"],
    [str(REFERENCE), "--task", TASK, "--fail-under", "1.5"],
    [str(REFERENCE), "--task", TASK, "--jobs", "0"],
])
def test_bad_values_are_refused_in_one_line_with_exit_2(argv, tmp_path):
    done = grade(*argv, "--out", str(tmp_path / "out")) if argv[0] not in ("bases", "validate-rubrics", "mutate") \
        else grade(*argv)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "results.json").exists()


def test_gpu_on_without_cuda_is_exit_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    done = grade(str(REFERENCE), "--task", TASK, "--gpu", "on", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "--gpu on" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_options_anywhere_and_an_empty_diff_fails_a_threshold(tmp_path):
    empty = tmp_path / "empty.diff"
    empty.write_text("")
    done = grade("--task", TASK, "--fail-under", "0.9", "--out", str(tmp_path / "out"), str(empty))
    assert done.returncode == 1, done.stderr
    assert results_of(tmp_path / "out")["candidates"][0]["verdict"] == "no_diff"


# --- time-outs ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_timeout_is_named_never_cached_and_a_longer_rerun_grades(tmp_path):
    out = tmp_path / "out"
    # --no-cache: evidence of this tree cached by earlier runs would answer before any time limit applies.
    short = grade(str(REFERENCE), "--task", TASK, "--timeout", "3", "--out", str(out), "--jobs", "1", "--no-cache")
    result = results_of(out)["candidates"][0]
    assert result["run_status"] == "timed_out", result["summary"]
    assert result["summary"].startswith("Timed out"), result["summary"]
    assert result["verdict"] != "full"
    assert "timed_out" in short.stderr
    # Not graded completely: its own exit code and reason, on the terminal and in results.json.
    assert short.returncode == 3 and "exit 3: 1 candidate(s) not graded completely (timed out)" in short.stderr
    assert results_of(out)["run"]["exit_reason"].startswith("3: ")
    assert all(c["status"] in ("not_evaluated", "met") for c in result["criteria"].values())
    assert not list((out / "store").glob("*.json")), "a timed-out result was stored"
    longer = grade(str(REFERENCE), "--task", TASK, "--timeout", "600", "--out", str(out), "--jobs", "1")
    assert "(cached)" not in longer.stderr
    again = results_of(out)["candidates"][0]
    assert (again["run_status"], again["verdict"]) == ("complete", "full"), again["summary"]
    junit_run = grade(str(REFERENCE), "--task", TASK, "--timeout", "3", "--no-cache", "--out", str(tmp_path / "o2"),
                      "--junit", str(tmp_path / "junit.xml"), "--jobs", "1")
    assert junit_run.returncode == 3, junit_run.stderr
    assert '<skipped>timed out' in (tmp_path / "junit.xml").read_text(), junit_run.stderr  # the reason as text


# --- interrupts and resume ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_sigint_writes_what_finished_exits_130_and_a_rerun_resumes(tmp_path):
    inputs = tmp_path / "in" / TASK
    inputs.mkdir(parents=True)
    for sample in SAMPLES[:3]:
        (inputs / sample.name).write_text(sample.read_text())
    out = tmp_path / "out"
    # --no-cache: evidence cached by earlier runs would finish all three before the signal arrives.
    proc = subprocess.Popen([sys.executable, "grade.py", str(inputs.parent), "--out", str(out), "--jobs", "1",
                             "--no-cache"],
                            cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    seen = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if line.startswith("[1/3]"):
            break
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=120)[1]
    stderr = "".join(seen) + rest
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert sum("interrupted" in line for line in rest.splitlines()) == 1, rest
    doc = results_of(out)
    # What finished is reported and stored (a second candidate may complete just as the signal arrives).
    finished = len(doc["candidates"])
    assert 1 <= finished < 3 and len(doc["run"]["incomplete"]["not_graded"]) == 3 - finished
    assert (out / "index.html").is_file()
    assert len(list((out / "store").glob("*.json"))) == finished
    resumed = grade(str(inputs.parent), "--out", str(out), "--jobs", "1")
    assert resumed.returncode in (0, 1), resumed.stderr  # every candidate graded (a fail verdict exits 1)
    assert resumed.stderr.count("(cached)") == finished
    assert len(results_of(out)["candidates"]) == 3


# --- one writer per output folder --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_second_run_into_the_same_out_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "out"
    first = subprocess.Popen([sys.executable, "grade.py", str(REFERENCE), "--task", TASK, "--out", str(out),
                              "--no-cache", "--jobs", "1"], cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / ".grader.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        second = grade(str(REFERENCE), "--task", TASK, "--out", str(out))
        assert second.returncode == 2, second.stderr
        assert f"pid {first.pid}" in second.stderr
    finally:
        first.communicate(timeout=600)
    assert first.returncode == 0
    assert len(results_of(out)["candidates"]) == 1


# --- calibrate without --results --------------------------------------------------------------------------------


@needs_seed
@pytest.mark.slow
def test_calibrate_grades_the_bundle_itself_without_results(tmp_path):
    text = (SEED / "graded-candidates.txt").read_text().split("\n\n")
    bundle = tmp_path / "one.txt"
    # The repository line, then the first entry's paragraph and diff.
    bundle.write_text("\n\n".join(text[:3]) + "\n")
    done = grade("calibrate", str(bundle), "--labels", str(SEED / "judge-labels.json"), "--out", str(tmp_path / "c"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "c" / "calibration.json").is_file()


# --- pure rules -----------------------------------------------------------------------------------------------------


def _apply(*statuses: str, truncated: bool = False, status: str = "partial") -> ApplyReport:
    return ApplyReport(status, "patch --fuzz=3", [FileReport("vllm/a.py", "modified",
                                                             [HunkReport(f"@@ -{i} +{i} @@", s)
                                                              for i, s in enumerate(statuses)])], truncated)


def test_a_whole_diff_with_a_failed_hunk_is_apply_partial_and_at_best_partial():
    run = RunReport([records.TestOutcome("t::a", "passed", {"c1": 1.0})], 0, False, "", 1.0)
    assert run_status(_apply("applied", "failed"), run, False) == "apply_partial"
    assert run_status(_apply("applied", "fuzz"), run, False) == "complete"
    # A whole diff whose hunk ends early is not the tree git builds from it; in a cut preview that is the cut.
    assert run_status(_apply("applied", "truncated", truncated=True), run, False) == "apply_partial"
    assert run_status(_apply("applied", "truncated", truncated=True), run, True) == "input_truncated"
    assert run_status(ApplyReport("partial", "git apply", [], binary=["vllm/x.bin"]), run, False) == "apply_partial"


def test_timeouts_and_environment_faults_are_states_of_the_run():
    timed = RunReport([records.TestOutcome("t::a", "timeout", {"c1": 1.0})], None, False, "", 1.0)
    assert run_status(_apply("applied", status="applied"), timed, False) == "timed_out"
    broken = RunReport([], None, False, "", 0.0, "the grading environment lacks msgspec")
    assert run_status(_apply("applied", status="applied"), broken, False) == "environment_error"


def test_only_complete_results_are_stored(tmp_path):
    store = ResultStore(tmp_path)
    for state in ("timed_out", "interrupted", "environment_error", "apply_partial"):
        assert not store.save(state, "k", records.CandidateResult(state, None, "x.diff", "partial", 0.5, {}, None, "",
                                                                  run_status=state))
    assert not store.save("e", "k", records.CandidateResult("e", None, "e.diff", "error", None, {}, None, ""))
    kept = records.CandidateResult("ok", None, "ok.diff", "fail", 0.0, {}, None, "")
    assert store.save("ok", "k", kept)
    assert store.load("ok", "k") == kept


def test_a_missing_distribution_is_the_environments_fault_and_named(tmp_path):
    """A task whose base needs a package the environment lacks: environment_error naming it, not the base's fault."""
    from grader.core.rubric import BaseRecipe, Task

    base = tmp_path / "base"
    (base / "vllm").mkdir(parents=True)
    (base / "vllm" / "__init__.py").write_text("")
    (base / "vllm" / "needs_it.py").write_text("import grader_surely_missing_distribution\n")
    recipe = BaseRecipe("0.0", "0" * 64, None, {"vllm/needs_it.py": "0000000"})
    task = Task("fake-env-task", "t", "p", 1, folder=tmp_path, base=recipe)
    problem = environment_problem(task, base, "key", False)
    assert problem and "grader_surely_missing_distribution" in problem and "lacks" in problem


def test_default_jobs_and_memory_limits_never_overcommit_the_machine():
    jobs = environment.default_jobs()
    assert 1 <= jobs <= (os.cpu_count() or 1)
    assert jobs * environment.memory_per_subject(jobs) <= environment.machine_memory_bytes()
    for many in (1, 2, 8, 64):
        assert environment.memory_per_subject(many) * many <= environment.machine_memory_bytes() or \
            environment.memory_per_subject(many) == 1 << 30


def test_verdict_of_an_environment_fault_is_error():
    from grader.core.rubric import all_tasks

    task = all_tasks()[TASK]
    from grader.pipeline.score import not_evaluated_all

    criteria = not_evaluated_all(task, "environment problem")
    assert verdict_for(task, _apply(status="applied"), criteria, "environment_error") == "error"
