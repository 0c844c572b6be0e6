"""The programs the grader runs are checked at start-up, through the real CLI with a PATH that lacks them.

git missing: one error line naming it and how to install it, exit 2, no traceback (the grader no longer imports
GitPython, whose import failed without git). GNU patch missing: a warning at start-up, and a candidate whose diff
needs fuzz (only patch places it) is ``environment_error`` naming patch, never the candidate's ``fail``; nothing of
it is stored. And the CLI's signal gate: a signal while the reports are written is held until they are.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TASK = "int8-kv-rounding"
# The three context lines above the reference fix's first change, which the fuzzed copy alters.
CONTEXT = ("     quant_max: float\n", "     quant_min: float\n", "     kv_quant_mode: KVQuantMode\n")


def bin_with(folder: Path, *tools: str) -> Path:
    """A PATH folder holding only ``tools`` (links to the machine's own)."""
    folder.mkdir()
    for tool in tools:
        os.symlink(shutil.which(tool), folder / tool)
    return folder


def run_cli(path_folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=str(path_folder), PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, str(REPO / "grade.py"), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def test_git_missing_is_one_line_and_exit_2(tmp_path):
    done = run_cli(bin_with(tmp_path / "bin", "cp", "patch"), "bases", "--task", TASK)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "error: git is not installed" in done.stderr and "apt-get install git" in done.stderr


def test_patch_missing_makes_a_fuzzy_diff_an_environment_error(tmp_path):
    diff = (REPO / "reference_impl" / f"{TASK}.diff").read_text()
    for line in CONTEXT:
        assert line in diff
        diff = diff.replace(line, line.rstrip("\n") + "  # changed\n", 1)
    candidate = tmp_path / "in" / TASK / "fuzzy.diff"
    candidate.parent.mkdir(parents=True)
    candidate.write_text(diff)
    out = tmp_path / "out"
    done = run_cli(bin_with(tmp_path / "bin", "git", "cp"), str(tmp_path / "in"), "--out", str(out), "--jobs", "1",
                   "--gpu", "off", "--no-cache")
    assert done.returncode == 2, done.stderr
    assert "warning: patch is not installed" in done.stderr, done.stderr
    (result,) = json.loads((out / "results.json").read_text())["candidates"]
    assert (result["verdict"], result["run_status"]) == ("error", "environment_error"), result
    assert "patch is not installed" in result["error"], result["error"]
    assert not list((out / "store").glob("*.json"))


def test_a_signal_while_reports_are_written_is_held_until_they_are():
    from grader.drive.commands import SignalGate
    from grader.drive.many_candidates import Interrupted

    with SignalGate() as gate:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            raise AssertionError("the first signal while grading must interrupt")
        except Interrupted as exc:
            assert str(exc) == "SIGINT"
    with SignalGate() as gate:
        gate.hold()
        os.kill(os.getpid(), signal.SIGHUP)  # neither raises nor ends the process: it is remembered
        os.kill(os.getpid(), signal.SIGINT)
    assert gate.first == "SIGHUP"
