"""``new-task``: write a working skeleton of a new task, its base pinned and proven.

The sdist's sha256 and the pre-image blobs of the files the task's candidates touch are measured, not typed: the
sdist is fetched (or taken from the cache) as every base is, the base is built with the overlay applied, and each
named file's git blob is read from the built tree. Everything an author must still write is marked with
``PLACEHOLDER``, which ``check-task`` refuses to pass.
"""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from jinja2 import Environment, PackageLoader, StrictUndefined

from grader.pipeline.checkout import build_base, file_blobs, obtain_sdist, sha256_of
from grader.core.records import BuiltBase
from grader.core.rubric import BaseRecipe
from grader.taskkit.upstream import UpstreamChange, UpstreamError, upstream_change

PLACEHOLDER = "TODO(new-task)"
TASK_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
BLOB_ABBREVIATION = 7
TEMPLATES = Environment(loader=PackageLoader("grader", "templates/task"), undefined=StrictUndefined,
                        keep_trailing_newline=True, trim_blocks=True, autoescape=False)
# A JSON string is a valid TOML basic string and a valid Python string literal.
TEMPLATES.filters["toml_string"] = lambda value: json.dumps(str(value), ensure_ascii=False)


class NewTaskError(Exception):
    """The task cannot be created as asked (a bad or taken id, a file the base lacks, a base that does not build)."""


@dataclass(frozen=True)
class TaskPaths:
    """Where one task's files live under a repository root."""

    root: Path
    task_id: str

    @property
    def rubric_dir(self) -> Path:
        return self.root / "rubrics" / self.task_id

    @property
    def reference(self) -> Path:
        return self.root / "reference_impl" / f"{self.task_id}.diff"

    @property
    def candidates_dir(self) -> Path:
        return self.root / "candidates" / self.task_id

    @property
    def slug(self) -> str:
        """The id as a Python identifier (probe and test module names)."""
        return self.task_id.replace("-", "_")


def refuse_bad_id(paths: TaskPaths) -> None:
    """A task id is lower-case words joined by hyphens, and no task of that id may exist yet."""
    if not TASK_ID.fullmatch(paths.task_id):
        raise NewTaskError(f"bad task id {paths.task_id!r}: use lower-case letters and digits in words joined by "
                           "'-' (e.g. int8-kv-rounding)")
    taken = [p for p in (paths.rubric_dir, paths.reference, paths.candidates_dir) if p.exists()]
    if taken:
        raise NewTaskError(f"task {paths.task_id} exists already: {', '.join(map(str, taken))}")


def normalised_files(files: list[str]) -> list[str]:
    """Each path as base.toml keys it (relative to the sdist root, forward slashes), in order, each once."""
    found = []
    for raw in files:
        path = PurePosixPath(raw.replace("\\", "/"))
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise NewTaskError(f"--files {raw!r}: give a path relative to the sdist's root (e.g. vllm/config.py)")
        found.append(path.as_posix())
    return list(dict.fromkeys(found))


def built_base(task_id: str, version: str, overlay: Path | None) -> tuple[str, BuiltBase]:
    """Fetch the sdist and build the base with the overlay applied (no blobs to prove yet): its sha256 and the
    base."""
    if overlay is not None and not overlay.is_file():
        raise NewTaskError(f"--overlay {overlay}: no such file")
    sha256 = sha256_of(obtain_sdist(version))
    return sha256, build_base(task_id, BaseRecipe(version, sha256, overlay, {}))


def pinned_recipe(base: BuiltBase, version: str, sha256: str, overlay: Path | None,
                  files: list[str]) -> BaseRecipe:
    """The recipe of the new task: each file's pre-image blob read from the built base (its overlay still at
    ``overlay``)."""
    blobs = file_blobs(base.path, files)
    missing = [rel for rel, blob in blobs.items() if blob is None]
    if missing:
        where = "the sdist with the overlay applied" if overlay else "the sdist"
        raise NewTaskError(f"vllm {version}: {where} has no file {', '.join(missing)}")
    return BaseRecipe(version, sha256, overlay, {rel: blob[:BLOB_ABBREVIATION] for rel, blob in blobs.items()})


