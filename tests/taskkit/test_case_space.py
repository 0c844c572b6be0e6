"""A criterion's declared case space against its checks: the evidence plugin reports the values each collected check
exercises (its ``cases`` markers, ``pytest.param`` marks, parametrize arguments named as a declared axis), and
check-task's rules refuse a criterion without cases, a clause naming no declared value, a declared value no check
of its criterion exercises, and a marked value its criteria do not declare. Fixture tasks under tmp_path, collected
by pytest with the plugin as the judge collects them (no base is built)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.rubric import REPO_ROOT, RUBRICS_DIR, BaseRecipe, load_task
from grader.sandbox.protocol import EVIDENCE_OUT
from grader.taskkit.cases import (case_space_problems, clause_table, clauses, coverage_problems, named_values,
                                  read_collected)
from grader.taskkit.checks import check_case_coverage, check_case_space
from grader.taskkit.skeleton import TaskPaths, rendered_files

BASE_TOML = '''\
[base]
sdist_version = "0.24.0"
sdist_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
blobs = { "vllm/a.py" = "1234567" }
'''

CRITERIA = {
    "c1": ("fix", "Accepts fp8 and fp8_e4m3 on XPU; still rejects int8 on XPU.",
           'dtype = ["fp8", "fp8_e4m3", "int8"]\nplatform = ["xpu"]'),
    "c2": ("fix", "Works for 0, 1 and 7 tokens.", 'tokens = ["0", "1", "7"]'),
    "c3": ("preserve", "CUDA keeps rejecting fp8 on sm80 and accepting it on sm90.",
           'capability = ["sm80", "sm90"]\ndtype = ["fp8"]'),
    "c4": ("preserve", "The module keeps every public name of vllm.a.", 'module = ["vllm.a"]'),
    "c5": ("preserve", "Other platforms decide as before: cpu and tpu.", 'platform = ["cpu", "tpu"]'),
}

TESTS = '''\
import pytest

PARAMS = [pytest.param("sm80", marks=pytest.mark.cases(dtype="fp8")), "sm90"]


@pytest.mark.criterion("c1")
@pytest.mark.cases(platform="xpu")
@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "int8", "undeclared"])
def test_c1(dtype):
    pass


@pytest.mark.criterion("c2")
@pytest.mark.parametrize("tokens", [0, 1, 7])
def test_c2(tokens):
    pass


@pytest.mark.criterion("c3")
@pytest.mark.parametrize("capability", PARAMS)
def test_c3(capability):
    pass


@pytest.mark.criterion("c4")
@pytest.mark.cases(module="vllm.a")
def test_c4():
    pass


@pytest.mark.criterion("c5")
@pytest.mark.cases(platform=["cpu", "tpu"])
def test_c5():
    pass
'''


def rubric_toml(criteria: dict[str, tuple[str, str, str | None]]) -> str:
    parts = ['id = "cases-demo"\ntitle = "t"\nversion = 1\n']
    for cid, (kind, requires, cases) in criteria.items():
        parts.append(f'[criteria.{cid}]\ntitle = "{cid}"\nrequires = "{requires}"\nweight = 1.0\n'
                     f'core = {"true" if cid == "c1" else "false"}\nkind = "{kind}"\n')
        if cases is not None:
            parts.append(f"[criteria.{cid}.cases]\n{cases}\n")
    return "\n".join(parts)


def write_task(root: Path, criteria=CRITERIA, tests: str = TESTS) -> Path:
    folder = root / "rubrics" / "cases-demo"
    (folder / "tests").mkdir(parents=True)
    (folder / "rubric.toml").write_text(rubric_toml(criteria))
    (folder / "base.toml").write_text(BASE_TOML)
    (folder / "tests" / "test_cases_demo.py").write_text(tests)
    return folder


def collect(folder: Path, tmp_path: Path):
    """The fixture task's tests collected with the evidence plugin, as the judge collects them."""
    evidence = tmp_path / "evidence.jsonl"
    evidence.write_text("")
    env = {**os.environ, EVIDENCE_OUT: str(evidence), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-c", str(RUBRICS_DIR / "pytest.ini"), "--rootdir",
                           str(folder.parent), "-p", "grader.pipeline.pytest_evidence", "--collect-only",
                           str(folder / "tests")], cwd=folder.parent, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return read_collected(evidence.read_text())


