"""mutate: rubric strength by mutation.

Mutants are derived from a task's reference fix (``reference_impl/<task>.diff``), each one a diff against the
task's base that the hidden tests should tell apart from the reference. Operators (the id prefix):

- ``drop-file``: leave out one file of the reference;
- ``drop-hunk``: leave out one hunk (files with more than one hunk; the one-hunk case is ``drop-file``);
- ``revert-condition``: in a hunk where a removed and an added line are both conditions of the same kind
  (``if``/``elif``/``while``/``assert``/a boolean ``return``), put the removed condition back in place of the
  added one;
- ``and-to-or``, ``or-to-and``, ``drop-not``, ``is-not-to-is``, ``is-to-is-not``, ``eq-to-ne``, ``ne-to-eq``,
  ``shift-boundary`` (``>=`` -> ``>``, ``>`` -> ``>=``, ``<=`` -> ``<``, ``<`` -> ``<=``), ``widen-platform``
  (a platform predicate replaced from ``PLATFORM_WIDENING``), ``capability-down``/``capability-up`` (a
  compute-capability constant moved one step along ``CAPABILITY_LADDER``): negate or weaken a new condition;
- ``swap-operands``: ``a - b`` -> ``b - a``, ``a / b`` -> ``b / a``, ``a // b`` -> ``b // a``,
  ``dot(a, b)`` -> ``dot(b, a)`` in an added line;
- ``delete-statement``: remove one added line that is a complete simple statement (``pass`` takes its place
  where the block would be left empty); a one-line call statement is removed this way;
- ``not-in-to-in``, ``in-to-not-in`` (a membership test negated, never a ``for``'s ``in``), ``drop-element``
  (one element left out of a literal set, tuple or list that a membership test reads);
- ``shift-constant``: an integer constant in a comparison moved by one either way (``n`` -> ``n+1``, ``n-1``);
- ``drop-guard`` (an added ``if`` whose block only returns, raises, continues or breaks, dropped whole, on one
  line or several) and ``drop-exit`` (the exit of a one-line guard, or an added ``return``/``raise`` that spans
  lines, replaced by ``pass``);
- ``widen-except`` (``except X`` -> ``except Exception``, an ``as`` name kept) and ``drop-handler`` (an added
  handler deleted where its ``try`` keeps another, else replaced by ``finally: pass``, so the exception goes on);
- ``delete-call``: an added call statement that spans lines replaced by ``pass``;
- the case space a fix accepts (``CASE_SPACE_OPERATORS``): ``narrow-alias`` (``x.startswith(p)`` or
  ``x.endswith(p)`` -> ``x == p``, a substring test ``"p" in x`` -> ``x == "p"``, ``x.lower()`` in a comparison ->
  ``x``; a family of values losing a member is ``drop-element``, which also takes a member out of a literal
  written one member a line and out of a collection of strings assigned to a name), ``drop-site`` (a condition
  term, or a whole ``if`` block, that the fix adds at two places or more, dropped at one of them at a time),
  ``widen-predicate`` (an added ``if``/``elif`` condition -> ``True``, ``return <condition>`` -> ``return True``,
  the body of a boolean function the fix writes or changes -> ``return True``), ``shift-bound`` (a slice bound or
  ``range`` stop moved by one either way), ``narrow-mask`` (one term of ``mask=a & b & ...`` dropped at a time:
  one dimension, or one of K and V, no longer bounded), ``drop-mask`` (a ``mask=`` keyword, and its ``other=``,
  dropped from a call) and ``drop-clamp`` (``torch.clamp(x, ...)``, ``x.clamp(...)``, ``min(max(x, lo), hi)``
  -> ``x``, and each bound of a nested one dropped). Statements with a mask or a clamp are rewritten whole (a call
  over several lines becomes one line).

Every file of the reference can be left out (``drop-file``, ``drop-hunk``); the other operators change only the
added lines of Python files, and only their code: comments, string literals and docstrings are masked out. A line
mutant that leaves its file unparsable (checked against the base's file where it is known) is never made. Every
mutant is built on the diff text (``grader.pipeline.diffparse``) with its hunk headers recounted, so ``git apply`` takes
it as it is.

A mutant id is ``<operator>:<path>[:h<hunk>[:l<line>[:<k>]]]`` with 0-based hunk index within the file,
0-based line index within the hunk body, and ``k`` (1, 2, ...) the second and later matches of one operator on
that line: ids depend on the reference diff alone, so they stay stable between runs. Mutants come whole files
first, then hunks, then each hunk's line mutants by operator in the order above; two that give the same diff
text keep the first.

Grading (``run_mutate``): the reference and each mutant are graded as ``grade`` grades a candidate, through
``many_candidates.grade_many`` (CPU evidence, the local backend, the evidence cache unless ``--no-cache``, no
results store). Only criteria *met* on the reference count; a mutant is *caught* when at least one of them is no
longer met (``partial`` or ``unmet``), *not_applicable* when it does not apply cleanly, no hidden test ran, or
every evaluated test errors on import, *equivalent* when it is missed but listed in
``rubrics/<task>/equivalent-mutants.toml`` (``"<mutant-id>" = "reason"``; a key with ``*``, ``?`` or ``[`` is an
``fnmatch`` pattern), and *missed* otherwise; *error* where its grading broke, and *not_graded* where ``--limit``
left it out (source files under ``vllm/`` are graded first). Mutation score = caught / (graded - not_applicable -
equivalent), where graded counts neither errors nor those not graded.
"""

from __future__ import annotations

import ast
import copy
import difflib
import fnmatch
import functools
import json
import re
import sys
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from grader.core.environment import default_jobs
from grader.pipeline.diffparse import HUNK_HEADER, FileSection, Hunk, parse_sections, render
from grader.drive.many_candidates import QuietObserver

SCHEMA = "mutation/1"
CONDITION_KEYWORDS = ("if", "elif", "while", "assert", "return")
# Platform predicates and what each is widened (or shifted) to.
PLATFORM_WIDENING = {
    "is_xpu()": ("is_cuda_alike()",),
    "is_cuda()": ("is_cuda_alike()",),
    "is_rocm()": ("is_cuda_alike()",),
    "is_cuda_alike()": ("is_cuda()",),
    "is_cpu()": ("is_cuda_alike()",),
    "on_gfx950()": ("on_gfx9()",),
    "on_gfx942()": ("on_gfx9()",),
    "on_gfx90a()": ("on_gfx9()",),
    "on_gfx9()": ("on_gfx950()",),
    "on_gfx1x()": ("on_gfx9()",),
}
# Compute capabilities (major * 10 + minor) in order; a constant moves to its neighbour on either side.
CAPABILITY_LADDER = (70, 75, 80, 86, 89, 90, 100, 103, 110, 120)
CAPABILITY_CONTEXT = re.compile(r"capabilit|\bcap\b|\bcap_|\bsm_?\d|\bSM", re.I)
SWAP_CALLS = {"dot", "matmul", "mm", "bmm"}
BOOLEANISH = re.compile(r"\b(and|or|not|is|in)\b|[<>]=?|==|!=|\bTrue\b|\bFalse\b|\b(is|has|on|supports?)_\w*\(")
IMPORT_BROKEN = re.compile(r"\b(SyntaxError|IndentationError|TabError|ImportError|ModuleNotFoundError)\b")

# (operator, pattern, replacement) over the code of an added line; every match is one mutant.
TEXT_OPERATORS: tuple[tuple[str, re.Pattern, str], ...] = (
    ("and-to-or", re.compile(r"\band\b"), "or"),
    ("or-to-and", re.compile(r"\bor\b"), "and"),
    ("drop-not", re.compile(r"(?<!\bis )\bnot\s+(?!in\b)"), ""),
    ("is-not-to-is", re.compile(r"\bis\s+not\b"), "is"),
    ("is-to-is-not", re.compile(r"\bis\b(?!\s+not\b)"), "is not"),
    ("eq-to-ne", re.compile(r"=="), "!="),
    ("ne-to-eq", re.compile(r"!="), "=="),
)
# Operators that change the case space a fix accepts rather than its code's shape (the last ones tried).
CASE_SPACE_OPERATORS = ("narrow-alias", "drop-site", "widen-predicate", "shift-bound", "narrow-mask", "drop-mask",
                        "drop-clamp")
# Operators added after the ones above, in the order they are tried (a mutant both make keeps the first name).
LATER_OPERATORS = ("not-in-to-in", "in-to-not-in", "drop-element", "shift-constant", "drop-guard", "drop-exit",
                   "widen-except", "drop-handler", "delete-call", *CASE_SPACE_OPERATORS)
BOUNDARY = re.compile(r"(?<![<>=!\-])(>=|<=|>|<)(?![<>=])")
BOUNDARY_SHIFT = {">=": ">", ">": ">=", "<=": "<", "<": "<="}


