"""Mutation operators on small hand-made diffs: each mutant applies, changes what it should, with stable ids."""

from __future__ import annotations

import difflib
import subprocess

import pytest

from grader.pipeline.diffparse import HUNK_HEADER, parse_sections
from grader.taskkit.mutate import (
    classify,
    count,
    derive_mutants,
    equivalence_reason,
    grading_order,
    import_broken,
    mutation_score,
)
from grader.core.records import ApplyReport, CriterionResult, RunReport
from grader.core.records import TestOutcome as Outcome

FILLER = "".join(f"FILLER_{i} = {i}\n" for i in range(12))

BASE_GATE = '''from vllm.platforms import current_platform


def supported(dtype):
    """Whether the dtype is supported and usable here."""
    if not current_platform.has_device_capability(90):
        return False
    return True
''' + FILLER + '''

def check(dtype, cap):
    # old rules, with and without fp8
    if dtype == "fp8":
        raise ValueError("no fp8")
    return cap
''' + FILLER + '''

def scale(a, b):
    return a
'''

NEW_GATE = '''from vllm.platforms import current_platform


def supported(dtype):
    """Whether the dtype is supported and usable here."""
    if not current_platform.has_device_capability(100):
        return False
    return True
''' + FILLER + '''

def check(dtype, cap):
    # new rules: xpu or cuda, and never fp8 on old parts
    if not current_platform.is_xpu() and dtype.startswith("fp8"):
        raise ValueError("fp8 needs SM89 or newer and a real GPU")
    if cap >= 89:
        cap = cap - 1
    return cap
''' + FILLER + '''

def scale(a, b):
    """Scaled: a / b, or dot(a, b) and more."""
    ratio = a / b
    return dot(a, b) + ratio
'''

BASE_HELPER = "def helper():\n    return 1\n"
NEW_HELPER = "def helper():\n    if ready():\n        return 2\n    return 1\n"
BASE_DOC = "# Notes\n\nSome text.\n"
NEW_DOC = "# Notes\n\nSome text, and more or less.\n"

BASE = {"pkg/gate.py": BASE_GATE, "pkg/helper.py": BASE_HELPER, "docs/notes.md": BASE_DOC}
NEW = {"pkg/gate.py": NEW_GATE, "pkg/helper.py": NEW_HELPER, "docs/notes.md": NEW_DOC}


def make_diff(base: dict[str, str], new: dict[str, str]) -> str:
    out = []
    for path in base:
        if base[path] == new[path]:
            continue
        out.append(f"diff --git a/{path} b/{path}\n")
        out.extend(difflib.unified_diff(base[path].splitlines(True), new[path].splitlines(True),
                                        f"a/{path}", f"b/{path}", n=3))
    return "".join(out)


REFERENCE = make_diff(BASE, NEW)


def source(path: str) -> str | None:
    return BASE.get(path)


@pytest.fixture(scope="module")
def mutants():
    return {m.id: m for m in derive_mutants(REFERENCE, source)}


@pytest.fixture
def apply_in(make_git_tree):
    """Factory: apply a diff with plain ``git apply`` to a fresh tree of BASE; returns the files after."""
    counter = iter(range(10_000))

    def apply(diff: str, check_only: bool = False) -> dict[str, str]:
        tree = make_git_tree(BASE, name=f"t{next(counter)}")
        argv = ["git", "apply", "--check"] if check_only else ["git", "apply"]
        done = subprocess.run(argv, cwd=tree, input=diff, text=True, capture_output=True)
        assert done.returncode == 0, f"git apply failed: {done.stderr}\n{diff}"
        return {p: (tree / p).read_text() for p in BASE}

    return apply


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    return [l[2:] for l in diff if l.startswith("- ")], [l[2:] for l in diff if l.startswith("+ ")]


def test_reference_applies(apply_in):
    assert apply_in(REFERENCE) == NEW


