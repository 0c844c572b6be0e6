"""Print the grader's layering, read from its imports: each module's layer (0: imports no other grader module when
it loads; otherwise one more than the highest layer it imports when it loads), the number of layers, and every
import, a deferred one inside a function included, that goes against the packages' order (``PACKAGE_ORDER``: core,
sandbox, pipeline, reports, drive, taskkit, the command line).

    .venv/bin/python scripts/layers.py            # the layers and the violations; exit 1 if there is one
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Lower first: a module may import its own package and those before it, never one after it.
PACKAGE_ORDER = ("core", "sandbox", "pipeline", "reports", "drive", "taskkit", "cli")
# The command line: what a user runs, above every tool it dispatches to.
CLI_MODULES = {"grader.cli", "grader.taskkit.cli"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / "grader").rglob("*.py")) if "__pycache__" not in p.parts}


def imports(name: str, path: Path, known: dict[str, Path], deferred: bool = True) -> set[str]:
    """The grader modules ``name`` imports: when it loads, and with ``deferred`` inside its functions too."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_bytes())
    for node in ast.walk(tree) if deferred else tree.body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*anchor, *([source] if source else [])])
            found.add(source)
            found |= {f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in known}
    return {m for m in found if m in known and m != name and m != "grader"}


def package_of(name: str) -> str:
    if name in CLI_MODULES:
        return "cli"
    parts = name.split(".")
    if name == "grader":  # the package's face: its version, imported by every wing
        return "core"
    if len(parts) >= 2 and parts[1] in PACKAGE_ORDER:
        return parts[1]
    raise ValueError(f"{name} belongs to no wing of {PACKAGE_ORDER}")


def graph(deferred: bool = True) -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known, deferred) for name, path in known.items()}


def layers(edges: dict[str, set[str]]) -> dict[str, int]:
    """Each module's layer; a cycle is a ValueError naming it."""
    @cache
    def layer(name: str, path: tuple[str, ...] = ()) -> int:
        if name in path:
            raise ValueError("import cycle: " + " -> ".join([*path[path.index(name):], name]))
        return 1 + max((layer(dep, (*path, name)) for dep in edges[name]), default=-1)
    return {name: layer(name) for name in edges}


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Imports of a package later in ``PACKAGE_ORDER`` than the importer's."""
    rank = {p: i for i, p in enumerate(PACKAGE_ORDER)}
    return [f"{name} ({package_of(name)}) imports {dep} ({package_of(dep)})"
            for name, deps in sorted(edges.items()) for dep in sorted(deps)
            if rank[package_of(dep)] > rank[package_of(name)]]


def main() -> int:
    found = layers(graph(deferred=False))
    for number in range(max(found.values()) + 1):
        print(f"layer {number}: {', '.join(sorted(n for n, l in found.items() if l == number))}")
    print(f"{max(found.values()) + 1} layers")
    wrong = violations(graph())
    for line in wrong:
        print(f"against the order: {line}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
