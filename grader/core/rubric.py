"""Task definitions: each folder under ``rubrics/`` is one task (rubric.toml, base.toml, hidden tests)."""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from grader.core.records import CRITERION_IDS

REPO_ROOT = Path(__file__).resolve().parents[2]
RUBRICS_DIR = REPO_ROOT / "rubrics"
# Probe modules every task's subjects get; ``subject_setup`` among them installs the stand-ins vLLM needs to import.
SHARED_PROBES = RUBRICS_DIR / "shared_probes"
CRITERION_KINDS = ("fix", "preserve", "conditional")
# Harness files beside the task folder and rubrics/*.py: pytest.ini configures every hidden-test run; the interval
# statistics are loaded by path by the speed tests of the tasks that have them (a checkout without bench/ has no
# such task, and a task that needs them fails its own tests without them).
HARNESS_FILES = (RUBRICS_DIR / "pytest.ini",)
OPTIONAL_HARNESS_FILES = (REPO_ROOT / "bench" / "stats.py",)


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
    # The case space the criterion's words imply: axis -> the values it names ([criteria.cN.cases]). Every value
    # must be exercised by some check of the criterion (``check-task``); the criterion is met only when all pass.
    cases: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class BaseRecipe:
    sdist_version: str
    sdist_sha256: str
    overlay: Path | None
    blobs: dict[str, str]
    # PEP 508 requirements of the task's hidden tests beyond the grader's own ([environment] requires).
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubjectPlatform:
    """A platform some of a task's checks need and the machine is not: the modules made unimportable before
    anything is imported (``unimportable``, each with its submodules), and the variables set (``env``) or removed
    (``unset``) in the subject's environment. A check asks for a subject on it by name
    (``grader.sandbox.client.subject``); that subject comes from a zygote prepared this way before it imported any
    third-party module (``grader.sandbox.zygote``), so nothing it made unimportable was ever loaded there."""

    name: str
    unimportable: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    unset: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"name": self.name, "unimportable": list(self.unimportable), "env": dict(self.env),
                "unset": list(self.unset)}

    @classmethod
    def from_json(cls, data: dict) -> SubjectPlatform:
        return cls(str(data["name"]), tuple(map(str, data.get("unimportable", ()))),
                   tuple((str(k), str(v)) for k, v in dict(data.get("env", {})).items()),
                   tuple(map(str, data.get("unset", ()))))


@dataclass(frozen=True)
class Task:
    id: str
    title: str
    problem: str
    version: int
    folder: Path
    base: BaseRecipe
    criteria: dict[str, Criterion] = field(default_factory=dict)
    # The platforms its checks may ask subjects on, by name ([platforms.NAME] in rubric.toml).
    platforms: dict[str, SubjectPlatform] = field(default_factory=dict)

    @property
    def tests_dir(self) -> Path:
        return self.folder / "tests"

    @property
    def core_criteria(self) -> list[str]:
        return [c.id for c in self.criteria.values() if c.core]


# The schema of rubric.toml and base.toml: per table, each key's TOML type and whether it is required. Unknown
# keys are refused, so a typo (``wieght``) is an error instead of a default.
Schema = dict[str, tuple[type, bool]]
RUBRIC_SCHEMA: Schema = {"id": (str, True), "title": (str, True), "problem": (str, False), "version": (int, False),
                         "criteria": (dict, True), "inference": (dict, False), "summary": (dict, False),
                         "platforms": (dict, False)}
CRITERION_SCHEMA: Schema = {"title": (str, True), "requires": (str, True), "weight": (float, False),
                            "core": (bool, False), "kind": (str, True), "anchor": (str, False),
                            "cases": (dict, False)}
INFERENCE_SCHEMA: Schema = {"paths": (list, False)}
PLATFORM_SCHEMA: Schema = {"unimportable": (list, False), "env": (dict, False), "unset": (list, False)}
_PLATFORM_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The task's words for the files a patch may touch (path -> phrase), read by the summary (grader.reports.summarize).
SUMMARY_SCHEMA: Schema = {"places": (dict, False)}
BASE_DOCUMENT_SCHEMA: Schema = {"base": (dict, True), "environment": (dict, False)}
BASE_SCHEMA: Schema = {"sdist_version": (str, True), "sdist_sha256": (str, True), "overlay": (str, False),
                       "blobs": (dict, False)}
ENVIRONMENT_SCHEMA: Schema = {"requires": (list, False)}
_TOML_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a table",
                    list: "a list"}