def test_every_mutant_applies_and_differs(mutants, apply_in):
    assert len(mutants) > 15
    for m in mutants.values():
        apply_in(m.diff, check_only=True)
        after = apply_in(m.diff)
        assert after != NEW, m.id


def test_every_python_mutant_still_parses(mutants, apply_in):
    import ast

    for m in mutants.values():
        after = apply_in(m.diff)
        for path, text in after.items():
            if path.endswith(".py"):
                ast.parse(text)  # raises on a mutant that breaks syntax


def test_drop_file(mutants, apply_in):
    after = apply_in(mutants["drop-file:pkg/helper.py"].diff)
    assert after == {**NEW, "pkg/helper.py": BASE_HELPER}
    docs = apply_in(mutants["drop-file:docs/notes.md"].diff)
    assert docs == {**NEW, "docs/notes.md": BASE_DOC}


def test_drop_hunk(mutants, apply_in):
    hunks = parse_sections(REFERENCE)[0].hunks
    assert len(hunks) == 3
    after = apply_in(mutants["drop-hunk:pkg/gate.py:h1"].diff)["pkg/gate.py"]
    assert 'if dtype == "fp8":' in after and "has_device_capability(100)" in after and "ratio = a / b" in after
    # one-hunk files are left to drop-file
    assert not any(i.startswith("drop-hunk:pkg/helper.py") for i in mutants)


def test_revert_condition(mutants, apply_in):
    (mid,) = [i for i in mutants if i.startswith("revert-condition:pkg/gate.py:h0")]
    removed, added = changed_lines(NEW_GATE, apply_in(mutants[mid].diff)["pkg/gate.py"])
    assert removed == ["    if not current_platform.has_device_capability(100):"]
    assert added == ["    if not current_platform.has_device_capability(90):"]


@pytest.mark.parametrize("prefix,old,new", [
    ("and-to-or:pkg/gate.py:h1", ' and dtype.startswith("fp8"):', ' or dtype.startswith("fp8"):'),
    ("drop-not:pkg/gate.py:h1", "if not current_platform.is_xpu()", "if current_platform.is_xpu()"),
    ("widen-platform:pkg/gate.py:h1", "current_platform.is_xpu()", "current_platform.is_cuda_alike()"),
    ("shift-boundary:pkg/gate.py:h1", "if cap >= 89:", "if cap > 89:"),
    ("capability-up:pkg/gate.py:h0", "has_device_capability(100)", "has_device_capability(103)"),
    ("capability-down:pkg/gate.py:h1", "if cap >= 89:", "if cap >= 86:"),
    ("swap-operands:pkg/gate.py:h1", "cap = cap - 1", "cap = 1 - cap"),
])
def test_condition_and_operand_operators(mutants, apply_in, prefix, old, new):
    matching = [m for i, m in mutants.items() if i.startswith(prefix)]
    assert matching, f"no mutant {prefix}*"
    hits = []
    for m in matching:
        removed, added = changed_lines(NEW_GATE, apply_in(m.diff)["pkg/gate.py"])
        assert len(removed) == len(added) == 1, m.id
        if old in removed[0] and added[0] == removed[0].replace(old, new):
            hits.append(m.id)
    assert hits, [m.id for m in matching]


def test_swap_operands_division_and_dot(mutants, apply_in):
    results = set()
    for i, m in mutants.items():
        if i.startswith("swap-operands:pkg/gate.py:h2"):
            _, added = changed_lines(NEW_GATE, apply_in(m.diff)["pkg/gate.py"])
            results.add(added[0].strip())
    assert "ratio = b / a" in results
    assert "return dot(b, a) + ratio" in results


