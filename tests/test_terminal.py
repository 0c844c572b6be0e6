"""The terminal: live phases and progress on a TTY, plain lines elsewhere, and the closing table with reasons."""

from __future__ import annotations

import io

from grader.many_candidates import Graded
from grader.core.records import Candidate, CandidateResult
from grader.terminal import observer_for, print_closing

TASK = "int8-kv-rounding"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def record(cid: str, verdict: str, score: float | None, **extra) -> CandidateResult:
    return CandidateResult.from_json({
        "id": cid, "task": TASK, "source": f"{cid}.diff", "verdict": verdict, "score": score, "summary": "",
        "run_status": "complete", "timings": {"apply_s": 0.5, "tests_s": 2.0}, "criteria": {},
        "apply": {"status": "applied", "files": []}, **extra})


FAILED_C1 = {"c1": {"id": "c1", "title": "Keys", "score": 0.5, "status": "unmet", "rationale": "1 of 2 checks failed",
                    "evidence": [{"status": "failed", "claim": "Keys are rounded to nearest.", "test": "t::k",
                                  "weight": 1.0, "kinds": [], "duration_s": 0.1}]}}


def graded(rec: CandidateResult, stored: bool = False) -> Graded:
    return Graded(Candidate(rec.id, "x.diff", "+x\n", TASK), rec, stored=stored)


def test_plain_lines_when_not_a_terminal():
    stream = io.StringIO()
    with observer_for(stream, 2) as observer:
        with observer.phase(f"base {TASK}"):
            pass
        observer.graded(graded(record("a", "full", 1.0)), 1, 2)
        observer.graded(graded(record("b", "partial", 0.8), stored=True), 2, 2)
    lines = stream.getvalue().splitlines()
    assert lines[0] == f"base {TASK} ..." and lines[1].startswith(f"base {TASK}: ready in ")
    assert lines[2] == f"[1/2] a: {TASK} full 1.00 in 2.5s"
    assert lines[3] == f"[2/2] b: {TASK} partial 0.80 (cached)"
    assert "\x1b" not in stream.getvalue()


def test_live_progress_on_a_terminal_prints_each_candidate_above_the_bar():
    stream = Terminal()
    with observer_for(stream, 1) as observer:
        with observer.phase("warm workers"):
            pass
        observer.graded(graded(record("a", "fail", 0.1)), 1, 1)
    text = stream.getvalue()
    assert "\x1b[" in text  # drawn, not printed as plain lines
    assert f"[1/1] a: {TASK} fail 0.10 in 2.5s" in text and "warm workers: ready in" in text


def test_closing_table_counts_verdicts_per_task_and_says_why():
    records = [record("a", "full", 1.0), record("b", "fail", 0.1, criteria=FAILED_C1),
               record("c", "error", None, error="grader failure:\nTraceback", criteria={}),
               record("d", "no_diff", None, task=None)]
    stream = io.StringIO()
    print_closing(records, "2: grading broke or met an environment fault for 1 candidate(s): c", stream)
    lines = stream.getvalue().splitlines()
    header = lines[0].split()
    assert header == ["task", "full", "partial", "fail", "incomplete", "no_diff", "input_truncated", "no_task",
                      "error", "total"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:3]}
    assert rows[TASK] == ["1", "0", "1", "0", "0", "0", "0", "1", "3"]
    assert rows["(none)"] == ["0", "0", "0", "0", "1", "0", "0", "0", "1"]
    assert "fail b: c1: \u201cKeys are rounded to nearest\u201d does not hold" in lines
    assert "error c: error: grader failure:" in lines
    assert lines[-1] == "exit 2: grading broke or met an environment fault for 1 candidate(s): c"


def test_closing_on_a_terminal_is_a_table():
    stream = Terminal()
    print_closing([record("a", "full", 1.0)], "0: every candidate was graded (no --fail-under threshold)", stream)
    text = stream.getvalue()
    assert "verdicts" in text and TASK in text and "exit 0: every candidate was graded" in text
