"""A real judge (cold) over toy trees, for tests of what the judge decides: hidden tests and probe modules given as
text, two uncontained subjects ("candidate" and "base") over folders holding the toy modules."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from grader.core.records import TestOutcome
from grader.run import judge_environment, parse_evidence, subject_spec
from grader.sandbox.launch import ColdLauncher, JudgeRun


def tree_with(folder: Path, **modules: str) -> Path:
    """A folder holding ``<name>.py`` for each module given."""
    folder.mkdir(parents=True)
    for name, source in modules.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return folder


def run_judge(root: Path, candidate: Path, base: Path, hidden_tests: str, probes: dict[str, str],
              extra_env: dict[str, str] | None = None, timeout: float = 300) -> dict[str, TestOutcome]:
    """The hidden tests' outcomes as grading reads them, by test name."""
    probe_folder = tree_with(root / "probes", **probes)
    specs = {side: subject_spec(side, root / f"subject-{side}", tree, tree, probe_folder, gpu=False,
                                contained=False)[0]
             for side, tree in (("candidate", candidate), ("base", base))}
    folder = root / "judge"
    folder.mkdir()
    (folder / "subjects.json").write_text(json.dumps(specs))
    tests = root / "tests" / "test_toy.py"
    tests.parent.mkdir()
    tests.write_text(textwrap.dedent(hidden_tests))
    env = dict(judge_environment(folder, candidate, base, False, timeout), **(extra_env or {}))
    (folder / "evidence.jsonl").write_text("")
    argv = ["-p", "no:cacheprovider", "-p", "grader.pytest_evidence", "-o", "markers=criterion", "--rootdir",
            str(tests.parent), str(tests)]
    returncode, timed_out = ColdLauncher().run(JudgeRun(argv, env, [], str(tests.parent), str(folder / "log"),
                                                        timeout))
    assert returncode is not None, (folder / "log").read_text()[-3000:]
    outcomes, errors = parse_evidence((folder / "evidence.jsonl").read_text(), timed_out)
    assert not errors, errors
    return {o.nodeid.rsplit("::", 1)[-1]: o for o in outcomes}
