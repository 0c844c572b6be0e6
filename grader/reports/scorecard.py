"""The HTML scorecards' view model: what ``index.html`` and each candidate page show, computed from typed results
(``CandidateResult``, as graded or read back from results.json) and the rubric. The templates only lay it out;
nothing here is HTML, and every string stays untrusted text for the templates to escape.

Index
    One table per task, headed by the rubric's criterion titles (core criteria marked). Each row has the
    verdict, score, run status, one cell per criterion and a *reason*: why the row is not simply full, in
    this order, each part only when it applies: the grading error, a run that did not complete, an apply that
    failed, was rejected, applied in part or was a truncated preview, and the first failing claim (core
    criteria first, unmet before partial, then by id, as the summary orders them); a partial with no failing
    criterion says what kept it from full (criteria not evaluated, checks not run, a score below 0.9). With a
    judge's verdicts the row also shows the judge's overall verdict and whether the grader's agrees
    (``agree``, ``disagree``, or ``not_compared`` when the grader's verdict is ``error``). Totals count
    verdicts per task.

Candidate page
    The verdict sentence (the summary's first sentence) beside the verdict, score and run status; each
    criterion with its rubric requirement, score, coverage and first failing assertion; its evidence, with
    skipped checks that give the same skip message collapsed into one line with a count; the diff by file
    and hunk with each hunk's apply status.

Linking evidence to the diff
    A failing check's message (status failed, error or timeout) *names* a file of the diff when the file's
    path occurs in it as a whole path or as the tail of a longer one (``<scratch>/import-root/vllm/x.py``
    names ``vllm/x.py``; ``vllm/x.pyc`` or ``myvllm/x.py`` do not). A path under one of the grader's own
    folders (``grader/...``) or a task's folder (``<task id>/tests/...``, the hidden tests) is the grader's
    file, not the candidate's, even when its tail matches. A line number written right after the path
    (``x.py:417`` as pytest writes it, ``x.py", line 43`` as a traceback does) is a line of the tree that was
    graded, and links the check to the hunk that shows that line: a hunk that landed (applied, offset, fuzz)
    put its new side in the tree, from where the apply report says it landed (``applied at line N``) or else
    its header's new start; a hunk that did not land (failed, truncated, not applied) left the base's lines,
    its old side, moved by the lines that the landed hunks above it added or removed (a hunk the apply report
    does not list holds no known line). A line that no shown
    hunk holds (a preview shows a cut hunk only in part) links the check to the file alone. Every check that
    names a file, with a line or without, also links that file to the check's criterion.

Which hunks ran in a check
    Where the patch's added lines were traced (an evidence entry's ``ran``: the diff's path -> lines of the
    graded tree that ran during the check), a failing check links to every hunk that holds one of those lines
    (the same tree numbering as above), and each such hunk back to the check. A traced check none of whose
    added lines ran says so: "none of the diff's lines ran in this check", or, where the diff also changes
    files that cannot be traced (anything but vLLM's Python files), that none of its Python lines ran. Lines are
    traced in a re-run of the failing checks alone (``grader.pipeline.traced_rerun``); a check whose re-run did not
    finish or did not reproduce its status shows why (``rerun``) instead.
"""

from __future__ import annotations

import re
import shutil
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.pipeline.diffparse import HUNK_HEADER, parse_sections, split_lines
from grader.core.records import (RUN_STATUSES, VERDICTS, ApplyReport, CandidateResult, CriterionResult, EvidenceEntry,
                                 FileReport, HunkReport)
from grader.core.rubric import RubricError, Task, all_tasks
from grader.reports.summarize import assertion_line
from grader.reports.wording import DECIDING, all_met_where_evaluated, claim_of, deciding_failure, verdict_phrase

NO_TASK = "(no task)"
FAILING = ("failed", "error", "timeout")
LANDED = ("applied", "offset", "fuzz")
# Folders of the grader's own files, beside the task folders, that a traceback may name.
GRADER_FOLDERS = ("grader", "rubrics")
PATH_CHARS = re.compile(r"[\w.<>/+~-]")
LINE_AFTER_PATH = re.compile(r'^(?::(\d+)|",? line (\d+))')
LANDED_AT = re.compile(r"applied at line (\d+)")


# ---------------------------------------------------------------- rubric look-ups


def known_tasks() -> dict[str, Task]:
    """The rubric's tasks, or none where the rubrics folder is not there (an installed package without it)."""
    try:
        return all_tasks()
    except (OSError, RubricError):
        return {}


