"""Task definitions: each folder under ``rubrics/`` is one task (rubric.toml, base.toml, hidden tests)."""

from __future__ import annotations

import hashlib
import platform
import site
import tomllib
from importlib import metadata
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

REPO_ROOT = Path(__file__).resolve().parents[2]
RUBRICS_DIR = REPO_ROOT / "rubrics"
CRITERION_IDS = ("c1", "c2", "c3", "c4", "c5")
CRITERION_KINDS = ("fix", "preserve", "conditional")
# Harness files every task's tests may load beside the task folder and rubrics/*.py.
HARNESS_FILES = (RUBRICS_DIR / "pytest.ini", REPO_ROOT / "bench" / "stats.py")


class RubricError(Exception):
    """A rubric folder is malformed."""


@dataclass(frozen=True)
class Criterion:
    id: str
    title: str
    requires: str
    weight: float
    core: bool
    kind: str
    anchor: str | None = None


@dataclass(frozen=True)
class BaseRecipe:
    sdist_version: str
    sdist_sha256: str
    overlay: Path | None
    blobs: dict[str, str]
    # PEP 508 requirements of the task's hidden tests beyond the grader's own ([environment] requires).
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Task:
    id: str
    title: str
    problem: str
    version: int
    folder: Path
    base: BaseRecipe
    criteria: dict[str, Criterion] = field(default_factory=dict)

    @property
    def tests_dir(self) -> Path:
        return self.folder / "tests"

    @property
    def core_criteria(self) -> list[str]:
        return [c.id for c in self.criteria.values() if c.core]


def _load_requirements(folder: Path, environment: dict) -> tuple[str, ...]:
    requires = environment.get("requires", [])
    if not isinstance(requires, list):
        raise RubricError(f"{folder.name}: [environment] requires must be a list of PEP 508 strings")
    for entry in requires:
        try:
            Requirement(entry if isinstance(entry, str) else "")
        except InvalidRequirement as exc:
            raise RubricError(f"{folder.name}: [environment] requires {entry!r} is not a PEP 508 requirement: "
                              f"{exc}") from None
    return tuple(requires)


def _load_base(folder: Path) -> BaseRecipe:
    document = tomllib.loads((folder / "base.toml").read_text())
    data = document["base"]
    overlay = folder / data["overlay"] if data.get("overlay") else None
    if overlay is not None and not overlay.is_file():
        raise RubricError(f"{folder.name}: overlay {overlay.name} is missing")
    return BaseRecipe(data["sdist_version"], data["sdist_sha256"], overlay, dict(data.get("blobs", {})),
                      _load_requirements(folder, document.get("environment", {})))


def _load_criteria(task_id: str, data: dict) -> dict[str, Criterion]:
    raw = data.get("criteria", {})
    if tuple(sorted(raw)) != CRITERION_IDS:
        raise RubricError(f"{task_id}: criteria must be exactly {', '.join(CRITERION_IDS)}, found {sorted(raw)}")
    criteria = {}
    for cid in CRITERION_IDS:
        c = raw[cid]
        kind = c.get("kind")
        if kind not in CRITERION_KINDS:
            raise RubricError(f"{task_id}.{cid}: kind must be one of {CRITERION_KINDS}, got {kind!r}")
        anchor = c.get("anchor")
        if (kind == "conditional") != (anchor is not None) or (anchor is not None and anchor not in raw):
            raise RubricError(f"{task_id}.{cid}: a conditional criterion names an existing anchor, others none")
        criteria[cid] = Criterion(cid, c["title"], c["requires"], float(c.get("weight", 1.0)),
                                  bool(c.get("core", False)), kind, anchor)
    return criteria


def load_task(folder: Path) -> Task:
    data = tomllib.loads((folder / "rubric.toml").read_text())
    if data.get("id") != folder.name:
        raise RubricError(f"{folder}: rubric id {data.get('id')!r} must equal the folder name")
    return Task(
        id=folder.name,
        title=data["title"],
        problem=data.get("problem", ""),
        version=int(data.get("version", 1)),
        folder=folder,
        base=_load_base(folder),
        criteria=_load_criteria(folder.name, data),
    )


@cache
def all_tasks(rubrics_dir: Path = RUBRICS_DIR) -> dict[str, Task]:
    """Every task with a rubric, by id."""
    return {d.name: load_task(d) for d in sorted(rubrics_dir.iterdir()) if (d / "rubric.toml").is_file()}


@cache
def all_base_recipes(rubrics_dir: Path = RUBRICS_DIR) -> dict[str, BaseRecipe]:
    """Base recipes of every task folder, including tasks whose rubric is not written yet."""
    return {d.name: _load_base(d) for d in sorted(rubrics_dir.iterdir()) if (d / "base.toml").is_file()}


def rubric_fingerprint(task: Task) -> str:
    """Digest of the task's folder (rubric, base recipe, hidden tests, probes) and the shared harness the hidden
    tests load (rubrics/*.py, shared probes, pytest.ini, the interval statistics of bench/stats.py): a change to any
    of them can change what evidence means. The engine's code is the engine fingerprint's (grader.core.identity).
    A harness file that is missing is an error: it would otherwise drop out of every key unnoticed."""
    digest = hashlib.sha256()
    files = sorted(p for p in task.folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    harness = [*sorted(RUBRICS_DIR.glob("*.py")), *sorted((RUBRICS_DIR / "shared_probes").glob("*.py")),
               *HARNESS_FILES]
    named = [(f"task/{p.relative_to(task.folder).as_posix()}", p) for p in files] + \
        [(p.relative_to(REPO_ROOT).as_posix(), p) for p in harness]
    for name, path in named:
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise RubricError(f"{task.id}: the harness file {path} cannot be read for the fingerprint: {exc}") from None
        digest.update(f"{name}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()[:16]


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
