"""Command line: ``grade PATH...`` (the default), ``bases``, ``validate-rubrics``, ``calibrate``, ``mutate``,
``run-tests``, and the task tooling: ``new-task``, ``check-task``, ``task-requirements``. Grading goes through
``grader.many_candidates.grade_many``; this module turns flags into its options and writes the reports.

Exit codes for ``grade`` (grader.outcome): 0 every candidate graded completely (and at or above ``--fail-under``);
1 a candidate scored below ``--fail-under``; 2 the grader could not run as asked (bad option or task id, ``--gpu on``
without CUDA, ``--contain strict`` without the full sandbox, another run writing ``--out``, git missing, an OSError
such as a full or read-only folder: one line naming cause and path), or grading of some candidate broke or met a
fault of the grader or its environment (verdict ``error``: ``grader_error``, ``environment_error``); 3 a candidate
was not graded completely (timed out, input cut off); 4 a candidate's task could not be told; 130 interrupted
(SIGINT, SIGTERM, SIGHUP; the reports are written first).
"""

from __future__ import annotations

import argparse
import difflib
import fcntl
import json
import os
import signal
import sys
import time
from collections import Counter
import traceback
from pathlib import Path

from grader import __version__
from grader.core.records import CandidateResult, GradingOptions, Incomplete, RunInfo
from grader.calibrate import add_parser as add_calibrate_parser, bundle_ids, judge_verdicts, read_labels, run_calibrate
from grader.mutate import add_parser as add_mutate_parser, run_mutate
from grader.taskkit.cli import COMMANDS as TASK_COMMANDS, add_parser as add_task_parser, run as run_task_command
from grader.checkout import BaseBuildError, build_base, verify_blobs, whole_tree_problem
from grader.ingest import IngestError, ingest, is_bundle, shard
from grader.many_candidates import Backend, Interrupted, LocalBackend, grade_many
from grader.outcome import exit_code, exit_reason
from grader.sandbox import contain
from grader.sandbox.launch import ColdLauncher
from grader.sandbox.shortfall import shortfalls, warning_line
from grader.sandbox.leftovers import owned_name
from grader.sandbox.tooling import REQUIRED_TOOLS, missing_tools, os_error_line
from grader.one_candidate import BaseCache
from grader.core.environment import GraderUsageError, default_jobs, detect_gpu
from grader.core.paths import FILE_MODE, output_folder
from grader.report import (graded_run, markdown_summary, started_at, write_html, write_index, write_junit,
                           write_results_json)
from grader.core.rubric import RubricError, all_base_recipes, all_tasks
from grader.store import ResultStore
from grader.terminal import observer_for, print_closing
from grader.validate import validate_rubrics

COMMANDS = ("grade", "bases", "validate-rubrics", "calibrate", "mutate", "run-tests", "merge", *TASK_COMMANDS)


def task_id(value: str) -> str:
    """An argparse type: a known task id, else a one-line error naming the known ones."""
    known = all_tasks()
    if value not in known:
        raise argparse.ArgumentTypeError(f"unknown task {value!r} (known: {', '.join(known)})")
    return value


def unit_interval(value: str) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not in [0, 1]")
    return number


def positive(kind):
    def parse(value: str):
        number = kind(value)
        if number <= 0:
            raise argparse.ArgumentTypeError(f"{value} is not positive")
        return number
    return parse


