"""Grading one candidate, already ingested (``grade_candidate``): its task's base (built once per run,
``BaseCache``) -> apply -> the environment check -> the hidden tests (or their cached evidence) -> score ->
summarize, and the integrity scan beside the verdict. Every failure becomes the candidate's own error result.

Many candidates are graded by ``grader.drive.many_candidates.grade_many``, whose backends call this once per
candidate."""

from __future__ import annotations

import hashlib
import tempfile
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path

from grader.pipeline.apply import UnsoundGround, applied_tree, base_problem, make_tree, reference_diff, sound_apply
from grader.pipeline.checkout import BaseBuildError, build_base
from grader.core.paths import make_import_root, remove_tree, scratch_root
from grader.reports.describe import describe_tree
from grader.pipeline.diffparse import parse_diff
from grader.drive.evidence_cache import EvidenceCache, diff_key, tree_key
from grader.pipeline.ingest import task_files
from grader.pipeline.preview import cut_reason, is_cut, unseen_evidence
from grader.pipeline.integrity import scan_diff
from grader.sandbox.launch import ColdLauncher, Launcher
from grader.core.records import (ApplyReport, BuiltBase, Candidate, CandidateResult, GradingOptions, RubricIdentity,
                                 RunReport, RunStatus)
from grader.core.identity import engine_fingerprint, grading_identity
from grader.core.rubric import Task, all_tasks, rubric_fingerprint
from grader.sandbox.leftovers import owned_name
from grader.core.sanitize import clean, clean_apply_report
from grader.sandbox.tooling import ToolMissing, os_error_line
from grader.pipeline.run import added_lines, candidate_time, charge_unreached, ensure_call_times, environment_problem, \
    run_hidden_tests
from grader.pipeline.traced_rerun import rerun_finished, trace_failing_checks
from grader.pipeline.score import FULL_AT, MET_AT, UNMET_AT, not_evaluated_all, overall_score, score_criteria, verdict_for
from grader.reports.summarize import summarize


class BaseCache:
    """Builds each task's base once per run, even when several workers ask at the same time; one task's build
    never holds up another task's."""

    def __init__(self) -> None:
        self._bases: dict[str, BuiltBase] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        # Set on an interrupt: whoever waits for another's build stops waiting.
        self.abandoned = threading.Event()

    def get(self, task: Task) -> BuiltBase:
        with self._lock:
            lock = self._locks.setdefault(task.id, threading.Lock())
        while not lock.acquire(timeout=0.2):
            if self.abandoned.is_set():
                raise BaseBuildError(f"the base of {task.id} was not waited for: the run was interrupted")
        try:
            if task.id not in self._bases:
                self._bases[task.id] = self.build(task)
            return self._bases[task.id]
        finally:
            lock.release()

    def build(self, task: Task) -> BuiltBase:
        return build_base(task.id, task.base)


def diff_sha256(diff: str) -> str:
    return hashlib.sha256(diff.encode("utf-8", "replace")).hexdigest()


def error_result(candidate: Candidate, message: str, task: Task | None = None,
                  apply: ApplyReport | None = None) -> CandidateResult:
    message = clean(message)  # a grader failure's traceback can quote what the candidate wrote
    criteria = not_evaluated_all(task, f"grading error: {message}") if task else {}
    return CandidateResult(candidate.id, candidate.task, candidate.source, "error", None, criteria, apply,
                           summary=f"Not graded: {message}", reference_summary=candidate.reference_summary,
                           error=message, diff_sha256=diff_sha256(candidate.diff),
                           rubric=rubric_identity(task) if task else None)


def always(apply: ApplyReport) -> bool:
    return True


def no_task_result(candidate: Candidate) -> CandidateResult:
    """A diff whose task cannot be told: not graded, and not a grader error (the caller can name the task)."""
    why = candidate.task_reason.rstrip(".") or "nothing in it names a known task"
    return CandidateResult(candidate.id, None, candidate.source, "no_task", None, {}, None,
                           f"Not graded: the task could not be told from the diff ({why}); pass --task ID to grade "
                           "it as that task.", candidate.reference_summary, diff_sha256=diff_sha256(candidate.diff))


