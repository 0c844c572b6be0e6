"""``check-task``: is a task folder complete and true to itself?

Each check gives one line: ``ok``, ``FAIL`` or ``fixed`` (``--fix`` rewrote a value that can be measured: the
sdist's sha256 and the pre-image blobs in base.toml), and why. The checks, in the order an author meets them:
the rubric's schema and criteria, each criterion's declared case space (every clause of its ``requires`` names a
declared value), placeholders left by ``new-task``, the pinned base (sdist sha256, blobs), the declared
requirements, the environment check grading runs, the hidden tests (collected in the judge, as grading collects
them: every criterion needs a test), the case coverage (every declared value exercised by a check of its criterion,
no marked value undeclared: ``grader.taskkit.cases``), the reference fix and the samples, and last (skipped by
``--no-grade``) the designed statuses of the base, the reference and every sample, graded on CPU. A check may carry
detail lines (the case coverage's clause -> values -> checks table), printed by ``check-task --cases``.
"""

from __future__ import annotations

import shutil
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.pipeline.checkout import BaseBuildError, build_base, file_blobs, obtain_sdist, sha256_of
from grader.core.records import BuiltBase
from grader.sandbox.leftovers import owned_name
from grader.pipeline.diffparse import parse_diff
from grader.core.records import Graded
from grader.drive.many_candidates import grade_many
from grader.core.records import CRITERION_STATUSES, Candidate, GradingOptions
from grader.core.rubric import CRITERION_IDS, RUBRICS_DIR, RubricError, Task, all_base_recipes, all_tasks, load_task
from grader.pipeline.run import environment_modules, environment_problem, parse_evidence, pytest_args
from grader.sandbox.launch import ColdLauncher
from grader.sandbox.protocol import base_environment, set_up_judge
from grader.taskkit.cases import CollectedCheck, case_space_problems, clause_table, coverage_problems, read_collected
from grader.taskkit.recipe_edit import RecipeEditError, rewrite_file
from grader.core.environment import unmet
from grader.core.paths import scratch_root
from grader.taskkit.requirements import import_failures
from grader.taskkit.skeleton import BLOB_ABBREVIATION, PLACEHOLDER, TaskPaths
from grader.taskkit.validate import check_rules

COLLECT_TIMEOUT_S = 600


@dataclass(frozen=True)
class Check:
    task: str
    name: str
    status: str  # ok | FAIL | fixed
    reason: str
    details: tuple[str, ...] = field(default=(), compare=False)

    @property
    def failed(self) -> bool:
        return self.status == "FAIL"

    def line(self) -> str:
        return f"{self.status:<5} {self.task}: {self.name}: {self.reason}"


def task_folders(rubrics_dir: Path = RUBRICS_DIR) -> list[Path]:
    """Every folder of ``rubrics/`` that is a task (holds a rubric.toml or a base.toml)."""
    return [d for d in sorted(rubrics_dir.iterdir())
            if d.is_dir() and ((d / "rubric.toml").is_file() or (d / "base.toml").is_file())]


# --- the rubric -------------------------------------------------------------------------------------------------------


def check_rubric(folder: Path) -> tuple[Check, Task | None]:
    """The rubric and base recipe load: ``load_task`` is the one validator (schema, types and every rule of the
    criteria), shared with grading."""
    try:
        task = load_task(folder)
    except (RubricError, OSError) as exc:
        return Check(folder.name, "rubric", "FAIL", str(exc)), None
    kinds = [c.kind for c in task.criteria.values()]
    summary = ", ".join(f"{kinds.count(k)} {k}" for k in ("fix", "preserve", "conditional") if k in kinds)
    return Check(task.id, "rubric", "ok", f"loads; criteria {', '.join(CRITERION_IDS)} ({summary})"), task


def check_criteria(task: Task) -> Check:
    """What the validated criteria are: the core ones and the anchors."""
    anchored = [f"{c.id}->{c.anchor}" for c in task.criteria.values() if c.anchor]
    return Check(task.id, "criteria", "ok", f"core {', '.join(task.core_criteria)}"
                 + (f"; anchors {', '.join(anchored)}" if anchored else ""))


def check_case_space(task: Task) -> Check:
    """Every criterion declares its case space, and every clause of its ``requires`` names a declared value."""
    problems = case_space_problems(task)
    if problems:
        return Check(task.id, "case space", "FAIL", "; ".join(problems))
    declared = ", ".join(f"{c.id} {sum(len(v) for v in c.cases.values())}" for c in task.criteria.values())
    return Check(task.id, "case space", "ok", f"declared values per criterion: {declared}; every clause of "
                 "every requires names one")


