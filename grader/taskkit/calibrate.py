"""Calibration: compare the grader's per-criterion results with an earlier judge's labels.

The judge never ran anything and saw more of each diff than a 60-line preview shows, so it is not ground truth;
calibration tells where the two disagree and why, it never tunes the grader to the labels.

Inputs: the grader's ``results.json`` (graded from the bundle) and a labels file
``{"criteria": {task: {cid: {...}}}, "entries": [{"bundle_position": i, "task": ..., "c1": 1|0.5|0|null, ...,
"overall": "full|partial|fail|no_diff"}]}``. Entry ``i`` is the bundle candidate at position ``i`` (``bundle_ids``).

Classes: a grader score maps to ``met`` (>= 0.75), ``unmet`` (<= 0.25), else ``partial``; a judge label 1, 0.5, 0
to ``met``, ``partial``, ``unmet``; a null label is "not stated" and a ``not_evaluated`` grader criterion is left
out (both counted). Pairs are split by the grader's apply report: ``apply.truncated`` is a truncated preview,
anything else a whole diff. Headline numbers are whole diffs only; disagreements on truncated previews are
attributed to truncation.

``calibration.json`` keys: ``schema``, ``inputs``, ``thresholds``, ``criteria``, ``criterion_names`` (the
judge's inferred criterion names per task), ``counts``, ``headline`` (whole diffs), ``whole``,
``truncated`` (each: ``agreement``, ``by_criterion``, ``by_task``, ``excluded``, ``verdict``), ``disagreements``
(whole diffs, each with ``id``, ``task``, ``criterion``, ``grader``, ``judge``, ``direction``,
``cause``, ``explanation``, ``note``, ``diff``), ``verdict_disagreements``, ``truncated_disagreements`` and
``notes``. A confusion matrix is ``{judge_class: {grader_class: count}}``.

The arithmetic (``grader_class``, ``judge_class``, ``build_pairs``, ``split_pairs``, ``confusion``, ``agreement``,
``by_criterion``, ``by_task``, ``verdict_agreement``) is pure; ``run_calibrate`` does the I/O.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from grader.core.records import (CRITERION_IDS, CRITERION_STATUSES, VERDICTS as ALL_VERDICTS, CandidateResult,
                                 CriterionResult, GradingOptions, RecordError)
from grader.pipeline.labels import LabelsError, bundle_ids, judge_verdicts, read_labels
from grader.pipeline.score import MET_AT, UNMET_AT

# What a judge can say: every criterion status but not_evaluated, every verdict but error.
CLASSES = tuple(s for s in CRITERION_STATUSES if s != "not_evaluated")
VERDICTS = tuple(v for v in ALL_VERDICTS if v != "error")
NOTE_VERDICTS = ("judge_wrong", "grader_wrong", "ambiguous")
SCHEMA = "calibration/1"
DEFAULT_NOTES = Path("rubrics/calibration-notes.toml")
_RANK = {"unmet": 0, "partial": 1, "met": 2}


# ---------------------------------------------------------------- pure arithmetic


def grader_class(criterion: CriterionResult | None) -> str | None:
    """met / partial / unmet from a grader criterion's score; None when it was not evaluated."""
    if criterion is None or criterion.status == "not_evaluated" or criterion.score is None:
        return None
    score = criterion.score
    if score >= MET_AT:
        return "met"
    if score <= UNMET_AT:
        return "unmet"
    return "partial"


def judge_class(label) -> str | None:
    """met / partial / unmet from a judge label 1 / 0.5 / 0; None when the judge did not say."""
    if label is None:
        return None
    value = float(label)
    if value >= 1.0:
        return "met"
    if value <= 0.0:
        return "unmet"
    return "partial"


@dataclass
class Pair:
    """One (candidate, criterion) the judge labelled, with what the grader made of it."""

    id: str
    task: str
    criterion: str
    judge: str | None
    grader: str | None
    truncated: bool
    excluded: str | None = None  # "not_stated", "not_evaluated", "missing_result", "task_mismatch", "error"

    @property
    def compared(self) -> bool:
        return self.excluded is None

    @property
    def agrees(self) -> bool:
        return self.compared and self.judge == self.grader