def evaluate(task: Task, diff: str, bases: BaseCache, options: GradingOptions, launcher: Launcher,
             evidence: EvidenceCache | None, cut_preview: bool = False,
             may_run=always) -> tuple[ApplyReport, RunReport | None, dict]:
    """Apply ``diff`` to a fresh tree of the task's base and run the hidden tests (the base itself when empty) with
    ``launcher``, unless ``may_run`` says of the apply report that no evidence can be graded (a cut preview);
    ``evidence``: the evidence cache, None when ``options.use_evidence_cache`` is off."""
    base = bases.get(task)
    # Evidence with and without the lines that ran is cached apart (its identity says which).
    identity = grading_identity(task, options.gpu, options.contained, options.trace_lines)
    shortcut = diff_key(identity, diff) if evidence else None
    if shortcut and (found := evidence.load_applied(shortcut)):
        return found[0], found[1] if may_run(found[0]) else None, \
            {"apply_s": 0.0, "tests_s": 0.0, "evidence_cached": 1.0}
    scratch = Path(tempfile.mkdtemp(prefix=owned_name(f"grader-{task.id}"), dir=scratch_root()))
    timings = {}
    try:
        started = time.monotonic()
        tree = make_tree(base, scratch)
        try:
            apply = sound_apply(base, parse_diff(diff), tree, reference_diff(task.id), options.contained,
                                cut_preview) if diff.strip() else \
                ApplyReport("empty", message="no diff: the base itself", tree_id=applied_tree(tree)[0])
        except ToolMissing as exc:
            # The candidate's diff needs a tool this machine lacks: the environment's state, not its failure.
            return (ApplyReport("failed", message=f"not applied: {exc}"),
                    RunReport([], None, False, "", 0.0, f"cannot apply the diff: {exc}"), timings)
        if apply.status not in ("failed", "rejected", "empty"):
            apply = replace(apply, description=describe_tree(base.path, tree, [f.path for f in apply.files]))
        apply = clean_apply_report(apply)  # the diff's names enter the records here, cleaned once
        timings["apply_s"] = round(time.monotonic() - started, 2)
        if apply.status in ("failed", "rejected") or not may_run(apply):
            return apply, None, timings
        problem = environment_problem(task, base.path, base.key, options.gpu)
        if problem:
            return apply, RunReport([], None, False, "", 0.0, problem), timings
        key = tree_key(identity, apply)
        run = evidence.load(key) if evidence and key else None
        if run is None:
            run, complete = hidden_test_evidence(task, base, tree, scratch, apply, options, launcher, evidence,
                                                 timings)
            if not complete:  # a traced re-run that did not finish: kept for this result, not cached
                return apply, run, timings
            if evidence and key and options.trace_lines:  # the untraced run is already kept under its own key
                evidence.save(key, run)
        else:
            timings["tests_s"] = 0.0
            timings["evidence_cached"] = 1.0
        if shortcut and key:
            evidence.save_applied(shortcut, apply, key, run)
        return apply, run, timings
    finally:
        if not options.keep_trees:
            remove_tree(scratch)


