"""A new session's record, stored when the session first needs it: its first write to the
metastore (a flush, a metadata document, an upload's record, a writer's state), its first
hand-over to another worker (its id read, the session pickled), or its commit, whichever
comes first. A session that does none of these leaves no record; errors storing it
surface there.

Until then no other handle can know of the session, so its staging partitions are empty:
their reads are answered here without I/O (`Unborn`).

The base. `create_session` reads the branch head before any record names it, so `expire`
may drop that commit meanwhile. The record is stored naming the base, and the base's
expiry marker is read after it: `expire` writes its markers and then reads the session
records again, taking back the markers of the commits they protect. Either that re-read
sees this record and the base stays, or the marker was written before this record was, and
the session refuses (ExpiredHistoryError) and deletes its record.

A branch reset (or deletion) may also leave the base unreachable, and `gc` delete it once its grace
period has passed (a sweep re-reads the session records first, so one stored before that
keeps it). The base's commit record is looked for with its marker (at once): a session
whose base is gone refuses its first write (NotFoundError naming the reset and gc) and
deletes its record, instead of failing at its commit on a missing manifest. (A sweep
that deletes the base between its re-read and this look is not seen: the commit then fails
as before; it could never land, its branch no longer descending from its base.)"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from zarrlake.errors import ExpiredHistoryError, NotFoundError, ZarrLakeError
from zarrlake.metastore.base import Call, MetaStore, WrapperMetaStore
from zarrlake.vc.gc_protocol import uploads_of

if TYPE_CHECKING:
    from zarrlake.connection import RepoContext
    from zarrlake.session_records import SessionRecord

T = TypeVar("T")


class Birth:
    """Stores a session's record once, on first need (`ensure`); thread-safe (a background
    flush may be the first writer)."""

    __slots__ = ("_lock", "ctx", "record", "version")

    def __init__(self, ctx: RepoContext, record: SessionRecord) -> None:
        self.ctx = ctx
        self.record = record  # as drafted; after `ensure`, the handle's own copy moves on
        self.version: int | None = None  # of the stored record, once stored
        self._lock = threading.Lock()

    @property
    def born(self) -> bool:
        """Whether the record is stored."""
        return self.version is not None

    def ensure(self) -> int:
        """Store the record if it is not yet (refused if the session expired or was
        abandoned before it was stored); returns the version stored."""
        if self.version is not None:
            return self.version
        with self._lock:
            if self.version is None:
                self.record.check_writable(self.ctx.clock())
                records = self.ctx.records
                version = records.store(self.record)
                base = self.record.base
                try:
                    error = self._base_gone(base)
                except BaseException:
                    with contextlib.suppress(ZarrLakeError):
                        records.forget(self.record.id)
                    raise
                if error is not None:
                    with contextlib.suppress(ZarrLakeError):
                        records.forget(self.record.id)
                    raise error
                self.version = version
        return self.version

    def _base_gone(self, base: str) -> NotFoundError | None:
        """The error to refuse with if `base` was expired or deleted (its marker and its
        commit record, looked for at once); None if it is there."""
        objects = self.ctx.objects
        marked, present = objects.map(
            lambda look: look(),
            [lambda: objects.is_expired(base), lambda: objects.store.exists(f"commits/{base}")],
        )
        branch = self.record.branch
        if marked:
            when = objects.expired_at(base)
            return ExpiredHistoryError(
                f"the base of this session, commit {base[:12]}, was expired (`zarrlake "
                f"expire`) before the session's first write stored its record; "
                f"start a new session on {branch!r}",
                base,
                when if when is not None else self.ctx.clock(),
            )
        if not present:
            return NotFoundError(
                f"the base of this session, commit {base[:12]}, no longer exists: branch "
                f"{branch!r} moved off it (a reset, or the branch deleted) and `gc` deleted "
                "it before the session's first write stored its record; start a new session "
                f"on {branch!r}"
            )
        return None


class Unborn(WrapperMetaStore):
    """The metastore as a session's staging sees it: the session's record is stored before
    its first write, and reads of its own partitions before then find them empty."""

    def __init__(self, inner: MetaStore, birth: Birth, partition: str) -> None:
        super().__init__(inner)
        self.birth = birth
        self.own = frozenset((partition, uploads_of(partition)))

    def _around(self, call: Call, run: Callable[[], T]) -> T:
        if self.birth.born:
            return run()
        if call.write:
            self.birth.ensure()
            return run()
        if call.partition in self.own:
            return iter(()) if call.op == "scan" else None  # type: ignore[return-value]
        return run()