# ---------------------------------------------------------------- derivation (pure)


@dataclass
class Mutant:
    id: str
    operator: str
    path: str
    hunk: int | None
    line: int | None
    description: str
    diff: str


def scan_code(text: str, state: str | None) -> tuple[list[bool], str | None]:
    """Which characters of ``text`` are code (not comment, string or docstring); ``state`` is an open ''' or \"\"\"."""
    mask = [False] * len(text)
    i = 0
    while i < len(text):
        if state:
            j = text.find(state, i)
            if j < 0:
                return mask, state
            i, state = j + 3, None
            continue
        ch = text[i]
        if ch == "#":
            break
        if ch in "'\"":
            if text.startswith(ch * 3, i):
                state, i = ch * 3, i + 3
                continue
            j = i + 1
            while j < len(text) and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        mask[i] = True
        i += 1
    return mask, state


def _bracket_delta(text: str, mask: list[bool]) -> int:
    return sum((ch in "([{") - (ch in ")]}") for ch, m in zip(text, mask) if m)


def state_at(source: str | None, line_no: int) -> tuple[str | None, int]:
    """(open triple quote or None, bracket depth) just before 1-based line ``line_no`` of ``source``."""
    state, depth = None, 0
    if not source:
        return None, 0
    for line in source.split("\n")[: max(0, line_no - 1)]:
        mask, state = scan_code(line, state)
        depth = max(0, depth + _bracket_delta(line, mask))
    return state, depth


def _code(text: str, mask: list[bool]) -> str:
    return "".join(ch if m else " " for ch, m in zip(text, mask))


def _is_code(mask: list[bool], text: str) -> bool:
    return any(m and not ch.isspace() for ch, m in zip(text, mask))


@dataclass
class _Line:
    tag: str          # " ", "-", "+", "\\"
    text: str         # without the tag
    mask: list[bool]  # code characters of text
    depth: int = 0    # bracket depth before the line (on its own side of the diff)
    after: int = 0    # bracket depth after it


def _annotate(hunk: Hunk, state: str | None, depth: int) -> list[_Line]:
    """Each body line with its code mask and bracket depths; old and new side are followed separately."""
    old_state = new_state = state
    old_depth = new_depth = depth
    out = []
    for raw in hunk.lines:
        tag, text = raw[:1], raw[1:]
        if tag == "\\":
            out.append(_Line(tag, text, [False] * len(text)))
            continue
        if tag in (" ", "+"):
            mask, new_state = scan_code(text, new_state)
            line = _Line(tag, text, mask, new_depth, max(0, new_depth + _bracket_delta(text, mask)))
            new_depth = line.after
        if tag in (" ", "-"):
            old_mask, old_state = scan_code(text, old_state)
            if tag == "-":
                line = _Line(tag, text, old_mask, old_depth, max(0, old_depth + _bracket_delta(text, old_mask)))
            old_depth = max(0, old_depth + _bracket_delta(text, old_mask))
        out.append(line)
    return out


def recount(section: FileSection, bodies: list[list[str] | None]) -> FileSection:
    """A copy of ``section`` with each hunk's body replaced (None drops it) and every header recounted.

    Old starts stay; each new start moves by how much the hunks before it changed their line balance, so
    ``git apply`` finds every header consistent.
    """
    hunks: list[Hunk] = []
    shift = 0
    for hunk, body in zip(section.hunks, bodies):
        m = HUNK_HEADER.match(hunk.header)
        old_start, new_start = int(m.group(1)), int(m.group(3))
        orig_delta = hunk.new_count - hunk.old_count
        if body is None or not any(line[:1] in "+-" for line in body):
            shift -= orig_delta
            continue
        old = sum(1 for line in body if line[:1] in (" ", "-"))
        new = sum(1 for line in body if line[:1] in (" ", "+"))
        header = f"@@ -{old_start},{old} +{new_start + shift},{new} @@{hunk.header[m.end():]}"
        hunks.append(Hunk(header, list(body), old, new, True))
        shift += (new - old) - orig_delta
    return FileSection(list(section.header), hunks, section.old_path, section.new_path, section.pre_blob)


def _render_with(sections: list[FileSection], index: int, replacement: FileSection | None) -> str:
    chosen = [s if i != index else replacement for i, s in enumerate(sections)]
    return render([s for s in chosen if s is not None])


def _line_mutant(sections, fi, hi, body, op, li, k, description) -> Mutant:
    section = sections[fi]
    bodies = [list(h.lines) for h in section.hunks]
    bodies[hi] = body
    new_section = recount(section, bodies)
    suffix = f":{k}" if k else ""
    diff = _render_with(sections, fi, new_section if new_section.hunks else None)
    return Mutant(f"{op}:{section.path}:h{hi}:l{li}{suffix}", op, section.path, hi, li, description, diff)


def _condition_kind(text: str, mask: list[bool]) -> str | None:
    code = _code(text, mask).strip()
    word = code.split(" ", 1)[0].rstrip(":")
    if word not in CONDITION_KEYWORDS:
        return None
    if word == "return" and not BOOLEANISH.search(code[len("return"):]):
        return None
    return word


def _blocks(lines: list[_Line]) -> list[list[int]]:
    """Indices of each run of changed ('-'/'+') lines."""
    blocks, current = [], []
    for i, line in enumerate(lines):
        if line.tag in "+-" and line.tag:
            current.append(i)
        elif line.tag == "\\":
            continue
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def _revert_pairs(lines: list[_Line]) -> list[tuple[int, int]]:
    """(added index, removed index) of condition pairs: same kind, in one change block, really changed."""
    pairs = []
    for block in _blocks(lines):
        removed = [i for i in block if lines[i].tag == "-" and _condition_kind(lines[i].text, lines[i].mask)]
        added = [i for i in block if lines[i].tag == "+" and _condition_kind(lines[i].text, lines[i].mask)]
        added_texts = {lines[i].text.strip() for i in added}
        removed_texts = {lines[i].text.strip() for i in removed}
        free = [i for i in removed if lines[i].text.strip() not in added_texts]
        for a in added:
            if lines[a].text.strip() in removed_texts:
                continue  # unchanged (re-indented) condition
            kind = _condition_kind(lines[a].text, lines[a].mask)
            same = [r for r in free if _condition_kind(lines[r].text, lines[r].mask) == kind]
            if not same:
                continue
            best = max(same, key=lambda r: difflib.SequenceMatcher(None, lines[r].text.strip(),
                                                                   lines[a].text.strip()).ratio())
            free.remove(best)
            pairs.append((a, best))
    return pairs


def _indent(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def _parse_line(stripped: str) -> tuple[ast.AST, int] | None:
    """Parse one added line on its own: (tree, line number the text is on), or None."""
    attempts = [(stripped, 1)]
    if stripped.endswith(":"):
        attempts += [(stripped + " pass", 1), ("if 0: pass\n" + stripped + " pass", 2),
                     ("try: pass\n" + stripped + " pass", 2)]
    if stripped.endswith(","):
        attempts.append(("(\n" + stripped + "\n)", 2))
    attempts.append(("(\n" + stripped + "\n)", 2))
    for text, line_no in attempts:
        try:
            return ast.parse(text), line_no
        except (SyntaxError, ValueError):
            continue
    return None


def _swap_sites(stripped: str) -> list[tuple[int, int, str, str]]:
    """(start, end, replacement, what) byte spans of non-commutative operations in ``stripped``."""
    parsed = _parse_line(stripped)
    if parsed is None:
        return []
    tree, line_no = parsed
    raw = stripped.encode()
    sites = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) != line_no or getattr(node, "end_lineno", None) != line_no:
            continue
        swapped = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Sub, ast.Div, ast.FloorDiv)):
            swapped = ast.BinOp(left=node.right, op=node.op, right=node.left)
        elif isinstance(node, ast.Call) and len(node.args) == 2 and not node.keywords and \
                not any(isinstance(a, ast.Starred) for a in node.args):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in SWAP_CALLS:
                swapped = ast.Call(func=node.func, args=[node.args[1], node.args[0]], keywords=[])
        if swapped is None:
            continue
        original = raw[node.col_offset:node.end_col_offset].decode()
        replacement = ast.unparse(swapped)
        if ast.dump(node.left if isinstance(node, ast.BinOp) else node.args[0]) == \
                ast.dump(node.right if isinstance(node, ast.BinOp) else node.args[1]):
            continue
        sites.append((node.col_offset, node.end_col_offset, replacement, original))
    return sorted(sites)


SIMPLE_STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return, ast.Raise, ast.Assert,
                     ast.Import, ast.ImportFrom, ast.Delete, ast.Break, ast.Continue)


