"""c1 (static): the repository's own tests expect emulation on non-gfx950 ROCm GPUs instead of skipping there.

Decided from the patched tree's test sources (no AMD GPU can run them here), relative to counts measured on
the base tree (vLLM 0.24.0 + tests/quantization/test_gfx950_moe.py from 0.25.0).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

# Test files that mention the MXFP4 / quark / gpt-oss paths.
TOPIC = re.compile(r"quark|gpt_oss|gpt-oss|mxfp4|ocp_mx", re.I)
# An expectation of the emulation backend: the enum member or the --moe-backend value.
EMULATION = re.compile(r"Mxfp4MoeBackend\.EMULATION|[\"']emulation[\"']")
# A reference to ROCm GPUs other than gfx950.
NON_GFX950 = re.compile(
    r"on_gfx942|on_gfx90a|gfx942|gfx90a|MI300|MI250|MI325|MI210|not\s+on_gfx950\s*\(\s*\)|not\s+\w*GFX950\b", re.I
)
GFX950 = re.compile(r"gfx950", re.I)

# Measured on the base tree.
BASE_EMULATION_COUNTS = {"tests/quantization/test_gfx950_moe.py": 2}
BASE_GFX950_SKIP_COUNTS = {
    "tests/evals/gsm8k/test_gsm8k_correctness.py": 1,
    "tests/kernels/moe/test_ocp_mx_moe.py": 1,
    "tests/quantization/test_gfx950_moe.py": 3,
}


def _topic_test_files(root: Path):
    tests = root / "tests"
    if not tests.is_dir():
        pytest.skip("environment: the patched tree has no tests/ folder")
    for p in sorted(tests.rglob("*.py")):
        try:
            text = p.read_text(errors="replace")
        except OSError:
            continue
        if TOPIC.search(text):
            yield str(p.relative_to(root)), text


def gfx950_keyed_skips(text: str) -> int:
    """Skip constructs (skipif marks, `if ...: pytest.skip(...)`) whose condition depends on gfx950."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return 0
    tainted: set[str] = set()
    assigns = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None]
    for _ in range(5):  # names derived from gfx950 checks, through a few levels of assignment
        for n in assigns:
            names = {x.id for x in ast.walk(n.value) if isinstance(x, ast.Name)}
            if GFX950.search(ast.unparse(n.value)) or names & tainted:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    tainted.update(x.id for x in ast.walk(t) if isinstance(x, ast.Name))
    # conditional imports `if is_rocm(): from vllm.platforms.rocm import on_gfx950` make the name itself tainted
    tainted.update({"on_gfx950", "_on_gfx950"})

    def keyed(expr) -> bool:
        if GFX950.search(ast.unparse(expr)):
            return True
        return any(isinstance(x, ast.Name) and x.id in tainted for x in ast.walk(expr))

    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("mark.skipif"):
            cond = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "condition"), None)
            if cond is not None and keyed(cond):
                count += 1
        elif isinstance(node, ast.If):
            skips = any(
                isinstance(c, ast.Call) and ast.unparse(c.func).split(".")[-1] in ("skip", "xfail")
                for stmt in node.body
                for c in ast.walk(stmt)
            )
            if skips and keyed(node.test):
                count += 1
    return count


@pytest.mark.static
@pytest.mark.criterion("c1", weight=6)
@pytest.mark.cases(path="repo-tests")
def test_repo_tests_expect_emulation_on_non_gfx950(vllm_tree):
    """The repo's MXFP4 MoE tests gain an expectation of the emulation backend on non-gfx950 ROCm GPUs."""
    switched = []
    for rel, text in _topic_test_files(vllm_tree):
        gained = len(EMULATION.findall(text)) - BASE_EMULATION_COUNTS.get(rel, 0)
        if gained > 0 and NON_GFX950.search(text):
            switched.append(rel)
    assert switched, (
        "no test file under tests/ newly expects the emulation backend (Mxfp4MoeBackend.EMULATION or "
        "moe_backend='emulation') for gfx942/gfx90a or other non-gfx950 ROCm GPUs"
    )


@pytest.mark.static
@pytest.mark.criterion("c1", weight=2)
@pytest.mark.cases(path="repo-tests")
def test_repo_tests_not_skipped_on_non_gfx950(vllm_tree):
    """No MXFP4/quark/gpt-oss test gains a skip keyed on gfx950 (skipping non-gfx950 GPUs instead of switching)."""
    added = {}
    for rel, text in _topic_test_files(vllm_tree):
        n = gfx950_keyed_skips(text) - BASE_GFX950_SKIP_COUNTS.get(rel, 0)
        if n > 0:
            added[rel] = n
    assert not added, f"new gfx950-keyed skips: {added}"