@dataclass(frozen=True)
class Column:
    """One criterion as a table header: its id, the rubric's title, and whether it is core."""

    id: str
    title: str
    core: bool
    requires: str = ""


def columns_for(task_id: str | None, results: list[CandidateResult], tasks: dict[str, Task]) -> list[Column]:
    """The rubric's criteria of the task; for a task without a rubric, the criteria its results carry."""
    task = tasks.get(task_id or "")
    if task is not None:
        return [Column(c.id, c.title, c.core, c.requires) for c in task.criteria.values()]
    titles: dict[str, str] = {}
    for r in results:
        for cid, crit in sorted(r.criteria.items()):
            titles.setdefault(cid, crit.title)
    return [Column(cid, title, False) for cid, title in sorted(titles.items())]


# ---------------------------------------------------------------- reasons and agreement


def failing_criteria(result: CandidateResult, core: set[str]) -> list[tuple[str, CriterionResult]]:
    """Criteria below met that count against the patch, in the summary's order: core first, unmet before partial.
    A conditional criterion that only lost to its anchor is left out: its anchor is the reason."""
    failing = [(cid, c) for cid, c in result.criteria.items()
               if c.status in ("unmet", "partial") and not c.rationale.startswith("anchor ")]
    return sorted(failing, key=lambda item: (item[0] not in core, item[1].status != "unmet", item[0]))


def failing_claim(cid: str, criterion: CriterionResult) -> str:
    """``c1: "claim" does not hold``, or the criterion's rationale when none of its checks failed (the assertion
    itself is on the candidate's page)."""
    entry = deciding_failure(criterion.evidence)
    if entry is None:
        return f"{cid}: {criterion.rationale or criterion.status}"
    return f"{cid}: \u201c{claim_of(entry)}\u201d does not hold"


def hunk_counts(apply: ApplyReport) -> Counter:
    return Counter(h.status for f in apply.files for h in f.hunks)


def apply_reason(apply: ApplyReport | None) -> str:
    """What the apply report says when the patched tree is not simply the diff: failed, rejected, partial, cut."""
    if not apply:
        return ""
    status, message = apply.status, apply.message
    counts = hunk_counts(apply)
    total = sum(counts.values())
    if status in ("failed", "rejected"):
        return f"apply {status}" + (f": {message}" if message else "")
    if apply.truncated:
        cut = counts["truncated"]
        return f"truncated preview: {cut} of {total} hunk{'s' if total != 1 else ''} cut off" if cut else \
            "truncated preview"
    if status == "partial":
        return f"applied in part: {counts['failed']} of {total} hunk{'s' if total != 1 else ''} failed"
    return ""


def run_reason(result: CandidateResult) -> str:
    status = result.run_status
    if status in ("complete", "apply_partial"):
        return ""  # apply_partial is said by the apply report's reason
    if status in ("environment_error", "grader_error"):
        return status.replace("_", " ") + (f": {first_line(result.error)}" if result.error else "")
    return status.replace("_", " ")


def first_line(text: str | None) -> str:
    return next((line.strip() for line in stable_text(text or "").splitlines() if line.strip()), "")


def reason(result: CandidateResult, core: set[str]) -> str:
    """Why the row is what it is, in one line (see the module docstring for the order)."""
    parts = []
    # An environment or grader error is said once, by the run's reason, which names it and quotes its first line.
    if result.verdict == "error" and result.run_status not in ("environment_error", "grader_error"):
        parts.append("error: " + (first_line(result.error) or "not graded"))
    parts.append(run_reason(result))
    if result.verdict == "no_diff":
        parts.append("no diff to grade")
    elif result.verdict == "no_task":
        parts.append("the task could not be told: pass --task")
    else:
        parts.append(apply_reason(result.apply))
    failing = failing_criteria(result, core)
    if failing:
        parts.append(failing_claim(*failing[0]))
    elif all_met_where_evaluated(result):
        parts.append(verdict_phrase(result))
    elif result.verdict == "partial":
        parts.append(short_of_full(result.criteria))
    return "; ".join(p for p in dict.fromkeys(parts) if p)


def short_of_full(criteria: dict[str, CriterionResult]) -> str:
    """Why a partial with no failing criterion is not full: criteria not evaluated, or checks that did not run
    here (a met criterion has every evaluated check passing, so nothing else can hold it back)."""
    ordered = sorted(criteria.items())
    unevaluated = [cid for cid, c in ordered if c.status == "not_evaluated"]
    thin = [f"{cid} ({', '.join(f'{n} {why}' for why, n in sorted(c.not_run.items()))})"
            for cid, c in ordered if c.status != "not_evaluated" and c.not_run]
    parts = [("not evaluated: " + ", ".join(unevaluated)) if unevaluated else "",
             ("checks not run: " + ", ".join(thin)) if thin else ""]
    return "; ".join(p for p in parts if p)