def _is_simple_statement(stripped: str) -> bool:
    if not stripped or stripped.endswith(("\\", ":")):
        return False
    try:
        tree = ast.parse(stripped)
    except (SyntaxError, ValueError):
        return False
    if len(tree.body) != 1 or not isinstance(tree.body[0], SIMPLE_STATEMENTS):
        return False
    node = tree.body[0]
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return False  # a docstring or a bare constant
    if isinstance(node, ast.AnnAssign) and node.value is None:
        return False  # a bare annotation does nothing at run time
    return True


def _leaves_block_empty(lines: list[_Line], i: int) -> bool:
    """Whether removing new-side line ``i`` leaves the block it sits in with no statement."""
    new_side = [j for j, ln in enumerate(lines) if ln.tag in (" ", "+") and _is_code(ln.mask, ln.text)]
    pos = new_side.index(i)
    prev = lines[new_side[pos - 1]] if pos else None
    if prev is None or not _code(prev.text, prev.mask).rstrip().endswith(":"):
        return False
    width = len(_indent(lines[i].text))
    following = new_side[pos + 1] if pos + 1 < len(new_side) else None
    return following is None or len(_indent(lines[following].text)) < width


def _text_mutations(text: str, mask: list[bool]) -> list[tuple[str, str, str]]:
    """(operator, new text, description) for the condition operators on one added line."""
    out = []
    code = _code(text, mask)

    def spans(pattern):
        return [m for m in pattern.finditer(code) if all(mask[m.start():m.end()] or [False])]

    for op, pattern, repl in TEXT_OPERATORS:
        for m in spans(pattern):
            new = text[:m.start()] + repl + text[m.end():]
            found = m.group(0).strip()
            out.append((op, new, f"{found!r} -> {repl.strip()!r}" if repl else f"drop {found!r}"))
    for m in spans(BOUNDARY):
        new = text[:m.start()] + BOUNDARY_SHIFT[m.group(0)] + text[m.end():]
        out.append(("shift-boundary", new, f"{m.group(0)!r} -> {BOUNDARY_SHIFT[m.group(0)]!r}"))
    for predicate, wider in PLATFORM_WIDENING.items():
        for m in spans(re.compile(r"(?<![\w])" + re.escape(predicate))):
            for w in wider:
                out.append(("widen-platform", text[:m.start()] + w + text[m.end():], f"{predicate} -> {w}"))
    if CAPABILITY_CONTEXT.search(code):
        for m in spans(re.compile(r"(?<![\w.])(\d+)(?![\w.])")):
            value = int(m.group(1))
            if value not in CAPABILITY_LADDER:
                continue
            k = CAPABILITY_LADDER.index(value)
            for op, j in (("capability-down", k - 1), ("capability-up", k + 1)):
                if 0 <= j < len(CAPABILITY_LADDER):
                    step = CAPABILITY_LADDER[j]
                    out.append((op, text[:m.start()] + str(step) + text[m.end():], f"{value} -> {step}"))
    return out


# ---------------------------------------------------------------- membership, guards, handlers, constants, calls

EXIT_STATEMENTS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
BROAD_EXCEPTIONS = {"Exception", "BaseException"}
EXCEPT_CLAUSE = re.compile(r"^(\s*)except\b\s*(?P<what>[^:]*?)(?P<name>\s+as\s+\w+)?\s*:(?P<rest>.*)$")


def _line_sites(stripped: str):
    """The nodes of one parsed added line that lie on it wholly, with the line's bytes: (nodes, raw)."""
    parsed = _parse_line(stripped)
    if parsed is None:
        return [], stripped.encode()
    tree, line_no = parsed
    nodes = [n for n in ast.walk(tree)
             if getattr(n, "lineno", None) == line_no and getattr(n, "end_lineno", None) == line_no]
    return nodes, stripped.encode()


def _compare_count(stripped: str, op_type) -> int:
    nodes, _ = _line_sites(stripped)
    return sum(isinstance(op, op_type) for n in nodes if isinstance(n, ast.Compare) for op in n.ops)


def _membership_mutations(text: str, mask: list[bool]) -> list[tuple[str, str, str]]:
    """``in`` <-> ``not in`` in a comparison (never a ``for``'s ``in``), and each element dropped from a literal
    set, tuple or list that a membership test reads."""
    out = []
    code = _code(text, mask)
    stripped, indent = text.strip(), _indent(text)
    for m in re.finditer(r"\bnot\s+in\b", code):
        new = text[:m.start()] + "in" + text[m.end():]
        if _compare_count(new.strip(), ast.NotIn) < _compare_count(stripped, ast.NotIn):
            out.append(("not-in-to-in", new, "'not in' -> 'in'"))
    for m in re.finditer(r"(?<!\bnot )\bin\b", code):
        new = text[:m.start()] + "not in" + text[m.end():]
        if _compare_count(new.strip(), ast.NotIn) > _compare_count(stripped, ast.NotIn):
            out.append(("in-to-not-in", new, "'in' -> 'not in'"))
    nodes, raw = _line_sites(stripped)
    for node in nodes:
        if not isinstance(node, ast.Compare) or not any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            continue
        for literal in node.comparators:
            if not isinstance(literal, (ast.Set, ast.Tuple, ast.List)) or len(literal.elts) < 2:
                continue
            for k, element in enumerate(literal.elts):
                kept = [e for j, e in enumerate(literal.elts) if j != k]
                smaller = type(literal)(elts=kept, ctx=ast.Load()) if not isinstance(literal, ast.Set) \
                    else ast.Set(elts=kept)
                new = (raw[:literal.col_offset] + ast.unparse(smaller).encode() + raw[literal.end_col_offset:])
                out.append(("drop-element", indent + new.decode(),
                            f"drop {ast.unparse(element)} from {ast.unparse(literal)}"))
    return out


def _constant_mutations(text: str) -> list[tuple[str, str, str]]:
    """An integer constant compared with something moved by one either way: n -> n+1, n -> n-1."""
    out = []
    nodes, raw = _line_sites(text.strip())
    for node in nodes:
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            if not isinstance(operand, ast.Constant) or type(operand.value) is not int:
                continue
            for step in (1, -1):
                value = operand.value + step
                new = raw[:operand.col_offset] + str(value).encode() + raw[operand.end_col_offset:]
                out.append(("shift-constant", _indent(text) + new.decode(), f"{operand.value} -> {value}"))
    return out


def _except_mutation(text: str, mask: list[bool]) -> tuple[str, str, str] | None:
    """``except X`` (X narrower than Exception) widened to ``except Exception``, its ``as`` name kept."""
    m = EXCEPT_CLAUSE.match(_code(text, mask))
    if m is None or not m.group("what").strip() or m.group("what").strip() in BROAD_EXCEPTIONS:
        return None
    new = f"{m.group(1)}except Exception{m.group('name') or ''}" + text[m.start("rest") - 1:]
    return "widen-except", new, f"except {m.group('what').strip()} -> except Exception"


def _new_side(lines: list[_Line]) -> list[int]:
    """Indices of the lines of the new side that hold code."""
    return [i for i, ln in enumerate(lines) if ln.tag in (" ", "+") and _is_code(ln.mask, ln.text)]


def _statement_span(lines: list[_Line], i: int) -> list[int] | None:
    """The new-side lines of the statement that starts on line ``i`` (brackets continue it, over string-only
    lines too); None when it starts inside brackets or runs past the hunk."""
    if lines[i].depth:
        return None
    span = [i]
    following = [j for j, ln in enumerate(lines) if j > i and ln.tag in (" ", "+")]
    while lines[span[-1]].after:
        if not following:
            return None
        span.append(following.pop(0))
    return span


def _block_body(lines: list[_Line], header: int, at_eof: bool) -> tuple[list[int], int | None] | None:
    """The new-side lines under the compound statement on line ``header`` (comments and strings among them)
    and the line that ends the block (None at the end of the file); None when the block runs past a hunk that
    does not reach the end of the file (what follows it cannot be seen), or holds no code."""
    width = len(_indent(lines[header].text))
    span = _statement_span(lines, header) or [header]
    ends = [j for j in _new_side(lines) if j > span[-1] and not lines[j].depth
            and len(_indent(lines[j].text)) <= width]
    if not ends and not at_eof:
        return None
    end = ends[0] if ends else None
    body = [j for j, ln in enumerate(lines) if span[-1] < j < (end if end is not None else len(lines))
            and ln.tag in (" ", "+")]
    if not any(j in _new_side(lines) for j in body):
        return None
    return body, end


def _code_at(lines: list[_Line], i: int | None) -> str:
    return _code(lines[i].text, lines[i].mask).strip() if i is not None else ""


