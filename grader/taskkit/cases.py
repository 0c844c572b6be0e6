"""A criterion's case space against the checks that exercise it (``check-task``'s case rules).

A criterion declares the values its words imply (``[criteria.cN.cases]``: axis -> values); a collected check names
the values it exercises (the evidence plugin's ``cases`` and ``marked_cases``, ``grader.pipeline.pytest_evidence``). The
rules, each a refusal naming what is wrong:

- every criterion declares a case space (``case_space_problems``);
- every clause of a criterion's ``requires`` (split at ';' and at sentence ends) names at least one declared value
  of that criterion, case-insensitively, as a substring: a clause that names none maps to no check
  (``case_space_problems``);
- every declared value is exercised by some check of its criterion (``coverage_problems``);
- every value a check's ``cases`` marker names is declared by one of the check's criteria on that axis: anything
  else is a typo that would count for nothing (``coverage_problems``).

``clause_table`` gives, per criterion and clause, the values the clause names and the checks that exercise them
together (a value of each axis the clause names: "bfloat16 is rejected on SM75" wants a check of bfloat16 on
SM75, not one of bfloat16 and another of SM75). A clause no check exercises together is flagged there, not refused:
a value is named by substring, so a short value ("on") is named by clauses that are not about it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from grader.core.rubric import Task

# Abbreviations whose period ends no sentence (a clause is not cut after them).
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class CollectedCheck:
    """One collected check: its node id, the criteria it evidences, every case value it exercises and the values
    its ``cases`` markers name (each axis -> values)."""

    nodeid: str
    criteria: tuple[str, ...]
    cases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    marked: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def exercises(self, axis: str, value: str) -> bool:
        return value in self.cases.get(axis, ())


def _axis_values(raw) -> dict[str, tuple[str, ...]]:
    if not isinstance(raw, dict):
        return {}
    return {str(axis): tuple(map(str, values)) for axis, values in raw.items() if isinstance(values, list)}


def read_collected(evidence: str) -> dict[str, CollectedCheck]:
    """The ``collected`` records of the evidence plugin's output, by node id."""
    found = {}
    for line in evidence.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict) or record.get("event") != "collected":
            continue
        criteria = tuple(c["id"] for c in record.get("criteria", []))
        found[record["nodeid"]] = CollectedCheck(record["nodeid"], criteria, _axis_values(record.get("cases")),
                                                 _axis_values(record.get("marked_cases")))
    return found


def clauses(requires: str) -> list[str]:
    """``requires`` cut at ';' and at sentence ends (not after an abbreviation such as "e.g."); empty pieces
    dropped."""
    protected = requires
    for i, abbreviation in enumerate(ABBREVIATIONS):
        protected = re.sub(re.escape(abbreviation), f"\0{i}\0", protected, flags=re.I)
    pieces = [p for part in protected.split(";") for p in SENTENCE_END.split(part)]
    restored = []
    for piece in pieces:
        for i, abbreviation in enumerate(ABBREVIATIONS):
            piece = piece.replace(f"\0{i}\0", abbreviation)
        if piece.strip(" .!?\n"):
            restored.append(piece.strip())
    return restored


def named_values(clause: str, cases: dict[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    """The declared (axis, value) pairs ``clause`` names: the value within the clause, case-insensitively."""
    lowered = clause.lower()
    return [(axis, value) for axis, values in cases.items() for value in values if value.lower() in lowered]


def clause_checks(clause: str, cases: dict[str, tuple[str, ...]],
                  checks: list[CollectedCheck]) -> list[CollectedCheck]:
    """The checks that exercise ``clause``: for each axis it names, one of the values it names on that axis."""
    named: dict[str, set[str]] = {}
    for axis, value in named_values(clause, cases):
        named.setdefault(axis, set()).add(value)
    if not named:
        return []
    return [check for check in checks
            if all(any(check.exercises(axis, v) for v in values) for axis, values in named.items())]


def case_space_problems(task: Task) -> list[str]:
    """Criteria without a declared case space, and clauses of ``requires`` that name none of its values."""
    problems = []
    for c in task.criteria.values():
        if not c.cases:
            problems.append(f"{c.id} declares no case space ([criteria.{c.id}.cases]: axis -> the values its "
                            "words imply)")
            continue
        for clause in clauses(c.requires):
            if not named_values(clause, c.cases):
                problems.append(f"{c.id}: the clause {_quoted(clause)} names no declared value of {c.id}, so no "
                                "check maps to it (name the value it is about, or declare it)")
    return problems


def coverage_problems(task: Task, checks: dict[str, CollectedCheck]) -> list[str]:
    """Declared values no check of their criterion exercises, and marked values no criterion of the check
    declares."""
    problems = []
    for c in task.criteria.values():
        own = [check for check in checks.values() if c.id in check.criteria]
        for axis, values in c.cases.items():
            missing = [v for v in values if not any(check.exercises(axis, v) for check in own)]
            if missing:
                problems.append(f"{c.id}: {axis}={', '.join(missing)} exercised by no check of {c.id}")
    for check in checks.values():
        declared = [task.criteria[cid].cases for cid in check.criteria if cid in task.criteria]
        for axis, values in check.marked.items():
            if not any(axis in cases for cases in declared):
                problems.append(f"{check.nodeid} marks the axis {axis!r}, which none of its criteria "
                                f"({', '.join(check.criteria) or 'none'}) declares")
                continue
            typos = [v for v in values if not any(v in cases.get(axis, ()) for cases in declared)]
            if typos:
                problems.append(f"{check.nodeid} marks {axis}={', '.join(typos)}, which none of its criteria "
                                f"({', '.join(check.criteria)}) declares on {axis}")
    return problems


def clause_table(task: Task, checks: dict[str, CollectedCheck], width: int = 100) -> list[str]:
    """One line per criterion's clause: the clause -> the declared values it names -> the checks of the criterion
    that exercise them (their count and the first few names)."""
    lines = []
    for c in task.criteria.values():
        own = [check for check in checks.values() if c.id in check.criteria]
        for clause in clauses(c.requires):
            exercising = [check.nodeid.rsplit("::", 1)[-1] for check in clause_checks(clause, c.cases, own)]
            shown = ", ".join(exercising[:3]) + (f" +{len(exercising) - 3} more" if len(exercising) > 3 else "")
            if not exercising:
                values = named_values(clause, c.cases)
                some = sum(any(check.exercises(a, v) for a, v in values) for check in own)
                shown = f"none exercises them together ({some} exercise some of them)" if values else ""
            lines.append(f"{c.id} {_quoted(clause, width)} -> {_named(clause, c.cases) or '(no declared value)'} -> "
                         f"{len(exercising)} checks{': ' + shown if shown else ''}")
    return lines


def _named(clause: str, cases: dict[str, tuple[str, ...]]) -> str:
    return ", ".join(f"{axis}={value}" for axis, value in named_values(clause, cases))


def _quoted(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit - 1] + "…")
