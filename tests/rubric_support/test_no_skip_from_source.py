"""No hidden test skips for what the candidate's source contains (issue: the judge steered by the candidate).

A skip means "not evaluated"; only the environment, measured by the judge itself, may cause one. So no function of
the hidden tests that reads the candidate's tree (a ``vllm_tree`` parameter) may skip, and no function that skips
may be handed a fixture that reads the tree: a reason drawn from the candidate's text would otherwise turn its
failing checks into unevaluated ones (a dead branch holding one construct the interpreter lacks did exactly that).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RUBRICS = Path(__file__).resolve().parents[2] / "rubrics"
SKIPS = {"skip", "xfail", "importorskip"}


def _calls_skip(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in SKIPS
               and isinstance(n.func.value, ast.Name) and n.func.value.id == "pytest" for n in ast.walk(node))


def _functions(path: Path) -> list[ast.FunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]


def _params(fn: ast.FunctionDef) -> set[str]:
    return {a.arg for a in fn.args.args + fn.args.kwonlyargs}


def hidden_test_files() -> list[Path]:
    return sorted(p for p in RUBRICS.glob("*/tests/*.py")) + [RUBRICS / "conftest.py"]


def tree_readers_that_skip(files: list[Path]) -> list[str]:
    """Functions that read the candidate's tree and skip, or skip with a tree-reading fixture in hand."""
    functions = [(path, fn) for path in files for fn in _functions(path)]
    readers = {fn.name for _, fn in functions if "vllm_tree" in _params(fn)}
    wrong = []
    for path, fn in functions:
        fed = _params(fn) & (readers | {"vllm_tree"})
        if fed and _calls_skip(fn):
            wrong.append(f"{path}::{fn.name} skips with {sorted(fed)} in hand")
    return wrong


def test_no_hidden_test_skips_on_what_it_read_of_the_candidates_tree():
    assert tree_readers_that_skip(hidden_test_files()) == []


def test_the_rule_finds_a_fixture_that_reads_the_tree_for_a_skip(tmp_path):
    hidden = tmp_path / "conftest.py"
    hidden.write_text(
        "import pytest\n"
        "@pytest.fixture\n"
        "def gap(vllm_tree):\n"
        "    return 'inline_asm' in (vllm_tree / 'k.py').read_text()\n"
        "def test_kernel(gap):\n"
        "    if gap:\n"
        "        pytest.skip('environment: the interpreter cannot run it')\n")
    assert tree_readers_that_skip([hidden]) != []


@pytest.mark.parametrize("body", ["pytest.skip('environment: no GPU')", "assert True"])
def test_a_skip_without_the_tree_in_hand_is_the_environments(tmp_path, body):
    hidden = tmp_path / "conftest.py"
    hidden.write_text(f"import pytest\ndef test_kernel(subject):\n    {body}\n")
    assert tree_readers_that_skip([hidden]) == []