def _edited_body(hunk: Hunk, drop: set[int], replace: dict[int, str] | None = None) -> list[str]:
    """The hunk's body with new-side lines dropped or replaced: an added line goes, a context line becomes a
    removed one (the mutant takes it out of the base)."""
    replace = replace or {}
    body = []
    for i, raw in enumerate(hunk.lines):
        tag, text = raw[:1], raw[1:]
        if i in drop or i in replace:
            if tag == " ":
                body.append("-" + text)
            if i in replace:
                body.append("+" + replace[i])
        else:
            body.append(raw)
    return body


def _parsed_statement(lines: list[_Line], span: list[int]) -> ast.stmt | None:
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent("\n".join(lines[j].text for j in span)))
    except (SyntaxError, ValueError):
        return None
    return tree.body[0] if len(tree.body) == 1 else None


def _structure_mutations(hunk: Hunk, lines: list[_Line], at_eof: bool) -> list[tuple[str, int, list[str], str]]:
    """(operator, line, body, description) for the operators that take out or reshape whole statements of an
    added line: a guard (``if ...:`` that only returns or raises) dropped, a guard's exit replaced by ``pass``,
    an exception handler dropped, a call statement spanning lines deleted."""
    out = []
    for i in _new_side(lines):
        line = lines[i]
        if line.tag != "+" or line.depth:
            continue
        code = _code(line.text, line.mask).strip()
        indent = _indent(line.text)
        if code.startswith("if ") and code.endswith(":"):
            out.extend(_guard_mutations(hunk, lines, i, at_eof))
        elif code.startswith("if ") and ":" in code:
            out.extend(_inline_guard_mutations(hunk, lines, i))
        elif code.startswith("except") and code.endswith(":"):
            dropped = _dropped_handler(hunk, lines, i, at_eof)
            if dropped is not None:
                out.append(("drop-handler", i, dropped, f"drop the handler {line.text.strip()!r}"))
        else:
            span = _statement_span(lines, i)
            statement = _parsed_statement(lines, span) if span and len(span) > 1 else None
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
                out.append(("delete-call", i, _edited_body(hunk, set(span[1:]), {span[0]: indent + "pass"}),
                            f"delete the call {line.text.strip()!r}..."))
            elif isinstance(statement, (ast.Return, ast.Raise)):
                out.append(("drop-exit", i, _edited_body(hunk, set(span[1:]), {span[0]: indent + "pass"}),
                            f"{line.text.strip()!r}... -> pass"))
    return out


def _guard_mutations(hunk: Hunk, lines: list[_Line], i: int, at_eof: bool) -> list[tuple[str, int, list[str], str]]:
    """An ``if`` block whose statements all leave (return, raise, continue, break): the whole guard dropped."""
    found = _block_body(lines, i, at_eof)
    if found is None:
        return []
    body, end = found
    if _code_at(lines, end).startswith(("elif", "else")):
        return []
    statements = _parsed_statement(lines, [i, *body])
    if not isinstance(statements, ast.If) or not all(isinstance(s, EXIT_STATEMENTS) for s in statements.body):
        return []
    return [("drop-guard", i, _edited_body(hunk, {i, *body}), f"drop the guard {lines[i].text.strip()!r}")]


def _inline_guard_mutations(hunk: Hunk, lines: list[_Line], i: int) -> list[tuple[str, int, list[str], str]]:
    """``if c: return x`` on one line: dropped whole, and its exit replaced by ``pass``."""
    stripped = lines[i].text.strip()
    try:
        tree = ast.parse(stripped)
    except (SyntaxError, ValueError):
        return []
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, ast.If) or node.orelse or len(node.body) != 1 or \
            not isinstance(node.body[0], EXIT_STATEMENTS):
        return []
    exit_at = node.body[0].col_offset
    raw = stripped.encode()
    passed = _indent(lines[i].text) + (raw[:exit_at] + b"pass").decode()
    return [("drop-guard", i, _edited_body(hunk, {i}), f"drop the guard {stripped!r}"),
            ("drop-exit", i, _edited_body(hunk, set(), {i: passed}), f"{stripped!r}: its exit -> pass")]


def _dropped_handler(hunk: Hunk, lines: list[_Line], i: int, at_eof: bool) -> list[str] | None:
    """The body with the handler on line ``i`` taken out: deleted where another handler of its ``try`` remains,
    else turned into ``finally: pass`` (the exception goes on, and the ``try`` stays a statement)."""
    found = _block_body(lines, i, at_eof)
    if found is None:
        return None
    body, end = found
    width = len(_indent(lines[i].text))
    same_level = [j for j in _new_side(lines) if len(_indent(lines[j].text)) == width and not lines[j].depth]
    before = [j for j in same_level if j < i]
    previous = _code_at(lines, before[-1] if before else None)
    following = _code_at(lines, end)
    if following.startswith("except") or previous.startswith("except"):
        return _edited_body(hunk, {i, *body})
    if following.startswith(("else", "finally")) or not previous.startswith("try"):
        return None
    pad = _indent(lines[next(j for j in body if j in _new_side(lines))].text)
    return _edited_body(hunk, set(body[1:]), {i: _indent(lines[i].text) + "finally:", body[0]: pad + "pass"})


# ---------------------------------------------------------------- the case space: aliases, sites, predicates, masks

# Calls that bound a value: a clamp dropped leaves the value.
CLAMP_CALLS = {"clamp", "clamp_", "clip", "clip_"}
MIN_CALLS, MAX_CALLS = {"min", "minimum", "fmin"}, {"max", "maximum", "fmax"}
CASE_FOLDS = {"lower", "upper", "casefold"}
PREDICATE_NAME = re.compile(r"^_*(is|has|supports?|can|should|use|uses|on|needs?)_\w*$")
# ``name.startswith("literal")`` on a line that does not parse alone (a condition continued on the next line).
PREFIX_TEST = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\.(startswith|endswith)"
                         r"\(\s*(\"[^\"\\]*\"|'[^'\\]*')\s*\)")


def _call_name(node: ast.AST) -> str:
    if not isinstance(node, ast.Call):
        return ""
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def _spliced(raw: bytes, node: ast.AST, replacement: str) -> str:
    return (raw[:node.col_offset] + replacement.encode() + raw[node.end_col_offset:]).decode()


def _source_of(raw: bytes, node: ast.AST) -> str:
    return raw[node.col_offset:node.end_col_offset].decode()


def _alias_mutations(text: str, mask: list[bool]) -> list[tuple[str, str, str]]:
    """A test that accepts a family of spellings narrowed to one: ``x.startswith(p)`` / ``x.endswith(p)`` ->
    ``x == p`` (``x in (p, q)`` for a tuple of prefixes), ``"p" in x`` (a substring test) -> ``x == "p"``, and
    ``x.lower()`` (``upper``, ``casefold``) in a comparison -> ``x``. On a line that does not parse alone, a
    dotted name's prefix test with a literal is still narrowed, in brackets."""
    out = []
    nodes, raw = _line_sites(text.strip())
    indent = _indent(text)
    if not nodes:
        for m in PREFIX_TEST.finditer(text):
            if mask[m.start()]:
                new = f"({m.group(1)} == {m.group(3)})"
                out.append(("narrow-alias", text[:m.start()] + new + text[m.end():], f"{m.group(0)} -> {new}"))
        return out
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith") and len(node.args) == 1 and not node.keywords:
            arg, subject = node.args[0], _source_of(raw, node.func.value)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                new = f"{subject} == {_source_of(raw, arg)}"
            elif isinstance(arg, ast.Tuple) and arg.elts:
                new = f"{subject} in {_source_of(raw, arg)}"
            else:
                continue
            out.append(("narrow-alias", indent + _spliced(raw, node, new), f"{_source_of(raw, node)} -> {new}"))
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In) and \
                isinstance(node.left, ast.Constant) and isinstance(node.left.value, str) and \
                not isinstance(node.comparators[0], (ast.Set, ast.Tuple, ast.List, ast.Dict)):
            new = f"{_source_of(raw, node.comparators[0])} == {_source_of(raw, node.left)}"
            out.append(("narrow-alias", indent + _spliced(raw, node, new), f"{_source_of(raw, node)} -> {new}"))
        elif isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                if _call_name(operand) in CASE_FOLDS and isinstance(operand.func, ast.Attribute) and \
                        not operand.args and not operand.keywords:
                    new = _source_of(raw, operand.func.value)
                    out.append(("narrow-alias", indent + _spliced(raw, operand, new),
                                f"{_source_of(raw, operand)} -> {new}"))
    return out


def _condition_test(stripped: str) -> tuple[ast.expr, bytes] | None:
    """The test of the ``if``/``elif`` on one line (its header, or the whole line ``if c: return``). A ``while`` is
    left alone: a loop condition made true or weaker would mostly make a mutant that hangs, which tells nothing."""
    nodes, raw = _line_sites(stripped)
    for node in nodes:
        if isinstance(node, ast.If) and node.test.lineno == node.test.end_lineno == node.lineno:
            return node.test, raw
    return None


