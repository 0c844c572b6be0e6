"""What a patch does, in words, read off the applied tree: the before/after AST of every changed function.

Deterministic and local: for each changed Python file, the functions (methods included, Triton ``@triton.jit``
kernels named as such) whose AST differs are compared for conditions added, removed or rewritten, calls added or
removed, numbers changed, and new or removed functions, kernels, ``tl.constexpr`` parameters and tests. Where
nothing finer is found it says how many lines of the function changed. Never raises: an unparsable file is
described as such.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

MAX_CODE = 70
MAX_FUNCTIONS = 2
SHOWN_PHRASES = 2  # the summary's first sentence names at most this many changes, and counts the rest


@dataclass
class FunctionChange:
    name: str
    conditions_added: list[str] = field(default_factory=list)
    conditions_removed: list[str] = field(default_factory=list)
    calls_added: list[str] = field(default_factory=list)
    calls_removed: list[str] = field(default_factory=list)
    numbers: list[tuple[str, str]] = field(default_factory=list)
    strings: list[str] = field(default_factory=list)
    # Assignments the function gained (``num_stages = 4``), each with the added condition it sits under, if any.
    assignments: list[tuple[str, str]] = field(default_factory=list)
    raises_added: list[str] = field(default_factory=list)
    strings_removed: list[str] = field(default_factory=list)
    lines: int = 0
    # What an added condition gates, where its branch says it plainly ("it can raise `ValueError`").
    gates: dict[str, str] = field(default_factory=dict)

    def weight(self) -> int:
        return 3 * (len(self.conditions_added) + len(self.conditions_removed) + len(self.assignments)) + \
            2 * (len(self.numbers) + len(self.raises_added)) + len(self.calls_added) + len(self.calls_removed)


def code(text: str) -> str:
    """A code fragment for prose: one line, cut at a token boundary, in backticks."""
    text = " ".join(text.split())
    if len(text) > MAX_CODE:
        cut = text[:MAX_CODE].rsplit(" ", 1)[0]
        text = (cut if len(cut) > MAX_CODE // 2 else text[:MAX_CODE]) + " ..."
    return f"`{text}`"


def code_pair(old: str, new: str) -> tuple[str, str]:
    """Two long fragments that differ in the middle, shown around where they differ."""
    old, new = " ".join(old.split()), " ".join(new.split())
    if max(len(old), len(new)) <= MAX_CODE:
        return code(old), code(new)
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    start = max(0, old.rfind(" ", 0, max(0, start - 10)) + 1) if start > 20 else 0
    lead = "... " if start else ""
    return code(lead + old[start:]), code(lead + new[start:])


def _functions(tree: ast.Module) -> dict[str, ast.AST]:
    found: dict[str, ast.AST] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[prefix + child.name] = child
                walk(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")

    walk(tree, "")
    return found


def _conditions(node: ast.AST) -> set[str]:
    tests = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            tests.add(ast.unparse(sub.test))
    return tests


def _branch_statements(body: list[ast.stmt]):
    """The statements of an ``if``'s true branch, nested blocks included, nested functions and classes left out."""
    pending = list(body)
    while pending:
        stmt = pending.pop(0)
        yield stmt
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            pending.extend(child for child in ast.iter_child_nodes(stmt) if isinstance(child, ast.stmt))


def _gates(node: ast.AST) -> dict[str, str]:
    """For each ``if`` test in ``node``, what its true branch does that a reader needs: the exceptions it can raise,
    or that it returns at once."""
    gated: dict[str, str] = {}
    for sub in ast.walk(node):
        if not isinstance(sub, ast.If):
            continue
        raised = sorted({ast.unparse(stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc)
                         for stmt in _branch_statements(sub.body) if isinstance(stmt, ast.Raise) and stmt.exc})
        if raised:
            gated[ast.unparse(sub.test)] = "it can raise " + " or ".join(code(name) for name in raised[:2])
        elif isinstance(sub.body[0], ast.Return):
            gated[ast.unparse(sub.test)] = "it returns at once"
    return gated


