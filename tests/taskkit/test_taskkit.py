"""Task tooling: declared requirements and the environment check, base.toml rewrites, new-task and check-task.

The end-to-end tests copy the engine and the rubrics' shared support into a temporary repository, create a
throwaway task there with ``new-task`` on the cached vLLM 0.24.0 sdist (no network once it is cached), fill in its
placeholders with a tiny real fix, and run ``check-task`` on it and on broken variants of it.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from grader.pipeline.checkout import fetch_sdist, sha256_of
from grader.core.rubric import (REPO_ROOT, BaseRecipe, Criterion, RubricError, Task, all_base_recipes, criteria_problems,
                                 load_task)
from grader.pipeline.run import environment_problem
from grader.core import environment
from grader.taskkit import requirements
from grader.taskkit.checks import sample_problems
from grader.taskkit.recipe_edit import RecipeEditError, rewrite
from grader.taskkit.skeleton import NewTaskError, TaskPaths, create_task, normalised_files

MISSING_DIST = "grader-surely-missing-distribution"


# --- declared requirements --------------------------------------------------------------------------------------------


@pytest.fixture
def site_folder(tmp_path) -> list[str]:
    """A site folder holding two fake installed distributions (fake_pkg 1.2 and prerel-pkg 2.0rc1)."""
    folder = tmp_path / "site"
    for name, version in (("fake_pkg", "1.2"), ("prerel_pkg", "2.0rc1")):
        info = folder / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
    return [str(folder)]


def test_satisfied_requirements_are_not_unmet(site_folder):
    # Names compare as PEP 503 normalises them; a pre-release counts as the version it is.
    assert environment.unmet(["fake-pkg", "Fake_Pkg>=1.0,<2", "prerel-pkg>=1.5"], site_folder) == []


def test_missing_and_too_old_requirements_are_named_with_what_is_installed(site_folder):
    assert environment.unmet(["msgspec", "fake-pkg>=3", "fake-pkg"], site_folder) == [
        "msgspec (not installed)", "fake-pkg>=3 (1.2 installed)"]


def test_a_requirement_whose_marker_does_not_hold_is_not_needed(site_folder):
    assert environment.unmet(['msgspec; python_version < "3"', 'fake-pkg>=9; sys_platform == "nowhere"'],
                              site_folder) == []
    assert environment.unmet(['msgspec; python_version >= "3"'], site_folder) == ["msgspec (not installed)"]


def test_unmet_message_names_the_task_and_each_problem(site_folder):
    message = environment.unmet_message("some-task", ["msgspec", "fake-pkg>=3"], site_folder)
    assert message == "task some-task needs msgspec (not installed), fake-pkg>=3 (1.2 installed)"
    assert environment.unmet_message("some-task", ["fake-pkg"], site_folder) is None


def test_an_installed_requirement_that_does_not_import_is_named(tmp_path):
    folder = tmp_path / "site"
    info = folder / "broken_pkg-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-pkg\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("broken_pkg\n")
    (folder / "broken_pkg").mkdir()
    (folder / "broken_pkg" / "__init__.py").write_text("raise ImportError('needs a library this machine lacks')\n")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(folder)}
    assert environment.unmet(["broken-pkg"], [str(folder)]) == []
    assert requirements.import_failures(["broken-pkg"], env, [str(folder)]) == {
        "broken_pkg": "ImportError: needs a library this machine lacks"}
    (folder / "broken_pkg" / "__init__.py").write_text("")
    assert requirements.import_failures(["broken-pkg"], env, [str(folder)]) == {}


def test_the_real_environment_satisfies_every_declared_requirement():
    for task, recipe in all_base_recipes().items():
        assert environment.unmet(recipe.requires) == [], task


def write_base_toml(folder: Path, environment: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "base.toml").write_text(f'[base]\nsdist_version = "0.0"\nsdist_sha256 = "{"0" * 64}"\n\n'
                                      f"[base.blobs]\n\n{environment}")
    return folder


def test_union_of_requirements_is_each_once_sorted_by_name(tmp_path):
    rubrics = tmp_path / "rubrics"
    write_base_toml(rubrics / "one", '[environment]\nrequires = ["requests", "numpy>=1.26"]\n')
    write_base_toml(rubrics / "two", '[environment]\nrequires = ["numpy>=1.26", "Msgspec"]\n')
    write_base_toml(rubrics / "three", "")
    assert requirements.union(rubrics) == ["Msgspec", "numpy>=1.26", "requests"]


def test_install_installs_only_what_is_missing_holding_torch(tmp_path, monkeypatch, capsys):
    """task-requirements --install hands pip the unmet requirements alone, with torch and triton at the versions
    installed; with nothing missing it runs no pip at all."""
    from grader.taskkit import cli

    rubrics = tmp_path / "rubrics"
    write_base_toml(rubrics / "one", f'[environment]\nrequires = ["pytest", "{MISSING_DIST}>=1"]\n')
    write_base_toml(rubrics / "two", '[environment]\nrequires = ["pytest>=999; python_version < \'3\'"]\n')
    monkeypatch.setattr(cli, "RUBRICS_DIR", rubrics)
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **_: ran.append(argv) or subprocess.CompletedProcess(argv, 0))
    args = cli_args("task-requirements", "--install")
    assert cli.run(args) == 0
    (argv,) = ran
    assert argv[:4] == [sys.executable, "-m", "pip", "install"]
    installed = [a for a in argv[4:] if not a.startswith("-")]
    torch_version = environment.installed_version("torch")
    assert installed == [f"{MISSING_DIST}>=1", f"torch=={torch_version}", *installed[2:]]
    assert all(a.split("==")[0] in requirements.HELD for a in installed[1:])
    assert cli.run(cli_args("task-requirements", "--missing")) == 0
    assert capsys.readouterr().out.split() == [f"{MISSING_DIST}>=1"]
    write_base_toml(rubrics / "three", "")
    (rubrics / "one" / "base.toml").write_text((rubrics / "one" / "base.toml").read_text()
                                               .replace(f', "{MISSING_DIST}>=1"', ""))
    all_base_recipes.cache_clear()
    ran.clear()
    assert cli.run(args) == 0 and ran == []


def cli_args(*argv: str):
    from grader.cli import build_parser

    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("environment,match", [
    ('[environment]\nrequires = "numpy"\n', "must be a list"),
    ('[environment]\nrequires = ["numpy >>= 1"]\n', "not a PEP 508 requirement"),
    ('[environment]\nrequires = [3]\n', "not a PEP 508 requirement"),
])
def test_a_malformed_declaration_is_refused(tmp_path, environment, match):
    write_base_toml(tmp_path / "rubrics" / "bad", environment)
    with pytest.raises(RubricError, match=match):
        all_base_recipes(tmp_path / "rubrics")


def test_a_declaration_loads_into_the_recipe(tmp_path):
    write_base_toml(tmp_path / "rubrics" / "good", '[environment]\nrequires = ["numpy>=1.26", "regex"]\n')
    assert all_base_recipes(tmp_path / "rubrics")["good"].requires == ("numpy>=1.26", "regex")


def test_environment_check_names_a_declared_requirement_that_is_missing(tmp_path, monkeypatch):
    """The check grading runs once per task: a missing declared requirement is named before any import."""
    monkeypatch.setenv("GRADER_CACHE", str(tmp_path / "cache"))
    base = tmp_path / "base"
    (base / "vllm").mkdir(parents=True)
    (base / "vllm" / "__init__.py").write_text("")
    recipe = BaseRecipe("0.0", "0" * 64, None, {}, (f"{MISSING_DIST}>=1", "pytest>=999"))
    task = Task("declared-env-task", "t", "p", 1, folder=tmp_path, base=recipe)
    problem = environment_problem(task, base, "key", False)
    assert problem is not None and problem.startswith("task declared-env-task needs ")
    assert f"{MISSING_DIST}>=1 (not installed)" in problem
    assert re.search(r"pytest>=999 \([0-9][^)]* installed\)", problem)
    satisfied = Task("declared-env-ok", "t", "p", 1, folder=tmp_path, base=BaseRecipe("0.0", "0" * 64, None, {},
                                                                                       ("pytest>=7",)))
    assert environment_problem(satisfied, base, "key", False) is None


def test_environment_check_imports_what_the_probes_load_and_rechecks_when_they_change(tmp_path, monkeypatch):
    """A package only a probed module needs (not a pinned file) is an environment problem naming it and the pip
    command; the check's remembered pass does not survive a probe naming one more module."""
    monkeypatch.setenv("GRADER_CACHE", str(tmp_path / "cache"))
    base = tmp_path / "base"
    (base / "vllm" / "multimodal").mkdir(parents=True)
    (base / "vllm" / "__init__.py").write_text("")
    (base / "vllm" / "pinned.py").write_text("VALUE = 1\n")
    (base / "vllm" / "multimodal" / "__init__.py").write_text(f"import {MISSING_DIST.replace('-', '_')}\n")
    task_folder = tmp_path / "task"
    (task_folder / "probes").mkdir(parents=True)
    probe = task_folder / "probes" / "task_probes.py"
    probe.write_text("from vllm.pinned import VALUE\n\ndef value():\n    return VALUE\n")
    recipe = BaseRecipe("0.0", "0" * 64, None, {"vllm/pinned.py": "0000000"}, ())
    task = Task("probed-env-task", "t", "p", 1, folder=task_folder, base=recipe)
    assert environment_problem(task, base, "key", False) is None
    probe.write_text(probe.read_text() + textwrap.dedent("""
        def images():
            import importlib
            return importlib.import_module("vllm.multimodal").__name__
        """))
    problem = environment_problem(task, base, "key", False)
    module = MISSING_DIST.replace("-", "_")
    assert problem is not None and f"lacks {module}, which the unpatched probed-env-task base needs to import " \
        "vllm.multimodal" in problem
    assert f"-m pip install {module}`" in problem


