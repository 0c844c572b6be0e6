"""The command line, and only that: arguments parsed and dispatched. ``grade PATH...`` (the default), ``merge``
and ``bases`` do their work in ``grader.drive.commands``; ``run-tests``, ``calibrate``, ``mutate``,
``validate-rubrics`` and the task tooling (``new-task``, ``check-task``, ``task-requirements``) in
``grader.taskkit``.

Exit codes for ``grade`` (grader.reports.outcome): 0 every candidate graded completely (and at or above ``--fail-under``);
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
import os
import sys
from pathlib import Path

from grader import __version__
from grader.core.environment import GraderUsageError, default_jobs
from grader.core.rubric import RubricError, all_tasks
from grader.drive.commands import run_bases, run_grade, run_merge
from grader.pipeline.checkout import BaseBuildError
from grader.sandbox.tooling import REQUIRED_TOOLS, missing_tools, os_error_line
from grader.taskkit.calibrate import add_parser as add_calibrate_parser, run_calibrate
from grader.taskkit.cli import COMMANDS as TASK_COMMANDS, add_parser as add_task_parser, run as run_task_command
from grader.taskkit.mutate import add_parser as add_mutate_parser, run_mutate
from grader.taskkit.run_tests import run_tests
from grader.taskkit.validate import validate_rubrics

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