def agreement(grader_verdict: str, judge_verdict: str | None) -> str | None:
    """``agree``/``disagree`` with the judge's overall verdict; ``not_compared`` for a grading error; None without
    a judge's verdict for the candidate."""
    if judge_verdict is None:
        return None
    if grader_verdict == "error":
        return "not_compared"
    return "agree" if grader_verdict == judge_verdict else "disagree"


AGREEMENT_MARKS = {"agree": "\u2713 agrees", "disagree": "\u2717 differs", "not_compared": "\u2013 not compared"}


def agreement_mark(state: str | None) -> str:
    """What the page shows for an agreement state ("" without a judge's verdict)."""
    return AGREEMENT_MARKS.get(state or "", "")


# ---------------------------------------------------------------- the index


@dataclass(frozen=True)
class Cell:
    status: str  # a criterion status, or "absent" where the result has no such criterion
    score: float | None
    rationale: str


@dataclass(frozen=True)
class Row:
    id: str
    page: str
    verdict: str
    score: float | None
    run_status: str
    cells: list[Cell]
    reason: str
    judge: str | None
    agreement: str | None
    # How the verdict reads where the bare verdict and score would mislead ("all met where evaluated; ..."), or "".
    phrase: str = ""
    input_kind: str = "whole"  # "cut": a preview cut at the bundle's line limit or with cut-off hunks
    # How many tamper signals the static scan raised (grader.pipeline.integrity): a marker, never part of the verdict.
    flags: int = 0

    @property
    def agreement_mark(self) -> str:
        return agreement_mark(self.agreement)

    @property
    def verdict_rank(self) -> int:
        return rank(VERDICTS, self.verdict)

    @property
    def run_rank(self) -> int:
        return rank(RUN_STATUSES, self.run_status)


def rank(order: tuple[str, ...], value: str) -> int:
    return order.index(value) if value in order else len(order)


@dataclass(frozen=True)
class TaskTable:
    task: str
    title: str
    anchor: str
    columns: list[Column]
    rows: list[Row]

    @property
    def totals(self) -> list[tuple[str, int]]:
        return verdict_totals(self.rows)

    @property
    def judged(self) -> tuple[int, int]:
        """(agreeing, compared) rows against the judge's verdicts."""
        compared = [r for r in self.rows if r.agreement in ("agree", "disagree")]
        return sum(r.agreement == "agree" for r in compared), len(compared)


def verdict_totals(rows: list[Row]) -> list[tuple[str, int]]:
    counts = Counter(r.verdict for r in rows)
    return [(v, counts[v]) for v in sorted(counts, key=lambda v: rank(VERDICTS, v))]


@dataclass(frozen=True)
class Index:
    tables: list[TaskTable]
    has_judge: bool
    verdicts: list[str]
    run_statuses: list[str]

    @property
    def rows(self) -> list[Row]:
        return [r for t in self.tables for r in t.rows]

    @property
    def totals(self) -> list[tuple[str, int]]:
        return verdict_totals(self.rows)

    @property
    def judged(self) -> tuple[int, int]:
        pairs = [t.judged for t in self.tables]
        return sum(a for a, _ in pairs), sum(n for _, n in pairs)


