"""The vLLM modules a task's probes load, read from the task's own sources.

The environment check imports these from the unpatched base before any candidate is graded, so that a package
needed only by a module a probe loads (and not by the files pinned in ``[base.blobs]``) is an environment error
there, not a failed check under grading. A probe names its modules as imports (``import vllm.x``, ``from vllm.x
import y``) or as strings (``import_module("vllm.x")``, a module constant, a list of them); the tests name them as
strings they pass to probes. Every such name that is a module of the base (a ``.py`` file or a package) counts.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

MODULE_NAME = re.compile(r"vllm(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
SOURCE_FOLDERS = ("probes", "tests")


def is_base_module(base_tree: Path, name: str) -> bool:
    """Whether ``name`` is a module (file or package) of the tree holding the ``vllm`` package."""
    path = base_tree.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def names_in_source(text: str) -> set[str]:
    """Every dotted ``vllm.*`` name the source imports or holds as a string (with ``from A import b``, also
    ``A.b``: ``b`` may be a submodule)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.update(MODULE_NAME.findall(node.value))
    return {name for name in names if MODULE_NAME.fullmatch(name)}


def probe_modules(task_folder: Path, base_tree: Path) -> list[str]:
    """The base's modules that the task's probes and tests name, sorted: what the environment check imports
    beyond the pinned files."""
    names: set[str] = set()
    for folder in SOURCE_FOLDERS:
        for source in sorted((task_folder / folder).rglob("*.py")):
            names |= names_in_source(source.read_text(encoding="utf-8", errors="replace"))
    return sorted(name for name in names if is_base_module(base_tree, name))
