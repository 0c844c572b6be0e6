"""Neighbours apart (issue 49): everything a subject writes, its log included, lands in its own bounded space,
opened after containment; its CPU share is bounded (a cpu cgroup where one can be made, and a lower priority).
Real contained subjects under a real judge: a flood of output, a fill of files, a fork of spinners."""

from __future__ import annotations

import pytest

from grader.sandbox import contain
from judge_harness import run_judge, tree_with

HOSTILE_PROBE = """
import os, sys, time


def flood_fill_spin(megabytes, files, spinners):
    chunk = "x" * (1 << 20)
    for _ in range(megabytes):  # the log: stdout and stderr
        sys.stdout.write(chunk)
        sys.stderr.write(chunk)
    sys.stdout.flush()
    made = 0
    try:
        for i in range(files):  # its home, until its own inode limit
            open(os.path.join(os.environ["HOME"], f"z{i}"), "w").close()
            made += 1
    except OSError:
        pass
    for _ in range(spinners):  # a fork of spinners
        if os.fork() == 0:
            end = time.monotonic() + 20
            while time.monotonic() < end:
                pass
            os._exit(0)
    with open("/proc/self/cgroup") as groups:
        cgroups = groups.read()
    return {"made": made, "cgroups": cgroups, "nice": os.getpriority(os.PRIO_PROCESS, 0)}
"""
HIDDEN = """
import json, os
from grader.sandbox.client import subject


def test_hostile():
    seen = subject("candidate").call("hostile.flood_fill_spin", megabytes=64, files=100000, spinners=8, timeout=200)
    with open(os.environ["GRADER_EVIDENCE_OUT"] + ".seen", "w") as out:
        json.dump(seen, out)
"""


@pytest.fixture
def contained():
    caps = contain.probe()
    if not caps.private_tmp:
        pytest.skip(f"no private view on this machine: {caps.private_tmp_reason}")
    return caps


def test_a_flood_a_fill_and_spinners_stay_in_the_subjects_own_space_and_share(tmp_path, contained):
    import json

    tree = tree_with(tmp_path / "tree", toylib="")
    seen = run_judge(tmp_path / "run", tree, tree, HIDDEN, {"hostile": HOSTILE_PROBE}, contained=True)
    assert seen["test_hostile"].status == "passed", seen["test_hostile"].message[-2000:]
    shared_log = tmp_path / "run" / "subject-candidate" / "subject.log"
    # 128 MB were written to stdout and stderr: none of it reached the shared scratch area.
    assert not shared_log.exists() or shared_log.stat().st_size < 64 << 10, shared_log.stat().st_size
    report = json.loads((tmp_path / "run" / "judge" / "evidence.jsonl.seen").read_text())
    assert 0 < report["made"] <= contain.SCRATCH_INODES  # the fill stopped at its own home's inode limit
    assert report["nice"] >= contain.SUBJECT_NICE
    if contained.cpu_cgroup:
        assert "grader-pid" in next(line for line in report["cgroups"].splitlines()
                                    if "cpu" in line.split(":")[1].split(",") or line.startswith("0::"))
    assert not list(tmp_path.rglob("z1")), "the fill reached the shared scratch area"


DYING_PROBE = """
import os, sys


def say_and_die():
    sys.stderr.write("the-last-words-of-this-subject\\n")
    sys.stderr.flush()
    os._exit(3)
"""
DYING_TEST = """
from grader.sandbox.client import subject


def test_dies():
    subject("candidate").call("dying.say_and_die", timeout=60)
"""


def test_the_judge_still_quotes_the_private_log_of_a_subject_that_died(tmp_path, contained):
    tree = tree_with(tmp_path / "tree", toylib="")
    seen = run_judge(tmp_path / "run", tree, tree, DYING_TEST, {"dying": DYING_PROBE}, contained=True)
    outcome = seen["test_dies"]
    assert outcome.status == "failed" and "the-last-words-of-this-subject" in outcome.message, outcome.message[-800:]