@dataclass
class VerdictPair:
    id: str
    task: str
    judge: str | None
    grader: str | None
    truncated: bool
    excluded: str | None = None


def is_truncated(result: CandidateResult | None) -> bool:
    """A truncated preview per the grader's apply report; everything else counts as a whole diff."""
    return bool(result and result.apply and result.apply.truncated)


def _empty_without_task(result: CandidateResult) -> bool:
    """A no_diff candidate with no task to infer is not a task disagreement: there is nothing to infer it from."""
    return result.verdict == "no_diff" and not result.task


def build_pairs(entries: list[dict], results: dict[str, CandidateResult], ids: Mapping[int, str],
                criteria: tuple[str, ...] = CRITERION_IDS) -> tuple[list[Pair], list[VerdictPair]]:
    """Pair every labelled entry and criterion with the grader's result for the same bundle candidate."""
    pairs: list[Pair] = []
    verdicts: list[VerdictPair] = []
    for entry in entries:
        position = int(entry["bundle_position"])
        cid = ids.get(position, f"(no entry at position {position})")
        task = entry.get("task") or ""
        result = results.get(cid)
        truncated = is_truncated(result)
        if result is None:
            problem = "missing_result"
        elif result.verdict == "error":
            problem = "error"
        elif result.task != task and not _empty_without_task(result):
            problem = "task_mismatch"
        else:
            problem = None
        for c in criteria:
            judged = judge_class(entry.get(c))
            graded = grader_class(result.criteria.get(c)) if result is not None and problem is None else None
            if judged is None:
                excluded = "not_stated"
            elif problem is not None:
                excluded = problem
            elif graded is None:
                excluded = "not_evaluated"
            else:
                excluded = None
            pairs.append(Pair(cid, task, c, judged, graded, truncated, excluded))
        overall = entry.get("overall")
        gverdict = result.verdict if result is not None else None
        vproblem = "missing_result" if result is None else "error" if gverdict == "error" else \
            "task_mismatch" if problem == "task_mismatch" else "not_stated" if overall is None else None
        verdicts.append(VerdictPair(cid, task, overall, gverdict, truncated, vproblem))
    return pairs, verdicts


def split_pairs(pairs: list) -> tuple[list, list]:
    """(whole, truncated) by the grader's apply report."""
    return [p for p in pairs if not p.truncated], [p for p in pairs if p.truncated]


def confusion(pairs: list[Pair]) -> dict[str, dict[str, int]]:
    """3x3 counts over compared pairs: rows the judge's class, columns the grader's."""
    matrix = {j: {g: 0 for g in CLASSES} for j in CLASSES}
    for p in pairs:
        if p.compared:
            matrix[p.judge][p.grader] += 1
    return matrix


def agreement(pairs: list[Pair]) -> dict:
    """Exact class agreement over compared pairs; rate is None when nothing was compared."""
    compared = [p for p in pairs if p.compared]
    agree = sum(p.agrees for p in compared)
    lower = sum(_RANK[p.grader] < _RANK[p.judge] for p in compared)
    return {"agree": agree, "total": len(compared), "rate": round(agree / len(compared), 4) if compared else None,
            "grader_lower": lower, "grader_higher": len(compared) - agree - lower}


def excluded_counts(pairs: list) -> dict[str, int]:
    return dict(sorted(Counter(p.excluded for p in pairs if p.excluded).items()))


def by_criterion(pairs: list[Pair], criteria: tuple[str, ...] = CRITERION_IDS) -> dict:
    out = {}
    for c in criteria:
        subset = [p for p in pairs if p.criterion == c]
        out[c] = {**agreement(subset), "confusion": confusion(subset), "excluded": excluded_counts(subset)}
    return out


