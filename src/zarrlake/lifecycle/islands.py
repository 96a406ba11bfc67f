"""Commits `expire` kept while it dropped a child of theirs: islands no ref's history reaches.

A commit kept only for a while (a tag since deleted, an open session's base, a running
history operation's keep record) can outlive the commit above it on its line. The walks from
branch heads stop at that expired child, so no later expiry would see the kept commit, and
its record and objects would stay forever. `expire` notes each such commit in the gc
partition (`i/<commit id>`) before it deletes the child's record, and every later expiry
walks down from the noted commits as it does from branch heads.
"""

from __future__ import annotations

from collections.abc import Iterable

from zarrlake.vc.gc_protocol import GcContext, partition

ISLAND = b"i/"


def islands(ctx: GcContext) -> list[str]:
    """The commit ids noted as islands."""
    items = ctx.meta.scan(partition(ctx), prefix=ISLAND)
    return [key[len(ISLAND) :].decode() for key, _, _ in items]


def note(ctx: GcContext, commits: Iterable[str]) -> None:
    """Note `commits` as islands (noting one twice is harmless)."""
    ctx.meta.set_many(partition(ctx), [(ISLAND + cid.encode(), b"") for cid in commits])


def forget(ctx: GcContext, commits: Iterable[str]) -> None:
    """Drop the notes of `commits` (expired, gone, or reached from a branch again)."""
    ctx.meta.set_many(partition(ctx), [(ISLAND + cid.encode(), None) for cid in commits])