def anchor_for(text: str, used: set[str]) -> str:
    """An id attribute value from free text: letters, digits and dashes, made unique among ``used``."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "item"
    anchor, n = base, 1
    while anchor in used:
        n += 1
        anchor = f"{base}-{n}"
    used.add(anchor)
    return anchor


def cell_for(result: CandidateResult, cid: str) -> Cell:
    crit = result.criteria.get(cid)
    if crit is None:
        return Cell("absent", None, "")
    return Cell(crit.status, crit.score, crit.rationale)


def build_row(result: CandidateResult, columns: list[Column], core: set[str], page: str,
              judge: dict[str, str] | None) -> Row:
    judged = (judge or {}).get(result.id)
    return Row(result.id, page, result.verdict, result.score, result.run_status,
               [cell_for(result, c.id) for c in columns], reason(result, core), judged,
               agreement(result.verdict, judged), verdict_phrase(result) if all_met_where_evaluated(result) else "",
               input_kind(result), len(result.integrity_flags))


def input_kind(result: CandidateResult) -> str:
    """``cut`` for a truncated preview (the apply report says so), ``whole`` for any other input."""
    return "cut" if result.apply is not None and result.apply.truncated else "whole"


def build_index(results: list[CandidateResult], page_for: Callable[[str], str], judge: dict[str, str] | None = None,
                tasks: dict[str, Task] | None = None) -> Index:
    """Per-task tables of every result (sorted by id), the task-less ones last under ``(no task)``."""
    tasks = known_tasks() if tasks is None else tasks
    grouped: dict[str, list[CandidateResult]] = defaultdict(list)
    for r in sorted(results, key=lambda r: r.id):
        grouped[r.task or NO_TASK].append(r)
    used: set[str] = set()
    tables = []
    for task_id in sorted(grouped, key=lambda t: (t == NO_TASK, t)):
        group = grouped[task_id]
        task = tasks.get(task_id)
        columns = columns_for(None if task_id == NO_TASK else task_id, group, tasks)
        core = {c.id for c in columns if c.core}
        rows = [build_row(r, columns, core, page_for(r.id), judge) for r in group]
        tables.append(TaskTable(task_id, task.title if task else "", anchor_for(f"task-{task_id}", used),
                                columns, rows))
    everything = [r for t in tables for r in t.rows]
    return Index(tables, judge is not None,
                 sorted({r.verdict for r in everything}, key=lambda v: rank(VERDICTS, v)),
                 sorted({r.run_status for r in everything}, key=lambda v: rank(RUN_STATUSES, v)))


# ---------------------------------------------------------------- the diff, by file and hunk


@dataclass(frozen=True)
class DiffLine:
    kind: str  # add, del, context or note ("\\ No newline at end of file")
    text: str
    old: int | None  # the line's number in the file before and after the patch, where it has one
    new: int | None
    tree: int | None  # its number in the tree that was graded, where the tree holds it


@dataclass
class DiffHunk:
    anchor: str
    header: str
    lines: list[DiffLine]
    status: str  # the apply report's hunk status, or "unknown" where the report has none for it
    detail: str
    evidence: list[EvidenceRef] = field(default_factory=list)
    named_lines: set[int] = field(default_factory=set)  # tree lines a failing check names
    ran_in: list[EvidenceRef] = field(default_factory=list)  # failing checks in which its added lines ran
    ran_lines: set[int] = field(default_factory=set)  # tree lines of it that ran in a failing check
    number: int = 0  # its place in its file, from 1

    @property
    def landed(self) -> bool:
        return self.status in LANDED

    def holds(self, tree_line: int) -> bool:
        """Whether the graded tree's line ``tree_line`` is one this hunk shows."""
        return any(line.tree == tree_line for line in self.lines)


@dataclass
class DiffFile:
    anchor: str
    path: str
    change: str
    header: list[str]
    hunks: list[DiffHunk]
    # Hunks the apply report lists with no hunk in the diff text (a preview cut inside the file header).
    unshown: list[HunkReport] = field(default_factory=list)
    criteria: list[str] = field(default_factory=list)  # criteria whose failing checks name this file
    neutralized: bool = False
    open: bool = True  # shown open; on a long diff only files a failing check ran or named are

    @property
    def added(self) -> int:
        return sum(line.kind == "add" for h in self.hunks for line in h.lines)

    @property
    def removed(self) -> int:
        return sum(line.kind == "del" for h in self.hunks for line in h.lines)

    @property
    def ran_in_failing(self) -> int:
        """Failing checks in which an added line of this file ran."""
        return len({ref.evidence_anchor for h in self.hunks for ref in h.ran_in})

    @property
    def linked(self) -> bool:
        return bool(self.criteria) or any(h.ran_in or h.evidence for h in self.hunks)


@dataclass
class DiffView:
    files: list[DiffFile]
    # Lines of the diff text outside every file section (a preamble, stray text): shown raw, never dropped.
    stray_lines: int
    raw: str

    @property
    def collapsed(self) -> bool:
        return any(not f.open for f in self.files)

    @property
    def hunk_statuses(self) -> list[tuple[str, int]]:
        counts = Counter(h.status for f in self.files for h in f.hunks)
        return sorted(counts.items())


@dataclass(frozen=True)
class EvidenceRef:
    """A link from a check to a place in the diff (a hunk or a file) and back."""

    criterion: str
    evidence_anchor: str
    test: str
    target: str  # the hunk's or the file's anchor
    line: int | None
    label: str  # what the link reads: the file's name, the line, and whether a hunk holds it


def line_kind(line: str) -> str:
    return {"+": "add", "-": "del", "\\": "note"}.get(line[:1], "context")