def by_task(pairs: list[Pair], criteria: tuple[str, ...] = CRITERION_IDS) -> dict:
    out = {}
    for task in sorted({p.task for p in pairs}):
        subset = [p for p in pairs if p.task == task]
        out[task] = {"all": agreement(subset), "by_criterion": by_criterion(subset, criteria)}
    return out


def verdict_agreement(verdicts: list[VerdictPair]) -> dict:
    """Grader verdict against the judge's overall, with a confusion matrix over full/partial/fail/no_diff."""
    compared = [v for v in verdicts if v.excluded is None]
    matrix = {j: {g: 0 for g in VERDICTS} for j in VERDICTS}
    for v in compared:
        if v.judge in matrix and v.grader in matrix[v.judge]:
            matrix[v.judge][v.grader] += 1
    agree = sum(v.judge == v.grader for v in compared)
    return {"agree": agree, "total": len(compared), "rate": round(agree / len(compared), 4) if compared else None,
            "confusion": matrix, "excluded": excluded_counts(verdicts)}


def summarize_split(pairs: list[Pair], verdicts: list[VerdictPair], criteria: tuple[str, ...]) -> dict:
    return {"agreement": agreement(pairs), "by_criterion": by_criterion(pairs, criteria),
            "by_task": by_task(pairs, criteria), "excluded": excluded_counts(pairs),
            "verdict": verdict_agreement(verdicts)}


# ---------------------------------------------------------------- explaining a disagreement

_E_LINE = re.compile(r"^E\s+(.*\S)")


def short_message(message: str, limit: int = 220) -> str:
    """The first ``E`` line of a pytest failure (the exception or assertion), else the message's last line."""
    lines = (message or "").splitlines()
    picked = next((m.group(1) for m in map(_E_LINE.match, lines) if m), None)
    if picked is None:
        picked = next((line.strip() for line in reversed(lines) if line.strip()), "")
    return picked if len(picked) <= limit else picked[: limit - 1] + "…"


def _test_name(nodeid: str) -> str:
    return nodeid.rsplit("::", 1)[-1]


_CRASH = re.compile(r"\b(ImportError|ModuleNotFoundError|NameError|SyntaxError|IndentationError|AttributeError|"
                    r"TypeError|KeyError|IndexError|RuntimeError|NotImplementedError|UnboundLocalError)\b")


def explain(pair: Pair, criterion: CriterionResult, result: CandidateResult) -> tuple[str, str, list[dict]]:
    """(cause, explanation, failing evidence) for a grader/judge disagreement, from the grader's evidence only."""
    evaluated = [e for e in criterion.evidence if e.status in ("passed", "failed", "error", "timeout")]
    failing = [e for e in evaluated if e.status != "passed"]
    failing_view = [{"test": e.test, "status": e.status, "claim": e.claim, "message": short_message(e.message)}
                    for e in failing]
    score = criterion.score
    head = f"grader: {pair.grader} ({score:.2f})" if score is not None else f"grader: {pair.grader}"
    tail = f"; judge said {pair.judge}"
    rationale = criterion.rationale
    failed_hunks = [f"{f.path} {h.header}".strip() for f in (result.apply.files if result.apply else [])
                    for h in f.hunks if h.status == "failed"]
    lower = _RANK[pair.grader] < _RANK[pair.judge]
    if lower and rationale.startswith("anchor "):
        anchor_id = rationale.split()[1]
        anchor = result.criteria.get(anchor_id)
        anchor_fail = next((e for e in (anchor.evidence if anchor else [])
                            if e.status in ("failed", "error", "timeout")), None)
        why = ""
        if anchor_fail:
            msg = short_message(anchor_fail.message)
            why = f" ({_test_name(anchor_fail.test)} fails" + (f": {msg})" if msg else ")")
        return "anchor_unmet", (f"{head} — {rationale.split(':')[0]}{why}, so the mechanism this criterion judges "
                                f"is not credited{tail}"), failing_view
    if lower and failed_hunks:
        return "apply_incomplete", (f"{head} — {len(failed_hunks)} hunk(s) did not apply (first: {failed_hunks[0]}), "
                                    f"so only part of the change was tested{tail}"), failing_view
    if lower and failing:
        first = failing[0]
        msg = short_message(first.message)
        statuses = {e.status for e in failing}
        if "timeout" in statuses:
            cause = "timeout"
        elif "error" in statuses or _CRASH.search(msg or ""):
            cause = "crash"
        else:
            cause = "failing_assertion"
        more = f" (+{len(failing) - 1} more failing)" if len(failing) > 1 else ""
        verb = "times out" if first.status == "timeout" else "fails"
        text = f"{head} — {_test_name(first.test)} {verb}"
        text += f" with: {msg}" if msg else ""
        return cause, text + more + tail, failing_view
    if not lower and not failing and evaluated:
        names = ", ".join(_test_name(e.test) for e in evaluated[:3])
        extra = f" and {len(evaluated) - 3} more" if len(evaluated) > 3 else ""
        return "all_checks_pass", (f"{head} — all {len(evaluated)} evaluated check(s) pass ({names}{extra}); the "
                                   f"judge's objection is not exercised by a hidden test{tail}"), failing_view
    if not lower and failing:
        return "some_checks_pass", f"{head} — {rationale}{tail}", failing_view
    return "unexplained", f"{head} — {rationale or 'no evidence recorded'}{tail}", failing_view