def test_delete_statement(mutants, apply_in):
    removed, added = changed_lines(NEW_GATE, apply_in(mutants["delete-statement:pkg/gate.py:h2:l5"].diff)["pkg/gate.py"])
    assert removed == ["    ratio = a / b"] and added == []
    # the only statement of a block becomes ``pass``, so the file still parses
    (mid,) = [i for i in mutants if i.startswith("delete-statement:pkg/helper.py")]
    after = apply_in(mutants[mid].diff)["pkg/helper.py"]
    assert after == "def helper():\n    if ready():\n        pass\n    return 1\n"


def test_comments_strings_and_docstrings_are_not_mutated(mutants):
    for m in mutants.values():
        if m.operator in ("drop-file", "drop-hunk", "delete-statement"):
            continue
        assert "# new rules" not in m.description
        assert "Scaled:" not in m.description
        assert "SM89 or newer" not in m.description
    # a raise spread over nothing but a string is not a deletable fragment either way, and prose files only drop
    assert {m.operator for m in mutants.values() if m.path == "docs/notes.md"} == {"drop-file"}


def test_ids_are_stable_and_unique(mutants):
    again = derive_mutants(REFERENCE, source)
    assert [m.id for m in again] == list(mutants)
    assert len(set(mutants)) == len(mutants)
    for mid in mutants:
        op, path, *rest = mid.split(":")
        assert path in BASE
        assert all(part[0] in "hl" or part.isdigit() for part in rest)
    # another file appended to the reference leaves every existing id in place
    extra = REFERENCE + make_diff({"pkg/z.py": "x = 1\n"}, {"pkg/z.py": "x = 1 - y\n"})
    grown = {m.id for m in derive_mutants(extra, source)}
    assert set(mutants) <= grown and "swap-operands:pkg/z.py:h0:l1" in grown


def test_ids_name_operator_file_hunk_and_line(mutants):
    m = mutants["delete-statement:pkg/gate.py:h2:l5"]
    assert (m.operator, m.path, m.hunk, m.line) == ("delete-statement", "pkg/gate.py", 2, 5)
    section = parse_sections(REFERENCE)[0]
    assert section.hunks[2].lines[5] == "+    ratio = a / b"


def test_hunk_headers_are_recounted(mutants):
    m = mutants["delete-statement:pkg/gate.py:h2:l5"]
    original = parse_sections(REFERENCE)[0].hunks
    mutated = parse_sections(m.diff)[0].hunks
    for hunk in mutated:
        match = HUNK_HEADER.match(hunk.header)
        assert int(match.group(2)) == sum(1 for l in hunk.lines if l[:1] in " -")
        assert int(match.group(4)) == sum(1 for l in hunk.lines if l[:1] in " +")
        assert hunk.complete
    assert mutated[2].new_count == original[2].new_count - 1
    # a revert of 100 -> 90 is the same diff as moving the capability down a step: kept once, as the revert
    assert not any(i.startswith("capability-down:pkg/gate.py:h0") for i in mutants)
    # dropping the middle hunk moves the new start of the hunk after it
    dropped = parse_sections(mutants["drop-hunk:pkg/gate.py:h1"].diff)[0].hunks
    delta = original[1].new_count - original[1].old_count
    new_start = lambda h: int(HUNK_HEADER.match(h.header).group(3))
    assert new_start(dropped[1]) == new_start(original[2]) - delta


def test_duplicate_diffs_are_kept_once(mutants):
    diffs = [m.diff for m in mutants.values()]
    assert len(diffs) == len(set(diffs))
    assert REFERENCE not in diffs


def test_grading_order_puts_vllm_sources_first():
    text = make_diff({"tests/t.py": "a = 1\n", "vllm/x.py": "b = 1\n"}, {"tests/t.py": "a = 1 - c\n",
                                                                           "vllm/x.py": "b = 1 - d\n"})
    ordered = grading_order(derive_mutants(text))
    assert ordered[0].path == "vllm/x.py" and ordered[-1].path == "tests/t.py"


# ---------------------------------------------------------------- classification (pure, no grading)


def crit(cid, status, score):
    return CriterionResult(cid, cid, score, status, f"{cid} rationale")