def hunk_starts(header: str) -> tuple[int, int, int, int]:
    """(old start, old count, new start, new count) of a hunk header; zeros for a header that does not parse."""
    match = HUNK_HEADER.match(header)
    if match is None:
        return 0, 0, 0, 0
    return int(match.group(1)), int(match.group(2) or 1), int(match.group(3)), int(match.group(4) or 1)


def numbered_lines(lines: list[str], old_start: int, new_start: int, tree_start: int,
                   landed: bool) -> list[DiffLine]:
    """Each body line with its old- and new-side number and its number in the graded tree: a hunk that landed
    put its new side there (from ``tree_start``), one that did not left its old side (also from ``tree_start``)."""
    numbered, old, new, tree = [], old_start, new_start, tree_start
    for line in lines:
        kind = line_kind(line)
        in_tree = kind == "context" or kind == ("add" if landed else "del")
        numbered.append(DiffLine(kind, line, old if kind in ("del", "context") else None,
                                 new if kind in ("add", "context") else None, tree if in_tree else None))
        old += kind in ("del", "context")
        new += kind in ("add", "context")
        tree += in_tree
    return numbered


def numbered_hunks(hunks: list[tuple[str, list[str], str, str]]) -> list[list[DiffLine]]:
    """Number the (header, lines, status, detail) hunks of one file in order (rule: the module docstring).

    A hunk that landed starts where the apply report says it landed, else at its new start. One that did not
    land left the base's lines, which sit at its old start moved by what the landed hunks before it added or
    removed, and by how far the last of them landed from where its header said."""
    numbered, delta, moved = [], 0, 0
    for header, lines, status, detail in hunks:
        old_start, old_count, new_start, new_count = hunk_starts(header)
        if status in LANDED:
            landed_at = LANDED_AT.search(detail or "")
            tree_start = int(landed_at.group(1)) if landed_at else new_start
            moved = tree_start - new_start
            numbered.append(numbered_lines(lines, old_start, new_start, tree_start, True))
            delta += new_count - old_count
        elif status == "unknown":  # no apply report says where it went: no line of the tree is known to be it
            numbered.append([replace(line, tree=None) for line in numbered_lines(lines, old_start, new_start, 0,
                                                                                   False)])
        else:
            numbered.append(numbered_lines(lines, old_start, new_start, old_start + delta + moved, False))
    return numbered


def report_files_by_path(apply: ApplyReport | None) -> dict[str, list[FileReport]]:
    by_path: dict[str, list[FileReport]] = defaultdict(list)
    for f in apply.files if apply else []:
        by_path[f.path].append(f)
    return by_path


def build_diff(diff: str, apply: ApplyReport | None) -> DiffView:
    """The diff by file and hunk, each hunk beside its apply report entry (matched by path, then by header)."""
    sections = parse_sections(diff)
    reported = report_files_by_path(apply)
    neutralized = set(apply.neutralized if apply else [])
    used: set[str] = set()
    files, shown = [], 0
    for index, section in enumerate(sections):
        path = section.path
        report = reported[path].pop(0) if reported.get(path) else None
        report_hunks = list(report.hunks if report else [])
        outcomes = []
        for hunk in section.hunks:
            entry = next((h for h in report_hunks if h.header == hunk.header), None)
            if entry is not None:
                report_hunks.remove(entry)
            status = entry.status if entry else ("not_applied" if path in neutralized else "unknown")
            outcomes.append((hunk.header, hunk.lines, status, entry.detail if entry else ""))
        hunks = [DiffHunk(anchor_for(f"hunk-{index + 1}-{number}", used), header, lines, status, detail,
                          number=number)
                 for number, ((header, _, status, detail), lines) in
                 enumerate(zip(outcomes, numbered_hunks(outcomes)), start=1)]
        shown += len(section.header) + sum(1 + len(h.lines) for h in section.hunks)
        files.append(DiffFile(anchor_for(f"file-{index + 1}", used), path,
                              report.change if report else ("not applied" if path in neutralized else ""),
                              section.header, hunks, report_hunks, neutralized=path in neutralized))
    total = len(split_lines(diff))
    return DiffView(files, max(total - shown, 0), diff)


# ---------------------------------------------------------------- what a check's message names


def under_grader_folder(prefix: str, task_ids: set[str]) -> bool:
    """Whether the part of a path before a matched tail puts it under the grader's or a task's own folder."""
    return any(part in task_ids or part in GRADER_FOLDERS for part in prefix.split("/"))


