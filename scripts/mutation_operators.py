"""Which mutation operators apply to each task's reference fix: the mutants ``grade.py mutate`` would grade, by
operator, without grading any (derivation only). Each mutant is also checked to apply to the built base with
``git apply --check`` and, for Python files, to leave the file parsing.

    python scripts/mutation_operators.py [--task ID ...]

prints a Markdown table (task, mutants, operators with their counts, the case-space operators of
``grader.taskkit.mutate.CASE_SPACE_OPERATORS`` among them) and the mutants that would not apply or parse, which grading
would count as not applicable (a line mutant that leaves its file unparsable is not made at all; a one-file
reference's ``drop-file`` is the empty diff). The README's table of operators per task is this output.
"""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.pipeline.checkout import build_base  # noqa: E402
from grader.core.rubric import all_tasks  # noqa: E402
from grader.pipeline.diffparse import parse_sections  # noqa: E402
from grader.taskkit.mutate import LATER_OPERATORS, TEXT_OPERATORS, derive_mutants  # noqa: E402
from grader.taskkit.validate import REFERENCE_DIR  # noqa: E402


OPERATORS = ("drop-file", "drop-hunk", "revert-condition", *(op for op, _, _ in TEXT_OPERATORS), "shift-boundary",
             "widen-platform", "capability-down", "capability-up", "swap-operands", "delete-statement",
             *LATER_OPERATORS)


def broken(base: Path, diff: str) -> str | None:
    """Why the mutant cannot be graded as a change of behaviour (does not apply, leaves a file unparsable): it is
    applied to copies of the files it touches only."""
    sections = parse_sections(diff)
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch)
        for section in sections:
            if section.old_path and (base / section.old_path).is_file():
                (tree / section.old_path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(base / section.old_path, tree / section.old_path)
        done = subprocess.run(["git", "apply", "-"], cwd=tree, input=diff, text=True, capture_output=True)
        if done.returncode:
            return f"does not apply: {done.stderr.strip()[:160]}"
        for section in sections:
            path = tree / section.path
            if section.path.endswith(".py") and path.is_file():
                try:
                    ast.parse(path.read_text())
                except SyntaxError as exc:
                    return f"{section.path} does not parse: {exc.msg} (line {exc.lineno})"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", action="append")
    args = parser.parse_args()
    tasks = all_tasks()
    print("| task | mutants | operators that applied (mutants each) |")
    print("| --- | --- | --- |")
    problems = []
    for task_id in args.task or [t for t in tasks if (REFERENCE_DIR / f"{t}.diff").is_file()]:
        base = build_base(task_id, tasks[task_id].base)
        mutants = derive_mutants((REFERENCE_DIR / f"{task_id}.diff").read_text(),
                                 lambda rel: (base.path / rel).read_text() if (base.path / rel).is_file() else None)
        made = Counter(m.operator for m in mutants)
        counts = {op: made[op] for op in OPERATORS if made[op]}
        print(f"| {task_id} | {len(mutants)} | {', '.join(f'{op} {n}' for op, n in counts.items())} |", flush=True)
        problems += [f"{task_id} {m.id}: {why}" for m in mutants if (why := broken(base.path, m.diff))]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