def _raised(node: ast.AST) -> set[str]:
    """The exception classes ``node`` raises (``raise ValueError(...)`` -> ``ValueError``)."""
    return {ast.unparse(sub.exc.func if isinstance(sub.exc, ast.Call) else sub.exc)
            for sub in ast.walk(node) if isinstance(sub, ast.Raise) and sub.exc is not None}


# Calls that say nothing of what a change does: logging, and the built-ins every function calls.
QUIET_CALLS = re.compile(r"^(?:\w+\.)?(?:logger|logging|log)\.\w+$|^(?:len|str|int|float|bool|isinstance|getattr|"
                         r"hasattr|print|repr|tuple|list|dict|set|range|min|max|type|super)$")


def _calls(node: ast.AST) -> set[str]:
    """Functions ``node`` calls, leaving out the exceptions it raises (a raise is told as one) and QUIET_CALLS."""
    raised = {id(sub.exc) for sub in ast.walk(node) if isinstance(sub, ast.Raise) and isinstance(sub.exc, ast.Call)}
    return {ast.unparse(sub.func) for sub in ast.walk(node)
            if isinstance(sub, ast.Call) and id(sub) not in raised and not QUIET_CALLS.match(ast.unparse(sub.func))}


def dict_pairs(node: ast.AST) -> set[tuple[str, str]]:
    """The (key, value) pairs of the dict literals in ``node`` whose key and value are both constants."""
    return {(ast.unparse(k), ast.unparse(v)) for sub in ast.walk(node) if isinstance(sub, ast.Dict)
            for k, v in zip(sub.keys, sub.values) if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}


def assignment_text(stmt: ast.stmt, old_pairs: set[tuple[str, str]]) -> str:
    """An assignment as a reader needs it: as written, or for a dict literal too long to quote, its target and the
    constant entries the old function had nowhere (``config = {'num_warps': 8, 'num_stages': 4, ...}``)."""
    text = ast.unparse(stmt)
    value = getattr(stmt, "value", None)
    if fits(text) or not isinstance(value, ast.Dict):
        return text
    target = ast.unparse(stmt.targets[0]) if isinstance(stmt, ast.Assign) else ast.unparse(stmt.target)
    new = [f"{k}: {v}" for k, v in ((ast.unparse(k), ast.unparse(v)) for k, v in zip(value.keys, value.values)
                                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant))
           if (k, v) not in old_pairs]
    shown = []
    for entry in new:
        if not fits(f"{target} = {{{', '.join(shown + [entry])}, ...}}"):
            break
        shown.append(entry)
    return f"{target} = {{{', '.join(shown)}, ...}}" if shown else text


def _assignments(node: ast.AST, old_pairs: set[tuple[str, str]] = frozenset()) -> dict[str, str]:
    """Simple assignments in ``node`` (``name = value``, ``obj.attr = value``, ``d[k] = value``) as
    ``assignment_text`` writes them, each with the test of the innermost ``if`` whose true branch holds it (""
    at the function's own level)."""
    found: dict[str, str] = {}

    def visit(body: list[ast.stmt], under: str) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and getattr(stmt, "value", None):
                found.setdefault(assignment_text(stmt, old_pairs), under)
            elif isinstance(stmt, ast.If):
                visit(stmt.body, ast.unparse(stmt.test))
                visit(stmt.orelse, under)
            elif isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try)):
                for block in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, block, []), under)
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body, under)

    visit(getattr(node, "body", []), "")
    return found


def _numbers(node: ast.AST) -> list[str]:
    return [repr(sub.value) for sub in ast.walk(node)
            if isinstance(sub, ast.Constant) and isinstance(sub.value, (int, float))
            and not isinstance(sub.value, bool)]


def _strings(node: ast.AST) -> set[str]:
    """String constants (docstrings aside), f-string parts included."""
    body = getattr(node, "body", [])
    doc = body[0].value if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else None
    return {sub.value for sub in ast.walk(node) if isinstance(sub, ast.Constant) and isinstance(sub.value, str)
            and sub is not doc and len(sub.value) > 3}