def _condition_terms(stripped: str) -> list[tuple[ast.BoolOp, ast.expr, bytes]]:
    """(boolean operation, one of its terms) in the condition of one line (``if``, ``elif``, ``assert`` or
    ``return``)."""
    code = stripped.split(" ", 1)[0].rstrip(":")
    if code not in CONDITION_KEYWORDS or code == "while":
        return []
    nodes, raw = _line_sites(stripped)
    found = _condition_test(stripped)
    if found is not None:
        nodes, raw = [n for n in ast.walk(found[0])], found[1]
    return [(node, term, raw) for node in nodes if isinstance(node, ast.BoolOp) for term in node.values]


def _repeated_sites(sections: list[FileSection]) -> tuple[set[str], set[str]]:
    """What the diff adds at two places or more: condition terms (their code) and ``if`` headers."""
    terms: dict[str, int] = {}
    headers: dict[str, int] = {}
    for section in sections:
        if not section.path.endswith(".py"):
            continue
        for hunk in section.hunks:
            for raw in hunk.lines:
                stripped = raw[1:].strip()
                if raw[:1] != "+" or not stripped:
                    continue
                for term in {ast.unparse(t) for _, t, _ in _condition_terms(stripped)}:
                    terms[term] = terms.get(term, 0) + 1
                if stripped.startswith("if ") and stripped.endswith(":"):
                    headers[stripped] = headers.get(stripped, 0) + 1
    return {t for t, n in terms.items() if n >= 2}, {h for h, n in headers.items() if n >= 2}


def _site_mutations(text: str, terms: set[str]) -> list[tuple[str, str, str]]:
    """A condition term the diff adds at several places dropped at this one (the others keep it)."""
    out = []
    indent = _indent(text)
    for node, term, raw in _condition_terms(text.strip()):
        if ast.unparse(term) not in terms:
            continue
        kept = [t for t in node.values if t is not term]
        new = ast.unparse(kept[0] if len(kept) == 1 else ast.BoolOp(op=node.op, values=kept))
        if len(kept) == 1 and isinstance(kept[0], (ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr)):
            new = f"({new})"
        out.append(("drop-site", indent + _spliced(raw, node, new),
                    f"drop {ast.unparse(term)!r}, added at several places, here"))
    return out


def _widening_mutations(text: str) -> list[tuple[str, str, str]]:
    """A condition the fix adds replaced by ``True`` (``if``, ``elif``), and a boolean ``return`` by ``return True``."""
    stripped, indent = text.strip(), _indent(text)
    found = _condition_test(stripped)
    if found is not None:
        test, raw = found
        if isinstance(test, ast.Constant):
            return []
        return [("widen-predicate", indent + _spliced(raw, test, "True"), f"{_source_of(raw, test)} -> True")]
    nodes, raw = _line_sites(stripped)
    returned = next((n for n in nodes if isinstance(n, ast.Return) and n.value is not None), None)
    if returned is None or not _is_booleanish(returned.value):
        return []
    return [("widen-predicate", indent + _spliced(raw, returned.value, "True"),
             f"return {_source_of(raw, returned.value)} -> return True")]


def _spelling_sets(tree: ast.AST) -> list[ast.Set | ast.Tuple | ast.List]:
    """Literal collections of two or more members that stand for a family of accepted values: read by a
    membership test, or a collection of strings assigned to a name (``SUPPORTED = {"fp8", "fp8_e4m3"}``, also
    through ``frozenset(...)``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            found += [c for c in node.comparators if isinstance(c, (ast.Set, ast.Tuple, ast.List))]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Call) and _call_name(value) in ("frozenset", "set", "tuple") and \
                    len(value.args) == 1:
                value = value.args[0]
            if isinstance(value, (ast.Set, ast.Tuple, ast.List)) and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts):
                found.append(value)
    return [f for f in found if len(f.elts) >= 2]


def _member_mutations(hunk: Hunk, lines: list[_Line]) -> list[tuple[str, int, list[str], str]]:
    """A family of accepted values losing one member (``drop-element`` beyond a membership test on one line): in a
    literal written one member a line, each member's line dropped in turn; in a literal on one line, each member
    dropped in turn (where the line-level operator made the same mutant, it is kept once)."""
    out, seen = [], set()
    for i in _new_side(lines):
        if lines[i].tag != "+":
            continue
        start = _statement_start(lines, i)
        span = _statement_span(lines, start) if start is not None and start not in seen else None
        if not span:
            continue
        seen.add(start)
        text = "\n".join(lines[j].text.strip() for j in span)
        tree, first, parsed = None, 1, ""
        for parsed, first in ((text, 1), (text + " pass", 1), ("if 0: pass\n" + text + " pass", 2)):
            try:
                tree = ast.parse(parsed)
                break
            except (SyntaxError, ValueError):
                continue
        for literal in _spelling_sets(tree) if tree is not None else []:
            if literal.lineno == literal.end_lineno:
                if len(span) == 1:
                    out += _members_dropped_on_line(lines[span[0]].text, text, literal, span[0], hunk)
                continue
            for element in literal.elts:
                index = element.lineno - first
                if element.lineno == element.end_lineno and 0 <= index < len(span) and \
                        lines[span[index]].text.strip().rstrip(",").strip() == \
                        ast.get_source_segment(parsed, element):
                    out.append(("drop-element", span[index], _edited_body(hunk, {span[index]}),
                                f"drop {ast.unparse(element)} from {ast.unparse(literal)}"))
    return out


def _members_dropped_on_line(line: str, text: str, literal: ast.expr, i: int, hunk: Hunk):
    """Each member of a literal written on one line (``text``: the line stripped) left out in turn."""
    raw, out = text.encode(), []
    for k, element in enumerate(literal.elts):
        kept = [e for j, e in enumerate(literal.elts) if j != k]
        smaller = ast.Set(elts=kept) if isinstance(literal, ast.Set) else type(literal)(elts=kept, ctx=ast.Load())
        new = _indent(line) + _spliced(raw, literal, ast.unparse(smaller))
        out.append(("drop-element", i, _edited_body(hunk, set(), {i: new}),
                    f"drop {ast.unparse(element)} from {ast.unparse(literal)}"))
    return out


def _long_condition_mutations(hunk: Hunk, lines: list[_Line]) -> list[tuple[str, int, list[str], str]]:
    """An added ``if``/``elif`` whose condition runs over several lines, replaced by ``True``."""
    out = []
    for i in _new_side(lines):
        keyword = _code_at(lines, i).split(" ", 1)[0].split("(", 1)[0]
        span = _statement_span(lines, i) if lines[i].tag == "+" and keyword in ("if", "elif") else None
        if not span or len(span) < 2:
            continue
        header = "\n".join(lines[j].text.strip() for j in span)
        try:
            ast.parse(("if 0: pass\n" if keyword == "elif" else "") + header + " pass")
        except (SyntaxError, ValueError):
            continue
        out.append(("widen-predicate", i, _rewritten_statement(hunk, lines, span,
                                                               f"{_indent(lines[i].text)}{keyword} (True):"),
                    f"the condition of {lines[i].text.strip()!r}... -> True"))
    return out


def _is_booleanish(node: ast.expr) -> bool:
    if isinstance(node, (ast.BoolOp, ast.Compare)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        return True
    return bool(PREDICATE_NAME.match(_call_name(node)))


def _predicate_body_mutations(hunk: Hunk, lines: list[_Line], at_eof: bool) -> list[tuple[str, int, list[str], str]]:
    """Each boolean function (``def is_...``, ``-> bool``) whose body the fix writes or changes: the whole body
    replaced by ``return True``."""
    out = []
    for i in _new_side(lines):
        if not lines[i].depth and _code_at(lines, i).startswith(("def ", "async def ")):
            out += _predicate_body_mutation(hunk, lines, i, at_eof)
    return out


def _predicate_body_mutation(hunk: Hunk, lines: list[_Line], i: int, at_eof: bool):
    span = _statement_span(lines, i)
    header = "\n".join(lines[j].text.strip() for j in span) if span else ""
    try:
        node = ast.parse(header + " pass").body[0] if header.endswith(":") else None
    except (SyntaxError, ValueError):
        return []
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not (
            PREDICATE_NAME.match(node.name) or (isinstance(node.returns, ast.Name) and node.returns.id == "bool")):
        return []
    found = _block_body(lines, i, at_eof)
    if found is None:
        return []
    body = [j for j in found[0] if j in _new_side(lines)]
    if not any(lines[j].tag == "+" for j in [*span, *body]):
        return []
    statements = _parsed_statement(lines, [*span, *found[0]])
    if statements is None or (len(statements.body) == 1 and isinstance(statements.body[0], ast.Return)
                              and isinstance(statements.body[0].value, ast.Constant)):
        return []
    pad = _indent(lines[body[0]].text)
    return [("widen-predicate", i, _edited_body(hunk, set(found[0]) - {body[0]}, {body[0]: pad + "return True"}),
             f"the body of {node.name}() -> return True")]


def _statement_start(lines: list[_Line], i: int) -> int | None:
    """The new-side line where the statement holding line ``i`` starts (None when that is before the hunk)."""
    for j in reversed([j for j in _new_side(lines) if j <= i]):
        if not lines[j].depth:
            return j
    return None


def _and_terms(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd):
        return _and_terms(node.left) + _and_terms(node.right)
    return [node]


def _calls(tree: ast.AST) -> list[ast.Call]:
    """The calls of ``tree`` in walk order (the same order in a deep copy of it)."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _mask_rewrites(statement: ast.stmt) -> list[tuple[str, ast.stmt, str]]:
    """A load or store's ``mask=`` dropped (its ``other=`` with it), and each term of a mask ``a & b & ...``
    dropped in turn: the bound of one dimension, or of one of K and V, no longer checked."""
    out = []
    for k, call in enumerate(_calls(statement)):
        mask = next((kw for kw in call.keywords if kw.arg == "mask"), None)
        if mask is None:
            continue
        fresh = copy.deepcopy(statement)
        target = _calls(fresh)[k]
        target.keywords = [kw for kw in target.keywords if kw.arg not in ("mask", "other")]
        out.append(("drop-mask", fresh, f"{_call_name(call)}(): mask={ast.unparse(mask.value)} dropped"))
        terms = _and_terms(mask.value)
        for t in range(len(terms) if len(terms) > 1 else 0):
            fresh = copy.deepcopy(statement)
            keyword = next(kw for kw in _calls(fresh)[k].keywords if kw.arg == "mask")
            keyword.value = functools.reduce(lambda a, b: ast.BinOp(left=a, op=ast.BitAnd(), right=b),
                                             [x for j, x in enumerate(_and_terms(keyword.value)) if j != t])
            out.append(("narrow-mask", fresh, f"mask {ast.unparse(mask.value)} -> {ast.unparse(keyword.value)}"))
    return out


