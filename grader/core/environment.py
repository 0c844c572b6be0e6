"""The grading environment: the interpreter's installed distributions, its fingerprint, and whether a task's
declared requirements (PEP 508, base.toml's ``[environment] requires``) are met here."""

from __future__ import annotations

import hashlib
import platform
import site
from functools import cache
from importlib import metadata

from packaging.requirements import Requirement


def interpreter_site_folders() -> list[str]:
    """Where this interpreter's distributions are installed, as a fresh judge or subject sees them: not this
    process's sys.path, which libraries extend at run time (Ray adds its vendored packages)."""
    return [*site.getsitepackages(), site.getusersitepackages()]


@cache
def environment_fingerprint() -> str:
    """Python and every installed distribution (name and version): evidence from another environment, one with
    a package more or less, is not reused."""
    installed = sorted({f"{(d.metadata['Name'] or '?').lower()}=={d.version}"
                        for d in metadata.distributions(path=interpreter_site_folders())})
    digest = hashlib.sha256("\n".join(installed).encode()).hexdigest()[:16]
    return f"python {platform.python_version()}; {len(installed)} distributions {digest}"


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