def named_places(message: str, path: str, task_ids: set[str]) -> list[int | None]:
    """Each place ``message`` names the candidate file ``path``: the line written after it, or None for none."""
    if not path or not message:
        return []
    places = []
    for match in re.finditer(re.escape(path), message):
        start, end = match.start(), match.end()
        before = message[start - 1] if start else ""
        if before and before != "/" and PATH_CHARS.match(before):
            continue  # the tail of a longer name (myvllm/x.py), not a path ending in this one
        if end < len(message) and re.match(r"[\w/]", message[end]):
            continue  # a longer name (x.pyc, x.py/...)
        token_start = start
        while token_start > 0 and PATH_CHARS.match(message[token_start - 1]):
            token_start -= 1
        if under_grader_folder(message[token_start:start], task_ids):
            continue
        line = LINE_AFTER_PATH.match(message[end:])
        places.append(int(line.group(1) or line.group(2)) if line else None)
    return places


def place_label(path: str, line: int | None, in_hunk: bool) -> str:
    name = path.rsplit("/", 1)[-1]
    if line is None:
        return name
    return f"{name}:{line}" + ("" if in_hunk else " (outside the diff's hunks)")


def link_evidence(view: DiffView, criteria: list[CriterionView], task_ids: set[str]) -> None:
    """Fill in both directions of every link between failing checks and the diff (rule: module docstring)."""
    for crit in criteria:
        for ev in crit.evidence:
            if ev.status not in FAILING or not ev.message:
                continue
            for diff_file in view.files:
                for line in dict.fromkeys(named_places(ev.message, diff_file.path, task_ids)):
                    hunk = next((h for h in diff_file.hunks if line is not None and h.holds(line)), None)
                    ref = EvidenceRef(crit.id, ev.anchor, ev.test, hunk.anchor if hunk else diff_file.anchor, line,
                                      place_label(diff_file.path, line, hunk is not None))
                    if ref not in ev.places:
                        ev.places.append(ref)
                    if hunk is not None and ref not in hunk.evidence:
                        hunk.evidence.append(ref)
                        hunk.named_lines.add(line)
                    if crit.id not in diff_file.criteria:
                        diff_file.criteria.append(crit.id)
    for diff_file in view.files:
        diff_file.criteria.sort()
    link_lines_ran(view, criteria)
    collapse_long(view)


# A diff longer than this many lines shows only the files a failing check ran or named open; the rest collapse.
LONG_DIFF_LINES = 300


def collapse_long(view: DiffView) -> None:
    shown = sum(len(h.lines) for f in view.files for h in f.hunks)
    if shown > LONG_DIFF_LINES and len(view.files) > 1:
        for diff_file in view.files:
            diff_file.open = diff_file.linked


def traceable(path: str) -> bool:
    """Whether a subject traces this file's added lines (``grader.pipeline.run.added_lines``): vLLM's Python files."""
    return path.startswith("vllm/") and path.endswith(".py")


def link_lines_ran(view: DiffView, criteria: list[CriterionView]) -> None:
    """Link each traced failing check to the hunks whose added lines ran in it (rule: module docstring)."""
    by_path = {f.path: f for f in view.files}
    for crit in criteria:
        for ev in crit.evidence:
            if ev.status not in FAILING or ev.ran is None:
                continue
            for path, lines in sorted(ev.ran.items()):
                diff_file = by_path.get(path)
                if diff_file is None:
                    continue
                for hunk in diff_file.hunks:
                    held = {line for line in lines if hunk.holds(line)}
                    if held:
                        hunk.ran_lines |= held
                        ref = EvidenceRef(crit.id, ev.anchor, ev.test, hunk.anchor, None,
                                          f"{path.rsplit('/', 1)[-1]} hunk {hunk.number}")
                        ev.ran_hunks.append(ref)
                        hunk.ran_in.append(ref)
            if not ev.ran_hunks:
                ev.none_ran = none_ran_sentence(view)


def none_ran_sentence(view: DiffView) -> str:
    """A file outside ``vllm/`` (tests, docs, CUDA sources) never runs in a subject, whose import root holds only
    vLLM's package: only vLLM's files that are not Python are changes no tracer can see."""
    unseen = [f.path.rsplit("/", 1)[-1] for f in view.files
              if f.hunks and f.path.startswith("vllm/") and not traceable(f.path)]
    if not unseen:
        return "none of the diff's lines ran in this check"
    if all(not f.hunks or f.path.rsplit("/", 1)[-1] in unseen for f in view.files):
        return "no line of this diff can be traced (it changes no Python file of vLLM)"
    return (f"none of the diff's Python lines ran in this check (its changes to {', '.join(unseen[:3])} "
            "cannot be traced)")