def _clamped_value(call: ast.Call) -> list[tuple[ast.expr, str]]:
    """What a clamp call becomes with its bounds (or one of two nested bounds) dropped: (replacement, what)."""
    name = _call_name(call)
    if name in CLAMP_CALLS:
        if isinstance(call.func, ast.Attribute) and not (isinstance(call.func.value, ast.Name)
                                                        and call.func.value.id in ("torch", "tl", "np", "numpy")):
            return [(call.func.value, "clamp dropped")]
        return [(call.args[0], "clamp dropped")] if call.args else []
    pair = MIN_CALLS if name in MIN_CALLS else MAX_CALLS if name in MAX_CALLS else None
    if pair is None or len(call.args) != 2 or call.keywords:
        return []
    other = MAX_CALLS if pair is MIN_CALLS else MIN_CALLS
    for k, inner in enumerate(call.args):
        if _call_name(inner) in other and len(inner.args) == 2 and not inner.keywords:
            bound = call.args[1 - k]
            value = inner.args[1] if isinstance(inner.args[0], ast.Constant) else inner.args[0]
            outer_only = ast.Call(func=call.func, args=[value, bound], keywords=[])
            return [(value, "clamp dropped"), (inner, "outer bound dropped"), (outer_only, "inner bound dropped")]
    return []


def _clamp_rewrites(statement: ast.stmt) -> list[tuple[str, ast.stmt, str]]:
    """Each clamp of ``statement`` (``torch.clamp(x, ...)``, ``x.clamp(...)``, ``min(max(x, lo), hi)``) dropped to
    its value, and a nested one's bounds one at a time."""
    out = []
    for k, call in enumerate(_calls(statement)):
        for choice, (_, what) in enumerate(_clamped_value(call)):
            fresh = copy.deepcopy(statement)
            target = _calls(fresh)[k]
            _replace_node(fresh, target, _clamped_value(target)[choice][0])
            out.append(("drop-clamp", fresh, f"{ast.unparse(call)}: {what}"))
    return out


