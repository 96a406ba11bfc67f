"""Commit records: parents, snapshot, change set, message, author, time, session, metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime

from zarrlake.errors import CorruptionError
from zarrlake.format import envelope
from zarrlake.format.digest import Hash


@dataclass(frozen=True)
class CommitRecord:
    """One commit as stored: its parents, snapshot and change set ids, and who, when and why."""

    parents: tuple[str, ...]
    snapshot: str
    changes: str
    message: str
    author: str | None
    timestamp: float  # seconds since the epoch, UTC
    session_id: str | None
    metadata: dict[str, str] = field(default_factory=dict)
    """Caller-defined properties (e.g. a streaming query's id and batch), kept with the
    commit; records without any encode as they always did."""

    @property
    def time(self) -> datetime:
        """The commit time as a timezone-aware UTC datetime."""
        return datetime.fromtimestamp(self.timestamp, UTC)

    def encode(self, algo: Hash = Hash.SHA256) -> tuple[str, bytes]:
        """Frame the record as canonical JSON; returns (object id, bytes)."""
        doc = {name: getattr(self, name) for name in _COMMIT_FIELDS}  # asdict deep-copies
        doc["parents"] = list(self.parents)
        if not self.metadata:
            del doc["metadata"]
        return envelope.encode(envelope.KIND_COMMIT, json.dumps(doc, sort_keys=True).encode(), algo)

    @classmethod
    def decode(cls, oid: str, data: bytes) -> CommitRecord:
        """Read back a commit stored under `oid`, verifying its checksum."""
        payload = envelope.decode(envelope.KIND_COMMIT, oid, data)
        try:
            doc = json.loads(bytes(payload))
            doc["parents"] = tuple(doc["parents"])
            return cls(**doc)
        except (ValueError, TypeError, KeyError) as e:
            raise CorruptionError(f"commit object {oid}: cannot decode ({e})") from e


_COMMIT_FIELDS = tuple(f.name for f in fields(CommitRecord))
