"""What a patch does, in words: grader/reports/describe.py on small sources, on every task's reference and samples, and on
the seed bundle's whole diffs; and the summaries built on it."""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path

import pytest

from conftest import SEED, needs_seed
from grader.pipeline.apply import apply_diff, make_tree, scratch_root
from grader.reports.describe import code, describe_file
from grader.reports.summarize import FIXED_CAP, SUMMARY_WORDS
from grader.pipeline.ingest import parse_bundle
from grader.drive.one_candidate import BaseCache
from grader.core.rubric import REPO_ROOT, all_tasks
from grader.core.records import CriterionResult, EvidenceEntry
from grader.reports.summarize import assertion_line, failure_sentence, quote_assertion

BEFORE = '''
def gate(platform, dtype):
    if platform.is_cuda() and platform.capability() < 89:
        raise ValueError("needs SM89")
    return True
'''


def test_a_condition_added_is_named_with_its_predicate():
    after = BEFORE.replace("if platform.is_cuda()", "if not platform.is_xpu() and platform.is_cuda()")
    (text,) = describe_file("vllm/gate.py", BEFORE, after)
    assert text.startswith("rewrites a condition, adding `not platform.is_xpu() and`") and "..." not in text
    assert text.endswith("in `gate()`")


def test_removed_conditions_calls_and_numbers():
    removed = describe_file("vllm/gate.py", BEFORE, "def gate(platform, dtype):\n    return True\n")[0]
    assert "removes the condition `platform.is_cuda() and platform.capability() < 89`" in removed
    changed = describe_file("vllm/gate.py", BEFORE, BEFORE.replace("89", "100"))[0]
    # The rewritten condition already says the number: it is not told twice.
    assert changed == ("rewrites the condition `platform.is_cuda() and platform.capability() < 89` as "
                       "`platform.is_cuda() and platform.capability() < 100` in `gate()`")


def test_new_kernels_constexprs_helpers_and_tests():
    before = "import triton\n\n@triton.jit\ndef k(x, BLOCK: tl.constexpr):\n    pass\n"
    after = ("import triton\n\n@triton.jit\ndef k(x, BLOCK: tl.constexpr, IS_INT8: tl.constexpr):\n"
             "    if IS_INT8:\n        pass\n\n@triton.jit\ndef helper(y):\n    return y\n")
    text = "; ".join(describe_file("vllm/k.py", before, after))
    assert "adds the Triton kernel `helper`" in text and "constexpr `IS_INT8`" in text
    tests = describe_file("tests/test_k.py", "def test_a():\n    pass\n",
                          "def test_a():\n    assert 1\n\ndef test_b():\n    pass\n")
    assert tests == ["adds 1 test and edits 1 in `test_k.py`"]


def test_unparsable_and_deleted_files_are_said_so():
    assert "unparsable" in describe_file("vllm/x.py", "x = 1\n", "def (:\n")[0]
    assert describe_file("vllm/x.py", "x = 1\n", None) == ["deletes `vllm/x.py`"]


def test_code_fragments_are_cut_at_a_token_boundary():
    long = " or ".join(f"current_platform.is_device_{i}()" for i in range(10))
    shown = code(long)
    assert shown.endswith(" ...`") and len(shown) < 90 and "current_platform.is_device_" in shown


def test_assertions_are_quoted_whole_to_a_sentence_end():
    message = "E   AssertionError: " + "the store rejects fp8 on XPU. " + "x" * 400
    assert quote_assertion(message) == "the store rejects fp8 on XPU."
    assert quote_assertion("E   AssertionError: short one") == "short one"


