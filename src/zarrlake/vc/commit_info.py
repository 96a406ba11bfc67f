"""Commits as users see them (the public view of a commit record)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from zarrlake.format.commit import CommitRecord


@dataclass(frozen=True)
class Commit:
    """One commit of the history, as users see it."""

    id: str
    parent_ids: tuple[str, ...]
    message: str
    author: str | None
    timestamp: datetime
    session_id: str | None
    metadata: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    """In the history of a path (`Repo.log(path=...)`): the name the node had here."""

    def to_json(self) -> dict:
        """The commit as the CLI's and the web UI's JSON show it."""
        out = {
            "id": self.id,
            "parents": list(self.parent_ids),
            "message": self.message,
            "author": self.author,
            "timestamp": self.timestamp.astimezone(UTC).isoformat(),
            "session_id": self.session_id,
            "metadata": dict(self.metadata),
        }
        if self.path is not None:
            out["path"] = self.path
        return out

    @classmethod
    def from_record(cls, cid: str, rec: CommitRecord, path: str | None = None) -> Commit:
        """The public view of the stored commit record `rec` named `cid` (`path`: the name
        of the node whose history it is part of)."""
        return cls(
            cid, rec.parents, rec.message, rec.author, rec.time, rec.session_id, rec.metadata, path
        )
