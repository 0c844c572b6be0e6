"""Typed records passed between the pipeline stages, and the versioned results schema they serialize to."""

from __future__ import annotations

import dataclasses
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

SCHEMA_VERSION = "3.0"

ApplyStatus = Literal["applied", "partial", "failed", "empty", "rejected"]
HunkStatus = Literal["applied", "offset", "fuzz", "failed", "truncated"]
FileChange = Literal["modified", "added", "deleted", "renamed"]
CriterionStatus = Literal["met", "partial", "unmet", "not_evaluated"]
# ``input_truncated`` (a cut preview) and ``no_task`` (no task could be told) are neither pass nor fail: the
# candidate was not seen whole, or not graded at all, and is counted apart like ``no_diff``.
# ``incomplete``: the run did not finish (timed out, interrupted); unscored, neither a pass nor a fail.
Verdict = Literal["full", "partial", "fail", "incomplete", "no_diff", "input_truncated", "no_task", "error"]
# "not_run": the judge ended before the test finished, for a reason not the candidate's (killed, out of memory).
TestStatus = Literal["passed", "failed", "skipped", "error", "timeout", "not_run"]
# What happened to a candidate's grading, beside its verdict: only "complete" results are stored and cached.
# "grader_error": the grader's own process (judge, warm worker) ended without its protocol's last word.
RunStatus = Literal["complete", "timed_out", "interrupted", "environment_error", "grader_error", "apply_partial",
                    "input_truncated"]
# The same values as tuples, in the order reports list them (best first): defined once, here.
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
CRITERION_STATUSES: tuple[CriterionStatus, ...] = get_args(CriterionStatus)
CRITERION_IDS = ("c1", "c2", "c3", "c4", "c5")


class RecordError(ValueError):
    """A JSON document is not the record it is read as (another version, shape or type)."""


Record = TypeVar("Record")