# --- base.toml rewrites -----------------------------------------------------------------------------------------------

RECIPE = """\
# Base recipe: comments stay where they are.
[base]
sdist_version = "0.24.0"
sdist_sha256 = "aaaa"  # pinned by hand

[base.blobs]
"vllm/a.py" = "1111111"   # the file candidates touch
"vllm/b.py" = "2222222"
plain_key = "3333333"

[environment]
requires = ["numpy"]
"""


def test_rewrite_changes_only_the_values_named():
    text = rewrite(RECIPE, sha256="bbbb", blobs={"vllm/a.py": "4444444", "plain_key": "5555555"})
    assert text == (RECIPE.replace('"aaaa"', '"bbbb"').replace('"1111111"', '"4444444"')
                    .replace('"3333333"', '"5555555"'))
    assert rewrite(RECIPE) == RECIPE


def test_rewrite_refuses_a_layout_it_cannot_follow():
    inline = '[base]\nsdist_version = "0.24.0"\nsdist_sha256 = "aaaa"\nblobs = { "vllm/a.py" = "1111111" }\n'
    with pytest.raises(RecipeEditError):
        rewrite(inline, blobs={"vllm/a.py": "4444444"})


# --- rules check-task adds to the schema ------------------------------------------------------------------------------


def make_task(kinds: dict[str, tuple[str, str | None]], core: str = "c1") -> Task:
    criteria = {cid: Criterion(cid, f"title {cid}", f"requires {cid}", 1.0, cid == core, kind, anchor)
                for cid, (kind, anchor) in kinds.items()}
    return Task("t", "t", "p", 1, Path("."), BaseRecipe("0", "0", None, {}), criteria)