def shard_spec(value: str) -> tuple[int, int]:
    """An argparse type: ``K/N``, shard K (1-based) of N."""
    try:
        index, count = (int(part) for part in value.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not K/N (e.g. 2/4)") from None
    if not 1 <= index <= count:
        raise argparse.ArgumentTypeError(f"{value}: K must be between 1 and N")
    return index, count


def add_grade_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", type=Path, help="directories, .diff/.patch files or bundle files")
    p.add_argument("--task", type=task_id, help="grade every input as this task instead of inferring it")
    p.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: out)")
    p.add_argument("--jobs", type=positive(int), default=default_jobs(),
                   help="candidates graded at once (default: what the machine's cores and memory allow)")
    p.add_argument("--gpu", choices=("auto", "on", "off"), default="auto", help="run GPU evidence (default: auto)")
    p.add_argument("--timeout", type=positive(float), default=600,
                   help="seconds allowed for one candidate's hidden tests (default: 600)")
    p.add_argument("--junit", type=Path, help="also write JUnit XML here")
    p.add_argument("--fail-under", type=unit_interval,
                   help="exit 1 when a candidate scores below this (in [0, 1])")
    p.add_argument("--fail-on-flags", action="store_true",
                   help="exit 5 when any candidate has a tamper signal (integrity_flags) and nothing else failed; "
                        "the flags decide no criterion and no verdict")
    p.add_argument("--no-cache", action="store_true", help="regrade candidates already in the output's store")
    p.add_argument("--keep-trees", action="store_true", help="keep patched trees for inspection")
    p.add_argument("--trace-lines", action="store_true",
                   help="after the tests, run the failing checks again with the diff's added lines traced, so the "
                        "pages link each failing check to the hunks that ran in it (passing checks are never "
                        "traced; the re-run never changes a verdict)")
    p.add_argument("--contain", choices=("on", "strict", "off"), default="on",
                   help="run candidates' tests in a sandbox (own uid, no network, limits): on uses what this "
                        "machine allows and warns when that is less than the full sandbox, strict refuses to run "
                        "without it (default: on)")
    p.add_argument("--no-control", action="store_true",
                   help="skip each task's control (its reference fix graded first, which must get its designed "
                        "statuses here; a pass is cached per environment)")
    p.add_argument("--cold", action="store_true",
                   help="start a fresh interpreter per candidate instead of forking warm workers (slower; GPU "
                        "evidence always runs so)")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="grade in this process's worker pool (default), or on long-lived Ray actors (docs/ray.md)")
    p.add_argument("--address", help="with --backend ray: the Ray cluster to join (default: $RAY_ADDRESS, "
                                     "else a local cluster of --jobs CPUs)")
    p.add_argument("--labels", type=Path, help="a judge's labels for the bundles given (the format of "
                                               "judge-labels.json): the scorecards show its verdict beside ours")
    p.add_argument("--shard", type=shard_spec, metavar="K/N",
                   help="grade only shard K of N (every N-th candidate in input order, from the K-th); the shards' "
                        "outputs join with `grade merge` (default: every candidate)")
    p.add_argument("--limit", type=positive(int), metavar="N",
                   help="grade only the first N candidates (of the shard, with --shard; default: all)")


GRADE_USAGE = "grade.py PATH... [--task ID] [--out DIR] [--junit FILE] [--fail-under SCORE] [options]"
USAGE = f"""{GRADE_USAGE}
       grade.py COMMAND [options]"""


class ShowDefaults(argparse.RawDescriptionHelpFormatter):
    """Every option's help ends with its default (or says it is required), unless the help already names it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or "default" in text or action.default is argparse.SUPPRESS:
            return text
        if action.required:
            return f"{text} (required)"
        default = action.default
        shown = "off" if default is False else "not set" if default is None else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


def grade_parser() -> argparse.ArgumentParser:
    """``grade``'s own parser, which reads options and paths in any order (``parse_intermixed_args``); its help is
    the whole help of ``grade.py``: grading's options, then the other commands."""
    parser = argparse.ArgumentParser(prog="grade.py", usage=USAGE, formatter_class=ShowDefaults,
                                     description="Grade candidate diffs (the default command: grade.py PATH... is "
                                                 "grade.py grade PATH...).",
                                     epilog=commands_text())
    add_grade_arguments(parser)
    return parser


