"""A real judge (cold) over toy trees, for tests of what the judge decides: hidden tests and probe modules given as
text, two uncontained subjects ("candidate" and "base") over folders holding the toy modules."""

from __future__ import annotations

import textwrap
from pathlib import Path

from grader.core.records import TestOutcome
from grader.core.rubric import SubjectPlatform
from grader.pipeline.run import parse_evidence, subject_spec
from grader.sandbox.launch import ColdLauncher
from grader.sandbox.protocol import JudgeRequest, set_up_judge


def tree_with(folder: Path, **modules: str) -> Path:
    """A folder holding ``<name>.py`` for each module given."""
    folder.mkdir(parents=True)
    for name, source in modules.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return folder


def run_judge(root: Path, candidate: Path, base: Path, hidden_tests: str, probes: dict[str, str],
              extra_env: dict[str, str] | None = None, timeout: float = 300,
              contained: bool = False) -> dict[str, TestOutcome]:
    """The hidden tests' outcomes as grading reads them, by test name (``contained``: subjects in their sandbox)."""
    probe_folder = tree_with(root / "probes", **probes)
    made = {side: subject_spec(side, root / f"subject-{side}", tree, tree, probe_folder, gpu=False,
                               contained=contained)
            for side, tree in (("candidate", candidate), ("base", base))}
    specs = {side: spec for side, (spec, _) in made.items()}
    judge = root / "judge"
    judge.mkdir()
    tests = root / "tests" / "test_toy.py"
    tests.parent.mkdir()
    tests.write_text(textwrap.dedent(hidden_tests))
    argv = ["-p", "no:cacheprovider", "-p", "grader.pipeline.pytest_evidence", "-o", "markers=criterion", "--rootdir",
            str(tests.parent), str(tests)]
    folder = set_up_judge(judge, argv, str(tests.parent), candidate, base, False, timeout, specs,
                          extra_env=extra_env)
    try:
        returncode, timed_out = ColdLauncher().run(folder.request)
    finally:
        for _, box in made.values():
            if box is not None:
                box.cleanup()
    assert returncode is not None, folder.log.read_text()[-3000:]
    outcomes, errors = parse_evidence(folder.evidence.read_text(), timed_out)
    assert not errors, errors
    return {o.nodeid.rsplit("::", 1)[-1]: o for o in outcomes}


def reporting_judge(root: Path, hidden_test: str, probes: dict[str, str],
                    platforms: tuple[SubjectPlatform, ...] = ()) -> tuple[JudgeRequest, Path]:
    """A request for a judge of one test file that writes what it saw to ``GRADER_EVIDENCE_OUT + ".seen"``, with
    one uncontained "candidate" subject over an empty tree and the probe modules given: the request (to run with
    any launcher) and that file."""
    probe_folder = tree_with(root / "probes", **probes)
    tree = root / "tree"
    tree.mkdir()
    spec, _ = subject_spec("candidate", root / "subject", tree, tree, probe_folder, gpu=False, contained=False)
    judge = root / "judge"
    judge.mkdir()
    test = root / "tests" / "test_report.py"
    test.parent.mkdir()
    test.write_text(textwrap.dedent(hidden_test))
    argv = ["-p", "no:cacheprovider", "--rootdir", str(test.parent), str(test)]
    folder = set_up_judge(judge, argv, str(test.parent), tree, tree, False, 120, {"candidate": spec},
                          platforms=platforms)
    return folder.request, judge / "evidence.jsonl.seen"
