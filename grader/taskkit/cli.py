"""The task authoring subcommands of ``grade``: ``new-task``, ``check-task`` and ``task-requirements``."""

from __future__ import annotations

import sys
from pathlib import Path

from grader.checkout import BaseBuildError
from grader.rubric import REPO_ROOT, RUBRICS_DIR

COMMANDS = ("new-task", "task-requirements")


def add_parser(sub) -> None:
    n = sub.add_parser("new-task", help="write the skeleton of a new task, its base pinned from the sdist")
    n.add_argument("task_id", metavar="ID", help="the new task's id: lower-case words joined by '-'")
    n.add_argument("--sdist", required=True, metavar="VERSION", help="the vLLM sdist the base is built from")
    n.add_argument("--overlay", type=Path, metavar="FILE", help="a diff applied at the sdist's root first")
    n.add_argument("--files", nargs="+", required=True, metavar="PATH",
                   help="files the task's candidates touch (their pre-image blobs are pinned)")
    n.add_argument("--root", type=Path, default=REPO_ROOT,
                   help="the repository to write into (default: this one)")
    sub.add_parser("task-requirements",
                   help="print every task's declared requirements (base.toml [environment]), one a line")


def run(args) -> int:
    if args.command == "new-task":
        return run_new_task(args)
    return run_task_requirements(args)


def run_new_task(args) -> int:
    from grader.taskkit.skeleton import NewTaskError, create_task

    try:
        written = create_task(args.root, args.task_id, args.sdist, args.overlay, args.files)
    except (NewTaskError, BaseBuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(path.relative_to(args.root) if path.is_relative_to(args.root) else path)
    print(f"wrote the skeleton of {args.task_id}; replace every TODO(new-task), then run "
          f"`grade.py check-task {args.task_id}`", file=sys.stderr)
    return 0


def run_task_requirements(args) -> int:
    from grader.taskkit.requirements import union

    for requirement in union(RUBRICS_DIR):
        print(requirement)
    return 0
