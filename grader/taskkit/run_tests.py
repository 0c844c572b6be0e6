"""``run-tests``: a task's hidden tests, sandboxed as in grading, on a tree of the author's or on the base patched
with a diff; the judge's pytest output and the statuses as grading reads them. For rubric authors: it decides no
verdict."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from grader.core.environment import detect_gpu
from grader.core.rubric import all_tasks
from grader.drive.one_candidate import BaseCache
from grader.sandbox.launch import ColdLauncher
from grader.sandbox.leftovers import owned_name


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
    from grader.pipeline.run import ensure_call_times, run_hidden_tests

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
    from grader.pipeline.apply import apply_diff, make_tree
    from grader.pipeline.diffparse import parse_diff

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