def check_placeholders(paths: TaskPaths) -> Check:
    """No file of the task still holds new-task's placeholder mark."""
    files = [p for folder in (paths.rubric_dir, paths.candidates_dir) if folder.is_dir()
             for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    files += [paths.reference] if paths.reference.is_file() else []
    left = [p.relative_to(paths.root).as_posix() for p in files
            if PLACEHOLDER in p.read_text(encoding="utf-8", errors="replace")]
    if left:
        return Check(paths.task_id, "placeholders", "FAIL", f"{PLACEHOLDER} left in {', '.join(left)}")
    return Check(paths.task_id, "placeholders", "ok", f"none left in {len(files)} files")


# --- the pinned base --------------------------------------------------------------------------------------------------


def check_sdist(task: Task, fix: bool) -> tuple[Check, Task, str | None]:
    """The pinned sha256 is the sdist's (the cached copy, else the index's); also the sdist's own sha256 (None
    when there is no sdist to measure)."""
    recipe = task.base
    try:
        actual = sha256_of(obtain_sdist(recipe.sdist_version))
    except (OSError, BaseBuildError) as exc:
        return Check(task.id, "sdist sha256", "FAIL", f"vllm {recipe.sdist_version}: {exc}"), task, None
    if actual == recipe.sdist_sha256:
        return Check(task.id, "sdist sha256", "ok", f"vllm-{recipe.sdist_version}.tar.gz {actual[:12]}"), task, actual
    wrong = f"base.toml pins {recipe.sdist_sha256[:12] or '(nothing)'}, vllm-{recipe.sdist_version}.tar.gz is " \
            f"{actual[:12]}"
    if not fix:
        return Check(task.id, "sdist sha256", "FAIL", wrong + " (--fix rewrites it)"), task, actual
    try:
        rewrite_file(task.folder / "base.toml", sha256=actual)
    except RecipeEditError as exc:
        return Check(task.id, "sdist sha256", "FAIL", f"{wrong}; {exc}"), task, actual
    return Check(task.id, "sdist sha256", "fixed", wrong + "; rewritten"), load_task(task.folder), actual


def blob_mismatches(task: Task, base: BuiltBase) -> tuple[list[str], dict[str, str]]:
    """The pinned files the built base lacks, and each pinned file whose blob differs, with its actual blob."""
    actual = file_blobs(base.path, list(task.base.blobs))
    missing = [rel for rel, blob in actual.items() if blob is None]
    wrong = {rel: blob for rel, blob in actual.items()
             if blob is not None and not blob.startswith(task.base.blobs[rel])}
    return missing, wrong


def check_blobs(task: Task, fix: bool, sdist_sha256: str) -> tuple[Check, Task, BuiltBase | None]:
    """Each pinned pre-image blob is the built base's (the overlay applied) when built from the sdist whose sha256
    is ``sdist_sha256`` (the one measured, whatever base.toml pins: that is the sdist check's to judge)."""
    try:
        # Built without its blobs so that wrong ones can be measured; the key is the sdist's and the overlay's.
        base = build_base(task.id, replace(task.base, sdist_sha256=sdist_sha256, blobs={}))
    except BaseBuildError as exc:
        return Check(task.id, "base blobs", "FAIL", f"the base does not build: {exc}"), task, None
    if not task.base.blobs:
        return Check(task.id, "base blobs", "FAIL", "base.toml pins no blob (list the files candidates touch)"), \
            task, base
    missing, wrong = blob_mismatches(task, base)
    if missing:
        return Check(task.id, "base blobs", "FAIL", f"not in the base: {', '.join(missing)} (remove them from "
                     "base.toml or fix the overlay)"), task, base
    if not wrong:
        return Check(task.id, "base blobs", "ok", f"{len(task.base.blobs)} files match the built base"), task, base
    said = ", ".join(f"{rel} pinned {task.base.blobs[rel]}, is {blob[:BLOB_ABBREVIATION]}"
                     for rel, blob in wrong.items())
    if not fix:
        return Check(task.id, "base blobs", "FAIL", said + " (--fix rewrites them)"), task, base
    # The corrected blob as long as the one it replaces (at least the usual abbreviation).
    corrected = {rel: blob[:max(BLOB_ABBREVIATION, len(task.base.blobs[rel]))] for rel, blob in wrong.items()}
    try:
        rewrite_file(task.folder / "base.toml", blobs=corrected)
    except RecipeEditError as exc:
        return Check(task.id, "base blobs", "FAIL", f"{said}; {exc}"), task, base
    return Check(task.id, "base blobs", "fixed", said + "; rewritten"), load_task(task.folder), base


# --- the environment --------------------------------------------------------------------------------------------------


def check_requirements(task: Task) -> Check:
    """Each declared requirement is installed at a version it allows, and its modules import."""
    problems = unmet(task.base.requires)
    if problems:
        return Check(task.id, "requirements", "FAIL", f"task {task.id} needs {', '.join(problems)}; "
                     "`grade.py task-requirements --install` installs what is missing")
    failures = import_failures(task.base.requires, base_environment(False))
    if failures:
        return Check(task.id, "requirements", "FAIL", "do not import: " + "; ".join(f"{m} ({e})"
                                                                                     for m, e in failures.items()))
    declared = ", ".join(task.base.requires) or "none declared"
    return Check(task.id, "requirements", "ok", f"installed and importable: {declared}")


def check_environment(task: Task, base: BuiltBase) -> Check:
    """What grading checks first: the task's modules import from the unpatched base here."""
    problem = environment_problem(task, base.path, base.key, False)
    if problem:
        return Check(task.id, "environment", "FAIL", problem)
    pinned, probed = environment_modules(task, base.path)
    return Check(task.id, "environment", "ok", f"the base's task modules import here (CPU): {len(pinned)} pinned, "
                 f"{len(probed)} more that the probes and tests name")


# --- the hidden tests -------------------------------------------------------------------------------------------------


def collect_tests(task: Task, base: BuiltBase) -> tuple[dict[str, CollectedCheck], list[str], int | None]:
    """The task's hidden tests as the judge collects them (``pytest --collect-only`` with the evidence plugin):
    each test by node id with the criteria it names and the case values it exercises, the collection errors, and
    pytest's exit code."""
    scratch = Path(tempfile.mkdtemp(prefix=owned_name(f"grader-collect-{task.id}"), dir=scratch_root()))
    try:
        judge = scratch / "judge"
        judge.mkdir(mode=0o700)
        folder = set_up_judge(judge, [*pytest_args(task), "--collect-only"], str(RUBRICS_DIR), base.path, base.path,
                              False, COLLECT_TIMEOUT_S, {})
        returncode, timed_out = ColdLauncher().run(folder.request)
        evidence = folder.evidence.read_text()
        outcomes, errors = parse_evidence(evidence, timed_out)
        if timed_out:
            errors.append(f"collection took over {COLLECT_TIMEOUT_S} s")
        elif not outcomes and not errors and returncode not in (0, 5):
            errors.append(f"pytest exited with {returncode}: {folder.log.read_text()[-500:]}")
        collected = read_collected(evidence)
        return {o.nodeid: collected.get(o.nodeid, CollectedCheck(o.nodeid, tuple(sorted(o.criteria))))
                for o in outcomes}, errors, returncode
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_tests(task: Task, base: BuiltBase) -> tuple[Check, dict[str, CollectedCheck] | None]:
    """Every criterion is evidenced by at least one collected hidden test, and every test names criteria of this
    rubric; also the tests collected (None when collection failed)."""
    collected, errors, _ = collect_tests(task, base)
    if errors:
        return Check(task.id, "hidden tests", "FAIL", "collection failed: " +
                     "; ".join(e[-400:] for e in errors)), None
    tests = {nodeid: check.criteria for nodeid, check in collected.items()}
    problems = []
    unnamed = [nodeid for nodeid, criteria in tests.items() if not criteria]
    if unnamed:
        problems.append(f"{len(unnamed)} tests name no criterion ({', '.join(unnamed[:3])}): they evidence nothing")
    unknown = sorted({cid for criteria in tests.values() for cid in criteria} - set(task.criteria))
    if unknown:
        problems.append(f"tests name criteria the rubric lacks: {', '.join(unknown)}")
    uncovered = [cid for cid in task.criteria if not any(cid in criteria for criteria in tests.values())]
    if uncovered:
        problems.append(f"no hidden test evidences {', '.join(uncovered)}")
    if problems:
        return Check(task.id, "hidden tests", "FAIL", "; ".join(problems)), collected
    counts = ", ".join(f"{cid} {sum(cid in c for c in tests.values())}" for cid in task.criteria)
    return Check(task.id, "hidden tests", "ok", f"{len(tests)} collected; tests per criterion: {counts}"), collected


def check_case_coverage(task: Task, collected: dict[str, CollectedCheck]) -> Check:
    """Every declared value is exercised by a check of its criterion and every marked value is declared; the
    clause -> values -> checks table as its details."""
    table = tuple(clause_table(task, collected))
    problems = coverage_problems(task, collected)
    if problems:
        return Check(task.id, "case coverage", "FAIL", "; ".join(problems), table)
    exercised = sum(len(values) for c in task.criteria.values() for values in c.cases.values())
    return Check(task.id, "case coverage", "ok", f"every one of {exercised} declared values is exercised by a check "
                 f"of its criterion; {len(table)} clauses mapped to checks", table)


# --- reference and samples --------------------------------------------------------------------------------------------


def check_reference(paths: TaskPaths) -> Check:
    """Our reference fix is there, is a diff, and is not the placeholder."""
    if not paths.reference.is_file():
        return Check(paths.task_id, "reference", "FAIL", f"no {paths.reference.relative_to(paths.root)}")
    text = paths.reference.read_text(encoding="utf-8", errors="replace")
    if PLACEHOLDER in text:
        return Check(paths.task_id, "reference", "FAIL", "still the new-task placeholder")
    files = [f.new_path or f.old_path for f in parse_diff(text).sections if f.hunks]
    if not files:
        return Check(paths.task_id, "reference", "FAIL", "holds no diff")
    return Check(paths.task_id, "reference", "ok", f"a diff of {', '.join(files)}")


def designed_statuses(section: dict) -> dict[str, str]:
    return {k: v for k, v in section.items() if k in CRITERION_IDS}


def sample_problems(paths: TaskPaths, expected: dict) -> list[str]:
    """What is wrong with expected.toml against the sample diffs beside it."""
    problems = []
    for needed in ("base", "reference"):
        if needed not in expected:
            problems.append(f"no [{needed}] section")
    for name, section in expected.items():
        if not isinstance(section, dict):
            problems.append(f"{name} is not a table")
            continue
        statuses = designed_statuses(section)
        if sorted(statuses) != list(CRITERION_IDS):
            problems.append(f"[{name}] gives statuses for {', '.join(sorted(statuses)) or 'no criterion'}, "
                            f"not {', '.join(CRITERION_IDS)}")
        gpu = section.get("gpu", {})
        bad = {cid: s for cid, s in {**statuses, **(gpu if isinstance(gpu, dict) else {})}.items()
               if s not in CRITERION_STATUSES or cid not in CRITERION_IDS}
        if bad:
            problems.append(f"[{name}] has {bad} (statuses are {', '.join(CRITERION_STATUSES)})")
    diffs = {p.stem for p in paths.candidates_dir.glob("*.diff")}
    sections = set(expected) - {"base", "reference"}
    if not diffs:
        problems.append("no sample diff (candidates/<task>/<name>.diff)")
    if diffs - sections:
        problems.append(f"samples without a section: {', '.join(sorted(diffs - sections))}")
    if sections - diffs:
        problems.append(f"sections without a sample diff: {', '.join(sorted(sections - diffs))}")
    return problems


def read_expected(paths: TaskPaths) -> tuple[dict | None, str]:
    path = paths.candidates_dir / "expected.toml"
    if not path.is_file():
        return None, f"no {path.relative_to(paths.root)}"
    try:
        return tomllib.loads(path.read_text()), ""
    except tomllib.TOMLDecodeError as exc:
        return None, f"expected.toml does not parse: {exc}"


def check_samples(paths: TaskPaths) -> Check:
    expected, error = read_expected(paths)
    if expected is None:
        return Check(paths.task_id, "samples", "FAIL", error)
    problems = sample_problems(paths, expected)
    if problems:
        return Check(paths.task_id, "samples", "FAIL", "; ".join(problems))
    return Check(paths.task_id, "samples", "ok", f"{len(expected) - 2} samples, each with its section in expected.toml")


# --- all checks of one task but grading -------------------------------------------------------------------------------


class Findings(list):
    """The checks made so far, each handed to ``report`` (the printer) as it is made."""

    def __init__(self, report: Callable[[Check], None]) -> None:
        super().__init__()
        self.report = report

    def add(self, check: Check) -> Check:
        self.append(check)
        self.report(check)
        return check

    def add_all(self, made: tuple) -> tuple:
        """A check function's answer, (check, what else it found...): the check added, the answer passed on."""
        self.add(made[0])
        return made


def static_checks(folder: Path, fix: bool, report: Callable[[Check], None]) -> tuple[list[Check], Task | None]:
    """Every check but grading, in order, each reported as it is made; the task as loaded after any fix (None
    when its rubric does not load)."""
    paths = TaskPaths(folder.parent.parent, folder.name)
    found = Findings(report)
    rubric, task = check_rubric(folder)
    found.add(rubric)
    if task is not None:
        found.add(check_criteria(task))
        found.add(check_case_space(task))
    found.add(check_placeholders(paths))
    if task is not None:
        _, task, sdist_sha256 = found.add_all(check_sdist(task, fix))
        base = None
        if sdist_sha256 is not None:
            _, task, base = found.add_all(check_blobs(task, fix, sdist_sha256))
        requirements = found.add(check_requirements(task))
        if base is not None and not requirements.failed:
            if not found.add(check_environment(task, base)).failed:
                _, collected = found.add_all(check_tests(task, base))
                if collected is not None:
                    found.add(check_case_coverage(task, collected))
    found.add(check_reference(paths))
    found.add(check_samples(paths))
    return found, task


# --- grading: the designed statuses hold on CPU -----------------------------------------------------------------------


def sample_candidates(task: Task) -> list[tuple[Candidate, dict[str, str]]]:
    """The base (empty diff), the reference and every sample of ``task``, each with its designed CPU statuses."""
    paths = TaskPaths(task.folder.parent.parent, task.id)
    expected, _ = read_expected(paths)
    found = []
    for name, section in (expected or {}).items():
        source = {"base": None, "reference": paths.reference}.get(name, paths.candidates_dir / f"{name}.diff")
        diff = source.read_text() if source is not None else ""
        found.append((Candidate(f"{task.id}/{name}", str(source or "base"), diff, task.id),
                      designed_statuses(section)))
    return found


def clipped(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word's end (a test's name is never cut mid-word), with
    an ellipsis where it was cut."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    return (cut[:cut.rfind(" ")] if " " in cut else cut).rstrip(" ,;") + "…"


def status_check(task: Task, name: str, graded: Graded | None, designed: dict[str, str]) -> Check:
    """One sample's statuses against its design."""
    label = f"statuses of {name}"
    if graded is None:
        return Check(task.id, label, "FAIL", "not graded (the run was interrupted)")
    result = graded.result
    if result.verdict == "error" or result.run_status != "complete":
        return Check(task.id, label, "FAIL", f"grading did not complete ({result.run_status}): "
                     f"{clipped(result.error or result.summary, 400)}")
    wrong = [f"{cid} is {r.status} ({clipped(r.rationale, 160)}), designed {designed.get(cid)}"
             for cid, r in result.criteria.items() if r.status != designed.get(cid)]
    if wrong:
        return Check(task.id, label, "FAIL", "; ".join(wrong))
    return Check(task.id, label, "ok", ", ".join(f"{cid} {r.status}" for cid, r in result.criteria.items()))


def grading_checks(tasks: list[Task], jobs: int) -> list[Check]:
    """Grade every task's base, reference and samples on CPU in one run; per sample whether it gets its designed
    statuses, and per task whether the rubric validates (fix unmet on the base, everything met by the reference)."""
    # Values --fix rewrote must be read again by the grading that follows.
    all_tasks.cache_clear()
    all_base_recipes.cache_clear()
    samples = {task.id: sample_candidates(task) for task in tasks}
    candidates = [candidate for found in samples.values() for candidate, _ in found]
    try:
        graded = grade_many(candidates, GradingOptions(gpu=False, jobs=jobs, empty_diff_grades_base=True)).by_id()
    except (RubricError, BaseBuildError) as exc:
        return [Check(task.id, "statuses", "FAIL", f"not graded: {exc}") for task in tasks]
    checks = []
    for task in tasks:
        for candidate, designed in samples[task.id]:
            checks.append(status_check(task, candidate.id.split("/", 1)[1], graded.get(candidate.id), designed))
        base, reference = graded.get(f"{task.id}/base"), graded.get(f"{task.id}/reference")
        if base is not None and reference is not None:
            validation = check_rules(task, base.result.criteria, reference.result.criteria)
            if validation.problems:
                checks.append(Check(task.id, "rubric validates", "FAIL", "; ".join(validation.problems)))
            else:
                checks.append(Check(task.id, "rubric validates", "ok", "fix criteria unmet on the base, preserve "
                                    "criteria met on it, the reference meets every criterion evaluated on CPU"))
    return checks


def gradable(checks: list[Check]) -> bool:
    """Whether grading a task's samples can tell anything: its base, environment, reference and samples are
    sound."""
    needed = {"sdist sha256", "base blobs", "environment", "reference", "samples"}
    return needed <= {c.name for c in checks} and not any(c.failed for c in checks if c.name in needed)