def outcome(status, message=""):
    return Outcome("t::x", status, {"c1": 1.0}, message=message)


REFERENCE_RESULTS = {"c1": crit("c1", "met", 1.0), "c2": crit("c2", "met", 1.0),
                     "c3": crit("c3", "not_evaluated", None)}


def test_classify_caught_missed_and_not_applicable():
    run = RunReport([outcome("passed")], 0, False, "", 1.0)
    applied = ApplyReport("applied", "git apply")
    mutant = {"c1": crit("c1", "partial", 0.5), "c2": crit("c2", "met", 1.0), "c3": crit("c3", "unmet", 0.0)}
    assert classify(REFERENCE_RESULTS, applied, run, mutant)[:2] == ("caught", ["c1"])
    # c3 was not evaluated on the reference: it is ignored
    quiet = {"c1": crit("c1", "met", 0.9), "c2": crit("c2", "met", 1.0), "c3": crit("c3", "unmet", 0.0)}
    status, dropped, why = classify(REFERENCE_RESULTS, applied, run, quiet)
    assert (status, dropped) == ("missed", []) and "score fell" in why
    assert classify(REFERENCE_RESULTS, ApplyReport("failed", message="hunk 1 failed"), None, None)[0] == \
        "not_applicable"
    broken = RunReport([outcome("failed", "E   SyntaxError: invalid syntax"),
                        outcome("error", "ImportError: cannot import name 'x'")], 1, False, "", 1.0)
    assert import_broken(broken)
    assert classify(REFERENCE_RESULTS, applied, broken, mutant)[0] == "not_applicable"
    assert not import_broken(RunReport([outcome("failed", "AssertionError"), outcome("error", "ImportError")],
                                       1, False, "", 1.0))


def test_equivalents_and_score():
    listed = {"drop-file:docs/x.md": "docs only", "*:tests/*": "the candidate's own tests"}
    assert equivalence_reason("drop-file:docs/x.md", listed) == "docs only"
    assert equivalence_reason("delete-statement:tests/t.py:h0:l1", listed) == "the candidate's own tests"
    assert equivalence_reason("drop-file:vllm/x.py", listed) is None
    entries = [{"status": s} for s in ("caught", "caught", "caught", "missed", "equivalent", "not_applicable",
                                       "not_graded")]
    counts = count(entries, 7)
    assert counts["graded"] == 6 and counts["caught"] == 3
    assert mutation_score(counts) == 0.75


# --- membership tests, guards, exception handlers, compared constants, call statements -------------------------------

BASE_CACHE = '''def touch(cache, key):
    cache.move_to_end(key)
    return key
''' + FILLER + '''

def load(path):
    return open(path).read()
'''

NEW_CACHE = '''def touch(cache, key):
    if key not in cache:
        return None
    if key in ("a", "b", "c"): return key
    cache.move_to_end(
        key,
    )
    return key
''' + FILLER + '''

def load(path):
    if len(path) > 3:
        raise ValueError(
            "too long",
        )
    try:
        return open(path).read()
    except FileNotFoundError as exc:  # missing
        raise KeyError(path) from exc
    except OSError:
        return None


def safe(x):
    try:
        return int(x)
    except ValueError:
        return 0
'''

CACHE_REFERENCE = make_diff({"pkg/cache.py": BASE_CACHE}, {"pkg/cache.py": NEW_CACHE})


@pytest.fixture(scope="module")
def cache_mutants():
    return {m.id: m for m in derive_mutants(CACHE_REFERENCE, {"pkg/cache.py": BASE_CACHE}.get)}


@pytest.fixture
def apply_cache(make_git_tree):
    counter = iter(range(10_000))

    def apply(diff: str) -> str:
        tree = make_git_tree({"pkg/cache.py": BASE_CACHE}, name=f"c{next(counter)}")
        done = subprocess.run(["git", "apply"], cwd=tree, input=diff, text=True, capture_output=True)
        assert done.returncode == 0, f"git apply failed: {done.stderr}\n{diff}"
        return (tree / "pkg/cache.py").read_text()

    return apply


