"""The task authoring subcommands of ``grade``: ``new-task``, ``check-task`` and ``task-requirements``."""

from __future__ import annotations

import sys
from pathlib import Path

from grader.pipeline.checkout import BaseBuildError
from grader.core.rubric import REPO_ROOT, RUBRICS_DIR

COMMANDS = ("new-task", "check-task", "task-requirements")


def add_parser(sub) -> None:
    n = sub.add_parser("new-task", help="write the skeleton of a new task, its base pinned from the sdist")
    n.add_argument("task_id", metavar="ID", help="the new task's id: lower-case words joined by '-'")
    n.add_argument("--sdist", required=True, metavar="VERSION", help="the vLLM sdist the base is built from")
    n.add_argument("--overlay", type=Path, metavar="FILE", help="a diff applied at the sdist's root first")
    n.add_argument("--files", nargs="+", metavar="PATH",
                   help="files the task's candidates touch (their pre-image blobs are pinned); with "
                        "--from-upstream, the files whose upstream change is the reference")
    n.add_argument("--from-upstream", metavar="VERSION", dest="upstream",
                   help="write the reference fix from upstream's change between the base and this vLLM sdist")
    n.add_argument("--description", default="",
                   help="what the task is about; with --from-upstream and no --files, the changed files it "
                        "names are proposed")
    n.add_argument("--root", type=Path, default=REPO_ROOT,
                   help="the repository to write into (default: this one)")
    c = sub.add_parser("check-task", help="check a task folder end to end (all tasks without ID); exit 1 on a FAIL")
    c.add_argument("task_id", nargs="?", metavar="ID", help="only this task")
    c.add_argument("--fix", action="store_true",
                   help="rewrite what can be measured (sdist sha256, pre-image blobs in base.toml)")
    c.add_argument("--no-grade", action="store_true",
                   help="skip grading the base, reference and samples (the slow step)")
    c.add_argument("--jobs", type=int, default=None, help="candidates graded at once (default: as grade)")
    c.add_argument("--cases", action="store_true",
                   help="also print, under the case coverage line, each criterion's clauses -> the declared values "
                        "each names -> the checks that exercise them")
    r = sub.add_parser("task-requirements",
                       help="print every task's declared requirements (base.toml [environment]), one a line")
    r.add_argument("--install", action="store_true",
                   help="install those this environment lacks (and only those), torch and triton held")
    r.add_argument("--missing", action="store_true", help="print only those this environment lacks")


def run(args) -> int:
    if args.command == "new-task":
        return run_new_task(args)
    if args.command == "check-task":
        return run_check_task(args)
    return run_task_requirements(args)


def run_new_task(args) -> int:
    from grader.taskkit.skeleton import NewTaskError, create_task

    try:
        written = create_task(args.root, args.task_id, args.sdist, args.overlay, args.files, args.upstream,
                              args.description)
    except (NewTaskError, BaseBuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path.relative_to(args.root) if path.is_relative_to(args.root) else path)
    if args.upstream:
        from grader.pipeline.diffparse import parse_diff

        reference = args.root / "reference_impl" / f"{args.task_id}.diff"
        changed = [s.new_path or s.old_path for s in parse_diff(reference.read_text()).sections]
        print(f"the reference is upstream's change in vllm {args.upstream} to {', '.join(changed)}", file=sys.stderr)
    print(f"wrote the skeleton of {args.task_id}; replace every TODO(new-task), then run "
          f"`grade.py check-task {args.task_id}`", file=sys.stderr)
    return 0


def run_check_task(args) -> int:
    """One line per check; 1 when any check failed, 2 when the task named does not exist."""
    from grader.core.environment import default_jobs
    from grader.taskkit.checks import gradable, grading_checks, static_checks, task_folders

    folders = task_folders()
    if args.task_id is not None:
        folders = [f for f in folders if f.name == args.task_id]
        if not folders:
            print(f"error: no task {args.task_id!r} under {RUBRICS_DIR}", file=sys.stderr)
            return 2
    def report(check) -> None:
        print(check.line(), flush=True)
        for detail in check.details if args.cases else ():
            print(f"      {detail}", flush=True)

    failed, to_grade = False, []
    for folder in folders:
        checks, task = static_checks(folder, args.fix, report)
        failed |= any(c.failed for c in checks)
        if task is not None and gradable(checks):
            to_grade.append(task)
        elif not args.no_grade:
            print(f"FAIL  {folder.name}: statuses: not graded (the base, environment, reference and samples must "
                  "pass first)")
            failed = True
    if to_grade and not args.no_grade:
        jobs = args.jobs or default_jobs()
        print(f"grading the base, reference and samples of {', '.join(t.id for t in to_grade)} on CPU "
              f"({jobs} at once)", file=sys.stderr, flush=True)
        for check in grading_checks(to_grade, jobs):
            print(check.line(), flush=True)
            failed |= check.failed
    return 1 if failed else 0


def run_task_requirements(args) -> int:
    """Print the union of the tasks' requirements (``--missing``: those not satisfied here); ``--install`` installs
    the missing ones with pip (exit status pip's), printing what it installs on stderr."""
    import subprocess

    from grader.taskkit.requirements import install_command, missing_from_union, union

    if not args.install:
        for requirement in (missing_from_union(RUBRICS_DIR) if args.missing else union(RUBRICS_DIR)):
            print(requirement)
        return 0
    missing = missing_from_union(RUBRICS_DIR)
    if not missing:
        print("every task's requirements are installed", file=sys.stderr)
        return 0
    command = install_command(missing)
    print(f"installing {', '.join(missing)}: {' '.join(command)}", file=sys.stderr, flush=True)
    return subprocess.run(command).returncode