@pytest.fixture
def demo(tmp_path):
    folder = write_task(tmp_path)
    return load_task(folder), collect(folder, tmp_path)


def by_name(collected) -> dict:
    return {nodeid.rsplit("::", 1)[-1]: check for nodeid, check in collected.items()}


def test_the_plugin_reports_markers_param_marks_and_parametrize_arguments_named_as_axes(demo):
    _, collected = demo
    checks = by_name(collected)
    assert checks["test_c1[fp8_e4m3]"].cases == {"dtype": ("fp8_e4m3",), "platform": ("xpu",)}
    assert checks["test_c1[fp8_e4m3]"].marked == {"platform": ("xpu",)}
    # a parametrized value outside the declared ones is reported as exercised, never as a marked typo
    assert checks["test_c1[undeclared]"].cases["dtype"] == ("undeclared",)
    assert checks["test_c2[0]"].cases == {"tokens": ("0",)}  # str(value)
    # a pytest.param's own cases mark joins the parametrize argument of the same item only
    assert checks["test_c3[sm80]"].cases == {"capability": ("sm80",), "dtype": ("fp8",)}
    assert checks["test_c3[sm90]"].cases == {"capability": ("sm90",)}
    assert checks["test_c5"].cases == {"platform": ("cpu", "tpu")}
    assert checks["test_c4"].criteria == ("c4",)


def test_a_fully_covered_task_passes_and_maps_every_clause(demo):
    task, collected = demo
    assert case_space_problems(task) == []
    assert coverage_problems(task, collected) == []
    assert check_case_space(task).status == "ok"
    coverage = check_case_coverage(task, collected)
    assert coverage.status == "ok", coverage.reason
    table = clause_table(task, collected)
    assert len(table) == len(coverage.details) == 6  # c1 has two clauses
    assert table[0].startswith("c1 'Accepts fp8 and fp8_e4m3 on XPU' -> dtype=fp8, dtype=fp8_e4m3, platform=xpu ->")
    # a check counts for a clause when it exercises a value of each axis the clause names
    assert table[1] == "c1 'still rejects int8 on XPU.' -> dtype=int8, platform=xpu -> 1 checks: test_c1[int8]"


def test_a_criterion_without_cases_is_refused(tmp_path):
    criteria = dict(CRITERIA, c2=("fix", "Works for 0, 1 and 7 tokens.", None))
    task = load_task(write_task(tmp_path, criteria))
    assert case_space_problems(task) == ["c2 declares no case space ([criteria.c2.cases]: axis -> the values its "
                                         "words imply)"]
    assert check_case_space(task).status == "FAIL"


def test_a_clause_that_names_no_declared_value_is_refused(tmp_path):
    criteria = dict(CRITERIA, c3=("preserve", "CUDA keeps rejecting fp8 on sm80; the message names the right "
                                  "GPU. It is accepted on sm90, e.g. for fp8.", 'capability = ["sm80", "sm90"]\n'
                                  'dtype = ["fp8"]'))
    task = load_task(write_task(tmp_path, criteria))
    problems = case_space_problems(task)
    assert len(problems) == 1 and problems[0].startswith("c3: the clause 'the message names the right GPU.' names "
                                                         "no declared value of c3")


def test_clauses_split_at_semicolons_and_sentence_ends_but_not_after_abbreviations():
    assert clauses("A on sm80; B, e.g. fp8. C is 0.5 wide! D") == ["A on sm80", "B, e.g. fp8.", "C is 0.5 wide!",
                                                                   "D"]
    assert named_values("Rejects FP8 on XPU", {"dtype": ("fp8", "int8"), "platform": ("xpu",)}) == \
        [("dtype", "fp8"), ("platform", "xpu")]


