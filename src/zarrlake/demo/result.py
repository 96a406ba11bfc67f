"""What the demo did, step by step: returned by `run` (and printed by `zarrlake demo
--json`), so tests can check the story's claims instead of the demo checking itself."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class WriterOutcome:
    """One concurrent writer: what it changed and whether its commit landed."""

    name: str
    region: str
    status: str  # "landed" or "conflict"
    commit: str | None = None
    conflicts: list[str] = field(default_factory=list)


@dataclass
class TimeTravel:
    """Reads of the first and the last day at the release tag and at main."""

    tag: str
    tag_commit: str
    days_after_tag: int
    first_day_identical: bool  # the first day reads the same at the tag and at main
    last_day_empty_at_tag: bool  # the last day is all fill value (NaN) at the tag
    last_day_complete_at_main: bool  # ... and has no NaN at main
    first_day_mean: float
    last_day_mean: float


@dataclass
class Replay:
    """A day's job run again with the same bytes."""

    day: str
    previous_head: str
    commit: str
    changes: dict[str, Any]  # the diff between the two heads (empty: no changes)
    stored_bytes_added: int  # chunk bytes main references, after minus before
    disk_bytes_added: int  # the repository's objects on disk (commit records only)
    day_bytes: int  # what the job sent, uncompressed
    refused: str = ""  # the first run's error: a commit that changes nothing is refused


@dataclass
class FailedJob:
    """A Spark job whose task raised half-way."""

    error: str
    fail_chunk: int
    head_before: str
    head_after: str
    data_untouched: bool
    open_sessions: int


@dataclass
class MergeOutcome:
    """A branch with its own commit, merged back into main."""

    branch: str
    branch_commit: str
    merge_commit: str
    main_has_change: bool


@dataclass
class AuditOutcome:
    """A reprocessed day written to a branch, audited by the checks guarding main, refused,
    fixed on its branch and published through a reviewed pull request."""

    checks: list[str]
    branch: str
    day: str
    pull_request: int
    failed_check: str
    failed_message: str
    merge_refused: str
    fix_commit: str
    checks_after_fix: dict[str, bool]
    merge_commit: str
    state: str
    main_has_fix: bool
    branch_deleted: bool


@dataclass
class GcOutcome:
    """Garbage collection after the failed job."""

    objects_deleted: int
    bytes_reclaimed: int
    object_bytes_before: int  # the repository's objects on disk (not the metastore)
    object_bytes_after: int


@dataclass
class Summary:
    """What the repository holds at the end."""

    commits: int
    branches: int
    tags: int
    arrays: int
    chunks: int
    logical_bytes: int  # the arrays' size uncompressed
    written_bytes: int  # array bytes the committed jobs and writers sent, uncompressed
    stored_bytes: int  # chunk bytes the repository stores (compressed, deduplicated)
    disk_bytes: int  # the whole directory: objects + metastore


@dataclass
class DemoResult:
    """Everything the story claims, as data."""

    directory: str
    replaced_previous_demo: bool
    dataset_commit: str
    day_commits: list[str]
    time_travel: TimeTravel
    replay: Replay
    disjoint_writers: list[WriterOutcome]
    overlapping_writers: list[WriterOutcome]
    retry: WriterOutcome
    failed_job: FailedJob
    merge: MergeOutcome | None
    audit: AuditOutcome | None
    gc: GcOutcome | None
    summary: Summary
    elapsed_seconds: float

    def to_json(self) -> dict[str, Any]:
        """The result as a plain dict, for `zarrlake demo --json`."""
        return asdict(self)
