"""``grade merge OUT... --out MERGED``: the outputs of several gradings (the shards of one input, graded by
separate CI jobs) as one: one results.json, one index with every candidate's page, one JUnit file.

Only outputs of the same grader (commit and schema version) under the same GPU setting and containment merge: a
merged results.json says that one grader graded it all. A candidate found in two outputs must have the same result
in both (apart from the fields that vary between identical runs); otherwise the merge is refused, naming the
candidate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from grader.core.paths import atomic_copy, output_folder, page_name
from grader.core.records import CandidateResult, Incomplete, MergedOutput, RecordError, RunInfo
from grader.reports.outcome import exit_code, exit_reason
from grader.reports.report import comparable, results_of, run_of


class MergeError(Exception):
    """The outputs cannot be merged: the message says which output or candidate and why."""


@dataclass(frozen=True)
class Merged:
    results: list[CandidateResult]
    run: RunInfo
    # Each result's output folder, where its candidate page lies.
    origin: dict[str, Path]


def read_output(out: Path) -> dict:
    path = out / "results.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MergeError(f"{path}: cannot be read as results.json ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("candidates"), list):
        raise MergeError(f"{path}: not a results.json (no candidates list)")
    return document


def same_grading(documents: dict[Path, dict], runs: dict[Path, RunInfo]) -> None:
    """Refuse outputs made by different graders, schema versions, GPU settings or containment (its shortfalls too)."""
    def identity(out: Path) -> tuple:
        run = runs[out]
        return documents[out].get("schema_version"), run.grader.commit, run.gpu, run.containment, \
            run.containment_warning
    first_out = next(iter(documents))
    for out in documents:
        if identity(out) != identity(first_out):
            raise MergeError(f"{out} was graded by another grader or setting than {first_out} (schema, commit, "
                             f"GPU, containment, its shortfalls: {identity(out)} vs {identity(first_out)})")


def read_run(out: Path, document: dict) -> RunInfo:
    """The run section of one output's results.json as a record; one that is not a run section of this schema
    is refused, naming the output."""
    return read_records(out, lambda: run_of(document), "its run section is not one of this grader")


def read_results(out: Path, document: dict) -> list[CandidateResult]:
    """The candidates of one output's results.json as records; one that is not a result of this schema is
    refused, naming the output."""
    return read_records(out, lambda: results_of(document), "a candidate is not a result of this grader")


def read_records(out: Path, read, refusal: str):
    """``read()``, its ``RecordError`` refused as a ``MergeError`` naming ``out``'s results.json."""
    try:
        return read()
    except RecordError as exc:
        raise MergeError(f"{out / 'results.json'}: {refusal} ({exc})") from None


def same_result(a: CandidateResult, b: CandidateResult) -> bool:
    """Whether two results agree apart from the fields that vary between identical runs."""
    return comparable({"candidates": [a.to_json()]}) == comparable({"candidates": [b.to_json()]})


def merged_run(runs: dict[Path, RunInfo], results: list[CandidateResult], fail_under: float | None) -> RunInfo:
    """The run section of the merge: the outputs' grader and settings (``same_grading`` made them one), the
    earliest start, their summed wall time, each output under ``merged_from``, and the merge's own exit."""
    first = next(iter(runs.values()))
    graded = {r.id for r in results}
    not_graded = sorted({cid for run in runs.values() if run.incomplete for cid in run.incomplete.not_graded} - graded)
    incomplete = Incomplete("some merged output was interrupted", not_graded) if not_graded else None
    reason = incomplete.reason if incomplete else None
    return RunInfo(
        grader_version=first.grader_version, grader=first.grader, gpu=first.gpu, containment=first.containment,
        containment_degraded=first.containment_degraded, containment_warning=first.containment_warning,
        timeout_s=first.timeout_s, started_at=min(run.started_at for run in runs.values()),
        candidates=len(results) + len(not_graded),
        merged_from=[MergedOutput(str(out), run.started_at, run.candidates, run.exit_code, run.backend, run.jobs)
                     for out, run in runs.items()],
        timings={"wall_s": round(sum(run.timings.get("wall_s", 0.0) for run in runs.values()), 2)},
        fail_under=fail_under, exit_code=130 if reason else exit_code(results, fail_under),
        exit_reason=exit_reason(results, fail_under, reason), incomplete=incomplete)


def merge_documents(documents: dict[Path, dict], fail_under: float | None = None) -> Merged:
    runs = {out: read_run(out, document) for out, document in documents.items()}
    same_grading(documents, runs)
    results: dict[str, CandidateResult] = {}
    origin: dict[str, Path] = {}
    for out, document in documents.items():
        for result in read_results(out, document):
            cid = result.id
            if cid in results and not same_result(results[cid], result):
                raise MergeError(f"candidate {cid!r} has different results in {origin[cid]} and {out}")
            results.setdefault(cid, result)
            origin.setdefault(cid, out)
    merged = sorted(results.values(), key=lambda r: r.id)
    return Merged(merged, merged_run(runs, merged, fail_under), origin)


def merge_outputs(outs: list[Path], fail_under: float | None = None) -> Merged:
    if len(set(map(Path.resolve, outs))) != len(outs):
        raise MergeError("an output folder is named twice")
    return merge_documents({out: read_output(out) for out in outs}, fail_under)


def copy_pages(merged: Merged, dest: Path) -> None:
    """Each candidate's page from the output that graded it (pages are rendered with their diff, which
    results.json does not hold), each copied whole or not at all (a filling disk leaves no page cut off)."""
    pages = output_folder(dest / "candidates")
    for result in merged.results:
        name = page_name(result.id)
        source = merged.origin[result.id] / "candidates" / name
        if source.is_file():
            atomic_copy(source, pages / name)