def _describe_diff(task: str, diff: str, bases: BaseCache) -> str:
    from grader.reports.describe import describe_tree

    base = bases.get(all_tasks()[task])
    parent = Path(tempfile.mkdtemp(prefix="describe-", dir=scratch_root()))
    try:
        tree = make_tree(base, parent)
        report = apply_diff(diff, tree)
        return describe_tree(base.path, tree, [f.path for f in report.files])
    finally:
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="module")
def described() -> dict[str, str]:
    bases = BaseCache()
    found = {}
    for task in all_tasks():
        # A task folder without its reference yet is check-task's to report, not this test's.
        reference = REPO_ROOT / "reference_impl" / f"{task}.diff"
        diffs = {"reference": reference.read_text()} if reference.is_file() else {}
        diffs |= {p.stem: p.read_text() for p in sorted((REPO_ROOT / "candidates" / task).glob("*.diff"))}
        for name, diff in diffs.items():
            found[f"{task}/{name}"] = _describe_diff(task, diff, bases)
    return found


@pytest.mark.slow
def test_every_reference_and_sample_gets_a_description_naming_code(described):
    empty = [k for k, v in described.items() if not v]
    assert not empty, empty
    assert all("`" in v for v in described.values()), {k: v for k, v in described.items() if "`" not in v}


@pytest.mark.slow
@pytest.mark.parametrize("key,words", [
    ("xpu-kv-cache-dtypes/reference", ["current_platform.is_xpu()", "TritonAttentionImpl.__init__()"]),
    ("xpu-kv-cache-dtypes/gate-on-is-cuda", ["current_platform.is_cuda()"]),
    ("vit-fp8-blackwell/gate-only", ["has_device_capability(90)` as", "has_device_capability(100)"]),
    ("int8-kv-rounding/key-only", ["constexpr `IS_INT8`", "_reshape_cache_per_token_head()"]),
    ("minimax-qk-norm/tp1-only-fast-path", ["adds the Triton kernel `_qk_norm_tp1_kernel`"]),
    ("minimax-qk-norm/narrow-only", ["qkv.narrow()", "qkv.split()"]),
])
def test_descriptions_say_what_the_change_does(described, key, words):
    for word in words:
        assert word in described[key], described[key]


@pytest.mark.slow
@needs_seed
def test_seed_whole_diffs_are_described():
    """Every whole diff of the earlier judge's bundle gets a description that names code."""
    bases = BaseCache()
    whole = [c for c in parse_bundle(SEED / "graded-candidates.txt") if c.diff and not c.at_preview_limit and c.task]
    described = {c.id: _describe_diff(c.task, c.diff, bases) for c in whole}
    assert len(described) >= 20
    missing = {k: v for k, v in described.items() if "`" not in v}
    assert len(missing) <= len(described) // 10, missing


@pytest.mark.slow
def test_summaries_are_short_and_keep_names_as_written(tmp_path):
    import json
    import subprocess
    import sys

    # Two tasks' samples (the quick ones); test_samples.py grades every sample already.
    done = subprocess.run([sys.executable, "grade.py", "candidates/xpu-kv-cache-dtypes", "candidates/vit-fp8-blackwell",
                           "--out", str(tmp_path / "out"), "--jobs", "2"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=3000)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())["candidates"]
    lengths = [len(r["summary"].split()) for r in results]
    # Samples carry no judge's paragraph: the fixed cap holds every summary (grader.reports.summarize.summary_cap).
    assert max(lengths) <= FIXED_CAP and statistics.median(lengths) <= SUMMARY_WORDS, sorted(lengths)
    text = " ".join(r["summary"] for r in results)
    for lowered in (" lora ", " xpu ", " cuda ", " fp8 gemm", " rocm "):
        assert lowered not in text.replace("`", " "), lowered
    assert all(r["summary"].startswith(("The patch", "Timed out", "Applied only", "Not graded", "No change"))
               or "landed only with fuzz" in r["summary"] for r in results)


def test_a_failure_that_only_quotes_a_traceback_is_told_by_the_exception_it_raised():
    message = ("E   AssertionError: ['raised: Traceback (most recent call last):\n"
               '  File "/tree/vllm/x.py", line 3, in f\n    return g()\n'
               "AttributeError: module \\'triton\\' has no attribute \\'cdiv\\'']")
    said = assertion_line(message)
    assert said.startswith("AttributeError: module 'triton' has no attribute 'cdiv'") and "Traceback" not in said
    criterion = CriterionResult("c1", "t", 0.0, "unmet", "0 of 1",
                                [EvidenceEntry("t.py::k", "failed", 1.0, "The kernel launches.", [], 0.0, message)])
    assert failure_sentence(criterion).startswith('"The kernel launches" does not hold (AttributeError: module')


