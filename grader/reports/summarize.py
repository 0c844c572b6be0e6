"""Summaries: one short paragraph per candidate, written from the evidence (``templates/summary.txt.j2``).

It opens with what happened when grading did not complete, then what the patch does (``grader.reports.describe``, read off
the applied tree), then one sentence per reason for the verdict: the core criterion that failed with its first
failing claim, what else is not met, what conditional criteria lost to their anchor (one sentence per anchor),
what was not evaluated and why, and what is met only on part of its checks. The detail lives on the page.
"""

from __future__ import annotations

import re
import tomllib
from collections import defaultdict
from functools import cache
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined

from grader.core.records import ApplyReport, CandidateResult, CriterionResult, EvidenceEntry, RunReport
from grader.reports.wording import all_met_where_evaluated, claim_of, deciding_failure, verdict_phrase

_env = Environment(loader=PackageLoader("grader", "templates"), undefined=StrictUndefined, trim_blocks=True,
                   lstrip_blocks=True, keep_trailing_newline=False, autoescape=False)
ASSERTION_CAP = 220
# About a reviewer's paragraph (the seed judge's run 30-87 words, median 56): past it, a summary is told tersely.
SUMMARY_WORDS = 90
# The hard cap on a summary's words: the judge's paragraph supplied with the input plus a fifth; where none was
# supplied, FIXED_CAP (the seed judge's median paragraph, 49 words, plus a fifth, rounded up).
JUDGE_ALLOWANCE = 1.2
FIXED_CAP = 60
# Never below this, whatever the judge's paragraph: a paragraph of a few words (a label, not a review) would
# leave room for no sentence (the seed judge's shortest paragraph is 30 words).
MIN_CAP = 30
# The fewest words worth keeping of a reason cut to fit (below it the reason is left out whole).
EVIDENCE_WORDS = 8
# The fewest words of a clause a cut may leave.
MIN_CLAUSE_WORDS = 4
# The observation quoted for a criterion after the first one below met: shorter, so the paragraph stays short.
SECONDARY_CAP = 90
# pytest's own prefixes of an assertion message, not part of the claim.
NOISE = re.compile(r"^(?:AssertionError|assert|grader\.sandbox\.client\.\w+|E)\s*:?\s*")


def describe_files(apply: ApplyReport | None) -> str:
    """What the diff touches, when nothing finer could be read from the tree: files by area."""
    if apply is None or not apply.files:
        return "changes nothing the grader could see"
    source = sorted({f.path.rsplit("/", 1)[-1] for f in apply.files if not f.path.startswith(("tests/", "docs/"))})
    tests = sum(f.path.startswith("tests/") for f in apply.files)
    parts = [f"`{name}`" for name in source[:4]] + ([f"{len(source) - 4} more files"] if len(source) > 4 else [])
    if tests:
        parts.append(f"{tests} test file{'s' if tests > 1 else ''}")
    return "changes " + _join(parts)


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def quote_assertion(message: str) -> str:
    """The first line that states what went wrong, whole up to a sentence end (or the cap, at a word)."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    marked = [line[1:].strip() for line in lines if line.startswith("E ")]
    first = next((NOISE.sub("", m) for m in marked if NOISE.sub("", m)), lines[-1] if lines else "")
    first = NOISE.sub("", first).strip()
    if len(first) <= ASSERTION_CAP:
        return first
    cut = first[:ASSERTION_CAP]
    end = max(cut.rfind(". "), cut.rfind("; "))
    return cut[:end + 1] if end > 15 else cut.rsplit(" ", 1)[0] + " ..."


# An exception's own line in a traceback: ``AttributeError: ...``, ``pkg.mod.ProbeRaised: ...``.
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Raised)\b:?")
TRACEBACK_START = "Traceback (most recent call last)"


def assertion_line(message: str) -> str:
    """What a failure says, in one line: the summary's quote of its assertion, unless that quote is only a
    traceback's opening or a line of carets; then the last exception a traceback in it raised."""
    said = quote_assertion(message)
    if re.search(r"[A-Za-z]", said) and TRACEBACK_START not in said:
        return said
    lines = [line.strip().removeprefix("E").strip() for line in message.splitlines()]
    raised = [line for line in lines if EXCEPTION_LINE.match(line) and TRACEBACK_START not in line]
    # Inside a quoted list of problems the traceback's quotes arrive with a backslash; the line reads without.
    return raised[-1].replace("\\'", "'")[:ASSERTION_CAP] if raised else said