# ---------------------------------------------------------------- notes


class NotesError(ValueError):
    pass


def load_notes(path: Path | None) -> dict[str, dict]:
    """``"<candidate-id>.<criterion>" = {verdict = "judge_wrong"|"grader_wrong"|"ambiguous", note = "..."}``."""
    if path is None or not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise NotesError(f"{path}: {exc}") from exc
    notes = {}
    for key, value in data.items():
        if not isinstance(value, dict) or value.get("verdict") not in NOTE_VERDICTS:
            raise NotesError(f"{path}: {key!r} needs verdict = one of {', '.join(NOTE_VERDICTS)}")
        notes[key] = {"verdict": value["verdict"], "note": str(value.get("note", ""))}
    return notes


# ---------------------------------------------------------------- the whole document


def calibrate(results: list[CandidateResult], labels: dict, ids: Mapping[int, str], notes: dict[str, dict] | None = None,
              diffs: dict[str, str] | None = None, inputs: dict | None = None) -> dict:
    """The calibration document (see the module docstring for its keys)."""
    notes = notes or {}
    criteria = tuple(sorted({c for t in labels.get("criteria", {}).values() for c in t})) or CRITERION_IDS
    by_id = {r.id: r for r in results}
    entries = labels.get("entries", [])
    pairs, verdicts = build_pairs(entries, by_id, ids, criteria)
    whole, truncated = split_pairs(pairs)
    vwhole, vtrunc = split_pairs(verdicts)
    entry_by_id = {ids[int(e["bundle_position"])]: e for e in entries if int(e["bundle_position"]) in ids}

    disagreements = []
    for p in whole:
        if not p.compared or p.agrees:
            continue
        result = by_id[p.id]
        crit = result.criteria[p.criterion]
        cause, text, failing = explain(p, crit, result)
        meaning = labels.get("criteria", {}).get(p.task, {}).get(p.criterion, {})
        disagreements.append({
            "id": p.id, "task": p.task, "criterion": p.criterion,
            "grader": {"class": p.grader, "status": crit.status, "score": crit.score, "title": crit.title,
                       "rationale": crit.rationale, "failing": failing, "verdict": result.verdict,
                       "apply_status": result.apply.status if result.apply else None},
            "judge": {"class": p.judge, "label": entry_by_id[p.id].get(p.criterion),
                      "criterion_name": meaning.get("name", ""), "criterion_meaning": meaning.get("meaning", ""),
                      "overall": entry_by_id[p.id].get("overall"),
                      "paragraph": result.reference_summary or ""},
            "direction": "grader_lower" if _RANK[p.grader] < _RANK[p.judge] else "grader_higher",
            "cause": cause, "explanation": text, "note": notes.get(f"{p.id}.{p.criterion}"),
            "diff": (diffs or {}).get(p.id, ""),
        })
    verdict_disagreements = [
        {"id": v.id, "task": v.task, "grader": v.grader, "judge": v.judge,
         "score": by_id[v.id].score, "note": notes.get(f"{v.id}.verdict")}
        for v in vwhole if v.excluded is None and v.grader != v.judge]
    truncated_disagreements = [
        {"id": p.id, "task": p.task, "criterion": p.criterion, "grader": p.grader, "judge": p.judge}
        for p in truncated if p.compared and not p.agrees]

    used = {f"{d['id']}.{d['criterion']}" for d in disagreements} | {f"{d['id']}.verdict"
                                                                      for d in verdict_disagreements}
    labelled_ids = set(entry_by_id)
    whole_summary = summarize_split(whole, vwhole, criteria)
    return {
        "schema": SCHEMA,
        "inputs": inputs or {},
        "thresholds": {"met_at": MET_AT, "unmet_at": UNMET_AT},
        "criteria": list(criteria),
        "criterion_names": labels.get("criteria", {}),
        "counts": {
            "labelled": len(entries),
            "graded": sum(1 for i in labelled_ids if i in by_id),
            "missing_results": sorted(i for i in labelled_ids if i not in by_id),
            "task_mismatch": sorted(i for i in labelled_ids if i in by_id and by_id[i].verdict != "error"
                                    and by_id[i].task != entry_by_id[i].get("task")
                                    and not _empty_without_task(by_id[i])),
            "errors": sorted(i for i in labelled_ids if i in by_id and by_id[i].verdict == "error"),
            "whole_candidates": len({v.id for v in vwhole}),
            "truncated_candidates": len({v.id for v in vtrunc}),
        },
        "headline": {
            "scope": "whole diffs",
            "criteria": whole_summary["agreement"],
            "by_criterion": {c: {k: v for k, v in d.items() if k in ("agree", "total", "rate")}
                             for c, d in whole_summary["by_criterion"].items()},
            "verdict": {k: v for k, v in whole_summary["verdict"].items() if k in ("agree", "total", "rate")},
            "not_evaluated": whole_summary["excluded"].get("not_evaluated", 0),
            "not_stated": whole_summary["excluded"].get("not_stated", 0),
        },
        "whole": whole_summary,
        "truncated": summarize_split(truncated, vtrunc, criteria),
        "disagreements": disagreements,
        "verdict_disagreements": verdict_disagreements,
        "truncated_disagreements": truncated_disagreements,
        "notes": {
            "by_verdict": dict(sorted(Counter(d["note"]["verdict"] for d in disagreements if d["note"]).items())),
            "without_note": sum(1 for d in disagreements if not d["note"]),
            "unmatched": sorted(k for k in notes if k not in used),
        },
    }


