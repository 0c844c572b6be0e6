"""The import graph (scripts/layers.py): core is the ground floor, the caches stand on it alone, no module imports
a package above its own, and there are at most ten load-time layers (apply stands on checkout's tree manifest, which
proves a candidate's tree a whole copy of its base)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "layers.py"
spec = importlib.util.spec_from_file_location("layers", SCRIPT)
layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layers)


def test_core_imports_nothing_else_of_the_grader():
    for name, deps in layers.graph().items():
        if name.startswith("grader.core"):
            assert all(d.startswith("grader.core") for d in deps), (name, deps)


def test_the_store_and_the_evidence_cache_import_only_core():
    edges = layers.graph()
    for name in ("grader.drive.store", "grader.drive.evidence_cache"):
        assert edges[name] and all(d.startswith("grader.core.") for d in edges[name]), (name, edges[name])


def test_no_module_imports_a_package_above_its_own():
    assert layers.violations(layers.graph()) == []


def test_at_most_ten_layers_and_no_cycle():
    found = layers.layers(layers.graph(deferred=False))  # a cycle raises
    assert max(found.values()) + 1 <= 10
    layers.layers(layers.graph())  # none through deferred imports either


def test_a_violation_is_found():
    edges = {"grader.core.records": {"grader.drive.one_candidate"}, "grader.drive.one_candidate": set()}
    assert layers.violations(edges) == ["grader.core.records (core) imports grader.drive.one_candidate (drive)"]


WINGS = ("core", "sandbox", "pipeline", "reports", "drive", "taskkit", "cli")


def test_the_wings_run_one_way_in_this_order():
    assert layers.PACKAGE_ORDER == WINGS


def test_every_module_belongs_to_a_wing_and_only_the_face_sits_at_the_top():
    top = sorted(p.name for p in (SCRIPT.parents[1] / "grader").glob("*.py"))
    assert top == ["__init__.py", "cli.py"]
    for name in layers.graph():
        assert layers.package_of(name) in WINGS


def test_each_wing_says_what_it_is_and_what_it_may_import():
    import ast

    for wing in WINGS[:-1]:
        init = SCRIPT.parents[1] / "grader" / wing / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "import" in doc.lower(), wing
        below = WINGS[:WINGS.index(wing)]
        above = WINGS[WINGS.index(wing) + 1:-1]
        assert all(f"grader.{w}" in doc for w in below if w != wing), (wing, doc)
        assert not any(f"``grader.{w}``" in doc for w in above), (wing, doc)


def test_an_upward_import_between_any_two_wings_is_a_violation():
    for lower_at, lower in enumerate(WINGS[:-1]):
        for upper in WINGS[lower_at + 1:-1]:
            edges = {f"grader.{lower}.a": {f"grader.{upper}.b"}, f"grader.{upper}.b": set()}
            assert layers.violations(edges) == [f"grader.{lower}.a ({lower}) imports grader.{upper}.b ({upper})"]
            edges = {f"grader.{upper}.b": {f"grader.{lower}.a"}, f"grader.{lower}.a": set()}
            assert layers.violations(edges) == []
    assert layers.violations({"grader.drive.x": {"grader.cli"}, "grader.cli": set()}) == [
        "grader.drive.x (drive) imports grader.cli (cli)"]


def test_a_module_outside_every_wing_is_refused():
    import pytest

    with pytest.raises(ValueError, match="no wing"):
        layers.package_of("grader.stray")