def test_a_conditional_anchored_on_a_conditional_is_a_problem():
    task = make_task({"c1": ("fix", None), "c2": ("conditional", "c1"), "c3": ("conditional", "c2"),
                      "c4": ("preserve", None), "c5": ("preserve", None)})
    assert [message for _, _, message in criteria_problems(task.criteria)] == ["c3's anchor c2 is conditional itself (an anchor is a fix or preserve "
                                       "criterion)"]


def test_a_rubric_without_a_fix_or_a_core_criterion_is_a_problem():
    task = make_task({cid: ("preserve", None) for cid in ("c1", "c2", "c3", "c4", "c5")}, core="none")
    assert [message for _, _, message in criteria_problems(task.criteria)] == ["no criterion is core (a core criterion decides a fail verdict)",
                                       "no criterion is a fix (the base would meet the whole rubric)"]


def test_samples_and_sections_must_pair_up(tmp_path):
    paths = TaskPaths(tmp_path, "t")
    paths.candidates_dir.mkdir(parents=True)
    (paths.candidates_dir / "only-diff.diff").write_text("")
    statuses = {cid: "met" for cid in ("c1", "c2", "c3", "c4", "c5")}
    expected = {"base": statuses, "reference": statuses, "only-section": statuses,
                "bad-status": {**statuses, "c2": "sort-of"}}
    problems = sample_problems(paths, expected)
    assert "samples without a section: only-diff" in problems
    assert "sections without a sample diff: bad-status, only-section" in problems
    assert any("[bad-status]" in p and "sort-of" in p for p in problems)


# --- new-task refusals that need no base ------------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", ["Upper", "under_score", "-lead", "trail-", "two--dashes", ""])
def test_new_task_refuses_a_bad_id(tmp_path, task_id):
    with pytest.raises(NewTaskError, match="bad task id"):
        create_task(tmp_path, task_id, "0.24.0", None, ["vllm/config.py"])
    assert list(tmp_path.iterdir()) == []


def test_new_task_refuses_an_existing_id(tmp_path):
    (tmp_path / "reference_impl").mkdir()
    (tmp_path / "reference_impl" / "taken.diff").write_text("")
    with pytest.raises(NewTaskError, match="exists already"):
        create_task(tmp_path, "taken", "0.24.0", None, ["vllm/config.py"])
    assert not (tmp_path / "rubrics").exists()


def test_new_task_refuses_paths_outside_the_sdist():
    for bad in ("/etc/passwd", "../x.py", "vllm/../../x.py"):
        with pytest.raises(NewTaskError, match="relative to the sdist"):
            normalised_files([bad])
    assert normalised_files(["./vllm/a.py", "vllm/a.py", "vllm\\b.py"]) == ["vllm/a.py", "vllm/b.py"]


# --- end to end: a throwaway task in a copy of the repository ---------------------------------------------------------