def _is_kernel(node: ast.AST) -> bool:
    return any("jit" in ast.unparse(d) for d in getattr(node, "decorator_list", []))


def _constexprs(node: ast.AST) -> set[str]:
    args = getattr(node, "args", None)
    if args is None:
        return set()
    return {a.arg for a in args.args + args.kwonlyargs if a.annotation is not None
            and ast.unparse(a.annotation).endswith("constexpr")}


def compare_function(name: str, old: ast.AST, new: ast.AST) -> FunctionChange:
    change = FunctionChange(name)
    before, after = _conditions(old), _conditions(new)
    change.conditions_added = sorted(after - before)
    change.conditions_removed = sorted(before - after)
    change.gates = {c: what for c, what in _gates(new).items() if c in change.conditions_added}
    calls_before, calls_after = _calls(old), _calls(new)
    change.calls_added = sorted(calls_after - calls_before)
    change.calls_removed = sorted(calls_before - calls_after)
    old_numbers, new_numbers = _numbers(old), _numbers(new)
    if len(old_numbers) == len(new_numbers):
        change.numbers = [(a, b) for a, b in zip(old_numbers, new_numbers) if a != b]
    change.strings = sorted(_strings(new) - _strings(old))
    change.strings_removed = sorted(_strings(old) - _strings(new))
    # Only assignments the old function had nowhere: code moved under a new condition is told by the condition.
    before_assigned, after_assigned = _assignments(old), _assignments(new, dict_pairs(old))
    change.assignments = sorted(((text, under) for text, under in after_assigned.items()
                                 if text not in before_assigned), key=lambda item: not is_constant_setting(item[0]))
    change.raises_added = sorted(_raised(new) - _raised(old))
    old_lines, new_lines = ast.unparse(old).splitlines(), ast.unparse(new).splitlines()
    change.lines = sum(1 for line in difflib.ndiff(old_lines, new_lines) if line[:1] in "+-")
    return change


def fits(text: str) -> bool:
    """Whether a code fragment is short enough to quote whole in prose."""
    return len(" ".join(text.split())) <= MAX_CODE


def _conditions_phrase(verb: str, conditions: list[str]) -> str:
    """``adds the condition `x``` for short ones; a long one is counted, not cut off."""
    shown = [c for c in conditions if fits(c)][:2]
    if len(shown) == len(conditions):
        return f"{verb} the condition{'s' if len(shown) > 1 else ''} " + " and ".join(code(c) for c in shown)
    if not shown:
        return f"{verb} {len(conditions)} condition{'s' if len(conditions) > 1 else ''}"
    return f"{verb} the condition {code(shown[0])} and {len(conditions) - 1} more"


def rewritten_condition(before: str, after: str) -> str:
    """A long condition rewritten, told by the words it gained and lost (when they are short enough to quote)."""
    old, new = " ".join(before.split()), " ".join(after.split())
    gained, lost = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            gained.append(new[j1:j2])
        if tag in ("replace", "delete"):
            lost.append(old[i1:i2])
    gained, lost = _words(gained), _words(lost)
    parts = []
    if gained and len(gained) <= 2 and fits(" ".join(gained)):
        parts.append("adding " + " and ".join(code(g) for g in gained))
    if lost and len(lost) <= 2 and fits(" ".join(lost)):
        parts.append("dropping " + " and ".join(code(g) for g in lost))
    return "rewrites a condition" + (f", {' and '.join(parts)}," if parts else "")


def _words(pieces: list[str]) -> list[str]:
    """Changed stretches of a condition that say something: stray brackets and spaces dropped."""
    kept = []
    for piece in pieces:
        piece = piece.strip()
        while piece[:1] == "(" and piece.count("(") > piece.count(")"):
            piece = piece[1:].strip()
        while piece[-1:] == "(" or (piece[-1:] == ")" and piece.count(")") > piece.count("(")):
            piece = piece[:-1].strip()
        if re.search(r"[A-Za-z0-9]", piece):
            kept.append(piece)
    return kept


