"""How judges are started: a fresh interpreter (cold) or a fork of a warm worker, and what both hand to a judge and
its subjects. Each case runs a tiny pytest file as the judge, with one uncontained subject answering a probe."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from grader.rubric import REPO_ROOT
from grader.run import subject_spec
from grader.sandbox.launch import SINGLE_THREADED, ColdLauncher, JudgeRun, WarmPool, base_environment

JUDGE_TEST = """
import json, os
import torch
from grader.sandbox.client import subject

def test_report_threads():
    seen = {"judge": torch.get_num_threads(), "subject": subject("candidate").call("threads_probe.count")}
    with open(os.environ["THREADS_OUT"], "w") as out:
        json.dump(seen, out)
"""
PROBE = """
import torch

def count():
    return torch.get_num_threads()
"""


def judge_run(tmp_path: Path) -> tuple[JudgeRun, Path]:
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "threads_probe.py").write_text(textwrap.dedent(PROBE))
    tree = tmp_path / "tree"
    tree.mkdir()
    spec, _ = subject_spec("candidate", tmp_path / "subject", tree, tree, probes, gpu=False, contained=False)
    (tmp_path / "subjects.json").write_text(json.dumps({"candidate": spec}))
    (tmp_path / "test_threads.py").write_text(textwrap.dedent(JUDGE_TEST))
    out = tmp_path / "threads.json"
    env = dict(base_environment(False), HOME=str(tmp_path), PYTHONPATH=str(REPO_ROOT),
               GRADER_SUBJECTS=str(tmp_path / "subjects.json"), THREADS_OUT=str(out))
    argv = ["-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_threads.py")]
    return JudgeRun(argv, env, [], str(tmp_path), str(tmp_path / "judge.log"), 120), out


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_judge_and_subject_compute_on_one_thread(tmp_path, warm):
    """Whatever --jobs and the core count, torch in a judge and in its subject runs one intra-op thread: a float
    reduction then splits the same way everywhere, and parallel candidates do not oversubscribe the cores."""
    assert all(base_environment(gpu)[name] == "1" for name in SINGLE_THREADED for gpu in (False, True))
    job, out = judge_run(tmp_path)
    launcher = WarmPool(1, base_environment(False), ["torch"]) if warm else ColdLauncher()
    try:
        returncode, timed_out = launcher.run(job)
    finally:
        launcher.close()
    assert (returncode, timed_out) == (0, False), Path(job.log).read_text()[-2000:]
    assert json.loads(out.read_text()) == {"judge": 1, "subject": 1}


def test_the_caller_cannot_pass_a_thread_count_through():
    """A thread count in the grader's own environment does not reach judges or subjects."""
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "8"
    try:
        env = base_environment(False, also_pass=("OMP_NUM_THREADS",))
    finally:
        if previous is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = previous
    assert env["OMP_NUM_THREADS"] == "1"
