"""Typed records passed between the pipeline stages, and the versioned results schema they serialize to."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

SCHEMA_VERSION = "2.2"

ApplyStatus = Literal["applied", "partial", "failed", "empty", "rejected"]
HunkStatus = Literal["applied", "offset", "fuzz", "failed", "truncated"]
FileChange = Literal["modified", "added", "deleted", "renamed"]
CriterionStatus = Literal["met", "partial", "unmet", "not_evaluated"]
Verdict = Literal["full", "partial", "fail", "no_diff", "error"]
TestStatus = Literal["passed", "failed", "skipped", "error", "timeout"]
# What happened to a candidate's grading, beside its verdict: only "complete" results are stored and cached.
RunStatus = Literal["complete", "timed_out", "interrupted", "environment_error", "apply_partial"]


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
class HunkReport:
    header: str
    status: HunkStatus
    detail: str = ""


@dataclass(frozen=True)
class FileReport:
    path: str
    change: FileChange
    hunks: list[HunkReport] = field(default_factory=list)


@dataclass(frozen=True)
class ApplyReport:
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
    # What the applied tree changes, in words (grader.describe), for the summary.
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
class TestOutcome:
    """One hidden test's result, as parsed from the evidence channel."""

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


@dataclass(frozen=True)
class RunReport:
    """What running a task's hidden tests against one patched tree produced."""

    outcomes: list[TestOutcome]
    returncode: int | None
    timed_out: bool
    log: str
    duration: float
    environment_error: str | None = None


@dataclass(frozen=True)
class CriterionResult:
    id: str
    title: str
    score: float | None
    status: CriterionStatus
    rationale: str
    evidence: list[dict] = field(default_factory=list)
    # Evaluated weight over the weight of every check of the criterion (1.0: every check ran).
    coverage: float = 0.0
    # Why checks did not run, counted: {"gpu": 5, "timeout": 1, ...}.
    not_run: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RubricIdentity:
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
class CandidateResult:
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

    def to_json(self) -> dict:
        return asdict(self)
