"""One identity for every cache and store key: what a grading depends on, so that a change to any of it is a miss.

An :class:`Identity` names the task and its rubric fingerprint, the base recipe, the interpreter's environment,
the GPU and containment switches, the results schema and the engine: a digest of every grader module that can
shape a verdict. Every cache and store key is ``identity.key(purpose, *parts)``; no key is assembled by hand.

The engine's modules are not listed by hand: they are the grader modules reachable, through ``import`` statements
and through the module names the engine launches (``-m grader.sandbox.judge``, ``-p grader.pipeline.pytest_evidence``),
from the one-candidate pipeline (``ENTRY_POINTS``), together with the templates they render. A module that an
import names but that is not on disk is an :class:`IdentityError`, never empty bytes: a moved file can not drop out
of a key unnoticed, and a renamed one changes the key because its name is hashed with its source.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from grader.core.records import SCHEMA_VERSION
from grader.core.environment import environment_fingerprint
from grader.core.paths import secret_digest
from grader.core.rubric import BaseRecipe, Task, rubric_fingerprint

# The folder that holds the ``grader`` package.
ENGINE_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "grader"
# Where grading of one candidate starts: everything it imports or launches decides the verdict.
ENTRY_POINTS = ("grader.drive.one_candidate",)
# A string constant that is exactly a grader module's dotted name (a module the engine launches by name).
_MODULE_NAME = re.compile(rf"{PACKAGE}(\.[A-Za-z_][A-Za-z0-9_]*)+")
_TEMPLATE_NAME = re.compile(r"[A-Za-z0-9_./-]+\.j2")


class IdentityError(Exception):
    """The engine's fingerprint cannot be taken (a module an import names is missing)."""


@dataclass(frozen=True)
class Identity:
    """What a cached or stored thing was made from. Fields that do not apply (no task, a machine-wide probe) are
    None, which is part of the key like any value."""

    environment: str
    engine: str
    schema: str = SCHEMA_VERSION
    task: str | None = None
    rubric: str | None = None
    recipe: str | None = None
    gpu: bool | None = None
    contained: bool | None = None
    # Whether subjects recorded which changed lines ran (evidence then carries them; the verdict never reads them).
    traced: bool | None = None
    # The judge's secret, as a digest (``core.paths.secret_digest``): deciding inputs are drawn from it.
    secret: str | None = None

    def key(self, purpose: str, *parts: str | None) -> str:
        """The key of ``purpose`` (one per cache) for this identity and ``parts``: any bytes, any characters."""
        document = json.dumps([purpose, asdict(self), list(parts)], sort_keys=True)  # ASCII: lone surrogates escaped
        return hashlib.sha256(document.encode()).hexdigest()


def recipe_key(recipe: BaseRecipe) -> str:
    """Identity of a base: the sdist and the overlay's bytes.

    A base's build key rightly depends on the recipe alone: the base is the sdist's files with the overlay applied,
    proven against the recipe's blob hashes on every reuse, and no grader code decides a byte of it. What the
    engine does with a base is in the engine fingerprint of every key that uses the base."""
    digest = hashlib.sha256(recipe.sdist_sha256.encode())
    if recipe.overlay is not None:
        digest.update(recipe.overlay.read_bytes())
    return digest.hexdigest()[:16]


def grading_identity(task: Task | None, gpu: bool | None, contained: bool | None,
                     traced: bool | None = None) -> Identity:
    """The identity of grading against ``task`` (None: a candidate without a known task) with these switches."""
    machine = machine_identity()
    if task is None:
        return Identity(machine.environment, machine.engine, gpu=gpu, contained=contained, traced=traced,
                        secret=secret_digest())
    return Identity(machine.environment, machine.engine, task=task.id,
                    rubric=f"{task.version}:{rubric_fingerprint(task)}", recipe=recipe_key(task.base), gpu=gpu,
                    contained=contained, traced=traced, secret=secret_digest())


def machine_identity() -> Identity:
    """The identity of facts about this interpreter (a CUDA probe, what warm workers preload): no task, no switch."""
    return Identity(environment_fingerprint(), engine_fingerprint())


@cache
def engine_fingerprint(root: Path | None = None) -> str:
    """Digest of every verdict-shaping engine module (name and source) and the templates they render, taken once
    per process (``engine_fingerprint.cache_clear()`` after pointing ``ENGINE_ROOT`` elsewhere)."""
    digest = hashlib.sha256()
    for name, path in sorted(engine_files(root or ENGINE_ROOT).items()):
        source = module_source(path)
        digest.update(f"{name}\0{len(source)}\0".encode())
        digest.update(source)
    return digest.hexdigest()[:16]


def module_source(path: Path) -> bytes:
    """The bytes of an engine file (a namespace package's folder has none)."""
    return path.read_bytes() if path.is_file() else b""


def engine_files(root: Path) -> dict[str, Path]:
    """Every engine file the entry points reach, by module name (templates as ``templates/<name>``)."""
    found: dict[str, Path] = {}
    pending = list(ENTRY_POINTS)
    while pending:
        name = pending.pop()
        if name in found:
            continue
        path = module_path(root, name)
        if path is None:
            raise IdentityError(f"the engine module {name} is not under {root} (an import names it)")
        found[name] = path
        pending += [parent for parent in _parents(name) if module_path(root, parent) is not None]
        if path.suffix == ".py":
            references, templates = referenced_modules(root, name, path)
            pending += references
            found.update({f"templates/{t}": root / PACKAGE / "templates" / t for t in templates})
    return found


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def module_path(root: Path, name: str) -> Path | None:
    """The file of module ``name`` (a package's ``__init__.py``; a namespace package's folder), None if absent."""
    base = root.joinpath(*name.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return base if base.is_dir() else None


def referenced_modules(root: Path, name: str, path: Path) -> tuple[list[str], list[str]]:
    """The grader modules that ``name`` imports or names as a string, and the templates it names."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    modules, templates = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(package, node.module, node.level)
            modules.append(source)
            # ``from grader.sandbox import zygote`` imports a module when one of that name exists.
            modules += [f"{source}.{a.name}" for a in node.names if module_path(root, f"{source}.{a.name}")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _MODULE_NAME.fullmatch(node.value) and module_path(root, node.value):
                modules.append(node.value)
            elif _TEMPLATE_NAME.fullmatch(node.value) and (root / PACKAGE / "templates" / node.value).is_file():
                templates.append(node.value)
    return [m for m in modules if m == PACKAGE or m.startswith(PACKAGE + ".")], templates


def _absolute(package: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    anchor = package.split(".")[: len(package.split(".")) - (level - 1)]
    return ".".join([*anchor, *([module] if module else [])])
