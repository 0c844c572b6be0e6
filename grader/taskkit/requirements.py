"""A task's declared environment: the PEP 508 requirements in ``[environment] requires`` of its base.toml.

What a task's hidden tests need beyond the grader's own dependencies (vLLM's import-time packages, numpy for an
interpreter shim) is declared per task; ``make setup`` installs the union of every task's, and the environment
check names what is missing before any candidate of the task is graded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from grader.core.environment import applies_here, installed_version, interpreter_site_folders, parse, unmet
from grader.core.rubric import RUBRICS_DIR, all_base_recipes

IMPORT_CHECK = """
import importlib, json, sys
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as exc:
        failed[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
print(json.dumps(failed))
"""


def union(rubrics_dir: Path = RUBRICS_DIR) -> list[str]:
    """Every task's declared requirements, each distinct string once, sorted by name: what setup installs."""
    seen: dict[str, str] = {}
    for recipe in all_base_recipes(rubrics_dir).values():
        for text in recipe.requires:
            seen.setdefault(" ".join(text.split()), text)
    return sorted(seen.values(), key=lambda text: (parse(text).name.lower(), text))


# Installed by setup before anything else and never moved by a task's requirement (a resolver could otherwise pull
# another build of torch, a CUDA one, in place of the CPU wheel).
HELD = ("torch", "triton")


def missing_from_union(rubrics_dir: Path = RUBRICS_DIR, path: list[str] | None = None) -> list[str]:
    """The declared requirements of every task that this environment does not satisfy (their marker holding
    here): what ``task-requirements --install`` installs."""
    return [text for text in union(rubrics_dir) if applies_here(parse(text)) and unmet([text], path)]


def install_command(requirements: list[str]) -> list[str]:
    """pip installing ``requirements`` into this interpreter, with torch and triton held at the versions installed."""
    held = [f"{name}=={version}" for name in HELD if (version := installed_version(name)) is not None]
    return [sys.executable, "-m", "pip", "install", "-q", *requirements, *held]


def import_names(name: str, path: list[str] | None = None) -> list[str]:
    """The top-level modules an installed distribution provides (its top_level.txt, else its files), looked up
    as ``installed_version`` looks."""
    names = set()
    for dist in metadata.distributions(name=name, path=interpreter_site_folders() if path is None else path):
        top_level = dist.read_text("top_level.txt")
        if top_level:
            names.update(line.strip() for line in top_level.splitlines() if line.strip())
            continue
        for file in dist.files or []:
            parts = file.parts
            if len(parts) > 1 and parts[1] == "__init__.py" and parts[0].isidentifier():
                names.add(parts[0])
            elif len(parts) == 1 and file.suffix == ".py" and file.stem.isidentifier():
                names.add(file.stem)
    return sorted(names)


def import_failures(requires: tuple[str, ...] | list[str], env: dict[str, str],
                    path: list[str] | None = None) -> dict[str, str]:
    """Import each installed requirement's top-level modules in a fresh interpreter with ``env``; what failed, by
    module, with the exception. A requirement that is not installed is ``unmet``'s to report, not this."""
    modules = sorted({module for text in requires if applies_here(parse(text))
                      for module in import_names(parse(text).name, path)})
    if not modules:
        return {}
    done = subprocess.run([sys.executable, "-c", IMPORT_CHECK, *modules], env=env, capture_output=True, text=True,
                          timeout=600)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"(import check)": f"printed nothing readable: {done.stderr[-300:]}"}