def test_an_added_condition_is_told_with_what_it_gates():
    old = ("class Impl:\n    def __init__(self, dtype):\n        if dtype == 'fp8':\n            if not capable():\n"
           "                raise ValueError('no')\n\ndef store(x):\n    return x\n")
    new = ("class Impl:\n    def __init__(self, dtype):\n        if dtype == 'fp8':\n            if on_cuda():\n"
           "                if not capable():\n                    raise ValueError('no')\n\n"
           "def store(x):\n    if x.empty:\n        return None\n    return x\n")
    assert describe_file("vllm/impl.py", old, new) == [
        "adds the condition `on_cuda()` in `Impl.__init__()`, under which it can raise `ValueError`",
        "adds the condition `x.empty` in `store()`, under which it returns at once"]


def test_a_gate_is_not_told_where_the_sentence_names_other_changes_it_could_belong_to():
    old = "def f(x):\n    return g(x)\n"
    new = "def f(x):\n    if x < 0:\n        raise ValueError(x)\n    return h(x)\n"
    said = describe_file("vllm/f.py", old, new)
    assert len(said) == 1 and said[0].startswith("adds the condition `x < 0` and ") and ", under which" not in said[0]


def test_conditions_too_long_to_quote_are_told_by_what_they_test_instead():
    old = ("def pick(p, dtype):\n    if p.is_xpu() and dtype in ('fp8', 'fp8_e4m3', 'fp8_e5m2', 'bfloat16', 'float16'):\n"
           "        return 1\n    if p.is_xpu() and dtype.startswith('fp8') and not p.has_native_fp8_support():\n"
           "        return 2\n    return 0\n")
    new = old.replace("p.is_xpu()", "p.is_cuda()")
    (text,) = describe_file("vllm/pick.py", old, new)
    assert text.startswith("now checks `p.is_cuda()` where it checked `p.is_xpu()`"), text
    assert "condition" not in text


def test_a_raise_is_told_as_a_raise_never_as_a_call_to_the_exception_class():
    old = "def check(dtype):\n    return dtype\n"
    new = "def check(dtype):\n    validate(dtype)\n    raise ValueError(f'unsupported {dtype}')\n"
    (text,) = describe_file("vllm/check.py", old, new)
    assert "ValueError()" not in text and "calls to `ValueError" not in text
    assert "now raises `ValueError`" in text and "`validate()`" in text


def test_a_value_set_under_a_new_condition_is_the_mechanism_told_first():
    old = ("def config(M, is_hopper, is_rocm):\n    cfg = {'BLOCK_M': 64}\n    if is_rocm:\n        cfg['waves'] = 2\n"
           "    return cfg\n")
    new = ("def config(M, is_hopper, is_rocm):\n    cfg = {'BLOCK_M': 64}\n    if is_rocm:\n        cfg['waves'] = 2\n"
           "    if is_hopper and M <= 64:\n        cfg['num_stages'] = 4\n    return cfg\n")
    (text,) = describe_file("vllm/config.py", old, new)
    assert text.startswith("sets `cfg['num_stages'] = 4` when `is_hopper and M <= 64`"), text
    assert "is_rocm" not in text


def test_a_reworded_message_is_told_by_the_words_it_changed():
    old = "def check(cap):\n    if cap < 90:\n        raise ValueError('needs SM 90 or newer (Hopper)')\n"
    new = "def check(cap):\n    if cap < 90:\n        raise ValueError('needs SM 100 or newer (Blackwell)')\n"
    (text,) = describe_file("vllm/check.py", old, new)
    assert text == "changes the text `90` to `100` and `(Hopper)` to `(Blackwell)` in `check()`", text
