"""The attribution rule (``grader.pipeline.run.judge_fault``) and how unfinished tests read when the judge's session
never ended: fast checks beside the real-signal ones in test_faults.py."""

from __future__ import annotations

import json
import signal

from grader.pipeline.run import JudgeEnd, judge_fault, parse_evidence, session_exit_status

TEST = {"nodeid": "t.py::test_a", "criteria": [{"id": "c1", "weight": 1.0}], "kinds": [], "doc": ""}


def evidence(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def end(session_exit=None, returncode=None, timed_out=False, lost=None, oom_kills=0) -> JudgeEnd:
    return JudgeEnd(session_exit, returncode, timed_out, lost, oom_kills, 1)


def test_a_judge_without_its_last_word_is_the_graders_error_naming_the_signal():
    kind, cause = judge_fault(end(returncode=-signal.SIGKILL))
    assert kind == "grader_error" and "SIGKILL" in cause and "1 hidden test(s) did not run" in cause


def test_an_oom_kill_is_the_environments_error():
    kind, cause = judge_fault(end(returncode=-signal.SIGKILL, oom_kills=2))
    assert kind == "environment_error" and "out of memory" in cause and "OOM killer" in cause


def test_a_lost_warm_worker_is_the_graders_error_even_after_a_last_word():
    kind, cause = judge_fault(end(session_exit=1, returncode=None, lost="the warm worker died (killed by SIGKILL)"))
    assert kind == "grader_error" and "warm worker" in cause


def test_a_session_that_ended_is_a_verdict_and_a_time_out_is_not_this_rules():
    assert judge_fault(end(session_exit=1, returncode=1)) is None
    assert judge_fault(end(session_exit=0, returncode=-signal.SIGKILL)) is None  # killed after its last word
    assert judge_fault(end(returncode=None, timed_out=True)) is None
    assert judge_fault(end(session_exit=3, returncode=3))[0] == "grader_error"


def test_unfinished_tests_are_not_run_when_the_session_never_ended():
    started = evidence({"event": "collected", **TEST}, {"event": "start", **TEST})
    (outcome,), _ = parse_evidence(started, timed_out=False)
    assert outcome.status == "not_run"
    assert session_exit_status(started) is None
    ended = started + evidence({"event": "session_end", "exitstatus": 1})
    assert session_exit_status(ended) == 1
    (outcome,), _ = parse_evidence(ended, timed_out=False)
    assert outcome.status == "error"