def failure_sentence(criterion: CriterionResult) -> str:
    entry = deciding_failure(criterion.evidence)
    if entry is None:
        return criterion.rationale
    claim = claim_of(entry)
    said = assertion_line(entry.message)
    return f"\"{claim}\" does not hold" + (f" ({said.rstrip('.')})" if said else "")


def status_sentence(result: CandidateResult, run: RunReport | None) -> str:
    """The first sentence when grading did not complete: what happened, before anything about the patch."""
    status = result.run_status
    if status == "timed_out":
        unfinished = sum(o.status == "timeout" for o in run.outcomes) if run else 0
        total = len(run.outcomes) if run else 0
        return (f"Timed out: the time limit was reached with {unfinished} of {total} checks unfinished; those "
                "count neither for nor against the patch, and this result is not cached.") if total else \
            "Timed out before any hidden test ran; this result is not cached."
    if status == "environment_error":
        return f"Not graded, because of the grading environment, not the patch: {result.error}."
    if status == "input_truncated":
        graded = [c.id for c in result.criteria.values() if c.status != "not_evaluated"]
        if not graded:
            return ("The input was cut off: this preview does not show the whole change, so nothing was graded; "
                    "this is neither a pass nor a fail.")
        return ("The input was cut off, after every file the criteria read: they are graded on what it shows, and "
                "the verdict is input_truncated, neither a pass nor a fail.")
    if status == "grader_error":
        return f"Not graded, because the grader failed, not the patch: {result.error}; a rerun grades it again."
    if status == "apply_partial":
        return partial_apply_sentence(result.apply)
    return ""


def _hunk_names(apply: ApplyReport, status: str) -> list[str]:
    return [f"{f.path} {h.header.split('@@')[1].strip() if '@@' in h.header else ''}".strip()
            for f in apply.files for h in f.hunks if h.status == status]


def partial_apply_sentence(apply: ApplyReport) -> str:
    """Why a whole diff's tree is not the one git builds from it: hunks that failed, ended early, binary files."""
    parts = []
    for status, said in (("failed", "failed"), ("truncated", "end early (the diff is corrupt there)")):
        named = _hunk_names(apply, status)
        if named:
            parts.append(f"{len(named)} hunk{'s' if len(named) != 1 else ''} {said} ({'; '.join(named[:3])})")
    if apply.binary:
        parts.append(f"binary changes were not applied ({', '.join(apply.binary[:3])})")
    return f"Applied only in part: {_join(parts)}, so the patched tree is not the one git builds from the diff."


def fuzz_sentence(apply: ApplyReport | None) -> str:
    """Hunks that landed only with fuzz (context that did not match), named: the tree may differ from the intent."""
    fuzzed = [f"{f.path} {h.header.split('@@')[1].strip()}" if "@@" in h.header else f.path
              for f in (apply.files if apply else []) for h in f.hunks if h.status == "fuzz"]
    if not fuzzed:
        return ""
    return (f"{len(fuzzed)} hunk{'s' if len(fuzzed) != 1 else ''} landed only with fuzz, on context that did not "
            f"match ({'; '.join(fuzzed[:3])}{'; ...' if len(fuzzed) > 3 else ''}).")


def observed_clause(message: str, cap: int = ASSERTION_CAP) -> str:
    """What a failure observed, as one whole clause for prose: the assertion line, cut only at a clause boundary
    (never mid-word, never with a truncation mark); empty when no such clause fits in ``cap``."""
    said = assertion_line(message).removesuffix(" ...").strip().rstrip(".")
    if len(said) <= cap and said == assertion_line(message).strip().rstrip("."):
        return said
    end = max((i for i in clause_boundaries(said) if i <= cap), default=-1)
    return said[:end].rstrip(".,;:") if end > 15 else ""


CLOSERS = {"(": ")", "[": "]", "{": "}"}