def _replace_node(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
            elif isinstance(value, list):
                for j, item in enumerate(value):
                    if item is old:
                        value[j] = new


def _statement_mutations(hunk: Hunk, lines: list[_Line]) -> list[tuple[str, int, list[str], str]]:
    """Masks and clamps in the simple statements the fix adds or changes, each statement rewritten whole (a call
    spanning lines is taken with every line of it)."""
    out, seen = [], set()
    for i in _new_side(lines):
        code = _code(lines[i].text, lines[i].mask)
        if lines[i].tag != "+" or not re.search(r"\bmask\s*=(?!=)|\bclamp_?\(|\bclip_?\(|\b(min|max)(imum)?\(", code):
            continue
        start = _statement_start(lines, i)
        if start is None or start in seen:
            continue
        seen.add(start)
        span = _statement_span(lines, start)
        statement = _parsed_statement(lines, span) if span else None
        if statement is None or isinstance(statement, (ast.If, ast.For, ast.While, ast.With, ast.Try,
                                                       ast.FunctionDef, ast.ClassDef)):
            continue
        indent = _indent(lines[start].text)
        for op, rewritten, what in _mask_rewrites(statement) + _clamp_rewrites(statement):
            out.append((op, start, _rewritten_statement(hunk, lines, span, indent + ast.unparse(rewritten)), what))
    return out


def _rewritten_statement(hunk: Hunk, lines: list[_Line], span: list[int], text: str) -> list[str]:
    """The hunk's body with the statement on ``span`` replaced by ``text``. Where the statement ends on a line of
    closing brackets that ``text`` ends with too, that line stays as it is: a hunk whose context ends in removed
    lines would only apply at the end of the file (git's rule for a hunk without trailing context)."""
    closing = lines[span[-1]].text.strip()
    if len(span) > 1 and closing and set(closing) <= set(")]}:") and text.endswith(closing):
        return _edited_body(hunk, set(span[1:-1]), {span[0]: text[:-len(closing)]})
    return _edited_body(hunk, set(span[1:]), {span[0]: text})


def _bound_mutations(text: str) -> list[tuple[str, str, str]]:
    """A slice bound or a ``range`` stop moved by one either way (an off-by-one at the edge of a loop or a
    slice, where no comparison says it)."""
    out = []
    nodes, raw = _line_sites(text.strip())
    bounds = [b for n in nodes if isinstance(n, ast.Slice) for b in (n.lower, n.upper) if b is not None]
    bounds += [n.args[1 if len(n.args) > 1 else 0] for n in nodes if _call_name(n) == "range" and
               isinstance(n.func, ast.Name) and n.args and not any(isinstance(a, ast.Starred) for a in n.args)]
    for bound in bounds:
        written = _source_of(raw, bound)
        for step in (1, -1):
            if isinstance(bound, ast.Constant) and type(bound.value) is int:
                new = str(bound.value + step)
            else:
                wrapped = written if isinstance(bound, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) \
                    else f"({written})"
                new = f"{wrapped} {'+' if step > 0 else '-'} 1"
            out.append(("shift-bound", _indent(text) + _spliced(raw, bound, new), f"{written} -> {new}"))
    return out


def _site_block_mutations(hunk: Hunk, lines: list[_Line], at_eof: bool,
                          headers: set[str]) -> list[tuple[str, int, list[str], str]]:
    """An ``if`` block the fix adds at several places (the same header), dropped whole at this one."""
    out = []
    for i in _new_side(lines):
        header = lines[i].text.strip()
        if lines[i].tag != "+" or lines[i].depth or header not in headers:
            continue
        found = _block_body(lines, i, at_eof)
        if found is None or _code_at(lines, found[1]).startswith(("elif", "else")):
            continue
        body, _ = found
        if all(lines[j].tag == "+" for j in body if j in _new_side(lines)):
            out.append(("drop-site", i, _edited_body(hunk, {i, *body}),
                        f"drop the block {header!r}, added at several places, here"))
    return out


def _post_image(source: str, section: FileSection) -> str | None:
    """The file ``section`` makes of ``source``, its hunks applied where their headers say; None where a context
    or removed line is not the source's (the mutant is then left to grading to apply or not)."""
    old, out, cursor = source.splitlines(), [], 0
    for hunk in section.hunks:
        start = int(HUNK_HEADER.match(hunk.header).group(1))
        begin = start - 1 if hunk.old_count else start
        if begin < cursor:
            return None
        out += old[cursor:begin]
        cursor = begin
        for raw in hunk.lines:
            tag, text = raw[:1], raw[1:]
            if tag in (" ", "-"):
                if cursor >= len(old) or old[cursor] != text:
                    return None
                cursor += 1
            if tag in (" ", "+"):
                out.append(text)
    return "\n".join(out + old[cursor:]) + "\n"


def leaves_unparsable(mutant: Mutant, base_source: Callable[[str], str | None] | None) -> bool:
    """Whether a line mutant leaves its Python file unparsable (then it is never made: it could only be caught by a
    syntax error, which says nothing of the rubric). Where the base's file is not known it is not judged here."""
    if mutant.line is None or not mutant.path.endswith(".py"):
        return False
    section = next((s for s in parse_sections(mutant.diff) if s.path == mutant.path), None)
    if section is None:
        return False
    new_file = section.old_path in (None, "/dev/null")
    source = "" if new_file else base_source(section.old_path) if base_source else None
    text = _post_image(source, section) if source is not None else None
    if text is None:
        return False
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return True
    return False


def derive_mutants(diff: str, base_source: Callable[[str], str | None] | None = None) -> list[Mutant]:
    """Every mutant of ``diff``, in the module docstring's order; ``base_source(path)`` (optional) tells
    docstring state."""
    sections = [s for s in parse_sections(diff) if s.hunks or s.header]
    made: list[Mutant] = []
    for fi, section in enumerate(sections):
        made.append(Mutant(f"drop-file:{section.path}", "drop-file", section.path, None, None,
                           f"leave out {section.path}", render(sections[:fi] + sections[fi + 1:])))
    for fi, section in enumerate(sections):
        if len(section.hunks) < 2:
            continue
        for hi, hunk in enumerate(section.hunks):
            bodies = [list(h.lines) for h in section.hunks]
            bodies[hi] = None
            made.append(Mutant(f"drop-hunk:{section.path}:h{hi}", "drop-hunk", section.path, hi, None,
                               f"leave out hunk {hi} ({hunk.header})",
                               _render_with(sections, fi, recount(section, bodies))))
    line_mutants: list[Mutant] = []
    repeated_terms, repeated_headers = _repeated_sites(sections)
    for fi, section in enumerate(sections):
        source = base_source(section.old_path) if base_source and section.old_path not in (None, "/dev/null") \
            else None
        if not section.path.endswith(".py"):
            continue  # prose and data: only dropped whole (drop-file, drop-hunk)
        for hi, hunk in enumerate(section.hunks):
            m = HUNK_HEADER.match(hunk.header)
            lines = _annotate(hunk, *state_at(source, int(m.group(1))))
            ops: dict[str, list[Mutant]] = {}

            def add(op, li, body, description):
                k = sum(1 for x in ops.get(op, []) if x.line == li)
                ops.setdefault(op, []).append(_line_mutant(sections, fi, hi, body, op, li, k, description))

            for a, r in _revert_pairs(lines):
                body = list(hunk.lines)
                body[a] = "+" + _indent(lines[a].text) + lines[r].text.strip()
                add("revert-condition", a, body, f"put back {lines[r].text.strip()!r} for {lines[a].text.strip()!r}")
            for li, line in enumerate(lines):
                if line.tag != "+" or not _is_code(line.mask, line.text):
                    continue
                for op, new_text, what in _text_mutations(line.text, line.mask):
                    body = list(hunk.lines)
                    body[li] = "+" + new_text
                    add(op, li, body, f"{what} in {line.text.strip()!r}")
            for li, line in enumerate(lines):
                if line.tag != "+" or not _is_code(line.mask, line.text):
                    continue
                stripped = line.text.strip()
                for start, end, replacement, original in _swap_sites(stripped):
                    raw = stripped.encode()
                    new = (raw[:start] + replacement.encode() + raw[end:]).decode()
                    body = list(hunk.lines)
                    body[li] = "+" + _indent(line.text) + new
                    add("swap-operands", li, body, f"{original!r} -> {replacement!r}")
            for li, line in enumerate(lines):
                if line.tag != "+" or not _is_code(line.mask, line.text):
                    continue
                if line.depth or line.after or not _is_simple_statement(line.text.strip()):
                    continue  # inside brackets: part of a longer statement
                body = list(hunk.lines)
                if _leaves_block_empty(lines, li):
                    body[li] = "+" + _indent(line.text) + "pass"
                else:
                    del body[li]
                add("delete-statement", li, body, f"delete {line.text.strip()!r}")
            for li, line in enumerate(lines):
                if line.tag != "+" or not _is_code(line.mask, line.text):
                    continue
                widened = _except_mutation(line.text, line.mask)
                for op, new_text, what in _membership_mutations(line.text, line.mask) + \
                        _constant_mutations(line.text) + ([widened] if widened else []):
                    body = list(hunk.lines)
                    body[li] = "+" + new_text
                    add(op, li, body, f"{what} in {line.text.strip()!r}")
            old_end = int(m.group(1)) + hunk.old_count - 1
            at_eof = section.old_path in (None, "/dev/null") or (source is not None and
                                                                 old_end >= len(source.splitlines()))
            for op, li, body, what in _structure_mutations(hunk, lines, at_eof):
                add(op, li, body, what)
            for li, line in enumerate(lines):
                if line.tag != "+" or not _is_code(line.mask, line.text):
                    continue
                for op, new_text, what in _alias_mutations(line.text, line.mask) + \
                        _site_mutations(line.text, repeated_terms) + _widening_mutations(line.text) + \
                        _bound_mutations(line.text):
                    body = list(hunk.lines)
                    body[li] = "+" + new_text
                    add(op, li, body, f"{what} in {line.text.strip()!r}")
            for op, li, body, what in _site_block_mutations(hunk, lines, at_eof, repeated_headers) + \
                    _predicate_body_mutations(hunk, lines, at_eof) + _long_condition_mutations(hunk, lines) + \
                    _member_mutations(hunk, lines) + \
                    _statement_mutations(hunk, lines):
                add(op, li, body, what)
            order = ["revert-condition"] + [op for op, _, _ in TEXT_OPERATORS] + \
                ["shift-boundary", "widen-platform", "capability-down", "capability-up", "swap-operands",
                 "delete-statement", *LATER_OPERATORS]
            for op in order:
                line_mutants.extend(sorted(ops.get(op, []), key=lambda x: (x.line, x.id)))
    made.extend(line_mutants)
    seen: set[str] = {diff}
    unique = []
    for mutant in made:
        if mutant.diff in seen or leaves_unparsable(mutant, base_source):
            continue
        seen.add(mutant.diff)
        unique.append(mutant)
    return unique


def grading_order(mutants: list[Mutant]) -> list[Mutant]:
    """Source files (under vllm/) first, then the rest; stable within each group (what --limit keeps)."""
    return sorted(mutants, key=lambda m: (not m.path.startswith("vllm/"),))


# ---------------------------------------------------------------- equivalents and classification (pure)


def load_equivalents(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    data = tomllib.loads(path.read_text())
    return {str(k): str(v) for k, v in data.items() if not isinstance(v, dict)}


def equivalence_reason(mutant_id: str, equivalents: dict[str, str]) -> str | None:
    if mutant_id in equivalents:
        return equivalents[mutant_id]
    for key, reason in equivalents.items():
        if any(ch in key for ch in "*?[") and fnmatch.fnmatchcase(mutant_id, key):
            return reason
    return None


def import_broken(run) -> bool:
    """Every evaluated test errored on import (a syntax or import error), so the mutant never really ran."""
    if run is None:
        return True
    evaluated = [o for o in run.outcomes if o.status != "skipped"]
    if not evaluated:
        return bool(run.environment_error)
    return all(o.status != "passed" and IMPORT_BROKEN.search(o.message or "") for o in evaluated)


def classify(reference: dict, apply, run, criteria: dict | None) -> tuple[str, list[str], str]:
    """(status, criteria that dropped below met, explanation) for one graded mutant."""
    if apply.status != "applied":
        return "not_applicable", [], f"apply {apply.status}: {apply.message}".strip()
    if run is None or criteria is None:
        return "not_applicable", [], "no tests ran"
    if import_broken(run):
        return "not_applicable", [], "every evaluated test errors on import"
    watched = [cid for cid, r in reference.items() if r.status == "met"]
    dropped = [cid for cid in watched if criteria[cid].status in ("partial", "unmet")]
    if dropped:
        why = "; ".join(f"{cid} {criteria[cid].status} ({criteria[cid].rationale})" for cid in dropped)
        return "caught", dropped, why
    parts = []
    for cid in watched:
        r = criteria[cid]
        note = " (score fell)" if r.score is not None and reference[cid].score is not None and \
            r.score < reference[cid].score else ""
        parts.append(f"{cid} {r.status}{note}: {r.rationale}")
    ignored = [cid for cid, r in reference.items() if r.status != "met"]
    if ignored:
        parts.append("ignored (not met on the reference): " + ", ".join(ignored))
    return "missed", [], "; ".join(parts) or "no criterion is met on the reference"


def mutation_score(counts: dict) -> float | None:
    denominator = counts["graded"] - counts["not_applicable"] - counts["equivalent"]
    return round(counts["caught"] / denominator, 4) if denominator > 0 else None


def count(mutants: list[dict], made: int) -> dict:
    c = {"made": made, "graded": 0, "caught": 0, "missed": 0, "not_applicable": 0, "equivalent": 0,
         "not_graded": 0, "error": 0}
    for m in mutants:
        c[m["status"]] = c.get(m["status"], 0) + 1
        if m["status"] not in ("not_graded",):
            c["graded"] += 1
    c["graded"] -= c["error"]
    # missed, yet some hidden test failed: a criterion's score fell but stayed at or above "met"
    c["missed_score_fell"] = sum(1 for m in mutants if m["status"] == "missed" and m.get("score_fell"))
    return c


# ---------------------------------------------------------------- grading (I/O)


def _criteria_json(criteria: dict | None) -> dict:
    if not criteria:
        return {}
    return {cid: {"status": r.status, "score": r.score, "rationale": r.rationale,
                  "failing": [e.test for e in r.evidence if e.status not in ("passed", "skipped")][:8]}
            for cid, r in criteria.items()}


def mutant_entry(mutant: Mutant, graded, reference: dict, equivalents: dict[str, str]) -> dict:
    """One graded mutant's line in mutation.json: caught, missed, equivalent or not applicable, and why."""
    entry = asdict(mutant)
    result = graded.result
    if result.verdict == "error" or result.apply is None:
        status, dropped, why, criteria = "error", [], f"grading broke: {result.error}", None
    else:
        criteria = result.criteria if graded.run is not None else None
        status, dropped, why = classify(reference, result.apply, graded.run, criteria)
        entry.update(apply={"status": result.apply.status, "method": result.apply.method,
                            "message": result.apply.message})
    if status == "missed":
        reason = equivalence_reason(mutant.id, equivalents)
        if reason is not None:
            status, why = "equivalent", f"listed equivalent: {reason}"
    elif status == "caught" and equivalence_reason(mutant.id, equivalents) is not None:
        why += " (listed in equivalent-mutants.toml, yet caught: the listing is wrong)"
    fell = [cid for cid, r in reference.items() if r.status == "met" and criteria and
            criteria[cid].score is not None and r.score is not None and criteria[cid].score < r.score]
    timings = result.timings
    entry.update(status=status, dropped=dropped, why=why, criteria=_criteria_json(criteria),
                 score_fell=fell if status in ("missed", "equivalent") else [],
                 seconds=round(timings.get("apply_s", 0.0) + timings.get("tests_s", 0.0), 1))
    return entry


class MutantProgress(QuietObserver):
    """Prints one line per graded mutant (phases are not shown)."""

    def __init__(self, progress: Callable[[str], None]) -> None:
        self.progress = progress

    def graded(self, item, done: int, total: int) -> None:
        self.progress(f"[{done}/{total}] {item.candidate.id}: {item.result.verdict}")


def grade_mutants(task, mutants: list[Mutant], limit: int | None, jobs: int, timeout: float,
                  use_cache: bool, progress: Callable[[str], None] = lambda s: None) -> dict:
    from grader.drive.many_candidates import grade_many
    from grader.core.records import Candidate, GradingOptions
    from grader.taskkit.validate import REFERENCE_DIR

    equivalents_path = task.folder / "equivalent-mutants.toml"
    equivalents = load_equivalents(equivalents_path)
    ordered = grading_order(mutants)
    to_grade = ordered if limit is None else ordered[:limit]
    started = time.monotonic()
    options = GradingOptions(gpu=False, timeout=timeout, jobs=max(1, jobs), use_evidence_cache=use_cache)
    reference_diff = (REFERENCE_DIR / f"{task.id}.diff").read_text()
    (graded_reference,) = grade_many([Candidate(f"{task.id}/reference", "reference", reference_diff, task.id)],
                                     options).graded
    if graded_reference.run is None:
        raise RuntimeError(f"{task.id}: the reference was not graded: {graded_reference.result.summary}")
    reference = graded_reference.result.criteria
    progress(f"{task.id}: reference " + " ".join(f"{c}={r.status}" for c, r in reference.items()))
    run = grade_many([Candidate(m.id, m.id, m.diff, task.id) for m in to_grade], options, MutantProgress(progress))
    by_id = run.by_id()
    entries = [mutant_entry(m, by_id[m.id], reference, equivalents) if m.id in by_id else
               dict(asdict(m), status="not_graded", dropped=[], why="left out by --limit", criteria={},
                    score_fell=[])
               for m in ordered]
    counts = count(entries, len(mutants))
    known = {m.id for m in mutants}
    stale = sorted(k for k in equivalents if not any(ch in k for ch in "*?[") and k not in known)
    return {"task": task.id, "counts": counts, "score": mutation_score(counts),
            "reference": {cid: {"status": r.status, "score": r.score} for cid, r in reference.items()},
            "equivalents_file": str(equivalents_path.relative_to(task.folder.parent.parent))
            if equivalents_path.is_file() else None,
            "stale_equivalents": stale, "seconds": round(time.monotonic() - started, 1), "mutants": entries}


def write_reports(out: Path, doc: dict) -> tuple[Path, Path]:
    from grader.core.paths import atomic_write
    from grader.reports.report import TEMPLATES

    atomic_write(out / "mutation.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
    html = TEMPLATES.get_template("mutation.html.j2").render(doc=doc)
    atomic_write(out / "mutation.html", html)
    return out / "mutation.json", out / "mutation.html"


def add_parser(sub) -> None:
    p = sub.add_parser("mutate", help="rubric strength: grade mutants of each reference fix")
    p.add_argument("--task", action="append", help="task id (repeatable; default: every task)")
    p.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: out)")
    p.add_argument("--jobs", type=int, default=default_jobs(),
                   help="mutants graded at once (default: what the machine's cores and memory allow)")
    p.add_argument("--limit", type=int, help="grade at most this many mutants per task (source files first)")
    p.add_argument("--timeout", type=float, default=300, help="seconds allowed for one mutant's hidden tests")
    p.add_argument("--no-cache", action="store_true", help="do not reuse or store hidden-test evidence")
    p.add_argument("--list", action="store_true", help="only list the mutants, grade nothing")


def _score_text(t: dict) -> str:
    c = t["counts"]
    score = "-" if t["score"] is None else f"{t['score']:.2f}"
    return (f"{t['task']}: mutation score {score} (caught {c['caught']}, missed {c['missed']}, equivalent "
            f"{c['equivalent']}, not applicable {c['not_applicable']}; made {c['made']}, graded {c['graded']}"
            + (f"; {c['missed_score_fell']} missed with a score that fell but stayed met"
               if c.get("missed_score_fell") else "")
            + (f", not graded {c['not_graded']}" if c["not_graded"] else "")
            + (f", errors {c['error']}" if c["error"] else "") + ")")


def run_mutate(args) -> int:
    from grader.pipeline.checkout import build_base
    from grader.core.rubric import all_tasks
    from grader.taskkit.validate import REFERENCE_DIR

    tasks = all_tasks()
    wanted = args.task or [t for t in tasks if (REFERENCE_DIR / f"{t}.diff").is_file()]
    unknown = [t for t in wanted if t not in tasks]
    if unknown:
        print(f"error: unknown task(s) {', '.join(unknown)} (known: {', '.join(tasks)})", file=sys.stderr)
        return 2
    path = args.out / "mutation.json"
    try:
        doc = json.loads(path.read_text())
        if doc.get("schema") != SCHEMA:
            raise ValueError
    except (OSError, ValueError):
        doc = {"schema": SCHEMA, "tasks": {}}
    for task_id in wanted:
        task = tasks[task_id]
        base = build_base(task.id, task.base)

        def source(rel: str, root=base.path) -> str | None:
            try:
                return (root / rel).read_text(encoding="utf-8", errors="replace")
            except OSError:
                return None

        mutants = derive_mutants((REFERENCE_DIR / f"{task_id}.diff").read_text(), source)
        if args.list:
            for m in grading_order(mutants):
                print(f"{m.id}\t{m.description}")
            continue
        print(f"{task_id}: {len(mutants)} mutant(s)", file=sys.stderr, flush=True)
        doc["tasks"][task_id] = grade_mutants(task, mutants, args.limit, args.jobs, args.timeout, not args.no_cache,
                                              lambda s: print(s, file=sys.stderr, flush=True))
        doc["tasks"] = dict(sorted(doc["tasks"].items()))
        write_reports(args.out, doc)
        print(_score_text(doc["tasks"][task_id]), flush=True)
    if args.list:
        return 0
    print(f"wrote {args.out / 'mutation.json'} and {args.out / 'mutation.html'}", file=sys.stderr)
    return 2 if any(t["counts"].get("error") for t in doc["tasks"].values() if t["task"] in wanted) else 0