# ---------------------------------------------------------------- I/O and the command


def write_reports(out: Path, doc: dict) -> tuple[Path, Path]:
    from grader.core.paths import atomic_write
    from grader.reports.report import TEMPLATES

    json_path, html_path = out / "calibration.json", out / "calibration.html"
    atomic_write(json_path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    html = TEMPLATES.get_template("calibration.html.j2").render(doc=doc, classes=CLASSES, verdicts=VERDICTS)
    atomic_write(html_path, html)
    return json_path, html_path


def _pct(rate) -> str:
    return "-" if rate is None else f"{100 * rate:.0f}%"


def headline_text(doc: dict) -> str:
    h = doc["headline"]
    parts = [f"{c} {_pct(d['rate'])} ({d['agree']}/{d['total']})" for c, d in h["by_criterion"].items()]
    crit, verdict = h["criteria"], h["verdict"]
    return (f"whole diffs: criteria {_pct(crit['rate'])} ({crit['agree']}/{crit['total']}); " + ", ".join(parts)
            + f"; verdict {_pct(verdict['rate'])} ({verdict['agree']}/{verdict['total']}); "
            f"{len(doc['disagreements'])} disagreement(s), {h['not_evaluated']} not evaluated")


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="compare grading of a bundle with an earlier judge's labels")
    p.add_argument("bundle", type=Path, help="the bundle file the labels belong to")
    p.add_argument("--labels", type=Path, required=True, help="judge labels JSON")
    p.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: out)")
    p.add_argument("--results", type=Path, help="reuse this results.json instead of grading the bundle")
    p.add_argument("--notes", type=Path, help=f"manual notes TOML (default: {DEFAULT_NOTES} if present)")
    p.add_argument("--jobs", type=int, default=None, help="candidates graded at once")
    p.add_argument("--gpu", choices=("auto", "on", "off"), default="auto", help="run GPU evidence (default: auto)")
    p.add_argument("--timeout", type=float, default=600, help="seconds allowed for one candidate's hidden tests")