TASK_ID = "demo-clamp"
MODULE_FILE = "vllm/utils/math_utils.py"


def sdist_0_24() -> Path:
    """The cached 0.24.0 sdist (downloaded once, verified against the sha256 the real tasks pin)."""
    recipe = next(r for r in all_base_recipes().values() if r.sdist_version == "0.24.0")
    return fetch_sdist(recipe.sdist_version, recipe.sdist_sha256)


def copy_engine(dest: Path) -> Path:
    """The engine (grader/, grade.py) and the rubrics' shared support (harness modules, pytest.ini, shared
    probes): a repository with no task in it."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO_ROOT / "grader", dest / "grader", ignore=ignore)
    shutil.copy(REPO_ROOT / "grade.py", dest / "grade.py")
    (dest / "rubrics").mkdir()
    for support in [*(REPO_ROOT / "rubrics").glob("*.py"), REPO_ROOT / "rubrics" / "pytest.ini"]:
        shutil.copy(support, dest / "rubrics" / support.name)
    shutil.copytree(REPO_ROOT / "rubrics" / "shared_probes", dest / "rubrics" / "shared_probes", ignore=ignore)
    return dest


class Repo:
    """A copy of the repository with its own grader cache (the real sdist linked into it)."""

    def __init__(self, root: Path, cache: Path) -> None:
        self.root, self.cache = root, cache

    def grade(self, *args: str) -> subprocess.CompletedProcess:
        # An index nothing answers on: a download the cache should have made unnecessary fails the test.
        env = {**os.environ, "GRADER_CACHE": str(self.cache), "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}
        return subprocess.run([sys.executable, str(self.root / "grade.py"), *args], cwd=self.root, env=env,
                              capture_output=True, text=True, timeout=1500)

    def check(self, *args: str) -> tuple[int, dict[str, tuple[str, str]]]:
        """check-task's exit code and its lines, by check name: (status, reason)."""
        done = self.grade("check-task", TASK_ID, *args)
        lines = {}
        for line in done.stdout.splitlines():
            match = re.match(rf"(ok|FAIL|fixed)\s+{TASK_ID}: ([^:]+): (.*)$", line)
            assert match, f"not a check line: {line!r}\n{done.stderr[-2000:]}"
            lines[match.group(2)] = (match.group(1), match.group(3))
        return done.returncode, lines

    @property
    def folder(self) -> Path:
        return self.root / "rubrics" / TASK_ID

    @property
    def base_tree(self) -> Path:
        return self.cache / "bases" / TASK_ID


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Repo:
    """A fresh repository copy and a private cache holding only the 0.24.0 sdist (a link to the cached one)."""
    sdist = sdist_0_24()
    root = copy_engine(tmp_path_factory.mktemp("repo"))
    cache = tmp_path_factory.mktemp("cache")
    (cache / "sdists").mkdir()
    (cache / "sdists" / sdist.name).symlink_to(sdist)
    return Repo(root, cache)


@pytest.fixture(scope="module")
def skeleton(repo) -> Repo:
    """new-task run in the copy: first refused for a file the sdist lacks (nothing written), then done."""
    refused = repo.grade("new-task", TASK_ID, "--sdist", "0.24.0", "--files", MODULE_FILE, "vllm/no_such_file.py")
    assert refused.returncode == 2 and "has no file vllm/no_such_file.py" in refused.stderr
    assert not repo.folder.exists()
    done = repo.grade("new-task", TASK_ID, "--sdist", "0.24.0", "--files", MODULE_FILE)
    assert done.returncode == 0, done.stderr
    return repo