# ---------------------------------------------------------------- a candidate's page


@dataclass
class EvidenceView:
    anchor: str
    test: str
    name: str  # the test's own name, without its file
    claim: str
    status: str
    weight: float
    kinds: list[str]
    message: str
    assertion: str  # what the failure says, in one line
    places: list[EvidenceRef] = field(default_factory=list)
    ran: dict[str, list[int]] | None = None  # the patch's added lines that ran in it; None: not traced
    ran_hunks: list[EvidenceRef] = field(default_factory=list)
    none_ran: str = ""  # the sentence for a traced failing check in which no hunk's added line ran
    rerun: str = ""  # why a failing check re-run traced has no lines (its re-run did not finish or reproduce)


@dataclass(frozen=True)
class SkipGroup:
    """Checks skipped with the same message, as one line."""

    message: str
    tests: list[str]

    @property
    def count(self) -> int:
        return len(self.tests)


@dataclass
class CriterionView:
    id: str
    anchor: str
    title: str
    requires: str
    core: bool
    status: str
    score: float | None
    coverage: float | None
    not_run: list[tuple[str, int]]
    rationale: str
    evidence: list[EvidenceView]
    skips: list[SkipGroup]
    first_failure: EvidenceView | None

    @property
    def failing(self) -> list[EvidenceView]:
        return [e for e in self.evidence if e.status in FAILING]

    @property
    def passing(self) -> list[EvidenceView]:
        """Checks that ran and did not fail (passed, or any other status a result may carry)."""
        return [e for e in self.evidence if e.status not in FAILING]

    @property
    def stood_in(self) -> int:
        """Skipped checks that count nowhere, because a variant of each ran (``grader.pipeline.score.stood_in_for``): the
        skips the coverage does not count as missing, so that the page's counts agree."""
        missing = sum(n for why, n in self.not_run if why in ("gpu", "skipped"))
        return max(0, sum(group.count for group in self.skips) - missing)

    @property
    def places(self) -> list[EvidenceRef]:
        """Every diff place this criterion's failing checks name, once per target."""
        seen: dict[str, EvidenceRef] = {}
        for ev in self.evidence:
            for ref in ev.places:
                seen.setdefault(ref.label, ref)
        return list(seen.values())