def mutated_texts(mutants, apply, operator) -> list[str]:
    """The file after each mutant of ``operator``, each checked to parse and to differ from the reference."""
    import ast

    texts = []
    for m in mutants.values():
        if m.operator == operator:
            after = apply(m.diff)
            ast.parse(after)
            assert after != NEW_CACHE, m.id
            texts.append(after)
    assert texts, f"no {operator} mutant"
    return texts


def test_membership_operators(cache_mutants, apply_cache):
    (flipped,) = mutated_texts(cache_mutants, apply_cache, "not-in-to-in")
    assert "    if key in cache:\n        return None\n" in flipped
    (negated,) = mutated_texts(cache_mutants, apply_cache, "in-to-not-in")
    assert 'if key not in ("a", "b", "c"): return key' in negated
    dropped = mutated_texts(cache_mutants, apply_cache, "drop-element")
    assert sorted(t.split("if key in ")[1].split(":")[0] for t in dropped) == \
        ["('a', 'b')", "('a', 'c')", "('b', 'c')"]


def test_guard_operators(cache_mutants, apply_cache):
    guards = mutated_texts(cache_mutants, apply_cache, "drop-guard")
    assert any("if key not in cache" not in t and "return None\n    if key in" not in t for t in guards)
    assert any('if key in ("a"' not in t for t in guards)
    assert any("if len(path) > 3" not in t and "too long" not in t for t in guards)
    exits = mutated_texts(cache_mutants, apply_cache, "drop-exit")
    assert any('if key in ("a", "b", "c"): pass\n' in t for t in exits)
    assert any("    if len(path) > 3:\n        pass\n    try:" in t for t in exits)


def test_exception_handler_operators(cache_mutants, apply_cache):
    widened = mutated_texts(cache_mutants, apply_cache, "widen-except")
    assert any("    except Exception as exc:  # missing\n" in t for t in widened)
    assert any("    except OSError:" not in t and t.count("except Exception:") == 1 for t in widened)
    dropped = mutated_texts(cache_mutants, apply_cache, "drop-handler")
    assert any("FileNotFoundError" not in t and "except OSError:" in t for t in dropped)
    assert any("        return int(x)\n    finally:\n        pass\n" in t for t in dropped)


def test_constant_and_call_operators(cache_mutants, apply_cache):
    shifted = mutated_texts(cache_mutants, apply_cache, "shift-constant")
    assert sorted(t.split("if len(path) > ")[1][0] for t in shifted) == ["2", "4"]
    (deleted,) = mutated_texts(cache_mutants, apply_cache, "delete-call")
    assert "move_to_end" not in deleted and "        return None\n    if key in" in deleted


def test_a_one_line_membership_guard_gets_mutants_beyond_dropping_its_file(apply_cache):
    """The case a file-drop alone could not score: the fix is one guard."""
    new = BASE_CACHE.replace("    cache.move_to_end(key)\n", "    if key not in cache: return key\n"
                                                                  "    cache.move_to_end(key)\n")
    operators = {m.operator for m in derive_mutants(make_diff({"pkg/cache.py": BASE_CACHE},
                                                              {"pkg/cache.py": new}))}
    # dropping the whole guard is dropping the file here: kept once, as drop-file
    assert operators == {"drop-file", "not-in-to-in", "drop-exit", "widen-predicate"}