@pytest.mark.slow
def test_new_task_writes_a_skeleton_pinned_to_the_built_base(skeleton):
    repo = skeleton
    again = repo.grade("new-task", TASK_ID, "--sdist", "0.24.0", "--files", MODULE_FILE)
    assert again.returncode == 2 and "exists already" in again.stderr and again.stdout == ""
    task = load_task(repo.folder)  # the skeleton's rubric and base recipe are valid as written
    assert task.base.sdist_sha256 == sha256_of(sdist_0_24())
    blob = subprocess.run(["git", "-C", str(repo.base_tree), "hash-object", MODULE_FILE], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert task.base.blobs == {MODULE_FILE: blob[:7]}
    assert [c.kind for c in task.criteria.values()] == ["fix", "fix", "fix", "preserve", "preserve"]
    for path in (repo.folder / "tests" / "test_demo_clamp.py", repo.folder / "probes" / "demo_clamp_probes.py",
                 repo.folder / "README.md", repo.root / "reference_impl" / f"{TASK_ID}.diff",
                 repo.root / "candidates" / TASK_ID / "expected.toml"):
        assert path.is_file(), path


@pytest.mark.slow
def test_check_task_fails_an_unfilled_skeleton_on_what_is_left_to_write(skeleton):
    code, lines = skeleton.check("--no-grade")
    assert code == 1
    for passing in ("rubric", "criteria", "sdist sha256", "base blobs", "requirements", "environment"):
        assert lines[passing][0] == "ok", (passing, lines[passing])
    assert lines["placeholders"][0] == "FAIL" and "TODO(new-task)" in lines["placeholders"][1]
    # Every criterion declares a case space; only c4's (its module) is exercised by a check yet.
    assert lines["case space"][0] == "ok"
    assert lines["case coverage"][0] == "FAIL" and "c1: example_axis=TODO(new-task) exercised by no check of c1" \
        in lines["case coverage"][1] and "c4:" not in lines["case coverage"][1]
    # The skeleton's one example test evidences c4; the other criteria have none yet.
    assert lines["hidden tests"] == ("FAIL", "no hidden test evidences c1, c2, c3, c5")
    assert lines["reference"] == ("FAIL", "still the new-task placeholder")
    assert lines["samples"][0] == "FAIL" and "no sample diff" in lines["samples"][1]


RUBRIC = '''\
id = "demo-clamp"
title = "math_utils gains clamp(value, lower, upper)"
problem = """
vllm/utils/math_utils.py has no clamp. A fix adds clamp(value, lower, upper), which bounds value to
[lower, upper], and leaves the other helpers as they are.
"""
version = 1

[criteria.c1]
title = "Values above the upper bound are capped"
requires = "clamp returns upper for every value above it."
weight = 1.0
core = true
kind = "fix"

[criteria.c1.cases]
region = ["above"]

[criteria.c2]
title = "Values below the lower bound are raised"
requires = "clamp returns lower for every value below it."
weight = 1.0
core = false
kind = "fix"

[criteria.c2.cases]
region = ["below"]

[criteria.c3]
title = "Values within the bounds are unchanged"
requires = "clamp returns a value within [lower, upper] unchanged."
weight = 1.0
core = false
kind = "fix"

[criteria.c3.cases]
region = ["within"]

[criteria.c4]
title = "vllm.utils.math_utils keeps what it had"
requires = "The patched vllm.utils.math_utils still imports and defines every public name the base defines."
weight = 1.0
core = false
kind = "preserve"

[criteria.c4.cases]
module = ["vllm.utils.math_utils"]

[criteria.c5]
title = "cdiv and round_up are unchanged"
requires = "cdiv and round_up give the base's results."
weight = 1.0
core = false
kind = "preserve"

[criteria.c5.cases]
helper = ["cdiv", "round_up"]
'''

PROBES = '''\
"""Probes for demo-clamp: what clamp, cdiv and round_up return in the subject."""

from __future__ import annotations

from probe_support import import_module, outcome_of

MODULE = "vllm.utils.math_utils"


def public_names(module: str = MODULE) -> list[str]:
    """The public names the module defines once imported."""
    return sorted(name for name in vars(import_module(module)) if not name.startswith("_"))


def clamp_outcomes(values: list[int], lower: int, upper: int) -> list[dict]:
    """clamp(value, lower, upper) for each value, or what calling it raised."""
    module = import_module(MODULE)
    return [outcome_of(lambda v: module.clamp(v, lower, upper), value) for value in values]


def helper_values(pairs: list[list[int]]) -> dict[str, list[int]]:
    """cdiv(a, b) and round_up(a, b) for each pair."""
    module = import_module(MODULE)
    return {"cdiv": [module.cdiv(a, b) for a, b in pairs], "round_up": [module.round_up(a, b) for a, b in pairs]}
'''

TESTS = '''\
"""Hidden tests for demo-clamp: clamp's three regions, and the helpers beside it unchanged."""

from __future__ import annotations

import pytest
import torch

PROBES = "demo_clamp_probes"
LOWER, UPPER = 0, 9


def clamped(subject, values: list[int]) -> list[int]:
    observed = subject.call(f"{PROBES}.clamp_outcomes", values=values, lower=LOWER, upper=UPPER)
    raised = [o for o in observed if "raised" in o]
    assert not raised, f"clamp raised {raised[0]['raised']}: {raised[0]['message']}"
    return [o["returned"] for o in observed]


@pytest.mark.criterion("c1")
@pytest.mark.cases(region="above")
def test_values_above_upper_are_capped(subject, secret_generator):
    """Values above the upper bound come back as the upper bound."""
    values = torch.randint(UPPER + 1, 1000, (8,), generator=secret_generator).tolist()
    assert clamped(subject, values) == [UPPER] * len(values)


@pytest.mark.criterion("c2")
@pytest.mark.cases(region="below")
def test_values_below_lower_are_raised(subject, secret_generator):
    """Values below the lower bound come back as the lower bound."""
    values = torch.randint(-1000, LOWER, (8,), generator=secret_generator).tolist()
    assert clamped(subject, values) == [LOWER] * len(values)


@pytest.mark.criterion("c3")
@pytest.mark.cases(region="within")
def test_values_within_bounds_are_unchanged(subject, secret_generator):
    """Values within the bounds come back unchanged."""
    values = torch.randint(LOWER, UPPER + 1, (8,), generator=secret_generator).tolist()
    assert clamped(subject, values) == values


@pytest.mark.criterion("c4")
@pytest.mark.cases(module="vllm.utils.math_utils")
def test_module_keeps_its_public_names(subject, base_subject):
    """vllm.utils.math_utils still imports and keeps every public name the base defines."""
    before = set(base_subject.call(f"{PROBES}.public_names"))
    after = set(subject.call(f"{PROBES}.public_names"))
    assert before <= after, f"public names gone: {sorted(before - after)}"


@pytest.mark.criterion("c5")
@pytest.mark.cases(helper=["cdiv", "round_up"])
def test_cdiv_and_round_up_agree_with_the_base(subject, base_subject, secret_generator):
    """cdiv and round_up give the base's results."""
    pairs = torch.randint(1, 500, (16, 2), generator=secret_generator).tolist()
    assert subject.call(f"{PROBES}.helper_values", pairs=pairs) == \\
        base_subject.call(f"{PROBES}.helper_values", pairs=pairs)
'''

EXPECTED = '''\
# Statuses each sample is designed to get on CPU.

[base]
description = "unchanged base: no clamp"
c1 = "unmet"
c2 = "unmet"
c3 = "unmet"
c4 = "met"
c5 = "met"

[reference]
description = "adds clamp as max(lower, min(value, upper))"
c1 = "met"
c2 = "met"
c3 = "met"
c4 = "met"
c5 = "met"

[upper-only]
description = "clamp caps at upper but never raises to lower"
c1 = "met"
c2 = "unmet"
c3 = "met"
c4 = "met"
c5 = "met"
'''


def diff_adding(base_tree: Path, body: str) -> str:
    """A git diff that appends ``body`` to the base's math_utils.py."""
    old = (base_tree / MODULE_FILE).read_text().splitlines(keepends=True)
    new = old + ["\n", "\n", *textwrap.dedent(body).lstrip("\n").splitlines(keepends=True)]
    lines = difflib.unified_diff(old, new, f"a/{MODULE_FILE}", f"b/{MODULE_FILE}")
    return f"diff --git a/{MODULE_FILE} b/{MODULE_FILE}\n" + "".join(lines)


@pytest.fixture(scope="module")
def filled(skeleton, tmp_path_factory) -> Repo:
    """A copy of the skeleton's repository (sharing its cache and built base) with every placeholder replaced: a
    rubric, tests of every criterion, a reference fix and one flawed sample."""
    root = tmp_path_factory.mktemp("filled")
    shutil.copytree(skeleton.root, root, dirs_exist_ok=True)
    repo = Repo(root, skeleton.cache)
    (repo.folder / "rubric.toml").write_text(RUBRIC)
    (repo.folder / "tests" / "test_demo_clamp.py").write_text(TESTS)
    (repo.folder / "probes" / "demo_clamp_probes.py").write_text(PROBES)
    (repo.folder / "README.md").write_text("# demo-clamp\n\nOne test per criterion; everything runs on CPU.\n")
    (repo.root / "reference_impl" / f"{TASK_ID}.diff").write_text(diff_adding(repo.base_tree, '''
        def clamp(value: int, lower: int, upper: int) -> int:
            """value bounded to [lower, upper]."""
            return max(lower, min(value, upper))
        '''))
    candidates = repo.root / "candidates" / TASK_ID
    (candidates / "upper-only.diff").write_text(diff_adding(repo.base_tree, '''
        def clamp(value: int, lower: int, upper: int) -> int:
            return min(value, upper)
        '''))
    (candidates / "expected.toml").write_text(EXPECTED)
    return repo


@pytest.mark.slow
def test_check_task_passes_a_filled_task_with_its_samples_graded(filled):
    code, lines = filled.check()
    assert code == 0, lines
    assert all(status == "ok" for status, _ in lines.values()), lines
    for name in ("base", "reference", "upper-only"):
        assert f"statuses of {name}" in lines
    assert lines["statuses of upper-only"][1] == "c1 met, c2 unmet, c3 met, c4 met, c5 met"
    assert "rubric validates" in lines


@pytest.mark.slow
def test_a_wrong_blob_and_sha256_fail_and_fix_rewrites_them(filled):
    base_toml = filled.folder / "base.toml"
    good = base_toml.read_text()
    pinned = tomllib.loads(good)["base"]
    blob, sha = pinned["blobs"][MODULE_FILE], pinned["sdist_sha256"]
    base_toml.write_text(good.replace(f'"{blob}"', '"0000000"').replace(sha, "f" * 64))
    try:
        code, lines = filled.check("--no-grade")
        assert code == 1
        status, reason = lines["base blobs"]
        assert status == "FAIL" and f"{MODULE_FILE} pinned 0000000, is {blob}" in reason
        assert lines["sdist sha256"] == ("FAIL", f"base.toml pins ffffffffffff, vllm-0.24.0.tar.gz is {sha[:12]} "
                                                 "(--fix rewrites it)")
        code, lines = filled.check("--no-grade", "--fix")
        assert code == 0, lines
        assert lines["base blobs"][0] == "fixed" and lines["sdist sha256"][0] == "fixed"
        assert base_toml.read_text() == good  # the values back, every comment and line as it was
        code, lines = filled.check("--no-grade")
        assert code == 0 and lines["base blobs"][0] == "ok"
    finally:
        base_toml.write_text(good)


@pytest.mark.slow
def test_a_criterion_without_a_test_fails(filled):
    tests = filled.folder / "tests" / "test_demo_clamp.py"
    good = tests.read_text()
    tests.write_text(good.replace('@pytest.mark.criterion("c5")', '@pytest.mark.criterion("c4")'))
    try:
        code, lines = filled.check("--no-grade")
        assert code == 1
        assert lines["hidden tests"] == ("FAIL", "no hidden test evidences c5")
    finally:
        tests.write_text(good)


@pytest.mark.slow
def test_check_task_cases_prints_the_clause_table_and_refuses_an_unexercised_value(filled):
    done = filled.grade("check-task", TASK_ID, "--no-grade", "--cases")
    assert done.returncode == 0, done.stdout + done.stderr
    coverage = done.stdout.split("case coverage: ", 1)[1].splitlines()
    assert coverage[1].strip() == "c1 'clamp returns upper for every value above it.' -> region=above -> 1 checks: " \
                                  "test_values_above_upper_are_capped"
    assert coverage[5].strip().startswith("c5 \"cdiv and round_up give the base's results.\" -> helper=cdiv, "
                                          "helper=round_up -> 1 checks")
    tests = filled.folder / "tests" / "test_demo_clamp.py"
    good = tests.read_text()
    tests.write_text(good.replace('cases(helper=["cdiv", "round_up"])', 'cases(helper="cdiv")'))
    try:
        code, lines = filled.check("--no-grade")
        assert code == 1
        assert lines["case coverage"] == ("FAIL", "c5: helper=round_up exercised by no check of c5")
    finally:
        tests.write_text(good)


@pytest.mark.slow
def test_a_missing_requirement_fails_naming_it(filled):
    base_toml = filled.folder / "base.toml"
    good = base_toml.read_text()
    assert "requires = []" in good
    base_toml.write_text(good.replace("requires = []", f'requires = ["{MISSING_DIST}>=1", "pytest"]'))
    try:
        code, lines = filled.check("--no-grade")
        assert code == 1
        assert lines["requirements"] == ("FAIL", f"task {TASK_ID} needs {MISSING_DIST}>=1 (not installed); "
                                                 "`grade.py task-requirements --install` installs what is missing")
    finally:
        base_toml.write_text(good)


def test_task_requirements_prints_the_union_of_the_tasks_declarations():
    done = subprocess.run([sys.executable, "grade.py", "task-requirements"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.split()
    declared = {r for recipe in all_base_recipes().values() for r in recipe.requires}
    assert set(printed) == declared and len(printed) == len(declared)


@pytest.mark.slow
def test_run_tests_builds_the_patched_tree_from_a_diff(filled, tmp_path):
    """run-tests --diff patches the base itself: the reference passes, the flawed sample fails its c2 test, a diff
    that does not apply is refused, and --keep-tree leaves the patched tree where it says."""
    reference = filled.root / "reference_impl" / f"{TASK_ID}.diff"
    done = filled.grade("run-tests", "--task", TASK_ID, "--diff", str(reference), "--gpu", "off")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "5 passed" in done.stdout
    sample = filled.root / "candidates" / TASK_ID / "upper-only.diff"
    done = filled.grade("run-tests", "--task", TASK_ID, "--diff", str(sample), "--gpu", "off", "--keep-tree")
    assert done.returncode == 1 and "1 failed, 4 passed" in done.stdout, done.stdout[-2000:]
    kept = Path(re.search(r"kept the tree the tests ran on: (\S+)", done.stderr).group(1))
    try:
        assert "return min(value, upper)" in (kept / MODULE_FILE).read_text()
    finally:
        shutil.rmtree(kept.parent, ignore_errors=True)
    stale = tmp_path / "stale.diff"
    stale.write_text(sample.read_text().replace(MODULE_FILE, "vllm/utils/not_in_the_base.py"))
    done = filled.grade("run-tests", "--task", TASK_ID, "--diff", str(stale), "--gpu", "off")
    assert done.returncode == 2 and "does not apply to the demo-clamp base" in done.stderr, done.stderr[-2000:]


# --- new-task --from-upstream, on small fake sdists ---------------------------------------------------------------

FAKE_BASE = {"vllm/__init__.py": "", "vllm/utils/__init__.py": "",
             "vllm/utils/lru_cache.py": "def touch(cache, key):\n    cache.move_to_end(key)\n",
             "vllm/other.py": "X = 1\n", "vllm/same.py": "Y = 2\n"}
FAKE_LATER = {**FAKE_BASE,
              "vllm/utils/lru_cache.py": "def touch(cache, key):\n    if key not in cache:\n        return\n"
                                         "    cache.move_to_end(key)\n",
              "vllm/other.py": "X = 2\n", "vllm/created.py": "Z = 3\n"}


def fake_sdist(folder: Path, version: str, files: dict[str, str]) -> Path:
    """vllm-VERSION.tar.gz as PyPI lays one out (every file below vllm-VERSION/), in the sdist cache."""
    import io
    import tarfile

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"vllm-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in {**files, "PKG-INFO": f"Version: {version}\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def fake_upstream(tmp_path, monkeypatch) -> Path:
    """A cache holding two fake sdists, 0.0.1 and 0.0.2, and an index nothing answers on."""
    monkeypatch.setenv("GRADER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    fake_sdist(tmp_path / "cache" / "sdists", "0.0.1", FAKE_BASE)
    fake_sdist(tmp_path / "cache" / "sdists", "0.0.2", FAKE_LATER)
    root = tmp_path / "repo"
    root.mkdir()
    return root


def test_from_upstream_writes_upstreams_change_of_the_named_files(fake_upstream, tmp_path):
    written = create_task(fake_upstream, "lru-touch", "0.0.1", None, ["vllm/utils/lru_cache.py", "vllm/created.py"],
                          "0.0.2")
    reference = (fake_upstream / "reference_impl" / "lru-touch.diff").read_text()
    assert fake_upstream / "reference_impl" / "lru-touch.diff" in written
    assert "+    if key not in cache:\n+        return\n" in reference and "new file mode 100644" in reference
    assert "vllm/other.py" not in reference
    # the diff is as git writes it: git applies it to the base, and its index line names the base's blob
    base = tmp_path / "cache" / "bases" / "lru-touch"
    blob = subprocess.run(["git", "hash-object", "vllm/utils/lru_cache.py"], cwd=base, capture_output=True,
                          text=True).stdout.strip()
    assert f"index {blob[:7]}.." in reference
    assert subprocess.run(["git", "apply", "--check", "-"], cwd=base, input=reference, text=True).returncode == 0
    recipe = load_task(fake_upstream / "rubrics" / "lru-touch").base
    assert recipe.blobs == {"vllm/utils/lru_cache.py": blob[:7]}  # a file upstream creates has no pre-image
    readme = (fake_upstream / "rubrics" / "lru-touch" / "README.md").read_text()
    assert "between vLLM 0.0.1 (the base) and vLLM 0.0.2" in readme


def test_from_upstream_proposes_the_changed_files_the_description_names(fake_upstream):
    create_task(fake_upstream, "lru-touch", "0.0.1", None, None, "0.0.2",
                "touch() in lru_cache loops forever on a key the cache does not hold")
    reference = (fake_upstream / "reference_impl" / "lru-touch.diff").read_text()
    assert reference.startswith("diff --git a/vllm/utils/lru_cache.py b/vllm/utils/lru_cache.py\n")
    assert reference.count("diff --git") == 1
    assert "the files proposed" in (fake_upstream / "rubrics" / "lru-touch" / "README.md").read_text()


@pytest.mark.parametrize("files,description,match", [
    (None, "a description naming no changed file", "3 Python files under vllm/ change in vllm 0.0.2"),
    (["vllm/same.py"], "", "vllm 0.0.2 does not change vllm/same.py"),
    (["vllm/gone.py"], "", "vllm 0.0.2 has no file vllm/gone.py"),
])
def test_from_upstream_refuses_what_gives_no_reference_and_writes_nothing(fake_upstream, files, description, match):
    with pytest.raises(NewTaskError, match=match):
        create_task(fake_upstream, "lru-touch", "0.0.1", None, files, "0.0.2", description)
    assert not (fake_upstream / "rubrics").exists() and not (fake_upstream / "reference_impl").exists()


def test_check_task_cuts_a_long_reason_at_a_words_end():
    from grader.taskkit.checks import clipped

    rationale = "2/3 checks fail: test_values_above_upper_are_capped, test_values_below_lower_are_raised"
    cut = clipped(rationale, 60)
    assert cut == "2/3 checks fail: test_values_above_upper_are_capped…" and len(cut) <= 60
    assert clipped(rationale, 200) == rationale