# What differs between two runs of the same candidate in a check's words, and is no part of what they say: a log
# line's time stamp (vLLM's "INFO 12-04 20:01:02 [x.py:12]", ISO times), a process id, an object's address, a
# scratch folder's random name, a measured duration; and a traceback's caret lines (``^^^^``), which only
# underline the line above them and read as noise once the page shows the message as text.
RUN_VARYING = (
    (re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (re.compile(r"\b(?:\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d+)?\b"), "<time>"),
    (re.compile(r"\b(pid[= ]|process )\d+\b", re.IGNORECASE), r"\1<pid>"),
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0x<addr>"),
    (re.compile(r"(/(?:tmp|var/tmp|dev/shm)/)[^/\s'\"():]*\d[^/\s'\"():]*"), r"\1<scratch>"),
    (re.compile(r"\b\d+\.\d+ ?(?:s|ms|seconds)\b"), "<duration>"),
)
CARET_LINE = re.compile(r"^[\s^~E>|]*[\^~][\s^~]*$")


def stable_text(message: str) -> str:
    """``message`` as the pages show it: without traceback caret lines and with the words that differ between
    two runs of one candidate (RUN_VARYING) replaced by what they are, so two gradings of a candidate write the
    same page but for the run's timings."""
    kept = [line for line in message.splitlines() if not CARET_LINE.match(line)]
    text = "\n".join(kept)
    for pattern, stands_for in RUN_VARYING:
        text = pattern.sub(stands_for, text)
    return text


def skip_message(evidence: EvidenceEntry) -> str:
    return stable_text(evidence.message.strip().removeprefix("Skipped:").strip()) or "no reason given"


def collapse_skips(evidence: list[EvidenceEntry]) -> list[SkipGroup]:
    """Skipped checks grouped by their skip message, in order of first appearance."""
    groups: dict[str, list[str]] = {}
    for e in evidence:
        if e.status == "skipped":
            groups.setdefault(skip_message(e), []).append(e.test)
    return [SkipGroup(message, tests) for message, tests in groups.items()]


def evidence_view(e: EvidenceEntry, anchor: str) -> EvidenceView:
    failing = e.status in FAILING
    message = stable_text(e.message)
    return EvidenceView(anchor, e.test, e.test.rsplit("::", 1)[-1], e.claim, e.status, e.weight, list(e.kinds),
                        message, assertion_line(message) if failing else "", ran=e.ran,
                        rerun=e.rerun if failing else "")


def criterion_view(cid: str, crit: CriterionResult, column: Column | None) -> CriterionView:
    shown = [e for e in crit.evidence if e.status != "skipped"]
    evidence = [evidence_view(e, f"ev-{cid}-{n}") for n, e in enumerate(shown, start=1)]
    first_failure = next((e for e in evidence if e.status in DECIDING), None)
    return CriterionView(
        cid, f"crit-{cid}", crit.title or (column.title if column else ""), column.requires if column else "",
        bool(column and column.core), crit.status, crit.score, crit.coverage, sorted(crit.not_run.items()),
        crit.rationale, evidence, collapse_skips(crit.evidence), first_failure)


def verdict_sentence(summary: str) -> str:
    """The summary's first sentence: up to the first full stop (or ! ?) followed by a space, outside code
    (backticks), quotes and parentheses, where the summary's quoted claims and code carry stops of their own."""
    text = " ".join((summary or "").split())
    in_code = in_quote = False
    depth = 0
    for i, ch in enumerate(text):
        if ch == "`":
            in_code = not in_code
        elif in_code:
            continue
        elif ch == '"':
            in_quote = not in_quote
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif ch in ".!?" and not in_quote and depth == 0 and text[i + 1:i + 2] == " ":
            return text[:i + 1]
    return text


@dataclass
class CandidatePage:
    result: CandidateResult
    task_title: str
    headline: str
    rest_of_summary: str
    criteria: list[CriterionView]
    diff: DiffView
    judge: str | None
    agreement: str | None
    reason: str

    @property
    def agreement_mark(self) -> str:
        return agreement_mark(self.agreement)

    @property
    def error(self) -> str:
        """The grading error as the page shows it (``stable_text``)."""
        return stable_text(self.result.error or "")

    @property
    def verdict_phrase(self) -> str:
        return verdict_phrase(self.result) if all_met_where_evaluated(self.result) else ""

    @property
    def unlinked_evidence(self) -> int:
        return sum(not ev.places and not ev.ran_hunks and not ev.none_ran
                   for c in self.criteria for ev in c.evidence if ev.status in FAILING)

    @property
    def failing_checks(self) -> int:
        return sum(ev.status in FAILING for c in self.criteria for ev in c.evidence)

    @property
    def hunk_linked_checks(self) -> int:
        """Failing checks linked to a hunk: one in which a hunk's added lines ran, or whose message names a line
        a hunk holds."""
        return sum(bool(ev.ran_hunks) or any(ref.line is not None and ref.target.startswith("hunk-")
                                             for ref in ev.places)
                   for c in self.criteria for ev in c.evidence if ev.status in FAILING)

    @property
    def none_ran_checks(self) -> int:
        """Failing checks that say none of the diff's (Python) lines ran in them and link nowhere else (a diff with
        nothing traceable says so, which is not counted here)."""
        return sum(ev.none_ran.startswith("none of") and not ev.places
                   for c in self.criteria for ev in c.evidence if ev.status in FAILING)


def build_candidate(result: CandidateResult, diff: str, judge: dict[str, str] | None = None,
                    tasks: dict[str, Task] | None = None) -> CandidatePage:
    tasks = known_tasks() if tasks is None else tasks
    task = tasks.get(result.task or "")
    columns = {c.id: c for c in columns_for(result.task, [result], tasks)}
    criteria = [criterion_view(cid, crit, columns.get(cid)) for cid, crit in sorted(result.criteria.items())]
    view = build_diff(diff, result.apply)
    link_evidence(view, criteria, set(tasks))
    summary = " ".join(stable_text(result.summary).split())
    headline = verdict_sentence(summary)
    judged = (judge or {}).get(result.id)
    core = {c.id for c in columns.values() if c.core}
    return CandidatePage(result, task.title if task else "", headline, summary[len(headline):].strip(), criteria,
                         view, judged, agreement(result.verdict, judged), reason(result, core))


# ---------------------------------------------------------------- looking at the pages in a browser

# How the screenshot script and the browser tests start the system's Chromium: headless, and with nothing that
# reaches out (the pages load only their own files; these keep the browser itself from calling home).
CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def system_chromium() -> str | None:
    """The Chromium on this machine (``make browser`` installs it), or None."""
    found = next((p for p in CHROMIUM_PATHS if Path(p).is_file()), None)
    return found or shutil.which("chromium") or shutil.which("chromium-browser")
