"""Command line: ``grade PATH...`` (the default), ``bases``, ``validate-rubrics``, ``calibrate``, ``mutate``,
``run-tests``.

Exit codes for ``grade``: 0 every candidate graded completely (and at or above ``--fail-under``); 1 a candidate
scored below ``--fail-under`` (``no_diff`` counts as 0; a timed-out or partly applied one counts as below); 2 the
grader could not run as asked (bad option or task id, ``--gpu on`` without CUDA, another run writing ``--out``),
or grading of some candidate broke or met an environment fault (verdict ``error``); 130 interrupted.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from grader import __version__
from grader.calibrate import add_parser as add_calibrate_parser, run_calibrate
from grader.mutate import add_parser as add_mutate_parser, run_mutate
from grader.taskkit.cli import COMMANDS as TASK_COMMANDS, add_parser as add_task_parser, run as run_task_command
from grader.checkout import BaseBuildError, build_base, verify_blobs
from grader.evidence_cache import EvidenceCache
from grader.ingest import IngestError, ingest
from grader.sandbox import contain
from grader.sandbox.launch import ColdLauncher, start_warm_pool
from grader.pipeline import BaseCache, GradeOptions, GraderUsageError, detect_gpu, grade_candidate
from grader.report import markdown_summary, write_html, write_junit, write_results_json
from grader.rubric import RubricError, all_base_recipes, all_tasks
from grader.store import ResultStore, cache_key
from grader.validate import validate_rubrics

COMMANDS = ("grade", "bases", "validate-rubrics", "calibrate", "mutate", "run-tests", *TASK_COMMANDS)


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


def _grade_parser(sub) -> None:
    p = sub.add_parser("grade", help="grade candidate diffs (the default command)")
    p.add_argument("paths", nargs="+", type=Path, help="directories, .diff/.patch files or bundle files")
    p.add_argument("--task", type=task_id, help="grade every input as this task instead of inferring it")
    p.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: out)")
    p.add_argument("--jobs", type=positive(int), default=contain.default_jobs(),
                   help="candidates graded at once (default: what the machine's cores and memory allow)")
    p.add_argument("--gpu", choices=("auto", "on", "off"), default="auto", help="run GPU evidence (default: auto)")
    p.add_argument("--timeout", type=positive(float), default=600,
                   help="seconds allowed for one candidate's hidden tests")
    p.add_argument("--junit", type=Path, help="also write JUnit XML here")
    p.add_argument("--fail-under", type=unit_interval,
                   help="exit 1 when a candidate scores below this (in [0, 1])")
    p.add_argument("--no-cache", action="store_true", help="regrade candidates already in the output's store")
    p.add_argument("--keep-trees", action="store_true", help="keep patched trees for inspection")
    p.add_argument("--contain", choices=("on", "off"), default="on",
                   help="run candidates' tests in a sandbox (own uid, no network, limits; default on)")
    p.add_argument("--cold", action="store_true",
                   help="start a fresh interpreter per candidate instead of forking warm workers (slower)")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="grade in this process's worker pool (default), or one Ray task per candidate (docs/ray.md)")
    p.add_argument("--address", help="with --backend ray: the Ray cluster to join (default: $RAY_ADDRESS, "
                                     "else a local cluster of --jobs CPUs)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grade", description="Rubric-driven grading of vLLM patches.")
    parser.add_argument("--version", action="version", version=f"grader {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _grade_parser(sub)
    add_calibrate_parser(sub)
    add_mutate_parser(sub)
    add_task_parser(sub)
    b = sub.add_parser("bases", help="build the pinned vLLM bases")
    b.add_argument("--verify", action="store_true", help="prove every expected blob (exit 1 on a mismatch)")
    b.add_argument("--task", type=task_id, help="only this task")
    v = sub.add_parser("validate-rubrics", help="grade base and reference of each task against its rubric")
    v.add_argument("--task", type=task_id, help="only this task")
    v.add_argument("--gpu", choices=("auto", "on", "off"), default="auto")
    v.add_argument("--out", type=Path, default=Path("out"))
    t = sub.add_parser("run-tests", help="run a task's hidden tests against any vLLM tree (the author's loop)")
    t.add_argument("--task", type=task_id, required=True)
    t.add_argument("--tree", type=Path, required=True, help="a folder holding a vllm/ package")
    t.add_argument("-k", dest="select", help="only the tests pytest's -k expression selects")
    t.add_argument("--gpu", choices=("auto", "on", "off"), default="auto")
    t.add_argument("--timeout", type=positive(float), default=600)
    return parser


def _progress(done: int, total: int, result: dict, cached: bool) -> None:
    score = "-" if result["score"] is None else f"{result['score']:.2f}"
    note = " (cached)" if cached else ""
    state = "" if result.get("run_status", "complete") == "complete" else f" [{result['run_status']}]"
    elapsed = sum(result.get("timings", {}).get(k, 0.0) for k in ("apply_s", "tests_s"))
    timing = f" in {elapsed:.1f}s" if elapsed and not cached else ""
    print(f"[{done}/{total}] {result['id']}: {result['task'] or '?'} {result['verdict']} {score}{state}{timing}"
          f"{note}", file=sys.stderr, flush=True)


class OutputLocked(Exception):
    """Another grader run is writing the same output folder."""


def lock_output(out: Path):
    """Hold ``OUT/.grader.lock`` for the run: one writer per output folder; the second is refused with the first's
    pid and start time. The lock is released when this process ends, however it ends."""
    out.mkdir(parents=True, exist_ok=True)
    handle = open(out / ".grader.lock", "a+")
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


class Interrupted(Exception):
    """SIGINT or SIGTERM arrived while grading."""


def _raise_interrupted(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


def run_grade(args) -> int:
    try:
        lock = lock_output(args.out)
    except OutputLocked as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return _run_grade(args)
    finally:
        lock.close()


def _run_grade(args) -> int:
    try:
        candidates = ingest(args.paths, args.task)
    except IngestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not candidates:
        print("error: no candidates found in " + ", ".join(map(str, args.paths)), file=sys.stderr)
        return 2
    on_ray = getattr(args, "backend", "local") == "ray"
    if on_ray:
        from grader import ray_backend
        ray_backend.connect(args.address, args.jobs)
        gpu, gpu_reason = ray_backend.detect_gpu(args.gpu, args.address)
    else:
        gpu, gpu_reason = detect_gpu(args.gpu)
    print(f"grading {len(candidates)} candidate(s) with {args.jobs} worker(s); {gpu_reason}", file=sys.stderr)
    tasks = all_tasks()
    store = ResultStore(args.out)
    bases = BaseCache()
    results: dict[str, dict] = {}
    started = time.monotonic()
    pending = []
    for candidate in candidates:
        key = cache_key(candidate, tasks.get(candidate.task or ""), gpu)
        stored = None if args.no_cache else store.load(candidate.id, key)
        if stored is not None:
            results[candidate.id] = stored
            _progress(len(results), len(candidates), stored, True)
        else:
            pending.append((candidate, key))

    interrupted = None
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if on_ray:
            try:
                ray_backend.grade_pending(pending, len(candidates), results, store, args, gpu, _progress)
            finally:
                ray_backend.disconnect()
        else:
            _grade_locally(args, pending, candidates, tasks, bases, gpu, store, results)
    except Interrupted as exc:
        interrupted = str(exc)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    run_info = {"grader_version": __version__, "gpu": gpu_reason, "candidates": len(candidates),
                "containment": contain.summary_line() if args.contain == "on" else "off (--contain off)",
                "timings": {"wall_s": round(time.monotonic() - started, 2)}}
    if interrupted:
        run_info["incomplete"] = {"reason": f"interrupted by {interrupted}",
                                  "not_graded": [c.id for c in candidates if c.id not in results]}
    ordered = [results[c.id] for c in candidates if c.id in results]
    write_results_json(args.out, ordered, run_info)
    write_html(args.out, ordered, run_info, {c.id: c.diff for c in candidates})
    if args.junit:
        write_junit(args.junit, ordered)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as f:
            f.write(markdown_summary(ordered))
    if interrupted:
        print(f"interrupted ({interrupted}): {len(ordered)} of {len(candidates)} candidate(s) graded, written to "
              f"{args.out / 'results.json'}; the rest were not graded and nothing unfinished was stored",
              file=sys.stderr)
        return 130
    print(f"wrote {args.out / 'results.json'} and {args.out / 'index.html'}", file=sys.stderr)
    return exit_code(ordered, args.fail_under)


def _grade_locally(args, pending, candidates, tasks, bases, gpu, store, results) -> None:
    """Grade ``pending`` in a pool of threads; on an interrupt, stop starting work, end every judge and subject,
    and keep only what finished before it."""
    stopping = threading.Event()
    launcher = _launcher(args, [c for c, _ in pending], tasks, bases, gpu)
    options = GradeOptions(gpu=gpu, timeout=args.timeout, keep_trees=args.keep_trees, launcher=launcher,
                           evidence_cache=None if args.no_cache else EvidenceCache(),
                           contained=args.contain == "on", memory_bytes=contain.memory_per_subject(args.jobs))

    def work(item):
        candidate, key = item
        if stopping.is_set():
            return None
        result = grade_candidate(candidate, bases, options).to_json()
        if stopping.is_set():
            return None
        store.save(candidate.id, key, result)
        return result

    pool = ThreadPoolExecutor(max_workers=max(1, args.jobs))
    futures = []
    try:
        futures = [pool.submit(work, item) for item in pending]
        for future in as_completed(futures):
            result = future.result()
            if result is not None:
                results[result["id"]] = result
                _progress(len(results), len(candidates), result, False)
    except Interrupted:
        stopping.set()
        pool.shutdown(wait=False, cancel_futures=True)
        launcher.terminate()
        pool.shutdown(wait=True)
        # A candidate whose grading completed (and was stored) just before the signal is reported with the rest.
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is None and future.result():
                results.setdefault(future.result()["id"], future.result())
        raise
    finally:
        pool.shutdown(wait=True)
        launcher.close()


def _launcher(args, pending: list, tasks: dict, bases: BaseCache, gpu: bool):
    """Warm workers unless --cold, or nothing needs running (everything cached, or no gradable candidate)."""
    gradable = [c for c in pending if c.task in tasks and c.diff.strip()]
    if args.cold or not gradable:
        return ColdLauncher()
    return start_warm_pool(max(1, args.jobs), bases.get(tasks[gradable[0].task]), gpu)


def exit_code(results: list[dict], fail_under: float | None) -> int:
    """2 when grading broke for some candidate; 1 when one is below ``fail_under`` (``no_diff`` scores 0, and a
    result that is not complete never passes a threshold); else 0."""
    if any(r["verdict"] == "error" for r in results):
        return 2
    if fail_under is None:
        return 0
    for r in results:
        score = 0.0 if r["verdict"] == "no_diff" else (r["score"] or 0.0)
        if score < fail_under or r.get("run_status", "complete") != "complete":
            return 1
    return 0


def run_bases(args) -> int:
    recipes = all_base_recipes()
    selected = {args.task: recipes[args.task]} if args.task else recipes
    failed = 0
    for task, recipe in selected.items():
        started = time.monotonic()
        try:
            base = build_base(task, recipe)
            problems = verify_blobs(base.path, recipe.blobs) if args.verify else []
        except BaseBuildError as exc:
            problems = [str(exc)]
        status = "FAILED" if problems else "ok"
        failed += bool(problems)
        print(f"{task}: {status} ({time.monotonic() - started:.1f}s, vllm {recipe.sdist_version}, "
              f"{len(recipe.blobs)} blobs)")
        for problem in problems:
            print(f"  {problem}")
    return 1 if failed else 0


def run_tests(args) -> int:
    """Copy ``--tree`` into a scratch folder, run the task's hidden tests on it (judge and subjects, sandboxed as
    in grading), print the judge's pytest output; pytest's exit code."""
    import shutil
    import tempfile

    from grader.apply import make_import_root, scratch_root
    from grader.run import run_hidden_tests

    if not (args.tree / "vllm").is_dir():
        print(f"error: {args.tree} holds no vllm/ package", file=sys.stderr)
        return 2
    task = all_tasks()[args.task]
    gpu, reason = detect_gpu(args.gpu)
    base = BaseCache().get(task)
    scratch = Path(tempfile.mkdtemp(prefix=f"grader-run-tests-{task.id}-", dir=scratch_root()))
    try:
        tree = scratch / "tree"
        tree.mkdir(mode=0o755)
        shutil.copytree(args.tree / "vllm", tree / "vllm", symlinks=False)
        run = run_hidden_tests(task, tree, make_import_root(tree, scratch), base.path, scratch, gpu, ColdLauncher(),
                               args.timeout, select=args.select)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(run.log)
    print(f"[{reason}; {len(run.outcomes)} tests in {run.duration:.1f}s"
          + (f"; {run.environment_error}" if run.environment_error else "") + "]", file=sys.stderr)
    return 2 if run.environment_error or run.returncode is None else int(run.returncode)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # No command named first means ``grade``, whatever order its options and paths come in.
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version"):
        argv.insert(0, "grade")
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed its one-line error (or the help)
        return 2 if exc.code else 0
    try:
        if args.command == "grade":
            return run_grade(args)
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
        return validate_rubrics(args)
    except (RubricError, BaseBuildError, GraderUsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