class TomlFile:
    """One TOML file being validated: its problems, each with the file, the key and the key's line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.text = path.read_text(encoding="utf-8")
            self.data = tomllib.loads(self.text)
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise RubricError(f"{self.where()}: not valid TOML: {exc}") from None
        self.problems: list[str] = []

    def where(self, line: int | None = None) -> str:
        try:
            name = self.path.relative_to(REPO_ROOT).as_posix()
        except ValueError:
            name = str(self.path)
        return f"{name}:{line}" if line else name

    def problem(self, table: tuple[str, ...], key: str | None, message: str) -> None:
        dotted = ".".join([*table, *([key] if key else [])]) or "(top level)"
        self.problems.append(f"{self.where(key_line(self.text, table, key))}: {dotted}: {message}")

    def check(self, table: tuple[str, ...], data: dict, schema: Schema) -> dict:
        """``data`` (the table at ``table``) against ``schema``: its keys known, typed, the required ones there.
        Returns the keys that passed (a wrong one is left out, so later rules do not trip over it)."""
        known = {}
        for key, value in data.items():
            if key not in schema:
                self.problem(table, key, f"unknown key (known: {', '.join(schema)})")
            elif not _has_type(value, schema[key][0]):
                self.problem(table, key, f"must be {_TOML_TYPE_NAMES[schema[key][0]]}, got {value!r}")
            else:
                known[key] = value
        for key, (_, required) in schema.items():
            if required and key not in data:
                self.problem(table, None, f"the required key {key!r} is missing")
        return known

    def raise_problems(self) -> None:
        if self.problems:
            raise RubricError("; ".join(self.problems))


def _has_type(value: object, wanted: type) -> bool:
    if wanted is float:  # a weight of 1 is 1.0; true is not a number
        return type(value) in (int, float)
    return type(value) is wanted


_TABLE_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")


def key_line(text: str, table: tuple[str, ...], key: str | None) -> int | None:
    """The line (1-based) where ``key`` of ``table`` is set; else the table's header (or its first sub-table's,
    for a table only written as ``[criteria.c1]``...); None when neither is in the text."""
    current: tuple[str, ...] = ()
    header = 1 if not table else None
    for number, line in enumerate(text.splitlines(), 1):
        match = _TABLE_HEADER.match(line)
        if match:
            current = tuple(part.strip().strip('"').strip("'") for part in match.group(1).split("."))
            if current == table or (header is None and current[:len(table)] == table):
                header = number
            continue
        if key is not None and current == table and re.match(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=", line):
            return number
    return header


def _load_requirements(toml: TomlFile, environment: dict) -> tuple[str, ...]:
    requires = environment.get("requires", [])  # a list: the schema checked it
    for entry in requires:
        try:
            Requirement(entry if isinstance(entry, str) else "")
        except InvalidRequirement as exc:
            toml.problem(("environment",), "requires", f"{entry!r} is not a PEP 508 requirement: {exc}")
    return tuple(requires)


def _load_base(folder: Path) -> BaseRecipe:
    toml = TomlFile(folder / "base.toml")
    document = toml.check((), toml.data, BASE_DOCUMENT_SCHEMA)
    data = toml.check(("base",), document.get("base", {}), BASE_SCHEMA)
    environment = toml.check(("environment",), document.get("environment", {}), ENVIRONMENT_SCHEMA)
    blobs = data.get("blobs", {})
    for path, blob in blobs.items():
        if not isinstance(blob, str):
            toml.problem(("base", "blobs"), path, f"must be a git blob hash (a string), got {blob!r}")
    overlay = folder / data["overlay"] if data.get("overlay") else None
    if overlay is not None and not overlay.is_file():
        toml.problem(("base",), "overlay", f"the overlay {overlay.name} is missing")
    requires = _load_requirements(toml, environment)
    toml.raise_problems()
    return BaseRecipe(data["sdist_version"], data["sdist_sha256"], overlay, dict(blobs), requires)


def _load_cases(toml: TomlFile, table: tuple[str, ...], raw: dict) -> dict[str, tuple[str, ...]]:
    """``[criteria.cN.cases]``: each axis a non-empty list of distinct strings."""
    cases = {}
    for axis, values in raw.items():
        if not (isinstance(values, list) and values and all(isinstance(v, str) and v for v in values)
                and len(set(values)) == len(values)):
            toml.problem(table + ("cases",), axis, "must be a non-empty list of distinct, non-empty strings")
            continue
        cases[axis] = tuple(values)
    return cases


def _load_criteria(toml: TomlFile, raw: dict) -> dict[str, Criterion]:
    if tuple(sorted(raw)) != CRITERION_IDS:
        toml.problem(("criteria",), None, f"criteria must be exactly {', '.join(CRITERION_IDS)}, found {sorted(raw)}")
    criteria = {}
    for cid in [c for c in CRITERION_IDS if c in raw]:
        table = ("criteria", cid)
        if not isinstance(raw[cid], dict):
            toml.problem(("criteria",), cid, "must be a table")
            continue
        c = toml.check(table, raw[cid], CRITERION_SCHEMA)
        kind = c.get("kind")
        if "kind" in c and kind not in CRITERION_KINDS:
            toml.problem(table, "kind", f"must be one of {', '.join(CRITERION_KINDS)}, got {kind!r}")
        anchor = c.get("anchor")
        if (kind == "conditional") != (anchor is not None):
            toml.problem(table, "anchor" if anchor is not None else "kind",
                         "a conditional criterion names an anchor, and only a conditional one does")
        if not all(c.get(k, "x").strip() for k in ("title", "requires")):
            toml.problem(table, "title" if not c.get("title", "x").strip() else "requires", "must not be empty")
        if c.get("weight", 1.0) <= 0:
            toml.problem(table, "weight", f"must be positive, got {c['weight']!r}")
        criteria[cid] = Criterion(cid, c.get("title", ""), c.get("requires", ""), float(c.get("weight", 1.0)),
                                  c.get("core", False), kind or "", anchor, _load_cases(toml, table, c.get("cases", {})))
    for problem in criteria_problems(criteria):
        toml.problem(*problem)
    return criteria


def _load_platforms(toml: TomlFile, raw: dict) -> dict[str, SubjectPlatform]:
    platforms = {}
    for name, table in raw.items():
        where = ("platforms", name)
        if not isinstance(table, dict):
            toml.problem(("platforms",), name, "must be a table")
            continue
        if not _PLATFORM_NAME.fullmatch(name):
            toml.problem(("platforms",), name, "a platform's name is lower-case letters, digits and dashes")
        p = toml.check(where, table, PLATFORM_SCHEMA)
        unimportable, unset, env = p.get("unimportable", []), p.get("unset", []), p.get("env", {})
        if not all(isinstance(m, str) and _MODULE_NAME.fullmatch(m) for m in unimportable):
            toml.problem(where, "unimportable", "must list module names")
        for key, names in (("unset", unset), ("env", env)):
            if not all(isinstance(v, str) and _VARIABLE_NAME.fullmatch(v) for v in names):
                toml.problem(where, key, "must name environment variables")
        if not all(isinstance(v, str) for v in env.values()):
            toml.problem(where, "env", "must map variables to strings")
        if not (unimportable or unset or env):
            toml.problem(where, None, "a platform makes something unimportable, or sets or unsets a variable")
        platforms[name] = SubjectPlatform(name, tuple(unimportable), tuple(sorted(env.items())), tuple(unset))
    return platforms


def criteria_problems(criteria: dict[str, Criterion]) -> list[tuple[tuple[str, ...], str | None, str]]:
    """What the criteria get wrong together (anchors, core and fix criteria), each as (table, key, message)."""
    problems = []
    for c in criteria.values():
        anchor = criteria.get(c.anchor) if c.anchor is not None else None
        if c.anchor is None:
            continue
        if c.anchor == c.id:
            problems.append((("criteria", c.id), "anchor", f"{c.id} is its own anchor"))
        elif anchor is None:
            problems.append((("criteria", c.id), "anchor", f"the anchor {c.anchor!r} is no criterion of the rubric"))
        elif anchor.kind == "conditional":
            problems.append((("criteria", c.id), "anchor", f"{c.id}'s anchor {c.anchor} is conditional itself "
                             "(an anchor is a fix or preserve criterion)"))
    if criteria and not any(c.core for c in criteria.values()):
        problems.append((("criteria",), None, "no criterion is core (a core criterion decides a fail verdict)"))
    if criteria and not any(c.kind == "fix" for c in criteria.values()):
        problems.append((("criteria",), None, "no criterion is a fix (the base would meet the whole rubric)"))
    return problems


def load_task(folder: Path) -> Task:
    """The task of ``folder``, its rubric.toml and base.toml validated against the schema and every rule of a
    rubric (the one validator ``grade`` and ``check-task`` share): any problem is a ``RubricError`` naming the
    file, the key and its line."""
    toml = TomlFile(folder / "rubric.toml")
    data = toml.check((), toml.data, RUBRIC_SCHEMA)
    if "id" in data and data["id"] != folder.name:
        toml.problem((), "id", f"the rubric id {data['id']!r} must equal the folder name {folder.name!r}")
    if "inference" in data:
        paths = toml.check(("inference",), data["inference"], INFERENCE_SCHEMA).get("paths", [])
        if not all(isinstance(p, str) for p in paths):
            toml.problem(("inference",), "paths", "must be a list of file paths (strings)")
    if "summary" in data:
        places = toml.check(("summary",), data["summary"], SUMMARY_SCHEMA).get("places", {})
        if not all(isinstance(v, str) for v in places.values()):
            toml.problem(("summary",), "places", "must map file paths to phrases (strings)")
    criteria = _load_criteria(toml, data.get("criteria", {}))
    platforms = _load_platforms(toml, data.get("platforms", {}))
    if data.get("version", 1) < 1:
        toml.problem((), "version", f"must be a positive integer, got {data['version']!r}")
    toml.raise_problems()
    return Task(
        id=folder.name,
        title=data["title"],
        problem=data.get("problem", ""),
        version=data.get("version", 1),
        folder=folder,
        base=_load_base(folder),
        criteria=criteria,
        platforms=platforms,
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
    harness = [*sorted(RUBRICS_DIR.glob("*.py")), *sorted(SHARED_PROBES.glob("*.py")),
               *HARNESS_FILES, *(p for p in OPTIONAL_HARNESS_FILES if p.is_file())]
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
