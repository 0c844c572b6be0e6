"""What a grading run shows on the terminal: phases while they run, one line per graded candidate, then a table
of verdicts per task, the reason for each error and fail, and why the exit code is what it is.

On a terminal, phases and the overall count are drawn live by ``rich``; anywhere else (a CI log, a pipe) the
same information comes as plain lines, one event per line, with no control characters.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from grader.orchestrate import Graded
from grader.core.records import VERDICTS
from grader.core.rubric import all_tasks
from grader.scorecard import reason

VERDICT_STYLE = {"full": "green", "partial": "yellow", "fail": "red", "no_diff": "dim", "error": "bold red"}


def candidate_line(item: Graded, done: int, total: int) -> str:
    """``[3/5] id: task verdict score [run status] in 12.3s (cached)``."""
    result = item.record
    score = "-" if result["score"] is None else f"{result['score']:.2f}"
    timings = result.get("timings", {})
    note = " (cached)" if item.stored else " (evidence cached)" if timings.get("evidence_cached") else ""
    state = "" if result.get("run_status", "complete") == "complete" else f" [{result['run_status']}]"
    elapsed = sum(timings.get(k, 0.0) for k in ("apply_s", "tests_s"))
    timing = f" in {elapsed:.1f}s" if elapsed and not item.stored else ""
    return f"[{done}/{total}] {result['id']}: {result['task'] or '?'} {result['verdict']} {score}{state}{timing}{note}"


class ProgressLines:
    """Plain lines: a phase when it starts and ends, and one line per graded candidate."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        print(f"{name} ...", file=self.stream, flush=True)
        yield
        print(f"{name}: ready in {time.monotonic() - started:.1f}s", file=self.stream, flush=True)

    def graded(self, item: Graded, done: int, total: int) -> None:
        print(candidate_line(item, done, total), file=self.stream, flush=True)


class LiveProgress:
    """A spinner per running phase and a bar of graded candidates, with each candidate's line printed above."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True)
        self.overall = self.progress.add_task("grading", total=total)

    def __enter__(self) -> LiveProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        phase = self.progress.add_task(name, total=None)
        try:
            yield
        finally:
            self.progress.remove_task(phase)
        self.console.print(f"[dim]{name}: ready in {time.monotonic() - started:.1f}s[/dim]", highlight=False)

    def graded(self, item: Graded, done: int, total: int) -> None:
        style = VERDICT_STYLE.get(item.record["verdict"], "")
        self.console.print(f"[{style}]{candidate_line(item, done, total)}[/{style}]" if style else
                           candidate_line(item, done, total), highlight=False, markup=bool(style))
        self.progress.update(self.overall, completed=done)


@contextmanager
def observer_for(stream: TextIO, total: int) -> Iterator[ProgressLines | LiveProgress]:
    """Live progress on a terminal, plain lines elsewhere."""
    if stream.isatty():
        with LiveProgress(Console(file=stream), total) as live:
            yield live
    else:
        yield ProgressLines(stream)


def verdict_counts(records: list[dict]) -> dict[str, Counter]:
    counts: dict[str, Counter] = {}
    for record in records:
        counts.setdefault(record.get("task") or "(none)", Counter())[record["verdict"]] += 1
    return dict(sorted(counts.items()))


def closing_reasons(records: list[dict]) -> list[tuple[str, str, str]]:
    """(id, verdict, why) for every candidate that is an error or a fail."""
    tasks = all_tasks()
    return [(r["id"], r["verdict"], reason(r, set(tasks[r["task"]].core_criteria) if r.get("task") in tasks else set()))
            for r in records if r["verdict"] in ("error", "fail")]


def print_closing(records: list[dict], exit_reason: str, stream: TextIO) -> None:
    """The verdict table per task, the reason for each error and fail, and the exit code's reason."""
    counts = verdict_counts(records)
    if stream.isatty():
        console = Console(file=stream)
        table = Table("task", *VERDICTS, "total", title="verdicts", title_justify="left")
        for task, by_verdict in counts.items():
            table.add_row(task, *(str(by_verdict[v]) for v in VERDICTS), str(sum(by_verdict.values())))
        console.print(table)
        for cid, verdict, why in closing_reasons(records):
            console.print(f"[{VERDICT_STYLE[verdict]}]{verdict}[/] {cid}: {why}", highlight=False)
        console.print(f"exit {exit_reason}", highlight=False)
        return
    width = max([len("task"), *map(len, counts)])
    print(f"{'task':<{width}}  " + "  ".join(f"{v:>7}" for v in (*VERDICTS, "total")), file=stream)
    for task, by_verdict in counts.items():
        print(f"{task:<{width}}  " + "  ".join(f"{by_verdict[v]:>7}" for v in VERDICTS)
              + f"  {sum(by_verdict.values()):>7}", file=stream)
    for cid, verdict, why in closing_reasons(records):
        print(f"{verdict} {cid}: {why}", file=stream)
    print(f"exit {exit_reason}", file=stream, flush=True)
