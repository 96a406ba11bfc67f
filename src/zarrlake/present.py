"""How commit ids, times and diffs are shown to people: one way for the command line, the
demo and the web UI, which may not import each other."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zarrlake.vc.diff import Diff


def short(commit_id: str | None) -> str:
    """The first 12 characters of a commit id; '-' for none."""
    return commit_id[:12] if commit_id else "-"


def subject(message: str) -> str:
    """A commit message's first line, as tables and one-line listings show it (a merge's
    message holds a body below it)."""
    return message.split("\n", 1)[0].rstrip()


def iso(value: datetime | float | None) -> str | None:
    """ISO-8601 UTC text for a datetime or a POSIX timestamp."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).isoformat()


def diff_rows(d: Diff) -> list[tuple[str, str, int, int]]:
    """(path, what happened to the node, chunks written, chunks deleted), by path."""
    return [(p or "/", c, w, x) for p, c, w, x in d.summary()]
