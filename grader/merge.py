"""``grade merge OUT... --out MERGED``: the outputs of several gradings (the shards of one input, graded by
separate CI jobs) as one: one results.json, one index with every candidate's page, one JUnit file.

Only outputs of the same grader (commit and schema version) under the same GPU setting merge: a merged results.json
says that one grader graded it all. A candidate found in two outputs must have the same result in both (apart from
the fields that vary between identical runs); otherwise the merge is refused, naming the candidate.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from grader.core.paths import output_folder, page_name
from grader.core.records import CandidateResult, RecordError
from grader.report import comparable, results_of


class MergeError(Exception):
    """The outputs cannot be merged: the message says which output or candidate and why."""


@dataclass(frozen=True)
class Merged:
    results: list[CandidateResult]
    run_info: dict
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


def same_grading(documents: dict[Path, dict]) -> None:
    """Refuse outputs made by different graders, schema versions or GPU settings."""
    def identity(document: dict) -> tuple:
        run = document.get("run", {})
        return document.get("schema_version"), (run.get("grader") or {}).get("commit"), run.get("gpu"), \
            run.get("containment")
    first_out, first = next(iter(documents.items()))
    for out, document in documents.items():
        if identity(document) != identity(first):
            raise MergeError(f"{out} was graded by another grader or setting than {first_out} "
                             f"(schema, commit, GPU, containment: {identity(document)} vs {identity(first)})")


def read_results(out: Path, document: dict) -> list[CandidateResult]:
    """The candidates of one output's results.json as records; one that is not a result of this schema is
    refused, naming the output."""
    try:
        return results_of(document)
    except RecordError as exc:
        raise MergeError(f"{out / 'results.json'}: a candidate is not a result of this grader ({exc})") from None


def same_result(a: CandidateResult, b: CandidateResult) -> bool:
    """Whether two results agree apart from the fields that vary between identical runs."""
    return comparable({"candidates": [a.to_json()]}) == comparable({"candidates": [b.to_json()]})


def merge_documents(documents: dict[Path, dict]) -> Merged:
    same_grading(documents)
    results: dict[str, CandidateResult] = {}
    origin: dict[str, Path] = {}
    for out, document in documents.items():
        for result in read_results(out, document):
            cid = result.id
            if cid in results and not same_result(results[cid], result):
                raise MergeError(f"candidate {cid!r} has different results in {origin[cid]} and {out}")
            results.setdefault(cid, result)
            origin.setdefault(cid, out)
    runs = [document.get("run", {}) for document in documents.values()]
    not_graded = sorted({cid for run in runs for cid in run.get("incomplete", {}).get("not_graded", [])} - set(results))
    first = runs[0]
    run_info = {key: first.get(key) for key in ("grader_version", "grader", "gpu", "containment", "timeout_s")}
    run_info |= {"started_at": min(run.get("started_at", "") for run in runs),
                 "candidates": len(results) + len(not_graded),
                 "merged_from": [{"out": str(out), "started_at": run.get("started_at"),
                                  "candidates": run.get("candidates"), "exit_code": run.get("exit_code"),
                                  "backend": run.get("backend"), "jobs": run.get("jobs")}
                                 for out, run in zip(documents, runs)],
                 "timings": {"wall_s": round(sum((run.get("timings") or {}).get("wall_s", 0.0) for run in runs), 2)}}
    if not_graded:
        run_info["incomplete"] = {"reason": "some merged output was interrupted", "not_graded": not_graded}
    return Merged(sorted(results.values(), key=lambda r: r.id), run_info, origin)


def merge_outputs(outs: list[Path]) -> Merged:
    if len(set(map(Path.resolve, outs))) != len(outs):
        raise MergeError("an output folder is named twice")
    return merge_documents({out: read_output(out) for out in outs})


def copy_pages(merged: Merged, dest: Path) -> None:
    """Each candidate's page from the output that graded it (pages are rendered with their diff, which
    results.json does not hold)."""
    pages = output_folder(dest / "candidates")
    for result in merged.results:
        name = page_name(result.id)
        source = merged.origin[result.id] / "candidates" / name
        if source.is_file():
            shutil.copyfile(source, pages / name)