def clause_boundaries(text: str) -> list[int]:
    """Where ``text`` may be cut between clauses (before ". ", "; ", ": " or ", "): only outside brackets, backticks
    and quotes, so that a cut never leaves ``SM(10`` or an open code span behind. A single quote opens a quote only
    after a non-letter, so the apostrophe of ``doesn't`` does not."""
    cuts: list[int] = []
    expected: list[str] = []
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "`\"" or (ch == "'" and (i == 0 or not text[i - 1].isalnum())):
            quote = ch
        elif ch in CLOSERS:
            expected.append(CLOSERS[ch])
        elif expected and ch == expected[-1]:
            expected.pop()
        elif not expected and text[i:i + 2] in (". ", "; ", ": ", ", "):
            cuts.append(i)
    return cuts


def case_of(test: str) -> str:
    """The case a parametrized check ran (``test_x[sm75-fp8]`` -> ``sm75-fp8``), or empty."""
    name = test.rsplit("::", 1)[-1]
    return name[name.index("[") + 1:-1] if "[" in name and name.endswith("]") else ""


def evaluated(criterion: CriterionResult) -> list[EvidenceEntry]:
    return [e for e in criterion.evidence if e.status in ("passed", "failed", "error")]


def none_ran_in(failing: list[EvidenceEntry]) -> bool:
    """Whether the patch's lines were traced in these failing checks and none of them ran in any."""
    return bool(failing) and all(e.ran == {} for e in failing)


def unmet_sentence(criterion: CriterionResult, core: bool, first: bool, terse: bool = False) -> str:
    """The evidence that decided a criterion below met, one clause each: the claim, the case, what was observed.
    ``terse`` (a summary over its length): the claim stands for the title, the first such criterion keeps a shorter
    observation and the others none."""
    checks = evaluated(criterion)
    failing = [e for e in checks if e.status != "passed"]
    entry = deciding_failure(criterion.evidence)
    state = "is not met" if criterion.status == "unmet" else "is only partly met"
    # Told tersely, the claim (the index's reason too) stands for the criterion's title.
    title = "" if terse and entry is not None else f" ({criterion.title})"
    head = f"{'Core criterion ' if core else ''}{criterion.id}{title} {state}"
    if entry is None:
        return f"{head}: {len(failing)} of {len(checks)} checks fail."
    # The evidence that decided it, in one clause: the claim that failed, the case, what was observed.
    case = case_of(entry.test)
    cap = ASSERTION_CAP if first and not terse else SECONDARY_CAP
    observed = "" if terse and not first else observed_clause(entry.message, cap)
    claim = f"\"{claim_of(entry)}\" fails" + (f" for {case}" if case else "")
    tail = f" ({observed})" if observed else ""
    where = ", and none of the diff's lines ran there" if none_ran_in(failing) else ""
    return f"{head}: {claim}{tail}{where}."


def verified_sentence(task, result: CandidateResult, met: list[CriterionResult]) -> str:
    """What was verified, in the rubric's words (the titles of the criteria met)."""
    if not met:
        return ""
    titles = [c.title for c in met]
    total = len(result.criteria)
    if len(met) == total and not any(c.not_run for c in met):
        return f"Every criterion is verified: {'; '.join(titles)}."
    partly = [c.id for c in met if c.not_run]
    where = f" ({_join(partly)} on the checks that ran)" if partly else ""
    return f"Verified{where}: {'; '.join(titles)}."


def reason_sentences(task, result: CandidateResult, terse: bool = False) -> list[str]:
    """What was verified, then one sentence per reason for the verdict, repeated reasons merged (``terse``: see
    ``unmet_sentence``)."""
    criteria = [result.criteria[c] for c in sorted(result.criteria)]
    core = set(task.core_criteria) if task else set()
    anchored: dict[str, list[CriterionResult]] = defaultdict(list)
    failing, not_evaluated, met = [], defaultdict(list), []
    for c in criteria:
        if c.status == "unmet" and c.rationale.startswith("anchor "):
            anchored[c.rationale.split()[1]].append(c)
        elif c.status in ("unmet", "partial"):
            failing.append(c)
        elif c.status == "not_evaluated":
            not_evaluated[not_evaluated_reason(c.rationale)].append(c)
        else:
            met.append(c)
    sentences = [verified_sentence(task, result, met)]
    failing.sort(key=lambda c: (c.id not in core, c.status != "unmet", c.id))
    sentences += [unmet_sentence(c, c.id in core, n == 0, terse) for n, c in enumerate(failing)]
    for anchor, dependants in anchored.items():
        sentences.append(f"{_join([c.id for c in dependants])} get{'s' if len(dependants) == 1 else ''} no credit "
                         f"while their anchor {anchor} is unmet.")
    for why, group in not_evaluated.items():
        sentences.append(f"Not evaluated: {_join([f'{c.id} ({c.title})' for c in group])}, because {why}.")
    return [s for s in sentences if s]


