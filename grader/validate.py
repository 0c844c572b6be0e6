"""validate-rubrics: check each rubric against reality by grading its base and its reference fix.

Every fix criterion must be unmet on the base and met on the reference, every preserve criterion met on both,
every conditional criterion met on the reference. A criterion that cannot be evaluated here (no GPU) is
reported as such, not passed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grader.pipeline import BaseCache, GradeOptions, detect_gpu, evaluate
from grader.records import CriterionResult
from grader.report import atomic_write
from grader.rubric import REPO_ROOT, Task, all_tasks
from grader.score import score_criteria

REFERENCE_DIR = REPO_ROOT / "reference_impl"


@dataclass
class Validation:
    task: str
    problems: list[str] = field(default_factory=list)
    unevaluated: list[str] = field(default_factory=list)
    base: dict[str, str] = field(default_factory=dict)
    reference: dict[str, str] = field(default_factory=dict)
    # Why each criterion got its status, with the failing tests' messages: what to read when a rubric breaks.
    evidence: dict[str, dict] = field(default_factory=dict)


def grade_tree(task: Task, diff: str, bases: BaseCache, options: GradeOptions) -> dict[str, CriterionResult]:
    apply, run, _ = evaluate(task, diff, bases, options)
    if run is None:
        raise RuntimeError(f"{task.id}: reference fix does not apply: {apply.message}")
    return score_criteria(task, run)


def check_rules(task: Task, base: dict[str, CriterionResult], reference: dict[str, CriterionResult]) -> Validation:
    """Pure: compare base and reference statuses with what each criterion's kind demands."""
    v = Validation(task.id, base={c: r.status for c, r in base.items()},
                   reference={c: r.status for c, r in reference.items()},
                   evidence={side: {c: {"rationale": r.rationale,
                                        "failing": [e for e in r.evidence if e["status"] not in ("passed", "skipped")]}
                                    for c, r in results.items()}
                             for side, results in (("base", base), ("reference", reference))})
    for criterion in task.criteria.values():
        b, r = base[criterion.id], reference[criterion.id]
        wanted_base = {"fix": "unmet", "preserve": "met"}.get(criterion.kind)
        if r.status == "not_evaluated" or (wanted_base and b.status == "not_evaluated"):
            v.unevaluated.append(f"{criterion.id}: {r.rationale if r.status == 'not_evaluated' else b.rationale}")
            continue
        if r.score is None or r.score < 0.9:
            v.problems.append(f"{criterion.id} ({criterion.kind}): reference scores {r.score} ({r.status})")
        if wanted_base and b.status != wanted_base:
            v.problems.append(f"{criterion.id} ({criterion.kind}): base is {b.status}, must be {wanted_base}")
    return v


def validate_task(task: Task, bases: BaseCache, options: GradeOptions) -> Validation:
    reference = REFERENCE_DIR / f"{task.id}.diff"
    if not reference.is_file():
        return Validation(task.id, problems=[f"no reference fix at {reference}"])
    base_results = grade_tree(task, "", bases, options)
    reference_results = grade_tree(task, reference.read_text(), bases, options)
    return check_rules(task, base_results, reference_results)


def validate_rubrics(args) -> int:
    tasks = all_tasks()
    selected = [tasks[args.task]] if args.task else list(tasks.values())
    gpu, reason = detect_gpu(args.gpu)
    print(reason, file=sys.stderr)
    options = GradeOptions(gpu=gpu)
    bases = BaseCache()
    report, broken = [], 0
    for task in selected:
        v = validate_task(task, bases, options)
        broken += bool(v.problems)
        state = "BROKEN" if v.problems else "ok"
        print(f"{task.id}: {state}  base {v.base}  reference {v.reference}")
        for problem in v.problems:
            print(f"  broken: {problem}")
        for note in v.unevaluated:
            print(f"  not evaluated here: {note}")
        report.append(v.__dict__)
    atomic_write(Path(args.out) / "validation.json", json.dumps({"gpu": reason, "tasks": report}, indent=2) + "\n")
    return 1 if broken else 0
