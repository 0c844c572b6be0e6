"""Packaging: every package of the engine is in the distribution, and what the engine imports is declared."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

from setuptools.discovery import PEP420PackageFinder

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Import names whose distribution is named otherwise.
DISTRIBUTION_OF = {"git": "gitpython"}


def declared() -> set[str]:
    requirements = [*PROJECT["project"]["dependencies"],
                    *(r for extra in PROJECT["project"]["optional-dependencies"].values() for r in extra)]
    return {r.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower()
            for r in requirements}


def test_the_engines_packages_are_packaged():
    find = PROJECT["tool"]["setuptools"]["packages"]["find"]
    found = set(PEP420PackageFinder.find(str(ROOT), include=find["include"]))
    assert {"grader", "grader.core", "grader.sandbox", "grader.taskkit"} <= found


def test_every_third_party_module_the_engine_imports_is_declared():
    imported = set()
    for path in (ROOT / "grader").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    # vllm is the candidate's tree; the channel imports numpy only to encode a numpy value it was handed (so numpy
    # is there already).
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m not in ("grader", "vllm", "numpy")}
    missing = {m for m in third_party if DISTRIBUTION_OF.get(m, m).lower() not in declared()}
    assert missing == set()
    assert "unidiff" not in declared()  # nothing imports it
