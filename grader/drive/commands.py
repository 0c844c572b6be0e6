"""The commands that write an output folder or the bases: ``grade`` (candidates into results.json, the pages,
JUnit and an exit code), ``merge`` (shards into one output) and ``bases`` (build and verify each task's pinned
checkout). One writer per output folder (its lock); a signal stops grading but never the writing of the reports.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from grader.core.environment import detect_gpu
from grader.core.paths import FILE_MODE, output_folder
from grader.core.records import CandidateResult, GradingOptions, Incomplete, RunInfo
from grader.core.rubric import all_base_recipes
from grader.drive.many_candidates import Backend, Interrupted, LocalBackend, grade_many
from grader.drive.store import ResultStore
from grader.pipeline.checkout import BaseBuildError, build_base, verify_blobs, whole_tree_problem
from grader.pipeline.ingest import IngestError, ingest, is_bundle, shard
from grader.pipeline.labels import bundle_ids, judge_verdicts, read_labels
from grader.reports.outcome import exit_code, exit_reason
from grader.reports.report import (graded_run, markdown_summary, started_at, write_html, write_index, write_junit,
                                   write_results_json)
from grader.reports.terminal import observer_for, print_closing
from grader.sandbox import contain
from grader.sandbox.shortfall import shortfalls, warning_line
from grader.sandbox.tooling import os_error_line


class OutputLocked(Exception):
    """Another grader run is writing the same output folder."""


def lock_output(out: Path):
    """Hold ``OUT/.grader.lock`` for the run: one writer per output folder; the second is refused with the first's
    pid and start time. The lock is released when this process ends, however it ends."""
    output_folder(out)
    handle = open(out / ".grader.lock", "a+")
    os.chmod(out / ".grader.lock", FILE_MODE)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise OutputLocked(f"{out} is being written by another grader run ({holder}); wait for it to finish or "
                           "use another --out") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
    handle.flush()
    return handle


class SignalGate:
    """SIGINT, SIGTERM and SIGHUP for the whole of a grading run. While grading, the first one raises
    ``Interrupted`` (the run stops and keeps what finished); every later one, and any that comes while the
    reports are written (``hold``), is only remembered, so the reports are always written whole."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.first: str | None = None
        self.raising = True
        self.previous: dict = {}

    def __enter__(self) -> SignalGate:
        self.previous = {sig: signal.signal(sig, self.handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def handle(self, signum, frame) -> None:
        if self.first is not None:
            return
        self.first = signal.Signals(signum).name
        if self.raising:
            raise Interrupted(self.first)

    def hold(self) -> None:
        self.raising = False


def locked_output(out: Path):
    """``out``'s lock (``lock_output``), or None after saying on stderr which run holds it."""
    try:
        return lock_output(out)
    except OutputLocked as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def run_grade(args) -> int:
    if (lock := locked_output(args.out)) is None:
        return 2
    try:
        with SignalGate() as gate:
            try:
                return _run_grade(args, gate)
            except Interrupted as exc:  # before grading began: nothing was graded, nothing to write
                print(f"interrupted ({exc}) before grading began; nothing was graded", file=sys.stderr)
                return 130
    finally:
        lock.close()


def judge_for(labels: Path | None, paths: list[Path]) -> dict[str, str] | None:
    """The judge's verdict per candidate of the bundles among ``paths``, from ``--labels``."""
    if labels is None:
        return None
    document = read_labels(labels)
    found: dict[str, str] = {}
    for path in paths:
        if path.is_file() and is_bundle(path):
            found |= judge_verdicts(document, bundle_ids(path))
    return found


def run_options(args, gpu: bool) -> GradingOptions:
    """What ``grade``'s flags ask of the orchestrator."""
    return GradingOptions(trace_lines=getattr(args, "trace_lines", False),
                          gpu=gpu, timeout=args.timeout, jobs=args.jobs, cold=getattr(args, "cold", False),
                          contained=getattr(args, "contain", "on") != "off",
                          keep_trees=getattr(args, "keep_trees", False), use_evidence_cache=not args.no_cache,
                          controls=not getattr(args, "no_control", True))


def run_backend(args) -> Backend:
    """Where ``grade --backend`` grades."""
    if getattr(args, "backend", "local") == "ray":
        from grader.drive.ray_backend import RayBackend

        return RayBackend()
    return LocalBackend()


def containment_shortfalls(mode: str) -> list[str]:
    """What subjects lack of the full sandbox in this run (``--contain off``: all of it)."""
    if mode == "off":
        return ["--contain off: candidates' tests run without a sandbox"]
    return shortfalls(contain.probe())


def _run_grade(args, gate: SignalGate) -> int:
    degraded = containment_shortfalls(args.contain)
    if degraded and args.contain == "strict":
        print("error: --contain strict: this machine does not give subjects the full sandbox: " + "; ".join(degraded),
              file=sys.stderr)
        return 2
    if degraded:
        print(warning_line(degraded), file=sys.stderr)
    try:
        candidates = ingest(args.paths, args.task)
    except IngestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not candidates:
        print("error: no candidates found in " + ", ".join(map(str, args.paths)), file=sys.stderr)
        return 2
    if args.shard:
        candidates = shard(candidates, *args.shard)
    candidates = candidates[:args.limit] if args.limit else candidates
    try:
        judge = judge_for(args.labels, args.paths)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: cannot read --labels {args.labels}: {exc}", file=sys.stderr)
        return 2
    on_ray = getattr(args, "backend", "local") == "ray"
    if on_ray:
        from grader.drive import ray_backend
        ray_backend.connect(args.address, args.jobs)
        gpu, gpu_reason = ray_backend.detect_gpu(args.gpu, args.address)
    else:
        gpu, gpu_reason = detect_gpu(args.gpu)
    print(f"grading {len(candidates)} candidate(s) with {args.jobs} worker(s); {gpu_reason}", file=sys.stderr)
    began = started_at()
    # Stored results are reused unless --no-cache; finished ones are always kept, so a rerun resumes.
    store = ResultStore(args.out, reuse=not args.no_cache)
    try:
        with observer_for(sys.stderr, len(candidates)) as observer:
            run = grade_many(candidates, run_options(args, gpu), observer, store, run_backend(args))
    finally:
        # From here on a signal waits for the reports to be written.
        gate.hold()
        if on_ray:
            ray_backend.disconnect()
    results = run.results
    code = 130 if run.interrupted else exit_code(results, args.fail_under)
    why = exit_reason(results, args.fail_under, run.interrupted)
    if args.fail_on_flags and code == 0:
        code, why = flags_exit(results, code, why)
    run_info = graded_run(
        began=began, gpu=gpu_reason, candidates=len(candidates),
        containment=contain.summary_line() if args.contain != "off" else "off (--contain off)", degraded=degraded,
        timeout=args.timeout, fail_under=args.fail_under, exit_code=code, exit_reason=why, wall_s=run.wall_s,
        backend=args.backend, jobs=args.jobs,
        incomplete=Incomplete(f"interrupted by {run.interrupted}", list(run.not_graded)) if run.interrupted else None)
    failed_reports = write_reports(args, results, run_info, {c.id: c.diff for c in candidates}, judge)
    if failed_reports and not run.interrupted:
        code, why = 2, f"2: the grader could not write {', '.join(failed_reports)} (see the errors above)"
    if run.interrupted:
        print(f"interrupted ({run.interrupted}): {len(results)} of {len(candidates)} candidate(s) graded, written "
              f"to {args.out / 'results.json'}; the rest were not graded and nothing unfinished was stored",
              file=sys.stderr)
        return code
    if not failed_reports:
        print(f"wrote {args.out / 'results.json'} and {args.out / 'index.html'}", file=sys.stderr)
    print_closing(results, why, sys.stderr)
    return code


def write_reports(args, records: list[CandidateResult], run_info: RunInfo, diffs: dict[str, str], judge) -> list[str]:
    """Every report, each on its own: one that fails (a grader bug) is named on stderr with its error and the
    others are still written. Returns the names of those that failed."""
    writers = [("results.json", lambda: write_results_json(args.out, records, run_info)),
               ("the HTML scorecards", lambda: write_html(args.out, records, run_info, diffs, judge))]
    if args.junit:
        writers.append((str(args.junit),
                        lambda: write_junit(args.junit, records, args.fail_under, run_info.started_at)))
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        writers.append(("the step summary", lambda: append_step_summary(records)))
    failed = []
    for name, write in writers:
        try:
            write()
        except OSError:
            raise  # a full, read-only or forbidden --out: one line naming it (main), not a grader bug
        except Exception:  # noqa: BLE001 - a grader bug: said below, and the other reports still get written
            print(f"error: writing {name} failed (a grader bug):\n{traceback.format_exc(limit=4)}", file=sys.stderr)
            failed.append(name)
    return failed


def append_step_summary(records: list[CandidateResult]) -> None:
    with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as f:
        f.write(markdown_summary(records))


def flags_exit(results: list[CandidateResult], code: int, why: str) -> tuple[int, str]:
    """With ``--fail-on-flags``: 5 when a candidate has a tamper signal (else the code and reason as they were)."""
    flagged = [r.id for r in results if r.integrity_flags]
    if not flagged:
        return code, why
    return 5, (f"5: --fail-on-flags: {len(flagged)} candidate(s) have tamper signals (integrity_flags): "
               + ", ".join(flagged[:5]))


def run_merge(args) -> int:
    """Merge ``args.outputs`` into ``args.out``: results.json, the index and the candidate pages, JUnit."""
    from grader.drive.merge import MergeError, copy_pages, merge_outputs

    try:
        merged = merge_outputs(args.outputs, args.fail_under)
    except MergeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if (lock := locked_output(args.out)) is None:
        return 2
    try:
        write_results_json(args.out, merged.results, merged.run)
        copy_pages(merged, args.out)
        write_index(args.out, merged.results, merged.run)
        if args.junit:
            write_junit(args.junit, merged.results, args.fail_under, merged.run.started_at)
    finally:
        lock.close()
    print(f"merged {len(merged.results)} candidate(s) from {len(args.outputs)} output(s) into {args.out}",
          file=sys.stderr)
    print_closing(merged.results, merged.run.exit_reason, sys.stderr)
    return merged.run.exit_code


def run_bases(args) -> int:
    recipes = all_base_recipes()
    selected = {args.task: recipes[args.task]} if args.task else recipes
    failed = 0
    for task, recipe in selected.items():
        started = time.monotonic()
        try:
            base = build_base(task, recipe)
            problems = verify_blobs(base.path, recipe.blobs) if args.verify else []
            whole = whole_tree_problem(base) if args.verify else None
            problems += [whole] if whole else []
        except BaseBuildError as exc:
            problems = [str(exc)]
        except OSError as exc:
            problems = [os_error_line(exc)]
        status = "FAILED" if problems else "ok"
        failed += bool(problems)
        print(f"{task}: {status} ({time.monotonic() - started:.1f}s, vllm {recipe.sdist_version}, "
              f"{len(recipe.blobs)} blobs)")
        for problem in problems:
            print(f"  {problem}")
    return 1 if failed else 0
