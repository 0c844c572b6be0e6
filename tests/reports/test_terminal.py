"""The terminal: live phases and progress on a TTY, plain lines elsewhere, and the closing table with reasons."""

from __future__ import annotations

import io
import re
import time

import pytest

from grader.cli import COMMANDS, build_parser, main
from grader.core.records import Graded
from grader.core.records import VERDICTS, Candidate, CandidateResult
from grader.reports.terminal import observer_for, print_closing

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
    # Full, partial and fail always; the other verdicts where some candidate has them.
    assert header == ["task", "full", "partial", "fail", "no_diff", "error", "total"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:3]}
    assert rows[TASK] == ["1", "0", "1", "0", "1", "3"]
    assert rows["(none)"] == ["0", "0", "0", "1", "0", "1"]
    assert "fail b: c1: \u201cKeys are rounded to nearest\u201d does not hold" in lines
    assert "error c: error: grader failure:" in lines
    assert lines[-1] == "exit 2: grading broke or met an environment fault for 1 candidate(s): c"


def test_closing_on_a_terminal_is_a_table():
    stream = Terminal()
    print_closing([record("a", "full", 1.0)], "0: every candidate was graded (no --fail-under threshold)", stream)
    text = stream.getvalue()
    assert "verdicts" in text and TASK in text and "exit 0: every candidate was graded" in text


LONG_TASKS = ("mxint4-silu-activation", "triton-kv-past-seq-len", "a-task-name-far-longer-than-any-real-one-is")


def every_verdict() -> list[CandidateResult]:
    extra = {"incomplete": {"run_status": "timed_out"}, "input_truncated": {"run_status": "input_truncated"},
             "error": {"error": "the judge died"}}
    return [record(f"{task}/{verdict}-{n}", verdict, 0.5 if verdict in ("partial", "fail") else None, task=task,
                   criteria=FAILED_C1 if verdict in ("partial", "fail") else {}, **extra.get(verdict, {}))
            for task in LONG_TASKS for verdict in VERDICTS for n in range(3)]


def test_closing_fits_80_columns_with_every_verdict_and_long_task_names():
    for stream in (io.StringIO(), Terminal()):
        print_closing(every_verdict(), "2: grading broke for 3 candidate(s): " + "x" * 200, stream)
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
        lines = text.splitlines()
        table = [line for line in lines if not line.startswith("exit ")]
        assert max(map(len, table)) <= 80, max(table, key=len)
        header = next(line for line in lines if line.startswith("task"))
        assert header.split()[1:] == ["full", "partial", "fail", "incomplete", "no_diff", "truncated", "no_task",
                                      "error", "total"]
        # Numbers stand under their headings: each row's last column ends where the header's does.
        rows = [line for line in lines if line.startswith(("mxint4", "triton", "a-task"))]
        assert rows and all(len(row) == len(header) for row in rows)


def test_every_fail_and_partial_gets_a_short_reason_line():
    stream = io.StringIO()
    records = every_verdict()
    print_closing(records, "2: broken", stream)
    lines = stream.getvalue().splitlines()
    for r in records:
        said = [line for line in lines if line.startswith(f"{r.verdict} {r.id}:")]
        if r.verdict in ("fail", "partial", "error"):
            assert len(said) == 1 and len(said[0]) <= 80, r.id
        else:
            assert not said, r.id
    partial = next(line for line in lines if line.startswith("partial mxint4"))
    assert "Keys are rounded to nearest" in partial
    # The worst first, as pytest lists failures: errors, then fails, then partials.
    kinds = [line.split()[0] for line in lines if line.split()[0] in ("error", "fail", "partial")]
    assert kinds == sorted(kinds, key=("error", "fail", "partial").index)
    # Unfinished gradings are one line per kind, with how many: a bundle of cut previews is not 66 lines.
    cut = [line for line in lines if line.startswith("input_truncated ")]
    assert len(cut) == 1 and cut[0].startswith("input_truncated 9 candidates: input cut off: ")
    timed = [line for line in lines if line.startswith("incomplete ")]
    assert len(timed) == 1 and "timed out" in timed[0]


CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


def screen(text: str, width: int = 80) -> list[str]:
    """The lines a terminal ``width`` columns wide shows after ``text``: the few controls rich draws with (carriage
    return, erase in line, cursor up, colours) applied, and lines wrapped at ``width``."""
    rows: list[list[str]] = [[]]
    row = col = 0
    at = 0
    while at < len(text):
        control = CSI.match(text, at)
        if control:
            argument, command = control.groups()
            if command == "A":
                row = max(0, row - (int(argument) if argument.isdigit() else 1))
            elif command == "K":
                rows[row] = [] if argument == "2" else rows[row][:col]
            at = control.end()
            continue
        char = text[at]
        at += 1
        if char == "\r":
            col = 0
            continue
        if char == "\n" or col >= width:
            row, col = row + 1, 0
            rows.extend([] for _ in range(row + 1 - len(rows)))
            if char == "\n":
                continue
        line = rows[row]
        line.extend(" " for _ in range(col + 1 - len(line)))
        line[col] = char
        col += 1
    return ["".join(line).rstrip() for line in rows]


def test_live_progress_leaves_no_stale_line_at_80_columns():
    stream = Terminal()
    ids = [f"candidate-{'x' * 40}-{n}" for n in range(3)]
    with observer_for(stream, 3) as observer:
        with observer.phase("warm workers"):
            time.sleep(0.25)  # long enough for the live display to draw the phase and the bar
        for n, cid in enumerate(ids, 1):
            observer.started(Candidate("slow-" + "y" * 60, "x.diff", "+x\n", TASK))
            time.sleep(0.25)
            observer.graded(graded(record(cid, "partial", 0.5)), n, 3)
    shown = [line for line in screen(stream.getvalue()) if line]
    assert not any("grading" in line or "slowest" in line or "\u2501" in line for line in shown), shown
    assert shown[0].startswith("warm workers: ready in")
    # Each candidate's line once, in order (a line longer than the terminal wraps onto the next).
    joined = " ".join(shown)
    assert [joined.count(f"] {cid}:") for cid in ids] == [1, 1, 1]


def test_help_of_the_default_command_lists_its_options_and_the_commands(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--task", "--out", "--jobs", "--junit", "--fail-under", "--contain", "--labels", "--shard"):
        assert option in text
    for command in ("merge", "calibrate", "mutate", "run-tests", "check-task", "bases"):
        assert f"  {command} " in text


def test_a_near_miss_command_gets_a_suggestion(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["mege", "out-1", "out-2"]) == 2
    assert "did you mean 'merge'?" in capsys.readouterr().err
    assert main(["calibrat"]) == 2
    assert "did you mean 'calibrate'?" in capsys.readouterr().err


def test_every_usage_line_names_its_command_alone(capsys):
    for command in COMMANDS:
        if command == "grade":
            continue
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        usage = capsys.readouterr().out.split("\n\n", 1)[0]
        assert usage.startswith(f"usage: grade.py {command} "), usage
        assert "PATH..." not in usage and "COMMAND" not in usage