def test_statements_continued_over_string_only_lines_are_taken_whole(make_git_tree):
    """A raise whose message is split over lines holding only strings: dropping the guard, its exit or the handler
    takes those lines too, so every mutant still parses."""
    import ast

    base = "def f(x):\n    return x\n\n\nY = 1\n"
    new = ('def f(x):\n    if x < 0:\n        raise ValueError(\n            "negative "\n            "input"\n'
           '        )\n    try:\n        return g(x)\n    except KeyError:\n        log(\n            "missing"\n'
           '        )\n        return x\n\n\nY = 1\n')
    mutants = derive_mutants(make_diff({"pkg/f.py": base}, {"pkg/f.py": new}), {"pkg/f.py": base}.get)
    assert {"drop-guard", "drop-exit", "drop-handler", "delete-call"} <= {m.operator for m in mutants}
    for i, m in enumerate(m for m in mutants if m.operator != "drop-file"):  # dropping the one file: no diff
        tree = make_git_tree({"pkg/f.py": base}, name=f"s{i}")
        done = subprocess.run(["git", "apply"], cwd=tree, input=m.diff, text=True, capture_output=True)
        assert done.returncode == 0, m.id
        ast.parse((tree / "pkg/f.py").read_text())


# --- the case space a fix accepts: aliases, sites, predicates, bounds, masks, clamps ----------------------------------

BASE_CASES = '''import torch
import triton.language as tl


def accepts(dtype, cap):
    return cap >= 89
''' + FILLER + '''

def is_supported(dtype):
    return False
''' + FILLER + '''

def kernel(k_ptr, v_ptr, offs, n, m):
    k = tl.load(k_ptr + offs)
    v = tl.load(v_ptr + offs)
    return k, v
''' + FILLER + '''

def scale(x, lo, hi):
    return x
'''

NEW_CASES = '''import torch
import triton.language as tl


def accepts(dtype, cap):
    if dtype.startswith("fp8") and not is_xpu():
        return cap >= 89
    if dtype in {"bfloat16", "bf16"} and not is_xpu():
        return cap >= 80
    return True
''' + FILLER + '''

def is_supported(dtype):
    spelled = dtype.lower()
    return spelled == "auto" or "fp8" in dtype
''' + FILLER + '''

def kernel(k_ptr, v_ptr, offs, n, m):
    k = tl.load(k_ptr + offs, mask=(offs < n) & (offs < m), other=0.0)
    v = tl.load(
        v_ptr + offs,
        mask=offs < n,
        other=0.0,
    )
    return k, v
''' + FILLER + '''

def scale(x, lo, hi):
    y = torch.clamp(x, min=lo, max=hi)
    z = min(max(x, lo), hi)
    return y + z + x.clamp(lo, hi) + sum(x[:n] for n in range(hi))
'''

CASES_REFERENCE = make_diff({"pkg/cases.py": BASE_CASES}, {"pkg/cases.py": NEW_CASES})


@pytest.fixture(scope="module")
def case_mutants():
    return derive_mutants(CASES_REFERENCE, {"pkg/cases.py": BASE_CASES}.get)


@pytest.fixture(scope="module")
def case_texts(case_mutants, tmp_path_factory):
    """The file after each mutant, by operator: each applies with git apply, parses and differs from the fix."""
    import ast

    texts: dict[str, list[str]] = {}
    for i, m in enumerate(m for m in case_mutants if m.operator != "drop-file"):  # the one file: no diff left
        tree = tmp_path_factory.mktemp(f"case{i}")
        (tree / "pkg").mkdir()
        (tree / "pkg" / "cases.py").write_text(BASE_CASES)
        subprocess.run(["git", "init", "-q", str(tree)], check=True)
        done = subprocess.run(["git", "apply"], cwd=tree, input=m.diff, text=True, capture_output=True)
        assert done.returncode == 0, f"{m.id}: {done.stderr}"
        after = (tree / "pkg" / "cases.py").read_text()
        ast.parse(after)
        assert after != NEW_CASES, m.id
        texts.setdefault(m.operator, []).append(after)
    return texts


def only_changed(after: str) -> list[str]:
    """The lines of the mutant's file that the fix's file does not have."""
    return changed_lines(NEW_CASES, after)[1]


