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
the session refuses (ExpiredHistoryError) and deletes its record."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from zarrlake.errors import ExpiredHistoryError, ZarrLakeError
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
                    expired = self.ctx.objects.is_expired(base)
                    when = self.ctx.objects.expired_at(base) if expired else None
                except BaseException:
                    with contextlib.suppress(ZarrLakeError):
                        records.forget(self.record.id)
                    raise
                if expired:
                    with contextlib.suppress(ZarrLakeError):
                        records.forget(self.record.id)
                    raise ExpiredHistoryError(
                        f"the base of this session, commit {base[:12]}, was expired (`zarrlake "
                        f"expire`) before the session's first write stored its record; "
                        f"start a new session on {self.record.branch!r}",
                        base,
                        when if when is not None else self.ctx.clock(),
                    )
                self.version = version
        return self.version


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