def _atoms(condition: str) -> set[str]:
    """What a condition tests, piece by piece: its calls (``current_platform.is_xpu()``), its comparisons
    (``M <= 64``) and the names it reads, as written."""
    try:
        tree = ast.parse(condition, mode="eval")
    except SyntaxError:
        return set()
    atoms = set()
    for sub in ast.walk(tree):
        if isinstance(sub, ast.Call):
            atoms.add(ast.unparse(sub))
        elif isinstance(sub, ast.Compare):
            atoms.add(ast.unparse(sub))
    return {a for a in atoms if fits(a)}


def _most_telling(atoms: set[str]) -> list[str]:
    """Atoms that are not part of another atom of the same set (the comparison rather than the call inside it),
    shortest first."""
    outer = [a for a in atoms if not any(a != b and a in b for b in atoms)]
    return sorted(outer, key=lambda a: (len(a), a))[:2]


def tested_instead(added: list[str], removed: list[str]) -> str:
    """Conditions too long to quote told by what they now test that they did not, and what they stopped testing:
    "now checks `x.is_cuda()` where it checked `x.is_xpu()`"; empty when neither side names anything."""
    before = set().union(*map(_atoms, removed)) if removed else set()
    after = set().union(*map(_atoms, added)) if added else set()
    gained, lost = _most_telling(after - before), _most_telling(before - after)
    if gained and lost:
        return f"now checks {_join_code(gained)} where it checked {_join_code(lost)}"
    if gained:
        return f"now also checks {_join_code(gained)}"
    if lost:
        return f"no longer checks {_join_code(lost)}"
    return ""


def is_constant_setting(text: str) -> bool:
    """Whether an assignment sets a constant (a number, a string, a dict of them): a tuning value, the likeliest
    mechanism, rather than a computation."""
    try:
        value = ast.parse(text.replace(", ...}", "}")).body[0].value
    except (SyntaxError, IndexError, AttributeError):
        return False
    return all(isinstance(sub, (ast.Constant, ast.Dict, ast.Tuple, ast.List, ast.UnaryOp, ast.USub, ast.Load))
               for sub in ast.walk(value))


def assignment_phrase(assignments: list[tuple[str, str]]) -> str:
    """``sets `num_stages = 4` when `M <= 64``` for the first short assignment the function gained."""
    shown = [(text, under) for text, under in assignments if fits(text)]
    if not shown:
        return ""
    text, under = shown[0]
    when = f" when {code(under)}" if under and fits(under) else ""
    more = f" (and {len(assignments) - 1} more assignment{'s' if len(assignments) > 2 else ''})" \
        if len(assignments) > 1 else ""
    return f"sets {code(text)}{when}{more}"


def text_change(removed: list[str], added: list[str]) -> str:
    """A message reworded, told by the words it lost and gained: "changes the text `90` to `100`"."""
    if not removed or not added:
        return ""
    old, new = " ".join(removed).split(), " ".join(added).split()
    lost, gained = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            lost.append(" ".join(old[i1:i2]))
            gained.append(" ".join(new[j1:j2]))
    pairs = [(a, b) for a, b in zip(lost, gained) if a and b]
    if not pairs or len(pairs) > 2 or not all(fits(a) and fits(b) for a, b in pairs):
        return ""
    return "changes the text " + " and ".join(f"{code(a)} to {code(b)}" for a, b in pairs)


