"""The import graph (scripts/layers.py): core is the ground floor, the caches stand on it alone, no module imports
a package above its own, and there are at most ten load-time layers (apply stands on checkout's tree manifest, which
proves a candidate's tree a whole copy of its base)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "layers.py"
spec = importlib.util.spec_from_file_location("layers", SCRIPT)
layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layers)


def test_core_imports_nothing_else_of_the_grader():
    for name, deps in layers.graph().items():
        if name.startswith("grader.core"):
            assert all(d.startswith("grader.core") for d in deps), (name, deps)


def test_the_store_and_the_evidence_cache_import_only_core():
    edges = layers.graph()
    for name in ("grader.store", "grader.evidence_cache"):
        assert edges[name] and all(d.startswith("grader.core.") for d in edges[name]), (name, edges[name])


def test_no_module_imports_a_package_above_its_own():
    assert layers.violations(layers.graph()) == []


def test_at_most_ten_layers_and_no_cycle():
    found = layers.layers(layers.graph(deferred=False))  # a cycle raises
    assert max(found.values()) + 1 <= 10
    layers.layers(layers.graph())  # none through deferred imports either


def test_a_violation_is_found():
    edges = {"grader.core.records": {"grader.one_candidate"}, "grader.one_candidate": set()}
    assert layers.violations(edges) == ["grader.core.records (core) imports grader.one_candidate (engine)"]
