"""An earlier judge's labels (the judge-labels format): read and checked whole, and its verdicts matched to the
bundle entries they label. Calibration compares with them; the scorecards show the judge's verdict beside ours."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path


class LabelsError(ValueError):
    """A labels file that is not of the judge-labels format: the message names the file, the entry and the field."""


def read_labels(path: Path) -> dict:
    """A judge-labels file, read and checked whole: a JSON object whose ``entries`` each hold a ``bundle_position``
    (a whole number, each once), an optional ``task`` and ``overall`` (text) and criterion labels (numbers), and
    whose ``criteria`` map tasks to criteria to objects. Anything else is a ``LabelsError`` naming the file, the
    entry and the field."""
    try:
        labels = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LabelsError(f"{path}: cannot be read as JSON ({exc})") from None
    if not isinstance(labels, dict):
        raise LabelsError(f"{path}: not a JSON object of labels")
    entries = labels.get("entries", [])
    if not isinstance(entries, list):
        raise LabelsError(f"{path}: the field 'entries' is not a list")
    seen: dict[int, int] = {}
    for index, entry in enumerate(entries):
        where = f"{path}: entry {index}"
        if not isinstance(entry, dict):
            raise LabelsError(f"{where} is not an object")
        position = entry.get("bundle_position")
        if "bundle_position" not in entry:
            raise LabelsError(f"{where} lacks the field 'bundle_position'")
        if not isinstance(position, int) or isinstance(position, bool) or position < 0:
            raise LabelsError(f"{where}: the field 'bundle_position' is {position!r}, not a whole number >= 0")
        if position in seen:
            raise LabelsError(f"{where}: the field 'bundle_position' {position} is also entry {seen[position]}'s")
        seen[position] = index
        for field in ("task", "overall"):
            if entry.get(field) is not None and not isinstance(entry[field], str):
                raise LabelsError(f"{where}: the field {field!r} is {entry[field]!r}, not text")
        for field, value in entry.items():
            if field in ("task", "overall", "bundle_position"):
                continue
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise LabelsError(f"{where}: the label {field!r} is {value!r}, not a number (1, 0.5, 0) or null")
    criteria = labels.get("criteria", {})
    if not isinstance(criteria, dict) or not all(isinstance(c, dict) and all(isinstance(m, dict) for m in c.values())
                                                 for c in criteria.values()):
        raise LabelsError(f"{path}: the field 'criteria' is not an object of tasks to criteria to objects")
    return labels


def bundle_ids(bundle: Path) -> dict[int, str]:
    """The id of each bundle entry by its position (labels name entries by position; ids come from their
    content, ``grader.pipeline.ingest.bundle_entry_id``)."""
    from grader.pipeline.ingest import ingest

    return {c.bundle_position: c.id for c in ingest([bundle]) if c.bundle_position is not None}


def judge_verdicts(labels: dict, ids: Mapping[int, str]) -> dict[str, str]:
    """The judge's overall verdict per bundle candidate id (what the scorecards show beside the grader's)."""
    return {ids[int(e["bundle_position"])]: e["overall"] for e in labels.get("entries", [])
            if e.get("overall") and int(e["bundle_position"]) in ids}