def hidden_test_evidence(task: Task, base: BuiltBase, tree: Path, scratch: Path, apply: ApplyReport,
                         options: GradingOptions, launcher: Launcher, evidence: EvidenceCache | None,
                         timings: dict) -> tuple[RunReport, bool]:
    """The hidden tests' evidence of ``tree``, and whether it is whole (cacheable). The verdict's evidence comes
    from an untraced run (found in the evidence cache under the untraced identity, or run now and kept there);
    with ``options.trace_lines``, its failing checks then run again traced, for their ``ran`` alone
    (``grader.pipeline.traced_rerun``). The stages' seconds are added to ``timings``."""
    untraced_key = tree_key(grading_identity(task, options.gpu, options.contained, False), apply)
    # Untraced, the caller has just looked this very key up and missed: only a traced grading looks again.
    first = evidence.load(untraced_key) if evidence and untraced_key and options.trace_lines else None
    import_root = make_import_root(tree, scratch / "import-root")
    budgets = None

    def run_tests(folder: Path, **traced) -> RunReport:
        nonlocal budgets
        budgets = budgets or ensure_call_times(task, base, options.gpu, launcher, options.contained,
                                               options.memory_bytes, options.also_pass)
        # The candidate's whole time comes from the controls' own time (``candidate_time``); what it burns is its.
        limit, charged = candidate_time(options.timeout, budgets)
        run = run_hidden_tests(task, tree, import_root, base.path, folder, options.gpu, launcher, limit,
                               options.contained, memory_bytes=options.memory_bytes, also_pass=options.also_pass,
                               call_budgets=budgets, charged=charged, **traced)
        # The base's own behaviour is part of the evidence: one that vanished meanwhile leaves none to keep.
        if problem := base_problem(base):
            raise UnsoundGround(problem)
        return charge_unreached(run, budgets, limit) if charged and run.timed_out else run

    if first is None:
        first = run_tests(scratch)
        if evidence and untraced_key:
            evidence.save(untraced_key, first)
        timings["tests_s"] = round(first.duration, 2)
    else:
        timings["tests_s"] = 0.0
        timings["evidence_cached"] = 1.0
    if not options.trace_lines:
        return first, True
    paths = [f.path for f in apply.files]
    rerun_folder = scratch / "traced-rerun"

    def run_traced(node_ids: list[str]) -> RunReport:
        rerun_folder.mkdir()
        return run_tests(rerun_folder, traced=paths, only=node_ids)

    run, rerun = trace_failing_checks(first, bool(added_lines(base.path, tree, paths)), run_traced)
    if rerun is not None:
        timings["rerun_s"] = round(rerun.duration, 2)
    return run, rerun is None or rerun_finished(rerun)


def grade_candidate(candidate: Candidate, bases: BaseCache, options: GradingOptions,
                    launcher: Launcher | None = None,
                    evidence: EvidenceCache | None = None) -> tuple[CandidateResult, RunReport | None]:
    """Grade one candidate: its result and the hidden tests' run it was scored from (None where nothing ran).
    Its judge runs on ``launcher`` (a fresh interpreter when None); the evidence cache is ``evidence`` (the
    default one when None) unless ``options.use_evidence_cache`` is off. Every failure becomes this candidate's
    error result, never an exception."""
    launcher = launcher or ColdLauncher()
    evidence = (evidence or EvidenceCache()) if options.use_evidence_cache else None
    started = time.monotonic()
    try:
        result, run = grade_or_raise(candidate, bases, options, launcher, evidence)
    except (OSError, BaseBuildError) as exc:  # a full disk or a forbidden folder; a base that cannot be had
        task = all_tasks().get(candidate.task or "")
        cause = os_error_line(exc) if isinstance(exc, OSError) else str(exc)
        result = replace(error_result(candidate, f"environment problem, not the candidate's: {cause}", task),
                         run_status="environment_error")
        run = None
    except Exception:  # the grader's own failure: reported as an error for this candidate only
        task = all_tasks().get(candidate.task or "")
        result, run = error_result(candidate, "grader failure:\n" + traceback.format_exc(limit=6), task), None
    # Tamper signals tell a reviewer where to look; they decide no criterion and no verdict.
    flagged = replace(result, integrity_flags=scan_diff(candidate.diff))
    # The whole grading in its job, beside its stages: what a job spends on a candidate outside the tree and the
    # tests (the import root, scoring, summary, removing the tree) is this less those.
    return replace(flagged, timings={**flagged.timings, "grading_s": round(time.monotonic() - started, 2)}), run


def run_status(apply: ApplyReport, run: RunReport | None, cut_preview: bool) -> RunStatus:
    """What happened, beside the verdict: a fault of the grader or of the environment, a time-out, a cut preview
    (the input was not seen whole), a whole diff applied only in part (a failed hunk, a hunk that ends early, a
    binary file not applied: the tree is not the one git builds from the diff)."""
    if run is not None and run.grader_error:
        return "grader_error"
    if run is not None and run.environment_error:
        return "environment_error"
    if run is not None and (run.timed_out or any(o.status == "timeout" for o in run.outcomes)):
        return "timed_out"
    if cut_preview:
        return "input_truncated"
    failed_hunks = any(h.status in ("failed", "truncated") for f in apply.files for h in f.hunks)
    if apply.status == "partial" and (failed_hunks or apply.truncated or apply.binary):
        return "apply_partial"
    return "complete"