def test_narrow_alias_turns_a_family_of_spellings_into_one(case_texts):
    changed = sorted(line.strip() for t in case_texts["narrow-alias"] for line in only_changed(t))
    assert changed == ['if dtype == "fp8" and not is_xpu():', 'return spelled == "auto" or dtype == "fp8"']
    assert len(case_texts["drop-element"]) == 2  # the literal set loses one member at a time


def test_drop_site_drops_a_term_added_at_several_places_one_place_at_a_time(case_texts):
    changed = sorted(line.strip() for t in case_texts["drop-site"] for line in only_changed(t))
    assert changed == ["if dtype in {'bfloat16', 'bf16'}:", "if dtype.startswith('fp8'):"]
    for text in case_texts["drop-site"]:
        assert text.count("not is_xpu()") == 1  # the other site keeps it


def test_widen_predicate_makes_added_conditions_and_boolean_returns_true(case_texts):
    changed = sorted(line.strip() for t in case_texts["widen-predicate"] for line in only_changed(t))
    # two conditions, two boolean returns in accepts(), is_supported()'s return, and its whole body
    assert changed == ["if True:", "if True:", "return True", "return True", "return True", "return True"]
    (body,) = [t for t in case_texts["widen-predicate"] if "spelled" not in t]
    assert "def is_supported(dtype):\n    return True\n" in body


def test_shift_bound_moves_slice_bounds_and_range_stops(case_texts):
    changed = sorted(line.split("sum(")[1] for t in case_texts["shift-bound"] for line in only_changed(t))
    assert changed == ["x[:n + 1] for n in range(hi))", "x[:n - 1] for n in range(hi))",
                       "x[:n] for n in range(hi + 1))", "x[:n] for n in range(hi - 1))"]


def test_masks_lose_one_dimension_or_go_whole_even_over_several_lines(case_texts):
    narrowed = sorted(line.strip() for t in case_texts["narrow-mask"] for line in only_changed(t))
    assert narrowed == ["k = tl.load(k_ptr + offs, mask=offs < m, other=0.0)",
                        "k = tl.load(k_ptr + offs, mask=offs < n, other=0.0)"]
    dropped = sorted(line.strip() for t in case_texts["drop-mask"] for line in only_changed(t))
    # a call over several lines becomes one line, its closing bracket kept as the context it was
    assert dropped == ["k = tl.load(k_ptr + offs)", "v = tl.load(v_ptr + offs"]
    (several,) = [t for t in case_texts["drop-mask"] if "v = tl.load(v_ptr + offs\n    )\n" in t]
    assert "mask=offs < n," not in several and "other=0.0," not in several


def test_drop_clamp_leaves_the_value_and_drops_nested_bounds_one_at_a_time(case_texts):
    changed = sorted(line.strip() for t in case_texts["drop-clamp"] for line in only_changed(t))
    assert changed == ["return y + z + x + sum((x[:n] for n in range(hi)))", "y = x", "z = max(x, lo)",
                       "z = min(x, hi)", "z = x"]


