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

from packaging.requirements import Requirement

from grader.core.rubric import RUBRICS_DIR, all_base_recipes, interpreter_site_folders

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


def parse(text: str) -> Requirement:
    """One PEP 508 requirement; ``InvalidRequirement`` names what is wrong with it."""
    return Requirement(text)


def applies_here(requirement: Requirement) -> bool:
    """Whether the requirement's environment marker (if any) holds for this interpreter."""
    return requirement.marker is None or requirement.marker.evaluate()


def installed_version(name: str, path: list[str] | None = None) -> str | None:
    """The version of the installed distribution ``name`` (names compared as PEP 503 normalises them), looked up in
    the interpreter's own site folders unless ``path`` is given; None when it is not installed."""
    found = list(metadata.distributions(name=name, path=interpreter_site_folders() if path is None else path))
    return found[0].version if found else None


def unmet(requires: tuple[str, ...] | list[str], path: list[str] | None = None) -> list[str]:
    """Each declared requirement this environment does not satisfy, in words: ``msgspec (not installed)``,
    ``numpy>=3 (1.26.4 installed)``. Requirements whose marker does not hold here are not needed, so never unmet.
    Extras are not checked (only the distribution and its version)."""
    problems = []
    for text in requires:
        requirement = parse(text)
        if not applies_here(requirement):
            continue
        version = installed_version(requirement.name, path)
        shown = f"{requirement.name}{requirement.specifier}"
        if version is None:
            problems.append(f"{shown} (not installed)")
        elif requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{shown} ({version} installed)")
    return problems


def unmet_message(task_id: str, requires: tuple[str, ...] | list[str], path: list[str] | None = None) -> str | None:
    """``task X needs msgspec (not installed), numpy>=3 (1.26.4 installed)``, or None when all are satisfied."""
    problems = unmet(requires, path)
    return f"task {task_id} needs {', '.join(problems)}" if problems else None


def union(rubrics_dir: Path = RUBRICS_DIR) -> list[str]:
    """Every task's declared requirements, each distinct string once, sorted by name: what setup installs."""
    seen: dict[str, str] = {}
    for recipe in all_base_recipes(rubrics_dir).values():
        for text in recipe.requires:
            seen.setdefault(" ".join(text.split()), text)
    return sorted(seen.values(), key=lambda text: (parse(text).name.lower(), text))


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

