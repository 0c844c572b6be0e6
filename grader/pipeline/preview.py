"""Cut previews: a bundle shows each diff as a preview that may stop anywhere, so what it shows is not the
candidate's whole change. Which criteria can still be graded is decided here.

The rule (README, "Cut previews"): a criterion's evidence is taken to touch every file under ``vllm/`` the task
names (its ``[base.blobs]`` and ``[inference] paths``) and every file under ``vllm/`` the preview touches; only
``vllm/`` is on a subject's import path, so nothing else can reach the evidence. The evidence is whole, and the
criteria are graded, only when each of those files is either shown with every hunk complete and applied, or is
known to be untouched. A file is known untouched when it is absent from a preview whose files come in git's
path order and it sorts before the last file shown (git writes files in that order, so the cut cannot have
removed it). The last file shown is never known whole: the cut may have removed its later hunks. Otherwise no
criterion is graded: every one is ``not_evaluated`` ("the input was cut off here"), and no hidden test runs.
"""

from __future__ import annotations

from grader.pipeline.apply import is_binary, is_cut_header
from grader.pipeline.diffparse import ParsedDiff
from grader.core.records import ApplyReport

EVIDENCE_ROOT = "vllm/"
CUT_REASON = "the input was cut off here"


def is_cut(parsed: ParsedDiff, at_preview_limit: bool) -> bool:
    """Whether a preview is cut: it reaches the bundle's line limit, a hunk ends early, or it stops in a header."""
    sections = parsed.sections
    return at_preview_limit or any(not h.complete for s in sections for h in s.hunks) or \
        bool(sections and is_cut_header(sections[-1]))


def unseen_evidence(task_files: frozenset[str], parsed: ParsedDiff, apply: ApplyReport) -> list[str]:
    """The evidence files whose change a cut preview may not show whole (empty: every criterion can be graded)."""
    sections = parsed.sections
    shown = [s.path for s in sections]
    unseen = {s.path for s in sections if s.path.startswith(EVIDENCE_ROOT) and
              (any(not h.complete for h in s.hunks) or is_binary(s) or is_cut_header(s))}
    unseen |= {f.path for f in apply.files if f.path.startswith(EVIDENCE_ROOT)
               and any(h.status == "failed" for h in f.hunks)}
    if not shown:
        return sorted(p for p in task_files if p.startswith(EVIDENCE_ROOT)) or [EVIDENCE_ROOT]
    last = shown[-1]
    if last.startswith(EVIDENCE_ROOT):
        unseen.add(last)
    in_git_order = shown == sorted(shown)
    unseen |= {p for p in task_files if p.startswith(EVIDENCE_ROOT) and p not in shown
               and not (in_git_order and p < last)}
    return sorted(unseen)


def cut_reason(unseen: list[str], at_preview_limit: bool) -> str:
    """Why nothing was graded, for each criterion's rationale."""
    where = "it reaches the bundle's preview line limit" if at_preview_limit else "a hunk or header ends early"
    files = ", ".join(unseen[:3]) + (f" and {len(unseen) - 3} more" if len(unseen) > 3 else "")
    return f"{CUT_REASON}: {where}, so the change to {files} may not be shown whole"