def grade_bundle(args) -> Path | None:
    """Grade the bundle into ``args.out`` (its store makes a rerun cheap) and write its results.json; None, with
    the reason printed, when that cannot be done."""
    from grader.pipeline.ingest import IngestError, ingest
    from grader.drive.many_candidates import grade_many
    from grader.core.environment import GraderUsageError, default_jobs, detect_gpu
    from grader.reports.outcome import exit_code, exit_reason
    from grader.reports.report import graded_run, started_at, write_results_json
    from grader.sandbox import contain
    from grader.sandbox.shortfall import shortfalls
    from grader.drive.store import ResultStore
    from grader.reports.terminal import ProgressLines

    try:
        candidates = ingest([args.bundle])
        gpu, reason = detect_gpu(args.gpu)
    except (IngestError, GraderUsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    options = GradingOptions(gpu=gpu, timeout=args.timeout, jobs=args.jobs or default_jobs())
    began = started_at()
    run = grade_many(candidates, options, ProgressLines(), ResultStore(args.out))
    degraded = shortfalls(contain.probe())
    # The exit code and reason are those ``grade`` would give these results (calibrate itself exits 0).
    return write_results_json(args.out, run.results, graded_run(
        began=began, gpu=reason, candidates=len(candidates), containment=contain.summary_line(), degraded=degraded,
        timeout=options.timeout, fail_under=None, exit_code=exit_code(run.results, None),
        exit_reason=exit_reason(run.results, None, None), wall_s=run.wall_s, backend="local", jobs=options.jobs))


def run_calibrate(args) -> int:
    from grader.pipeline.ingest import IngestError, ingest
    from grader.reports.report import results_of

    try:
        labels = read_labels(args.labels)
    except LabelsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results_path = args.results
    if results_path is None:
        results_path = grade_bundle(args)
        if results_path is None:
            return 2
    try:
        document = json.loads(results_path.read_text(encoding="utf-8"))
        results = results_of(document)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, RecordError) as exc:
        print(f"error: cannot read results {results_path}: {exc}", file=sys.stderr)
        return 2
    notes_path = args.notes if args.notes is not None else (DEFAULT_NOTES if DEFAULT_NOTES.is_file() else None)
    try:
        notes = load_notes(notes_path)
        diffs = {c.id: c.diff for c in ingest([args.bundle])}
    except (NotesError, IngestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    inputs = {"bundle": str(args.bundle), "labels": str(args.labels), "results": str(results_path),
              "notes": str(notes_path) if notes_path else None}
    ids = bundle_ids(args.bundle)
    doc = calibrate(results, labels, ids, notes, diffs, inputs)
    json_path, html_path = write_reports(args.out, doc)
    if args.results is None:  # the scorecards of the run just made, with the judge's verdicts beside
        from grader.reports.report import run_of, write_html

        write_html(args.out, results, run_of(document), diffs,
                   judge_verdicts(labels, ids))
    print(headline_text(doc), file=sys.stderr)
    print(f"wrote {json_path} and {html_path}", file=sys.stderr)
    return 0
