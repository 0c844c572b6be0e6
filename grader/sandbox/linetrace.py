"""Which of the patch's added lines run while one probe call runs: a line tracer for the subject, kept to the
changed files.

The subject is given, per file as its code objects name it, the tree's line numbers that the patch added; it
records those of them that run inside functions and reports them beside the probe's answer. Lines that run at a
module's top level or in a class body (imports, definitions) are left out: which check imports a module first
is an accident of test order, not evidence about the check. Everything it sends is untrusted and is bounded and
attributed by the judge (``grader.sandbox.client``); it feeds only the scorecard, never a verdict.

The cost stays off code that is not the patch's: the global trace function answers every other frame with None,
so only frames of changed files get a line tracer, and a function whose added lines have all been seen in this
call is not traced again (a kernel the Triton interpreter runs once per program is traced once).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

# A function's code object (with fresh locals), as opposed to a module's or a class body's.
CO_NEWLOCALS = 0x0002


class LineTrace:
    def __init__(self, added: dict[str, list[int]]) -> None:
        self.added = {path: frozenset(lines) for path, lines in added.items()}
        self.ran: dict[str, set[int]] = {}
        # Per code object, the added lines it holds that have not run yet in this call.
        self.unseen: dict[object, set[int]] = {}

    def _lines_of(self, code, wanted: frozenset[int]) -> set[int]:
        if code not in self.unseen:
            lines = {line for _, _, line in code.co_lines() if line in wanted}
            # The def line holds only the frame's entry, which raises no line event, unless the body shares it.
            if len({line for _, _, line in code.co_lines() if line is not None}) > 1:
                lines.discard(code.co_firstlineno)
            self.unseen[code] = lines
        return self.unseen[code]

    def _global(self, frame, event, arg) -> Callable | None:
        code = frame.f_code
        wanted = self.added.get(code.co_filename)
        if wanted is None or not code.co_flags & CO_NEWLOCALS:
            return None
        unseen = self._lines_of(code, wanted)
        if not unseen:
            return None
        seen = self.ran.setdefault(code.co_filename, set())

        def local(frame, event, arg):
            if event == "line" and frame.f_lineno in unseen:
                unseen.discard(frame.f_lineno)
                seen.add(frame.f_lineno)
                if not unseen:
                    frame.f_trace_lines = False
            return local

        return local

    def start(self) -> None:
        self.ran = {}
        self.unseen = {}
        threading.settrace(self._global)
        sys.settrace(self._global)

    def stop(self) -> dict[str, list[int]]:
        """End tracing; the lines that ran, by file (files where none ran left out)."""
        sys.settrace(None)
        threading.settrace(None)
        self.unseen = {}
        return {path: sorted(lines) for path, lines in self.ran.items() if lines}