def record_from_json(cls: type[Record], data: Any, where: str = "") -> Record:
    """``cls`` (a record dataclass) from its JSON form, every field checked against its annotation: an unknown
    or missing field, or a value of another type, is a ``RecordError`` naming where, never a half-read record."""
    where = where or cls.__name__
    if not isinstance(data, dict):
        raise RecordError(f"{where}: expected an object, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise RecordError(f"{where}: unknown field {unknown[0]!r}")
    hints = get_type_hints(cls)
    values = {}
    for name, spec in fields.items():
        if name in data:
            values[name] = _value(data[name], hints[name], f"{where}.{name}")
        elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise RecordError(f"{where}: missing field {name!r}")
    return cls(**values)


def _default_of(spec: dataclasses.Field) -> Any:
    return spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default


def _plain(value: Any) -> Any:
    """``value`` as JSON data: records by their own ``to_json``, containers element by element."""
    if isinstance(value, JsonRecord):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _value(value: Any, hint: Any, where: str) -> Any:
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return value
    if origin is Literal:
        if value not in args:
            raise RecordError(f"{where}: {value!r} is not one of {args}")
        return value
    if origin in (Union, types.UnionType):
        for option in args:
            try:
                return _value(value, option, where)
            except RecordError:
                continue
        raise RecordError(f"{where}: {value!r} is none of {args}")
    if origin is list or hint is list:
        if not isinstance(value, list):
            raise RecordError(f"{where}: expected a list, got {type(value).__name__}")
        return [_value(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)] if args else value
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        if not isinstance(value, (list, tuple)):
            raise RecordError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(_value(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict or hint is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise RecordError(f"{where}: expected an object")
        return {k: _value(v, args[1], f"{where}.{k}") for k, v in value.items()} if args else value
    if dataclasses.is_dataclass(hint):
        return record_from_json(hint, value, where)
    if hint is type(None):
        if value is not None:
            raise RecordError(f"{where}: expected null")
        return None
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint in (str, int, bool) and type(value) is hint:
        return value
    raise RecordError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {type(value).__name__}")


class JsonRecord:
    """A record that crosses a stage or a cache: ``to_json`` and the checked ``from_json``. A field named in
    ``ABSENT_WHEN_DEFAULT`` is left out of the JSON while it holds its default (``from_json`` gives the default
    back), so a document says such a field only where it has something to say."""

    ABSENT_WHEN_DEFAULT: tuple[str, ...] = ()

    def to_json(self) -> dict:
        document = {}
        for spec in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, spec.name)
            if spec.name in self.ABSENT_WHEN_DEFAULT and value == _default_of(spec):
                continue
            document[spec.name] = _plain(value)
        return document

    @classmethod
    def from_json(cls, data: Any):
        return record_from_json(cls, data)


@dataclass(frozen=True)
class Candidate:
    """One patch to grade, as ingestion found it."""

    id: str
    source: str
    diff: str
    task: str | None = None
    task_reason: str = ""
    reference_summary: str | None = None
    bundle_position: int | None = None
    ingest_error: str | None = None
    at_preview_limit: bool = False


@dataclass(frozen=True)
class BuiltBase:
    """A task's pinned base, built: a git repository whose commit holds the sdist with its overlay."""

    task: str
    path: Path
    commit: str
    # The recipe's key (grader.core.identity.recipe_key).
    key: str


@dataclass(frozen=True)
class HunkReport(JsonRecord):
    header: str
    status: HunkStatus
    detail: str = ""


@dataclass(frozen=True)
class FileReport(JsonRecord):
    path: str
    change: FileChange
    hunks: list[HunkReport] = field(default_factory=list)


@dataclass(frozen=True)
class ApplyReport(JsonRecord):
    status: ApplyStatus
    method: str | None = None
    files: list[FileReport] = field(default_factory=list)
    truncated: bool = False
    message: str = ""
    neutralized: list[str] = field(default_factory=list)
    # Files the diff changes as binary (a git binary patch or "Binary files ... differ"): reported, never applied.
    binary: list[str] = field(default_factory=list)
    # git's tree hash of the whole applied tree: what the evidence cache is keyed on (never on parsed paths).
    tree_id: str = ""
    # What the applied tree changes, in words (grader.reports.describe), for the summary.
    description: str = ""

    @property
    def hunks_applied(self) -> int:
        return sum(h.status in ("applied", "offset", "fuzz") for f in self.files for h in f.hunks)

    @property
    def hunks_truncated(self) -> int:
        return sum(h.status == "truncated" for f in self.files for h in f.hunks)

    @property
    def hunks_total(self) -> int:
        return sum(len(f.hunks) for f in self.files)


@dataclass(frozen=True)
class TestOutcome(JsonRecord):
    """One hidden test's result, as parsed from the evidence channel."""

    __test__ = False  # a record, not a pytest test class

    nodeid: str
    status: TestStatus
    criteria: dict[str, float]
    kinds: list[str] = field(default_factory=list)
    doc: str = ""
    message: str = ""
    duration: float = 0.0
    # For a skipped test: "marker" (the judge's collection-time markers: GPU, platform) or "judge" (a hidden test
    # decided at run time, from the environment, that it cannot run here). Subjects can never skip.
    skipped_by: str = ""
    # The patch's added lines that ran in the candidate's subject during this test (the diff's path -> line
    # numbers of the graded tree), from a traced re-run of the failing checks (``grader.pipeline.traced_rerun``); None
    # where lines were not traced. Shown on the scorecard, never scored.
    ran: dict[str, list[int]] | None = None
    # Why a re-run failing check has no ``ran`` (its re-run did not finish, or did not reproduce); "" otherwise.
    rerun: str = ""


@dataclass(frozen=True)
class RunReport(JsonRecord):
    """What running a task's hidden tests against one patched tree produced."""

    outcomes: list[TestOutcome]
    returncode: int | None
    timed_out: bool
    log: str
    duration: float
    environment_error: str | None = None
    # The judge or its warm worker ended without the evidence plugin's last word (``grader.pipeline.run.judge_fault``).
    grader_error: str | None = None


@dataclass(frozen=True)
class EvidenceEntry(JsonRecord):
    """One hidden test as evidence of one criterion (a ``TestOutcome`` weighed for that criterion)."""

    ABSENT_WHEN_DEFAULT = ("message", "ran", "rerun")

    test: str
    status: TestStatus
    weight: float
    # The test's docstring: the claim it checks, in the rubric's words ("" where it has none).
    claim: str
    kinds: list[str]
    duration_s: float
    # The failure or skip text, its last 1,500 characters ("": none).
    message: str = ""
    # The patch's added lines that ran during the test (``TestOutcome.ran``); None where lines were not traced.
    ran: dict[str, list[int]] | None = None
    # Why the traced re-run gave no lines for a failing check (``TestOutcome.rerun``; "": it gave them, or none ran).
    rerun: str = ""


@dataclass(frozen=True)
class CriterionResult(JsonRecord):
    id: str
    title: str
    score: float | None
    status: CriterionStatus
    rationale: str
    evidence: list[EvidenceEntry] = field(default_factory=list)
    # Evaluated weight over the weight of every check of the criterion (1.0: every check ran).
    coverage: float = 0.0
    # Why checks did not run, counted: {"gpu": 5, "timeout": 1, ...}.
    not_run: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RubricIdentity(JsonRecord):
    """What a result was graded against: enough to tell whether two results are comparable."""

    task_version: int
    # Digest of the task folder and the shared harness the hidden tests load (grader.core.rubric).
    fingerprint: str
    weights: dict[str, float]
    core: list[str]
    # Score thresholds: met at or above met_at, unmet at or below unmet_at, full needs full_at on every criterion.
    thresholds: dict[str, float]
    # The pinned base: sdist version and sha256, and the sha256 of the overlay applied to it (None: no overlay).
    base: dict[str, str | None]
    # Digest of every engine module that shapes a verdict (grader.core.identity.engine_fingerprint).
    engine: str = ""


@dataclass(frozen=True)
class IntegrityFlag(JsonRecord):
    """A tamper signal from the static scan of the diff (grader.pipeline.integrity): where to look, never a verdict."""

    rule: str
    file: str
    line: int
    text: str
    why: str


@dataclass(frozen=True)
class CandidateResult(JsonRecord):
    id: str
    task: str | None
    source: str
    verdict: Verdict
    score: float | None
    criteria: dict[str, CriterionResult]
    apply: ApplyReport | None
    summary: str
    reference_summary: str | None = None
    error: str | None = None
    diff_sha256: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    run_status: RunStatus = "complete"
    rubric: RubricIdentity | None = None
    # The version of the task's rubric that produced the verdict (rubric.toml's ``version``), read off ``rubric``.
    rubric_version: int | None = None
    integrity_flags: list[IntegrityFlag] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.rubric is not None and self.rubric_version is None:
            object.__setattr__(self, "rubric_version", self.rubric.task_version)


@dataclass(frozen=True)
class Graded:
    """One candidate's grading: its result and, when its hidden tests ran in this process, their run."""

    candidate: Candidate
    result: CandidateResult
    run: RunReport | None = None
    # Found in the results store: nothing ran for it in this run.
    stored: bool = False


@dataclass(frozen=True)
class AppliedEntry(JsonRecord):
    """The evidence cache's entry for a diff: what it applied to, and the key of that tree's evidence."""

    apply: ApplyReport
    tree_key: str


# Seconds a candidate's hidden tests may run (``grade --timeout``).
DEFAULT_TIMEOUT_S = 600


@dataclass(frozen=True)
class GradingOptions(JsonRecord):
    """How a grading run grades: the one options record from the command line to every backend (local threads,
    each Ray actor) and each candidate's pipeline. What runs the work (a results store, a backend, a launcher)
    is not an option: it is handed beside it."""

    gpu: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    jobs: int = 1
    # One fresh interpreter per candidate instead of forked warm workers (slower; nothing shared).
    cold: bool = False
    contained: bool = True
    keep_trees: bool = False
    # Record which of the diff's added lines ran in each failing check, in a traced re-run of those checks alone
    # (``grader.pipeline.traced_rerun``; the pages link failing checks to hunks; never changes a verdict).
    trace_lines: bool = False
    # Reuse and keep hidden-test evidence keyed on the applied tree (off: every test runs again).
    use_evidence_cache: bool = True
    # An empty diff grades the unpatched base (validate, mutate) instead of being ``no_diff``.
    empty_diff_grades_base: bool = False
    # Grade each task's reference fix first and stop the task where it misses its designed statuses
    # (``grader.drive.controls``; on every node, with the Ray backend).
    controls: bool = False
    # A subject's memory limit; None: the machine's share at ``jobs`` (``grade_many`` fills it in before any
    # backend sees the options).
    memory_bytes: int | None = None
    # Variables of the grader's environment passed on beyond ``protocol.PASSED_THROUGH_ENV`` (a Ray actor's
    # narrowed CUDA_VISIBLE_DEVICES).
    also_pass: tuple[str, ...] = ()


@dataclass(frozen=True)
class GraderRevision(JsonRecord):
    """Which grader graded: its version and, from a git checkout, its commit and whether the tree had edits
    (None: not a checkout, or git could not tell)."""

    version: str
    commit: str | None
    modified: bool | None


@dataclass(frozen=True)
class Incomplete(JsonRecord):
    """Why a run did not grade every candidate, and which it did not grade."""

    reason: str
    not_graded: list[str]


@dataclass(frozen=True)
class MergedOutput(JsonRecord):
    """One output folder a merged run joined (``grade merge``), as its own run section told it."""

    out: str
    started_at: str
    candidates: int
    exit_code: int
    # None where that output is itself a merge (its outputs each say theirs).
    backend: str | None
    jobs: int | None


@dataclass(frozen=True)
class RunInfo(JsonRecord):
    """results.json's ``run`` section: who graded, when, how, and why the exit code is what it is. Built once by
    ``grade`` (or ``grade merge``, from its outputs' sections) and read by field; a dictionary only in the file."""

    ABSENT_WHEN_DEFAULT = ("backend", "jobs", "incomplete", "merged_from")

    grader_version: str
    grader: GraderRevision
    started_at: str
    # How the GPU was decided, in words (grader.core.environment.detect_gpu).
    gpu: str
    # How many candidates the run was given (graded or not).
    candidates: int
    # The sandbox subjects ran in, in words; "off (--contain off)" without one.
    containment: str
    # Whether subjects got less than the full sandbox, and what they lacked (None: nothing).
    containment_degraded: bool
    containment_warning: str | None
    timeout_s: float
    fail_under: float | None
    exit_code: int
    exit_reason: str
    timings: dict[str, float]
    # Absent in a merged run, whose outputs each say theirs under ``merged_from``.
    backend: str | None = None
    jobs: int | None = None
    incomplete: Incomplete | None = None
    merged_from: list[MergedOutput] = field(default_factory=list)