def not_evaluated_reason(rationale: str) -> str:
    """Why a criterion was not evaluated, as a clause: the first reason, without pytest's "Skipped:" prefix."""
    first = rationale.split(";")[0].strip().removeprefix("Skipped:").strip().rstrip(".")
    first = first.removeprefix("not evaluated:").strip()
    return first[:1].lower() + first[1:] if first else "no check of it ran"


def verdict_closing(result: CandidateResult) -> str:
    """The last sentence: the verdict as it should be read (``grader.reports.wording``)."""
    if all_met_where_evaluated(result):
        return f"Verdict partial: {verdict_phrase(result)}."
    if result.score is None:
        return f"Verdict {result.verdict.replace('_', ' ')}."
    return f"Verdict {result.verdict} ({result.score:.2f})."


def places_of(task) -> dict[str, str]:
    """The task's words for the files a patch may touch (``[summary.places]`` of its rubric.toml)."""
    if task is None:
        return {}
    return rubric_places(task.folder / "rubric.toml")


@cache
def rubric_places(path: Path) -> dict[str, str]:
    try:
        places = tomllib.loads(path.read_text()).get("summary", {}).get("places", {})
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return {str(k): str(v) for k, v in places.items()} if isinstance(places, dict) else {}


def change_sentence(task, apply: ApplyReport | None, change: str, with_places: bool = True) -> str:
    """What the patch changes, in the task's words where its rubric has them, then how (``grader.reports.describe``);
    without ``with_places`` (a summary short of room), how alone."""
    places = places_of(task) if with_places else {}
    paths = [f.path for f in (apply.files if apply else [])]
    if not any(p in places for p in paths):
        return f"The patch {change or describe_files(apply)}."
    ordered = sorted(dict.fromkeys(paths), key=lambda p: (p.startswith(("tests/", "docs/")), p))
    named = list(dict.fromkeys(places.get(p) or f"`{p.rsplit('/', 1)[-1]}`" for p in ordered))
    # Two places at most: the mechanism after the colon is what the sentence is for.
    where = _join(named[:2] + ([f"{len(named) - 2} other file{'s' if len(named) > 3 else ''}"]
                               if len(named) > 2 else []))
    return f"The patch changes {where}" + (f": it {change}." if change else ".")


def graded_base(result: CandidateResult) -> bool:
    """Whether an empty diff's criteria were run (the unpatched base graded as itself)."""
    return any(evaluated(criterion) for criterion in result.criteria.values())


def summary_cap(result: CandidateResult) -> int:
    """The most words the candidate's summary may have: the supplied judge's paragraph's plus a fifth (at least
    MIN_CAP), else FIXED_CAP."""
    judge = len((result.reference_summary or "").split())
    return max(int(judge * JUDGE_ALLOWANCE), MIN_CAP) if judge else FIXED_CAP


def summarize(task, result: CandidateResult, run: RunReport | None, change: str = "") -> str:
    """The candidate's paragraph, never over ``summary_cap`` words: one over ``SUMMARY_WORDS`` or the cap is told
    again tersely (``unmet_sentence``), and what still does not fit is left out by ``fit_words``."""
    cap = summary_cap(result)
    sentences = summary_sentences(task, result, run, change, terse=False)
    if words(sentences) > min(cap, SUMMARY_WORDS):
        sentences = summary_sentences(task, result, run, change, terse=True)
    if words(sentences) > cap and max(len(s.split()) for s in sentences) > cap // 2:
        # A sentence that would take half the room (the places a change is in, and the change): the mechanism is
        # kept before the places it is in.
        sentences = summary_sentences(task, result, run, change, terse=True, with_places=False)
    return " ".join(fit_words(sentences, cap))


