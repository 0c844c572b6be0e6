"""What a grading run shows on the terminal: phases while they run, one line per graded candidate, then a table
of verdicts per task, a short reason for each fail, partial, error and unfinished candidate (as pytest's short
summary), and why the exit code is what it is.

On a terminal, phases and the overall count are drawn live by ``rich``; anywhere else (a CI log, a pipe) the
same information comes as plain lines, one event per line, with no control characters.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn,
                           TimeElapsedColumn)
from rich.text import Text

from grader.core.records import VERDICTS, Candidate, CandidateResult
from grader.core.records import Graded
from grader.reports.outcome import unfinished
from grader.core.rubric import all_tasks
from grader.core.sanitize import clean
from grader.sandbox import protocol
from grader.reports.scorecard import reason
from grader.reports.wording import verdict_line

VERDICT_STYLE = {"full": "green", "partial": "yellow", "fail": "red", "no_diff": "dim", "incomplete": "magenta",
                 "input_truncated": "magenta",
                 "no_task": "magenta", "error": "bold red"}


def candidate_line(item: Graded, done: int, total: int) -> str:
    """``[3/5] id: task verdict score [run status] in 12.3s (cached)``; a partial short of full only by checks that
    did not run reads ``partial (all met where evaluated; 5 GPU checks not run)`` instead of its score."""
    result = item.result
    timings = result.timings
    note = " (cached)" if item.stored else " (evidence cached)" if timings.get("evidence_cached") else ""
    state = "" if result.run_status == "complete" else f" [{result.run_status}]"
    elapsed = sum(timings.get(k, 0.0) for k in ("apply_s", "tests_s"))
    timing = f" in {elapsed:.1f}s" if elapsed and not item.stored else ""
    verdict = verdict_line(result) if result.score is not None else f"{result.verdict} -"
    return clean(f"[{done}/{total}] {result.id}: {result.task or '?'} {verdict}{state}{timing}{note}")


def clock_text(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Pace:
    """How a long run goes: candidates per minute graded in this run (stored ones are not counted: they cost
    nothing), the time left at that rate, and the candidate that has been running longest."""

    def __init__(self, total: int, clock=time.monotonic) -> None:
        self.total = total
        self.clock = clock
        self.first_start: float | None = None
        self.running: dict[str, float] = {}
        self.done = 0
        self.graded_here = 0
        self.lock = threading.Lock()

    def started(self, candidate: Candidate) -> None:
        with self.lock:
            now = self.clock()
            self.first_start = now if self.first_start is None else self.first_start
            self.running[candidate.id] = now

    def finished(self, item: Graded, done: int) -> None:
        with self.lock:
            self.running.pop(item.candidate.id, None)
            self.done = done
            self.graded_here += not item.stored

    def text(self) -> str:
        """``12/1000 graded, 31.4/min, ETA 31m28s, slowest running: ID (48s)``."""
        with self.lock:
            now = self.clock()
            parts = [f"{self.done}/{self.total} graded"]
            elapsed = now - self.first_start if self.first_start is not None else 0.0
            if self.graded_here and elapsed > 0:
                per_second = self.graded_here / elapsed
                parts += [f"{per_second * 60:.1f}/min", f"ETA {clock_text((self.total - self.done) / per_second)}"]
            if self.running:
                slowest, since = min(self.running.items(), key=lambda kv: kv[1])
                parts.append(f"slowest running: {slowest} ({clock_text(now - since)})")
            return ", ".join(parts)


# Seconds between two progress lines in a log (GRADER_PROGRESS_EVERY overrides).
PROGRESS_EVERY_S = 30.0


class ProgressLines:
    """Plain lines: a phase when it starts and ends, one line per graded candidate, and every
    ``PROGRESS_EVERY_S`` seconds a progress line (rate, ETA, slowest running candidate)."""

    def __init__(self, stream: TextIO | None = None, total: int = 0, every: float | None = None) -> None:
        self.stream = stream or sys.stderr
        self.pace = Pace(total)
        self.every = every if every is not None else float(os.environ.get(protocol.PROGRESS_EVERY, PROGRESS_EVERY_S))
        self.stopped = threading.Event()
        self.ticker = threading.Thread(target=self.tick, name="progress-lines", daemon=True)

    def __enter__(self) -> ProgressLines:
        self.ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.ticker.join()

    def tick(self) -> None:
        while not self.stopped.wait(self.every):
            if self.pace.first_start is not None:
                print(f"progress: {self.pace.text()}", file=self.stream, flush=True)

    def started(self, candidate: Candidate) -> None:
        self.pace.started(candidate)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        print(f"{name} ...", file=self.stream, flush=True)
        yield
        print(f"{name}: ready in {time.monotonic() - started:.1f}s", file=self.stream, flush=True)

    def graded(self, item: Graded, done: int, total: int) -> None:
        self.pace.finished(item, done)
        print(candidate_line(item, done, total), file=self.stream, flush=True)


class PaceColumn(ProgressColumn):
    """The overall bar's rate, ETA and slowest running candidate, read at every refresh."""

    def __init__(self, pace: Pace, room: int) -> None:
        super().__init__()
        self.pace = pace
        self.room = room

    def render(self, task) -> Text:
        # One line, cut to the room the other columns leave: a progress line that wraps redraws badly on a narrow
        # terminal and can leave a stale line behind.
        text = self.pace.text().partition(", ")[2] if task.description == "grading" else ""
        return Text(short_line(text, self.room) if self.room > 1 else "", style="dim")


# The live bar's width, and what its other columns take beside the pace (spinner, "grading", bar, elapsed time,
# the spaces between), not counting the done/total count.
BAR_WIDTH = 20
FIXED_COLUMNS = 1 + 1 + len("grading") + 1 + BAR_WIDTH + 1 + 1 + 1 + len("0:00:00") + 1 + 1


