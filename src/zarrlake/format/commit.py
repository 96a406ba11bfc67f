"""Commit records: parents, snapshot, change set, message, author, time, session."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from zarrlake.errors import CorruptionError
from zarrlake.format import envelope


@dataclass(frozen=True)
class CommitRecord:
    parents: tuple[str, ...]
    snapshot: str
    changes: str
    message: str
    author: str | None
    timestamp: float  # seconds since the epoch, UTC
    session_id: str | None

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp, UTC)

    def encode(self) -> tuple[str, bytes]:
        doc = asdict(self)
        doc["parents"] = list(self.parents)
        return envelope.encode(envelope.KIND_COMMIT, json.dumps(doc, sort_keys=True).encode())

    @classmethod
    def decode(cls, oid: str, data: bytes) -> CommitRecord:
        payload = envelope.decode(envelope.KIND_COMMIT, oid, data)
        try:
            doc = json.loads(payload)
            doc["parents"] = tuple(doc["parents"])
            return cls(**doc)
        except (ValueError, TypeError, KeyError) as e:
            raise CorruptionError(f"commit object {oid}: cannot decode ({e})") from e
