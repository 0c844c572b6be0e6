"""What a real ``grade`` run records about itself and writes for other users: run metadata that validates
against the shipped schema, per-candidate rubric identity, per-test durations, the exit code with its reason,
outputs readable by others whatever the umask, and a diff with a binary file graded on its text part."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from grader.core.rubric import all_tasks
from grader.reports.report import run_of
from grader.pipeline.score import FULL_AT, MET_AT, UNMET_AT

REPO = Path(__file__).resolve().parents[2]
TASK = "int8-kv-rounding"  # the fastest hidden suite
SAMPLE = REPO / "candidates" / TASK / "key-only.diff"
BINARY_FILE = ("diff --git a/docs/plot.png b/docs/plot.png\nnew file mode 100644\nindex 0000000..e69de29\n"
               "GIT binary patch\nliteral 3\nKcmZ?wWB>pF01E&C\n\nliteral 0\nHcmV?d00001\n\n")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One run with a threshold that the sample is below, under a umask that would hide every file."""
    folder = tmp_path_factory.mktemp("metadata")
    (folder / "in").mkdir()
    (folder / "in" / "with-binary.diff").write_text(BINARY_FILE + SAMPLE.read_text())
    out = folder / "out"
    proc = subprocess.run(
        [sys.executable, str(REPO / "grade.py"), str(folder / "in"), "--task", TASK, "--gpu", "off", "--out", str(out),
         "--junit", str(out / "junit.xml"), "--fail-under", "0.9"],
        capture_output=True, text=True, timeout=900, cwd=REPO, preexec_fn=lambda: os.umask(0o077))
    return proc, out, json.loads((out / "results.json").read_text())


def test_results_validate_against_the_schema_with_the_run_metadata(graded):
    import jsonschema

    proc, _, doc = graded
    jsonschema.validate(doc, json.loads((REPO / "grader" / "schema" / "results.schema.json").read_text()))
    run = doc["run"]
    assert datetime.fromisoformat(run["started_at"]).tzinfo is not None
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert run["grader"]["commit"] == head and isinstance(run["grader"]["modified"], bool)
    assert run["fail_under"] == 0.9
    assert run["exit_code"] == proc.returncode == 1, proc.stderr
    assert run["exit_reason"].startswith("1: 1 candidate(s) below --fail-under 0.9") and "with-binary" in run["exit_reason"]


def test_the_run_section_reads_back_as_the_record_that_wrote_it(graded):
    _, _, doc = graded
    run = run_of(doc)
    assert run.to_json() == doc["run"] and run.exit_code == 1 and run.backend == "local" and run.incomplete is None


def test_each_candidate_names_what_it_was_graded_against(graded):
    _, _, doc = graded
    (result,) = doc["candidates"]
    task = all_tasks()[TASK]
    rubric = result["rubric"]
    assert rubric["task_version"] == task.version
    assert rubric["weights"] == {cid: c.weight for cid, c in task.criteria.items()}
    assert rubric["core"] == task.core_criteria
    assert rubric["thresholds"] == {"met_at": MET_AT, "unmet_at": UNMET_AT, "full_at": FULL_AT}
    assert rubric["base"]["sdist_sha256"] == task.base.sdist_sha256 and len(rubric["base"]["overlay_sha256"]) == 64
    ran = [e for c in result["criteria"].values() for e in c["evidence"] if e["status"] != "skipped"]
    assert ran and all(e["duration_s"] >= 0 for e in ran) and any(e["duration_s"] > 0 for e in ran)


def test_the_text_part_of_a_diff_with_a_binary_file_is_graded(graded):
    _, _, doc = graded
    (result,) = doc["candidates"]
    assert result["apply"]["binary"] == ["docs/plot.png"] and result["apply"]["status"] == "partial"
    # The tree graded is not the one git builds from the diff: apply_partial, at most partial, said first.
    assert result["run_status"] == "apply_partial" and result["verdict"] == "partial"
    assert any(c["status"] == "met" for c in result["criteria"].values())
    assert result["summary"].startswith("Applied only in part: binary changes were not applied (docs/plot.png)")


def test_outputs_are_readable_by_other_users_whatever_the_umask(graded):
    _, out, _ = graded
    for path in [out, *out.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        wanted = 0o755 if path.is_dir() else 0o644
        assert mode == wanted, f"{path.relative_to(out)} is {oct(mode)}, not {oct(wanted)}"


def test_the_terminal_closes_with_verdicts_per_task_and_the_exit_reason(graded):
    proc, _, doc = graded
    lines = proc.stderr.splitlines()
    # Full, partial and fail always; the other verdicts only where some candidate has them.
    assert [line.split()[1:] for line in lines if line.startswith(TASK + " ")] == [["0", "1", "0", "1"]]
    assert lines[-1] == "exit " + doc["run"]["exit_reason"]
    assert "\x1b" not in proc.stderr  # not a terminal: plain lines