def words(sentences: list[str]) -> int:
    return sum(len(s.split()) for s in sentences)


def keeping_order(sentence: str) -> int:
    """Which sentences give way first when a summary is over its cap: what was verified, then what was not
    evaluated; every other reason (the unmet criteria's evidence first) before them."""
    if sentence.startswith(("Verified", "Every criterion is verified")):
        return 2
    return 1 if sentence.startswith("Not evaluated") else 0


def fit_words(sentences: list[str], cap: int) -> list[str]:
    """``sentences`` within ``cap`` words, in their order: the first (what happened, or what the patch does) and
    the last (the verdict) always, the others as they fit by ``keeping_order``; a first sentence too long for
    what is left is cut at its last clause boundary that fits, else at a word."""
    if words(sentences) <= cap or len(sentences) < 2:
        return [shortened(s, cap) for s in sentences[:1]] if len(sentences) == 1 else sentences
    first, middle, last = sentences[0], sentences[1:-1], sentences[-1]
    room = cap - len(last.split())
    if room <= 0:
        return [shortened(last, cap)]
    # The first reason (an unmet criterion's evidence, where there is one) keeps its room beside the first sentence.
    reason = next((len(s.split()) for s in middle if keeping_order(s) == 0), 0)
    first = shortened(first, room - reason if reason <= room // 2 else room)
    room -= len(first.split())
    kept: set[int] = set()
    shown = list(middle)
    for index in sorted(range(len(middle)), key=lambda i: (keeping_order(middle[i]), i)):
        size = len(middle[index].split())
        if size > room and room >= EVIDENCE_WORDS:
            # A reason (the evidence of an unmet criterion first) is cut at a clause to the room left rather
            # than left out; what was verified keeps the titles that fit.
            shown[index] = shortened(middle[index], room, at_words=False)
            size = len(shown[index].split()) if shown[index] else room + 1
        if size <= room:
            kept.add(index)
            room -= size
    return [first, *(s for i, s in enumerate(shown) if i in kept), last]


def shortened(sentence: str, cap: int, at_words: bool = True) -> str:
    """``sentence`` in at most ``cap`` words: whole, else up to its last clause boundary that fits, else (with
    ``at_words``) its first words, an open quote or code span closed; either way it ends as a sentence. Empty
    when it cannot be cut so."""
    if len(sentence.split()) <= cap:
        return sentence
    text = sentence.rstrip(".")
    # A reason is cut only where a clause ends (". ", "; ", ": "), never inside a list ("c2, c3, ..."); the
    # opening sentence may also be cut at a comma.
    fitting = [i for i in clause_boundaries(text) if len(text[:i].split()) <= cap
               and (at_words or text[i] in ".;:") and len(text[:i].split()) >= MIN_CLAUSE_WORDS]
    if fitting and (not at_words or len(text[:fitting[-1]].split()) >= cap // 2):
        return text[:fitting[-1]].rstrip(".,;: ") + "."
    if not at_words:
        return ""
    cut = " ".join(text.split()[:max(cap - 1, 1)]).rstrip(".,;: ")
    for mark in ("`", '"'):
        if cut.count(mark) % 2:
            cut += mark
    return cut + "."


def render_summary(task, result: CandidateResult, run: RunReport | None, change: str, terse: bool) -> str:
    """The paragraph before any cap (``summary_sentences`` joined)."""
    return " ".join(summary_sentences(task, result, run, change, terse))


def summary_sentences(task, result: CandidateResult, run: RunReport | None, change: str,
                      terse: bool, with_places: bool = True) -> list[str]:
    """The paragraph's sentences (one per line of ``summary.txt.j2``)."""
    # An empty diff has criteria only where it was graded as the unpatched base (validation's control).
    graded = result.verdict != "no_diff" or graded_base(result)
    text = _env.get_template("summary.txt.j2").render(
        result=result, apply=result.apply, task=task, change=change or describe_files(result.apply),
        opening=change_sentence(task, result.apply, change, with_places),
        lead=status_sentence(result, run), fuzz=fuzz_sentence(result.apply),
        reasons=reason_sentences(task, result, terse) if graded else [],
        closing=verdict_closing(result),
    )
    return [" ".join(line.split()) for line in text.splitlines() if line.strip()]