def rubric_identity(task: Task) -> RubricIdentity:
    recipe = task.base
    overlay = hashlib.sha256(recipe.overlay.read_bytes()).hexdigest() if recipe.overlay is not None else None
    return RubricIdentity(task.version, rubric_fingerprint(task),
                          {cid: c.weight for cid, c in task.criteria.items()}, task.core_criteria,
                          {"met_at": MET_AT, "unmet_at": UNMET_AT, "full_at": FULL_AT},
                          {"sdist_version": recipe.sdist_version, "sdist_sha256": recipe.sdist_sha256,
                           "overlay_sha256": overlay}, engine_fingerprint())


def summarized(task: Task | None, result: CandidateResult, run: RunReport | None, change: str = "") -> CandidateResult:
    """``result`` with its summary, which is written from the rest of the result."""
    return replace(result, summary=summarize(task, result, run, change))


def grade_or_raise(candidate: Candidate, bases: BaseCache, options: GradingOptions, launcher: Launcher,
                   evidence: EvidenceCache | None) -> tuple[CandidateResult, RunReport | None]:
    if candidate.ingest_error:
        return error_result(candidate, candidate.ingest_error), None
    tasks = all_tasks()
    task = tasks.get(candidate.task or "")
    if not candidate.diff.strip() and not (task and options.empty_diff_grades_base):
        # Nothing to grade, with or without a known task: a verdict about the candidate, not a grader error.
        apply = ApplyReport("empty", message=candidate.task_reason or "the candidate has no diff")
        criteria = not_evaluated_all(task, "no diff to grade") if task else {}
        result = CandidateResult(candidate.id, candidate.task, candidate.source, "no_diff", None, criteria, apply,
                                 "", candidate.reference_summary, diff_sha256=diff_sha256(candidate.diff),
                                 rubric=rubric_identity(task) if task else None)
        return summarized(task, result, None), None
    if candidate.task is None:
        return no_task_result(candidate), None
    if task is None:
        return error_result(candidate, f"unknown task {candidate.task!r} (known: {', '.join(tasks)})"), None
    parsed = parse_diff(candidate.diff)
    # Only a bundle shows previews; a diff given whole whose hunks end early is a corrupt diff, not a cut one.
    cut = candidate.bundle_position is not None and is_cut(parsed, candidate.at_preview_limit)
    scope = task_files(task.id)
    apply, run, timings = evaluate(task, candidate.diff, bases, options, launcher, evidence, cut,
                                   lambda report: not cut or not unseen_evidence(scope, parsed, report))
    if cut and candidate.at_preview_limit and apply.status == "applied":
        apply = replace(apply, status="partial", truncated=True,
                        message="the preview reaches the bundle's line limit: later hunks or files may be missing")
    unseen = unseen_evidence(scope, parsed, apply) if cut else []
    if unseen:
        criteria = not_evaluated_all(task, cut_reason(unseen, candidate.at_preview_limit))
    elif run is None:
        criteria = not_evaluated_all(task, f"the patch did not apply: {apply.message}")
    else:
        criteria = score_criteria(task, run)
    status = run_status(apply, run, cut)
    if status == "environment_error":
        criteria = not_evaluated_all(task, f"environment problem, not the candidate's: {run.environment_error}")
    elif status == "grader_error":
        criteria = not_evaluated_all(task, f"the grader's fault, not the candidate's: {run.grader_error}")
    elif status == "timed_out" and run is not None and not run.outcomes:
        criteria = not_evaluated_all(task, f"timed out: the time limit ({options.timeout:g} s) was reached before "
                                           "any hidden test ran")
    verdict = verdict_for(task, apply, criteria, status, cut_input=cut)
    result = CandidateResult(candidate.id, task.id, candidate.source, verdict, overall_score(task, criteria, verdict),
                             criteria, apply, "", candidate.reference_summary,
                             diff_sha256=diff_sha256(candidate.diff), timings=timings, run_status=status,
                             error=run.environment_error if status == "environment_error" else
                             run.grader_error if status == "grader_error" else None,
                             rubric=rubric_identity(task))
    return summarized(task, result, run, apply.description), run
