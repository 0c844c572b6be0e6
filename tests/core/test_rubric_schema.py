"""The rubric schema is enforced at load: unknown keys, wrong types and every rule of the criteria are refused with
the file, the key and its line, by ``grade`` and ``check-task`` alike (one validator, ``load_task``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.rubric import REPO_ROOT, RubricError, key_line, load_task

TASK = "int8-kv-rounding"
# The task's own version line, whatever its version: the typo is written beside it.
VERSION = re.search(r"^version = \d+$", (REPO_ROOT / "rubrics" / TASK / "rubric.toml").read_text(), re.M).group(0)

# (what is written, the edit, the key and the words of the refusal)
TYPOS = {
    "wieght": (("weight = 1.0\ncore = false\nkind = \"preserve\"", "wieght = 1.5\ncore = false\nkind = \"preserve\""),
               "criteria.c2.wieght", "unknown key"),
    "core as a string": (("core = false", 'core = "false"'), "criteria.c2.core", "must be true or false"),
    "verison": ((VERSION, VERSION + "\nverison = 4"), "verison", "unknown key"),
}


def task_copy(root: Path, edit: tuple[str, str] | None = None, file: str = "rubric.toml") -> Path:
    folder = root / "rubrics" / TASK
    shutil.copytree(REPO_ROOT / "rubrics" / TASK, folder, ignore=shutil.ignore_patterns("__pycache__"))
    if edit is not None:
        text = (folder / file).read_text()
        assert edit[0] in text
        (folder / file).write_text(text.replace(edit[0], edit[1], 1))
    return folder


def line_of(folder: Path, file: str, text: str) -> int:
    return next(i for i, line in enumerate((folder / file).read_text().splitlines(), 1) if line.startswith(text))


@pytest.mark.parametrize("typo", list(TYPOS))
def test_load_refuses_each_typo_with_file_key_and_line(tmp_path, typo):
    edit, key, words = TYPOS[typo]
    folder = task_copy(tmp_path, edit)
    with pytest.raises(RubricError) as refused:
        load_task(folder)
    line = line_of(folder, "rubric.toml", edit[1].splitlines()[-1] if typo == "verison" else edit[1].split("\n")[0])
    assert re.search(rf"rubric\.toml:{line}: {re.escape(key)}: {words}", str(refused.value)), str(refused.value)


@pytest.mark.parametrize("edit,file,key,words", [
    (('weight = 1.0', 'weight = "1"'), "rubric.toml", "criteria.c1.weight", "must be a number"),
    (('weight = 1.0', 'weight = true'), "rubric.toml", "criteria.c1.weight", "must be a number"),
    (('weight = 1.0', 'weight = 0'), "rubric.toml", "criteria.c1.weight", "must be positive"),
    (('kind = "fix"', 'kind = "fixed"'), "rubric.toml", "criteria.c1.kind", "must be one of"),
    (('title = "Rounds', 'titel = "Rounds'), "rubric.toml", "criteria.c1.titel", "unknown key"),
    (('core = true', 'core = false'), "rubric.toml", "criteria", "no criterion is core"),
    (('overlay = "base.overlay.diff"', 'overlay = "base.overlay.diff"\noverlays = 1'), "base.toml",
     "base.overlays", "unknown key"),
    (('"vllm/v1/attention/ops/triton_reshape_and_cache_flash.py" = "320b7aa"',
      '"vllm/v1/attention/ops/triton_reshape_and_cache_flash.py" = 320'), "base.toml",
     "base.blobs.vllm/v1/attention/ops/triton_reshape_and_cache_flash.py", "must be a git blob hash"),
    (('[summary.places]', '[summary.place]'), "rubric.toml", "summary.place", "unknown key"),
    (('"tests/kernels/attention/test_cache.py" = "the repository', '"tests/kernels/attention/test_cache.py" = 3 #'),
     "rubric.toml", "summary.places", "must map file paths to phrases"),
])
def test_wrong_types_and_rules_are_refused_with_the_key(tmp_path, edit, file, key, words):
    folder = task_copy(tmp_path, edit, file)
    with pytest.raises(RubricError, match=rf"{file.replace('.', '[.]')}:\d+: {re.escape(key)}: {words}"):
        load_task(folder)


def test_every_problem_is_named_at_once(tmp_path):
    folder = task_copy(tmp_path, ('core = false', 'core = "false"\nwieght = 2'))
    with pytest.raises(RubricError) as refused:
        load_task(folder)
    assert "criteria.c2.core" in str(refused.value) and "criteria.c2.wieght" in str(refused.value)


def test_key_line_finds_keys_in_their_table():
    text = 'id = "x"\n\n[criteria.c1]\nweight = 1\n\n["criteria".c2]\nweight = 2\n'
    assert key_line(text, (), "id") == 1
    assert key_line(text, ("criteria", "c1"), "weight") == 4
    assert key_line(text, ("criteria", "c2"), "weight") == 7
    assert key_line(text, ("criteria", "c2"), "missing") == 6


def test_every_shipped_rubric_loads():
    for folder in sorted((REPO_ROOT / "rubrics").iterdir()):
        if (folder / "rubric.toml").is_file():
            assert load_task(folder).id == folder.name


# --- the real CLI: grade and check-task refuse the same rubric -------------------------------------------------------


def repository_with(root: Path, edit: tuple[str, str]) -> Path:
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO_ROOT / "grader", root / "grader", ignore=ignore)
    shutil.copy(REPO_ROOT / "grade.py", root / "grade.py")
    task_copy(root, edit)
    for support in [*(REPO_ROOT / "rubrics").glob("*.py"), REPO_ROOT / "rubrics" / "pytest.ini"]:
        shutil.copy(support, root / "rubrics" / support.name)
    shutil.copytree(REPO_ROOT / "candidates" / TASK, root / "candidates" / TASK)
    shutil.copytree(REPO_ROOT / "reference_impl", root / "reference_impl")
    return root


@pytest.mark.parametrize("typo", list(TYPOS))
def test_grade_and_check_task_refuse_each_typo_alike(tmp_path, typo):
    edit, key, _ = TYPOS[typo]
    root = repository_with(tmp_path / "repo", edit)
    env = {**os.environ, "GRADER_CACHE": str(tmp_path / "cache")}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "grade.py", *args], cwd=root, env=env, capture_output=True,
                              text=True, timeout=600)

    graded = cli(f"candidates/{TASK}/round-no-clamp.diff", "--out", str(tmp_path / "out"), "--gpu", "off")
    assert graded.returncode == 2 and f"rubric.toml:" in graded.stderr and key in graded.stderr, graded.stderr
    checked = cli("check-task", TASK, "--no-grade")
    assert checked.returncode != 0
    assert re.search(rf"FAIL\s+{TASK}: rubric: .*rubric\.toml:\d+: {re.escape(key)}:", checked.stdout), checked.stdout