def commands_text() -> str:
    """The commands and what each does, for the end of the help (``grade.py COMMAND --help`` for its options)."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    width = max(map(len, helps))
    return "commands (grade.py COMMAND --help lists each one's options):\n" + "\n".join(
        f"  {name:<{width}}  {text}" for name, text in helps.items())


def suggestion(word: str) -> str | None:
    """The command ``word`` is a near miss of (``mege`` -> ``merge``), or None."""
    close = difflib.get_close_matches(word, COMMANDS, n=1, cutoff=0.7)
    return close[0] if close else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grade.py", usage=USAGE, formatter_class=ShowDefaults,
                                     description="Rubric-driven grading of vLLM patches.")
    parser.add_argument("--version", action="version", version=f"grader {__version__}")
    # prog: each command's usage line reads "grade.py merge ...", not the whole usage of grade.py before it
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", prog="grade.py")
    add_grade_arguments(sub.add_parser("grade", help="grade candidate diffs (the default command)",
                                       usage=GRADE_USAGE))
    add_calibrate_parser(sub)
    add_mutate_parser(sub)
    add_task_parser(sub)
    m = sub.add_parser("merge", help="join the outputs of several gradings (shards) into one output folder")
    m.add_argument("outputs", nargs="+", type=Path, help="output folders of gradings by the same grader")
    m.add_argument("--out", type=Path, required=True, help="where the merged output is written")
    m.add_argument("--junit", type=Path, help="also write the merged JUnit XML here (default: none)")
    m.add_argument("--fail-under", type=unit_interval,
                   help="exit 1 when a candidate scores below this, as for grade (default: no threshold)")
    b = sub.add_parser("bases", help="build the pinned vLLM bases")
    b.add_argument("--verify", action="store_true", help="prove every expected blob (exit 1 on a mismatch)")
    b.add_argument("--task", type=task_id, help="only this task")
    v = sub.add_parser("validate-rubrics", help="grade base and reference of each task against its rubric")
    v.add_argument("--task", type=task_id, help="only this task (default: every task)")
    v.add_argument("--gpu", choices=("auto", "on", "off"), default="auto", help="run GPU evidence")
    v.add_argument("--out", type=Path, default=Path("out"), help="output folder")
    t = sub.add_parser("run-tests", help="run a task's hidden tests against any vLLM tree (the author's loop)")
    t.add_argument("--task", type=task_id, required=True, help="the task whose hidden tests run")
    given = t.add_mutually_exclusive_group(required=True)
    given.add_argument("--tree", type=Path, help="a folder holding a vllm/ package")
    given.add_argument("--diff", type=Path, metavar="FILE",
                       help="a diff against the task's base: the patched tree is built from it as grading builds it")
    t.add_argument("--keep-tree", action="store_true",
                   help="leave the tree the tests ran on (for a debugger) and print where it is")
    t.add_argument("-k", dest="select", help="only the tests pytest's -k expression selects")
    t.add_argument("--gpu", choices=("auto", "on", "off"), default="auto", help="run GPU evidence")
    t.add_argument("--timeout", type=positive(float), default=600, help="seconds allowed for the hidden tests")
    for subparser in sub.choices.values():
        subparser.formatter_class = ShowDefaults
    return parser


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """``grade``'s arguments in any order; every other command's through its subparser."""
    if argv and argv[0] == "grade":
        args = grade_parser().parse_intermixed_args(argv[1:])
        args.command = "grade"
        return args
    return build_parser().parse_args(argv)


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
        from grader.ray_backend import RayBackend

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
        from grader import ray_backend
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
    from grader.merge import MergeError, copy_pages, merge_outputs

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


def outcome_counts(outcomes) -> str:
    """``3 passed, 1 failed (1 over its time budget), 1 timeout (not evaluated)``: the statuses grading scores."""
    counts = Counter(o.status for o in outcomes)
    over = sum(o.status == "failed" and o.message.startswith("timeout:") for o in outcomes)
    named = {"failed": f"failed ({over} over its time budget)" if over else "failed",
             "timeout": "timeout (not evaluated)", "skipped": "skipped (not evaluated)"}
    return ", ".join(f"{n} {named.get(status, status)}" for status, n in sorted(counts.items())) or "none"


def run_tests(args) -> int:
    """Run the task's hidden tests (judge and subjects, sandboxed as in grading) on a copy of ``--tree``, or on the
    base patched with ``--diff`` as grading patches it; print the judge's pytest output; pytest's exit code (2
    when the tree cannot be made or the environment cannot run the tests)."""
    import shutil
    import tempfile

    from grader.core.paths import make_import_root, scratch_root
    from grader.run import ensure_call_times, run_hidden_tests

    if args.tree is not None and not (args.tree / "vllm").is_dir():
        print(f"error: {args.tree} holds no vllm/ package", file=sys.stderr)
        return 2
    if args.diff is not None and not args.diff.is_file():
        print(f"error: --diff {args.diff}: no such file", file=sys.stderr)
        return 2
    task = all_tasks()[args.task]
    gpu, reason = detect_gpu(args.gpu)
    base = BaseCache().get(task)
    scratch = Path(tempfile.mkdtemp(prefix=owned_name(f"grader-run-tests-{task.id}"), dir=scratch_root()))
    tree = None
    try:
        tree = copied_tree(args.tree, scratch) if args.tree is not None else patched_tree(base, args.diff, scratch)
        if tree is None:
            return 2
        # The same budgets as grading: a call over budget where a control finished it fails here too.
        budgets = ensure_call_times(task, base, gpu, ColdLauncher())
        run = run_hidden_tests(task, tree, make_import_root(tree, scratch / "import-root"), base.path, scratch, gpu,
                               ColdLauncher(), args.timeout, select=args.select, call_budgets=budgets)
    finally:
        if args.keep_tree and tree is not None:
            for entry in scratch.iterdir():
                if entry != tree:
                    shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() and not entry.is_symlink() \
                        else entry.unlink()
            print(f"kept the tree the tests ran on: {tree}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    print(run.log)
    problem = run.environment_error or run.grader_error
    print(f"[{reason}; {len(run.outcomes)} tests in {run.duration:.1f}s; as grading reads them: "
          f"{outcome_counts(run.outcomes)}" + (f"; {problem}" if problem else "") + "]", file=sys.stderr)
    return 2 if problem or run.returncode is None else int(run.returncode)


def leave_now(code: int) -> None:
    """End the process at once: an interrupted run's reports are written, and what is still winding down (trees
    being removed, an abandoned base build) must not hold up the exit the signal asked for (docker kills after
    10 s); a later run reclaims what is left."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def tools_missing() -> bool:
    """Check the programs the grader runs, once at start-up: a required one missing is one error line (the caller
    exits 2); another missing is a warning, and a candidate that needs it ends ``environment_error``."""
    missing = missing_tools()
    for name, sentence in missing.items():
        if name in REQUIRED_TOOLS:
            print(f"error: {sentence}", file=sys.stderr)
        else:
            print(f"warning: {sentence}; a candidate whose diff needs {name} is not graded (environment_error)",
                  file=sys.stderr)
    return any(name in REQUIRED_TOOLS for name in missing)