def example_module(files: list[str]) -> str | None:
    """The module of the first Python file under vllm/ among ``files`` (what the example probe imports)."""
    for rel in files:
        if rel.startswith("vllm/") and rel.endswith(".py"):
            return rel[:-3].replace("/", ".").removesuffix(".__init__")
    return None


def rendered_files(paths: TaskPaths, recipe: BaseRecipe, files: list[str],
                   upstream: UpstreamChange | None = None, description: str = "") -> dict[Path, str]:
    """Every file of the skeleton, by path, with its text; with ``upstream``, its reference is upstream's
    change and its README says where that came from."""
    module = example_module(files)
    values = {"task_id": paths.task_id, "mark": PLACEHOLDER, "version": recipe.sdist_version,
              "sha256": recipe.sdist_sha256, "overlay": recipe.overlay is not None, "blobs": recipe.blobs,
              "files": files, "module": module, "module_or_package": module or "vllm",
              "probe_module": f"{paths.slug}_probes", "upstream": upstream, "description": description.strip()}
    rubric = TEMPLATES.get_template("rubric.toml.j2").render(values)
    kinds = {cid: c["kind"] for cid, c in tomllib.loads(rubric)["criteria"].items()}
    folder = paths.rubric_dir
    return {
        folder / "rubric.toml": rubric,
        folder / "base.toml": TEMPLATES.get_template("base.toml.j2").render(values),
        folder / "README.md": TEMPLATES.get_template("README.md.j2").render(values),
        folder / "equivalent-mutants.toml": TEMPLATES.get_template("equivalent-mutants.toml.j2").render(values),
        folder / "probes" / f"{paths.slug}_probes.py": TEMPLATES.get_template("probes.py.j2").render(values),
        folder / "tests" / f"test_{paths.slug}.py": TEMPLATES.get_template("test.py.j2").render(values),
        paths.reference: upstream.diff if upstream else TEMPLATES.get_template("reference.diff.j2").render(values),
        paths.candidates_dir / "expected.toml": TEMPLATES.get_template("expected.toml.j2").render(
            {**values, "kinds": kinds}),
    }


def create_task(root: Path, task_id: str, version: str, overlay: Path | None, files: list[str] | None,
                upstream_version: str | None = None, description: str = "") -> list[Path]:
    """Write the skeleton of ``task_id`` under ``root``; the paths written. With ``upstream_version``, the
    reference is upstream's change between the base and that sdist, of ``files`` or else of the changed files
    ``description`` names. Nothing is written when any check fails (a bad or taken id, a file the base lacks, a
    base that cannot be built, an upstream change that gives no reference)."""
    paths = TaskPaths(root, task_id)
    refuse_bad_id(paths)
    wanted = normalised_files(files or [])
    if not wanted and upstream_version is None:
        raise NewTaskError("--files: name at least one file the task's candidates touch")
    sha256, base = built_base(task_id, version, overlay)
    change = None
    if upstream_version is not None:
        try:
            change = upstream_change(base.path, upstream_version, wanted, description)
        except UpstreamError as exc:
            raise NewTaskError(f"--from-upstream {upstream_version}: {exc}") from exc
        # Files upstream creates have no pre-image to pin.
        wanted = [p for p in change.files if (base.path / p).is_file()] or wanted
        if not wanted:
            raise NewTaskError(f"--from-upstream {upstream_version}: upstream only adds files "
                               f"({', '.join(change.files)}); name a file of the base with --files")
    recipe = pinned_recipe(base, version, sha256, overlay, wanted)
    written = rendered_files(paths, recipe, wanted, change, description)
    for path, text in written.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if overlay is not None:
        shutil.copyfile(overlay, paths.rubric_dir / "base.overlay.diff")
        written[paths.rubric_dir / "base.overlay.diff"] = ""
    return sorted(written)