def test_a_boolean_function_body_the_fix_writes_becomes_return_true():
    base = "def helper():\n    return 1\n\n\ndef is_ready(x) -> bool:\n    return False\n\n\nZ = 1\n"
    new = ("def helper():\n    return 1\n\n\ndef is_ready(x) -> bool:\n    if x is None:\n        return False\n"
           "    ok = x > 0\n    return ok\n\n\nZ = 1\n")
    mutants = derive_mutants(make_diff({"pkg/p.py": base}, {"pkg/p.py": new}), {"pkg/p.py": base}.get)
    bodies = [m for m in mutants if m.operator == "widen-predicate" and "is_ready" in m.description]
    assert len(bodies) == 1
    added = [line for line in bodies[0].diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ["+    return True"]


def test_a_mutant_that_would_not_parse_is_never_made():
    """A clamp inside a multi-line ``if`` header cannot be rewritten as a statement; nothing unparsable is made
    for it, and every mutant made parses against the base."""
    from grader.taskkit.mutate import Mutant, leaves_unparsable

    base = "def f(x):\n    return x\n"
    new = "def f(x):\n    if (x.clamp(0, 1) >\n            0):\n        return 1\n    return x\n"
    mutants = derive_mutants(make_diff({"pkg/f.py": base}, {"pkg/f.py": new}), {"pkg/f.py": base}.get)
    assert mutants and not any(leaves_unparsable(m, {"pkg/f.py": base}.get) for m in mutants)
    reference = make_diff({"pkg/f.py": base}, {"pkg/f.py": new})
    broken = Mutant("x:pkg/f.py:h0:l3", "x", "pkg/f.py", 0, 3, "unbalanced",
                    reference.replace("+        return 1", "+        return (1"))
    assert leaves_unparsable(broken, {"pkg/f.py": base}.get)
    assert not leaves_unparsable(broken, lambda path: None)  # the base's file unknown: grading judges it


def test_a_condition_over_several_lines_is_narrowed_and_widened(make_git_tree):
    """The shape of a real fix: ``if x.startswith("fp8") and not (`` continued on the next lines. Its prefix test
    is narrowed to one spelling, and its whole condition widened to ``True``; both apply and parse."""
    import ast

    base = "def check(x, cap):\n    return cap\n\n\nY = 1\n"
    new = ('def check(x, cap):\n    if x.startswith("fp8") and not (\n        cap >= 89\n    ):\n'
           '        raise ValueError(x)\n    return cap\n\n\nY = 1\n')
    mutants = derive_mutants(make_diff({"pkg/c.py": base}, {"pkg/c.py": new}), {"pkg/c.py": base}.get)
    texts = {}
    for i, m in enumerate(m for m in mutants if m.operator in ("narrow-alias", "widen-predicate")):
        tree = make_git_tree({"pkg/c.py": base}, name=f"l{i}")
        done = subprocess.run(["git", "apply"], cwd=tree, input=m.diff, text=True, capture_output=True)
        assert done.returncode == 0, f"{m.id}: {done.stderr}"
        texts[m.operator] = (tree / "pkg/c.py").read_text()
        ast.parse(texts[m.operator])
    assert '    if (x == "fp8") and not (\n' in texts["narrow-alias"]
    assert "    if (True\n    ):\n        raise ValueError(x)\n" in texts["widen-predicate"]


def test_a_family_of_values_loses_one_member_in_every_shape(make_git_tree):
    """drop-element beyond a membership test on one line: a set assigned to a name, and a literal written one
    member a line (each member's line dropped), in a condition and in an assignment."""
    import ast

    base = "def ok(x):\n    return False\n\n\nY = 1\n"
    new = ('FP8 = frozenset({"fp8", "fp8_e4m3"})\n\n\ndef ok(x):\n    if x in (\n        "fp8_e5m2",\n'
           '        "fp8_inc",\n    ):\n        return True\n    return x in FP8\n\n\nY = 1\n')
    mutants = [m for m in derive_mutants(make_diff({"pkg/d.py": base}, {"pkg/d.py": new}), {"pkg/d.py": base}.get)
               if m.operator == "drop-element"]
    texts = []
    for i, m in enumerate(mutants):
        tree = make_git_tree({"pkg/d.py": base}, name=f"d{i}")
        done = subprocess.run(["git", "apply"], cwd=tree, input=m.diff, text=True, capture_output=True)
        assert done.returncode == 0, f"{m.id}: {done.stderr}"
        texts.append((tree / "pkg/d.py").read_text())
        ast.parse(texts[-1])
    assert len(texts) == 4
    assert sum("frozenset({'fp8'})" in t for t in texts) == sum("frozenset({'fp8_e4m3'})" in t for t in texts) == 1
    assert sum('"fp8_e5m2"' not in t for t in texts) == sum('"fp8_inc"' not in t for t in texts) == 1