def test_a_declared_value_no_check_of_its_criterion_exercises_is_refused_by_name(tmp_path):
    tests = TESTS.replace('["fp8", "fp8_e4m3", "int8", "undeclared"]', '["fp8", "fp8_e4m3"]')
    # sm90 exercised only by a c5 check: it does not cover c3
    tests = tests.replace('PARAMS = [pytest.param("sm80", marks=pytest.mark.cases(dtype="fp8")), "sm90"]',
                          'PARAMS = [pytest.param("sm80", marks=pytest.mark.cases(dtype="fp8"))]')
    tests += '''

@pytest.mark.criterion("c5")
@pytest.mark.cases(platform="cpu")
@pytest.mark.parametrize("capability", ["sm90"])
def test_other(capability):
    pass
'''
    folder = write_task(tmp_path, tests=tests)
    task, collected = load_task(folder), collect(folder, tmp_path)
    assert coverage_problems(task, collected) == ["c1: dtype=int8 exercised by no check of c1",
                                                  "c3: capability=sm90 exercised by no check of c3"]
    table = clause_table(task, collected)
    assert table[1].endswith("-> dtype=int8, platform=xpu -> 0 checks: none exercises them together (2 exercise "
                             "some of them)")


def test_the_table_flags_a_clause_no_check_exercises_together(tmp_path):
    """Every value of c3 is exercised, but fp8 only by a check without a capability and the capabilities only
    without fp8: "rejecting fp8 on sm80" is then checked by nothing, which the table says (it is no refusal: values
    are named by substring)."""
    tests = TESTS.replace('PARAMS = [pytest.param("sm80", marks=pytest.mark.cases(dtype="fp8")), "sm90"]',
                          'PARAMS = ["sm80", "sm90"]')
    tests += """

@pytest.mark.criterion("c3")
@pytest.mark.cases(dtype="fp8")
def test_fp8_alone():
    pass
"""
    folder = write_task(tmp_path, tests=tests)
    task, collected = load_task(folder), collect(folder, tmp_path)
    assert coverage_problems(task, collected) == []
    (line,) = [row for row in clause_table(task, collected) if row.startswith("c3")]
    assert line == ("c3 'CUDA keeps rejecting fp8 on sm80 and accepting it on sm90.' -> capability=sm80, "
                    "capability=sm90, dtype=fp8 -> 0 checks: none exercises them together (3 exercise some of them)")


def test_a_marked_value_or_axis_its_criteria_do_not_declare_is_a_typo(tmp_path):
    tests = TESTS.replace('@pytest.mark.cases(platform=["cpu", "tpu"])',
                          '@pytest.mark.cases(platform=["cpu", "tpu", "cpuu"], dtype="fp8")')
    folder = write_task(tmp_path, tests=tests)
    task, collected = load_task(folder), collect(folder, tmp_path)
    nodeid = next(n for n in collected if n.endswith("::test_c5"))
    assert coverage_problems(task, collected) == [
        f"{nodeid} marks the axis 'dtype', which none of its criteria (c5) declares",
        f"{nodeid} marks platform=cpuu, which none of its criteria (c5) declares on platform"]
    assert check_case_coverage(task, collected).status == "FAIL"


@pytest.mark.parametrize("files", [["vllm/utils/math_utils.py"], ["docs/notes.md"]])
def test_the_new_task_skeleton_declares_a_case_space_every_clause_names(tmp_path, files):
    """A fresh skeleton (with a module to probe, and without) passes the case-space rule as written; what is left
    to write is the placeholders' rule's to refuse."""
    paths = TaskPaths(tmp_path, "demo-task")
    recipe = BaseRecipe("0.24.0", "0" * 64, None, {f: "1234567" for f in files})
    for path, text in rendered_files(paths, recipe, files).items():
        if path.parent == paths.rubric_dir:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    task = load_task(paths.rubric_dir)
    assert all(c.cases for c in task.criteria.values())
    assert case_space_problems(task) == []
