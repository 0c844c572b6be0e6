"""validate-rubrics: check each rubric against reality by grading its base and its reference fix.

Every fix criterion must be unmet on the base and met on the reference, every preserve criterion met on both,
every conditional criterion met on the reference. Met is scoring's met (``grader.pipeline.score.MET_AT``): every evaluated
check of the criterion passes, so a reference that fails one case of a criterion does not validate it. A criterion
that cannot be evaluated here (no GPU) is reported as such, not passed; but a fix criterion the base leaves not
evaluated while the reference is evaluated is broken: the checks that should catch the bug did not decide on the
bug.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.drive.many_candidates import grade_many
from grader.core.environment import default_jobs, detect_gpu
from grader.core.records import Candidate, CriterionResult, EvidenceEntry, GradingOptions
from grader.core.paths import atomic_write
from grader.core.rubric import REPO_ROOT, Task, all_tasks
from grader.pipeline.score import MET_AT

REFERENCE_DIR = REPO_ROOT / "reference_impl"


@dataclass
class Validation:
    task: str
    problems: list[str] = field(default_factory=list)
    unevaluated: list[str] = field(default_factory=list)
    base: dict[str, str] = field(default_factory=dict)
    reference: dict[str, str] = field(default_factory=dict)
    # Why each criterion got its status, with the failing tests' messages: what to read when a rubric breaks
    # ({"base" | "reference": {criterion id: (rationale, failing evidence)}}).
    evidence: dict[str, dict[str, tuple[str, list[EvidenceEntry]]]] = field(default_factory=dict)

    def to_json(self) -> dict:
        """The task's entry in validation.json."""
        evidence = {side: {cid: {"rationale": rationale, "failing": [e.to_json() for e in failing]}
                           for cid, (rationale, failing) in criteria.items()}
                    for side, criteria in self.evidence.items()}
        return dict(vars(self), evidence=evidence)


def check_rules(task: Task, base: dict[str, CriterionResult], reference: dict[str, CriterionResult]) -> Validation:
    """Pure: compare base and reference statuses with what each criterion's kind demands."""
    v = Validation(task.id, base={c: r.status for c, r in base.items()},
                   reference={c: r.status for c, r in reference.items()},
                   evidence={side: {c: (r.rationale, [e for e in r.evidence if e.status not in ("passed", "skipped")])
                                    for c, r in results.items()}
                             for side, results in (("base", base), ("reference", reference))})
    for criterion in task.criteria.values():
        b, r = base[criterion.id], reference[criterion.id]
        wanted_base = {"fix": "unmet", "preserve": "met"}.get(criterion.kind)
        if criterion.kind == "fix" and b.status == "not_evaluated" and r.status != "not_evaluated":
            v.problems.append(f"{criterion.id} (fix): the base leaves it not evaluated ({b.rationale}) where the "
                              "reference is evaluated: a fix criterion must be decided on the base (a call the base "
                              "does not finish fails under its time budget; see rubrics/README.md, "
                              "'What can go wrong in a call')")
            continue
        if r.status == "not_evaluated" or (wanted_base and b.status == "not_evaluated"):
            v.unevaluated.append(f"{criterion.id}: {r.rationale if r.status == 'not_evaluated' else b.rationale}")
            continue
        if r.score is None or r.score < MET_AT:
            v.problems.append(f"{criterion.id} ({criterion.kind}): reference scores {r.score} ({r.status}), must be "
                              f"met (every evaluated check passing): {r.rationale}")
        if wanted_base and b.status != wanted_base:
            v.problems.append(f"{criterion.id} ({criterion.kind}): base is {b.status}, must be {wanted_base}")
    return v


def validate_tasks(tasks: list[Task], options: GradingOptions) -> list[Validation]:
    """Grade each task's unpatched base and its reference fix (all in one run), and check the rules."""
    sides = []
    for task in tasks:
        reference = REFERENCE_DIR / f"{task.id}.diff"
        if reference.is_file():
            sides += [Candidate(f"{task.id}/base", "base", "", task.id),
                      Candidate(f"{task.id}/reference", str(reference), reference.read_text(), task.id)]
    graded = grade_many(sides, replace(options, empty_diff_grades_base=True)).by_id()
    validations = []
    for task in tasks:
        base, reference = graded.get(f"{task.id}/base"), graded.get(f"{task.id}/reference")
        if base is None or reference is None:
            validations.append(Validation(task.id, problems=[f"no reference fix at {REFERENCE_DIR / task.id}.diff"]))
        elif reference.run is None:
            validations.append(Validation(task.id, problems=[
                f"the reference fix was not graded: {reference.result.error or reference.result.apply.message}"]))
        else:
            validations.append(check_rules(task, base.result.criteria, reference.result.criteria))
    return validations


def validate_rubrics(args) -> int:
    tasks = all_tasks()
    selected = [tasks[args.task]] if args.task else list(tasks.values())
    gpu, reason = detect_gpu(args.gpu)
    print(reason, file=sys.stderr)
    report, broken = [], 0
    for task, v in zip(selected, validate_tasks(selected, GradingOptions(gpu=gpu, jobs=default_jobs()))):
        broken += bool(v.problems)
        state = "BROKEN" if v.problems else "ok"
        print(f"{task.id}: {state}  base {v.base}  reference {v.reference}")
        for problem in v.problems:
            print(f"  broken: {problem}")
        for note in v.unevaluated:
            print(f"  not evaluated here: {note}")
        report.append(v.to_json())
    atomic_write(Path(args.out) / "validation.json", json.dumps({"gpu": reason, "tasks": report}, indent=2) + "\n")
    return 1 if broken else 0