def copied_tree(source: Path, scratch: Path) -> Path:
    """A copy of ``source``'s vllm/ package (and its metadata) in ``scratch``, readable by the sandbox's uid."""
    import shutil

    tree = scratch / "tree"
    tree.mkdir(mode=0o755)
    shutil.copytree(source / "vllm", tree / "vllm", symlinks=False)
    # vLLM reads its version from this metadata; without it platform detection fails (a GPU tree gets no CUDA
    # platform, its custom ops land on the CPU dispatch key), as it would not in grading
    if (source / "vllm.egg-info").is_dir():
        shutil.copytree(source / "vllm.egg-info", tree / "vllm.egg-info", symlinks=False)
    return tree


def patched_tree(base, diff: Path, scratch: Path) -> Path | None:
    """The base patched with ``diff`` in ``scratch``, applied as grading applies a candidate; None (the reason
    printed) when the diff does not apply. A partly applied diff is run, with a warning naming what failed."""
    from grader.apply import apply_diff, make_tree
    from grader.diffparse import parse_diff

    tree = make_tree(base, scratch)
    report = apply_diff(parse_diff(diff.read_bytes().decode("utf-8", errors="replace")), tree)
    failed = [f"{f.path} {h.header}: {h.detail or h.status}" for f in report.files for h in f.hunks
              if h.status not in ("applied", "offset", "fuzz")]
    if report.status not in ("applied", "partial"):
        print(f"error: {diff} does not apply to the {base.task} base ({report.status}): "
              + "; ".join(filter(None, [report.message, *failed[:5]])), file=sys.stderr)
        return None
    if report.status == "partial":
        print(f"warning: {diff} applied only in part: " + "; ".join(filter(None, [report.message, *failed[:5]])),
              file=sys.stderr)
    print(f"applied {diff} to the {base.task} base ({report.hunks_applied}/{report.hunks_total} hunks, "
          f"{report.method})", file=sys.stderr)
    return tree


def main(argv: list[str] | None = None) -> int:
    # Trees are read by the sandbox's own uid and reports by other users (CI upload steps): a restrictive umask
    # inherited from the caller would break both, so the grader sets its own.
    os.umask(0o022)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        grade_parser().print_help(sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        grade_parser().print_help()
        return 0
    near = suggestion(argv[0]) if argv[0] not in COMMANDS and not Path(argv[0]).exists() else None
    if near is not None:
        print(f"error: {argv[0]!r} is neither a command nor a file; did you mean {near!r}? "
              f"(grade.py --help lists the commands)", file=sys.stderr)
        return 2
    # No command named first means ``grade``, whatever order its options and paths come in.
    if argv[0] not in COMMANDS and argv[0] != "--version":
        argv.insert(0, "grade")
    try:
        args = parse_arguments(argv)
    except SystemExit as exc:  # argparse has printed its one-line error (or the help)
        return 2 if exc.code else 0
    if tools_missing():
        return 2
    try:
        if args.command == "grade":
            code = run_grade(args)
            if code == 130:
                leave_now(code)
            return code
        if args.command == "bases":
            return run_bases(args)
        if args.command == "calibrate":
            return run_calibrate(args)
        if args.command == "mutate":
            return run_mutate(args)
        if args.command in TASK_COMMANDS:
            return run_task_command(args)
        if args.command == "run-tests":
            return run_tests(args)
        if args.command == "merge":
            return run_merge(args)
        return validate_rubrics(args)
    except (RubricError, BaseBuildError, GraderUsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted (SIGINT)", file=sys.stderr)
        return 130
    except OSError as exc:  # a full disk, a read-only or forbidden folder: the user's to fix, said in one line
        print(f"error: {os_error_line(exc)}", file=sys.stderr)
        return 2