class LiveProgress:
    """A spinner per running phase and a bar of graded candidates, with each candidate's line printed above."""

    def __init__(self, console: Console, total: int) -> None:
        self.console = console
        self.pace = Pace(total)
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=BAR_WIDTH),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 PaceColumn(self.pace, console.width - FIXED_COLUMNS - 2 * len(str(total))),
                                 console=console, transient=True)
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

    def started(self, candidate: Candidate) -> None:
        self.pace.started(candidate)

    def graded(self, item: Graded, done: int, total: int) -> None:
        self.pace.finished(item, done)
        style = VERDICT_STYLE.get(item.result.verdict, "")
        line = escape(candidate_line(item, done, total))  # an id like "[/]" is text, not rich markup
        self.console.print(f"[{style}]{line}[/{style}]" if style else line, highlight=False, markup=bool(style))
        self.progress.update(self.overall, completed=done)


@contextmanager
def observer_for(stream: TextIO, total: int) -> Iterator[ProgressLines | LiveProgress]:
    """Live progress on a terminal, plain lines elsewhere."""
    if stream.isatty():
        with LiveProgress(Console(file=stream), total) as live:
            yield live
    else:
        with ProgressLines(stream, total) as lines:
            yield lines


def verdict_counts(results: list[CandidateResult]) -> dict[str, Counter]:
    counts: dict[str, Counter] = {}
    for result in results:
        counts.setdefault(result.task or "(none)", Counter())[result.verdict] += 1
    return dict(sorted(counts.items()))


# The closing table's column headings: one word each (a log is read with ``split``), at most 10 characters, so that
# every verdict and a task name fit in 80 columns.
VERDICT_HEADINGS = {"input_truncated": "truncated"}
ALWAYS_SHOWN = ("full", "partial", "fail")
# The width of a log without a terminal, as pytest takes it.
LOG_WIDTH = 80


def verdict_table(results: list[CandidateResult], width: int) -> list[str]:
    """The verdicts per task as lines no wider than ``width``: a column for each verdict some candidate has (and
    always full, partial and fail) and the total; a task name too long for what is left is cut with an ellipsis."""
    counts = verdict_counts(results)
    shown = [v for v in VERDICTS if v in ALWAYS_SHOWN or any(c[v] for c in counts.values())]
    headings = [VERDICT_HEADINGS.get(v, v) for v in shown] + ["total"]
    widths = [max(len(h), 3) for h in headings]
    numbers = " ".join(f"{h:>{w}}" for h, w in zip(headings, widths))
    room = max(4, width - len(numbers) - 1)
    task_width = min(room, max([len("task"), *map(len, counts)]))

    def task_cell(name: str) -> str:
        return name if len(name) <= task_width else name[:task_width - 1] + "\u2026"

    lines = [f"{'task':<{task_width}} {numbers}"]
    for task, by_verdict in counts.items():
        cells = [by_verdict[v] for v in shown] + [sum(by_verdict.values())]
        lines.append(f"{task_cell(task):<{task_width}} " + " ".join(f"{n:>{w}}" for n, w in zip(cells, widths)))
    return lines


# Verdicts that get a reason line each at the end, as pytest's short summary lists what did not pass, worst first.
REASONED = ("error", "fail", "partial")


def closing_reasons(results: list[CandidateResult]) -> list[tuple[str, str, str]]:
    """(id, verdict, why) for every candidate that is an error, a fail or a partial (worst first), then one line
    per kind of unfinished grading (timed out, input cut off, no task) naming how many and the first few; cleaned
    for a terminal (they carry text the candidate chose). A reason is the index's (``grader.reports.scorecard.reason``)."""
    tasks = all_tasks()
    found = []
    for result in sorted(results, key=lambda r: (REASONED.index(r.verdict) if r.verdict in REASONED else 9, r.id)):
        if result.verdict in REASONED:
            core = set(tasks[result.task].core_criteria) if result.task in tasks else set()
            found.append((clean(result.id), result.verdict, clean(reason(result, core))))
    unfinished_by: dict[tuple[str, str], list[str]] = {}
    for result in sorted(results, key=lambda r: r.id):
        why = unfinished(result)
        if why and result.verdict not in REASONED:
            unfinished_by.setdefault((result.verdict, why), []).append(clean(result.id))
    for (verdict, why), ids in unfinished_by.items():
        named = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        found.append((ids[0], verdict, why) if len(ids) == 1 else
                     (f"{len(ids)} candidates", verdict, f"{why}: {named}"))
    return found


def short_line(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters, cut with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:width - 1] + "\u2026"


def print_closing(records: list[CandidateResult], exit_reason: str, stream: TextIO) -> None:
    """The verdict table per task, a short reason line for each fail, partial, error and unfinished candidate,
    and the exit code's reason; every line fits the terminal (80 columns in a log)."""
    console = Console(file=stream) if stream.isatty() else None
    width = console.width if console is not None else LOG_WIDTH
    lines = verdict_table(records, width)
    reasons = closing_reasons(records)
    if reasons:
        lines.append(short_line(f"short reasons ({len(reasons)}):", width))
        lines += [short_line(f"{verdict} {cid}: {why}", width) for cid, verdict, why in reasons]
    if console is None:
        for line in lines:
            print(line, file=stream)
        print(f"exit {clean(exit_reason)}", file=stream, flush=True)
        return
    console.print(Text("verdicts", style="bold"))
    for line in lines:
        verdict = line.split(" ", 1)[0]
        console.print(Text(line, style=VERDICT_STYLE.get(verdict, "")), highlight=False, soft_wrap=True)
    console.print(Text(f"exit {clean(exit_reason)}"), highlight=False)