def _sentence_for(change: FunctionChange) -> str:
    parts = []
    # What the function now does first (a constant it sets, under a condition), then the conditions themselves;
    # a computed value is told by its calls, or last when nothing else says what changed.
    setting = assignment_phrase(change.assignments)
    constant = bool(setting) and is_constant_setting(change.assignments[0][0])
    if constant:
        parts.append(setting)
    told_conditions = {under for _, under in change.assignments[:1]} if constant else set()
    added = [c for c in change.conditions_added if c not in told_conditions]
    removed = change.conditions_removed
    if added and removed and len(added) == 1 and len(removed) == 1:
        before, after = removed[0], added[0]
        parts.append(f"rewrites the condition {code(before)} as {code(after)}" if fits(before) and fits(after)
                     else rewritten_condition(before, after))
    elif (added or removed) and not all(fits(c) for c in added + removed) and tested_instead(added, removed):
        parts.append(tested_instead(added, removed))
    else:
        if added:
            parts.append(_conditions_phrase("adds", added))
        if removed:
            parts.append(_conditions_phrase("removes", removed))
    if change.raises_added and len(parts) < 2 and not change.gates:
        parts.append("now raises " + " or ".join(code(name) for name in change.raises_added[:2]))
    told = " ".join(added + removed)
    numbers = [(a, b) for a, b in change.numbers if not (a in told and b in told)]  # a rewrite already says them
    if numbers and len(numbers) <= 2:  # more is code moved around, not a constant changed
        parts.append("changes " + " and ".join(f"{a} to {b}" for a, b in numbers))
    # A call that an added condition makes is told by the condition already.
    calls_added = [c for c in change.calls_added if fits(c) and not any(c in t for t in change.conditions_added)]
    calls_removed = [c for c in change.calls_removed if fits(c)]
    if calls_added and calls_removed and len(parts) < 2:
        parts.append("replaces calls to " + _join_code([c + "()" for c in calls_removed[:2]]) + " with "
                     + _join_code([c + "()" for c in calls_added[:2]]))
    elif calls_added and len(parts) < 2:
        parts.append("adds calls to " + _join_code([c + "()" for c in calls_added[:3]]))
    elif calls_removed and len(parts) < 2:
        parts.append("removes calls to " + _join_code([c + "()" for c in calls_removed[:3]]))
    if setting and not constant and not parts:
        parts.append(setting)
    if change.strings and not parts:
        reworded = text_change(change.strings_removed, change.strings)
        if reworded:
            parts.append(reworded)
        elif fits(repr(change.strings[0])):
            parts.append(f"rewrites the text {code(repr(change.strings[0]))}")
    if not parts:
        parts.append(f"edits {change.lines} line{'s' if change.lines != 1 else ''}")
    return " and ".join(parts) + f" in {code(change.name + '()')}" + _gate_clause(change, parts)


def _gate_clause(change: FunctionChange, parts: list[str]) -> str:
    """What the one condition a function gained gates (", under which it can raise `ValueError`"), when the
    sentence says nothing else that the clause could be read to belong to."""
    if len(parts) != 1 or len(change.conditions_added) != 1 or change.conditions_removed:
        return ""
    gate = change.gates.get(change.conditions_added[0])
    return f", under which {gate}" if gate and fits(change.conditions_added[0]) else ""


def _join_code(fragments: list[str]) -> str:
    quoted = [code(f) for f in fragments]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def describe_file(path: str, old_text: str | None, new_text: str | None) -> list[str]:
    """Phrases saying what changed in one file (empty when nothing the grader can name changed)."""
    name = Path(path).name
    if new_text is None:
        return [f"deletes {code(path)}"]
    try:
        new = ast.parse(new_text)
    except SyntaxError as exc:
        return [f"leaves {code(name)} unparsable (line {exc.lineno}: {exc.msg})"]
    try:
        old = ast.parse(old_text) if old_text is not None else ast.Module(body=[], type_ignores=[])
    except SyntaxError:
        old = ast.Module(body=[], type_ignores=[])
    before, after = _functions(old), _functions(new)
    if path.startswith("tests/") or name.startswith("test_"):
        return _describe_tests(path, before, after, old_text is None)
    phrases = []
    added = [n for n in after if n not in before]
    tests = [n for n in added if n.rsplit(".", 1)[-1].startswith("test_")]
    kernels = [n for n in added if _is_kernel(after[n])]
    helpers = [n for n in added if n not in tests and n not in kernels]
    if old_text is None:
        phrases.append(f"adds {code(path)}")
    if tests:
        phrases.append(f"adds {len(tests)} test{'s' if len(tests) != 1 else ''} in {code(name)}")
    if kernels:
        phrases.append("adds the Triton kernel" + ("s " if len(kernels) > 1 else " ")
                       + ", ".join(code(k) for k in kernels[:3]))
    if helpers and old_text is not None:
        phrases.append("adds " + ", ".join(code(h + "()") for h in helpers[:3]))
    removed = [n for n in before if n not in after]
    if removed:
        phrases.append("removes " + ", ".join(code(r + "()") for r in removed[:3]))
    changed = [compare_function(n, before[n], after[n]) for n in before
               if n in after and ast.dump(before[n]) != ast.dump(after[n])]
    for change in sorted(changed, key=FunctionChange.weight, reverse=True)[:MAX_FUNCTIONS]:
        new_constexprs = _constexprs(after[change.name]) - _constexprs(before[change.name])
        sentence = _sentence_for(change)
        if new_constexprs:
            sentence += ", a kernel given the constexpr " + ", ".join(code(c) for c in sorted(new_constexprs))
        phrases.append(sentence)
    if not phrases and ast.dump(old) != ast.dump(new):
        phrases.append(f"edits module-level code of {code(name)}")
    return phrases


def _describe_tests(path: str, before: dict, after: dict, new_file: bool) -> list[str]:
    tests = [n for n in after if n.rsplit(".", 1)[-1].startswith("test_")]
    added = [n for n in tests if n not in before]
    edited = [n for n in tests if n in before and ast.dump(before[n]) != ast.dump(after[n])]
    parts = []
    if added:
        parts.append(f"adds {len(added)} test{'s' if len(added) != 1 else ''}")
    if edited:
        parts.append(f"edits {len(edited)}" if added else f"edits {len(edited)} test{'s' if len(edited) != 1 else ''}")
    where = code(Path(path).name)
    if not parts:
        return [f"{'adds' if new_file else 'edits'} the test file {where}"]
    return [" and ".join(parts) + f" in {where}"]


def telling_rank(phrase: str) -> int:
    """How much a phrase says about what the change does, lower first: a changed function's conditions, values,
    raises and numbers; a kernel added; a function added or removed, a file added; tests; a bare count of lines
    edited."""
    if re.match(r"edits \d+ lines? in |edits module-level code", phrase):
        return 4
    if re.match(r"(adds|edits) (\d+ tests?|the test file)", phrase):
        return 3
    if phrase.startswith(("adds `", "removes `")):
        return 2
    if phrase.startswith(("adds the Triton kernel", "deletes ", "changes the text ")):
        return 1
    return 0


def describe_tree(base: Path, tree: Path, paths: list[str]) -> str:
    """One clause for the whole patch, e.g. "in `f()` it adds the condition `x.is_xpu()`; adds 2 tests ...";
    empty when no Python file changed."""
    phrases = []
    # Source before tests: what the patch changes in vLLM is what a reader wants first.
    for path in sorted(paths, key=lambda p: (p.startswith("tests/"), p)):
        if not path.endswith(".py"):
            continue
        old_file, new_file = base / path, tree / path
        old = old_file.read_text(errors="replace") if old_file.is_file() else None
        new = new_file.read_text(errors="replace") if new_file.is_file() else None
        if old == new:
            continue
        try:
            phrases += describe_file(path, old, new)
        except Exception as exc:  # noqa: BLE001 - ast.parse can raise SystemError/RecursionError on odd input
            # A pathological file: say so rather than fail the grading.
            phrases.append(f"changes {code(Path(path).name)} (not described: {type(exc).__name__})")
    # What tells the mechanism (a value set, a condition, a raise, a number) before what only says where.
    phrases = sorted(phrases, key=telling_rank)
    more = len(phrases) - SHOWN_PHRASES
    return "; ".join(phrases[:SHOWN_PHRASES]) + \
        (f"; and makes {more} further change{'s' if more != 1 else ''}" if more > 0 else "")
