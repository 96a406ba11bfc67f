"""The storage engines under test behind one small interface, so every workload runs the
same zarr code against zarrlake, Icechunk and plain zarr.

An engine holds at most one repository and one open writable session at a time:
`create`/`open` a location, `begin()` a session and get its zarr store, `commit()` it.
"""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar

import zarr
from zarr.abc.store import Store

ZARRLAKE, ICECHUNK, ZARR, FILES = "zarrlake", "icechunk", "zarr", "files"


class Engine:
    """Base: plain zarr on a local directory (no versioning; commit is a no-op)."""

    name: ClassVar[str] = ZARR
    versioned: ClassVar[bool] = False

    def __init__(self) -> None:
        self.path = ""

    def create(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.path = path

    def open(self, path: str) -> None:
        self.path = path

    def begin(self) -> Store:
        return zarr.storage.LocalStore(self.path)

    def commit(self, message: str, *, concurrent: bool = False) -> str | None:
        return None

    def reader(self) -> Store:
        return zarr.storage.LocalStore(self.path, read_only=True)

    def log_ids(self) -> list[str]:
        return []

    def retryable(self) -> tuple[type[BaseException], ...]:
        """Errors after which a concurrent writer starts again from the branch head."""
        return ()


class ZarrlakeEngine(Engine):
    """zarrlake, embedded default: local directory + SQLite metastore."""

    name = ZARRLAKE
    versioned = True

    def __init__(self) -> None:
        super().__init__()
        import zarrlake

        # The package loads its engine modules on first use of these names: load them now,
        # before any workload starts its clock (as for zarr and Icechunk).
        for name in ("Repo", "Session", "SessionStore"):
            getattr(zarrlake, name, None)
        self.zl = zarrlake
        self.repo: Any = None
        self.session: Any = None

    def create(self, path: str) -> None:
        self.path = path
        self.repo = self.zl.Repo.create(path)

    def open(self, path: str) -> None:
        self.path = path
        self.repo = self.zl.Repo.open(path)

    def begin(self) -> Store:
        self.session = self.repo.create_session("main")
        return self.session.store

    def commit(self, message: str, *, concurrent: bool = False) -> str | None:
        return self.session.commit(message)

    def reader(self) -> Store:
        return self.repo.readonly_session("main").store

    def log_ids(self) -> list[str]:
        return [c.id for c in self.repo.log("main")]

    def retryable(self) -> tuple[type[BaseException], ...]:
        from zarrlake.vc.commit_protocol import CommitTimeoutError

        return (self.zl.ConflictError, CommitTimeoutError)


class IcechunkEngine(Engine):
    """Icechunk on `local_filesystem_storage`. Concurrent commits rebase on conflict with
    `ConflictDetector`, as Icechunk's docs prescribe for parallel writers."""

    name = ICECHUNK
    versioned = True

    def __init__(self) -> None:
        super().__init__()
        import icechunk

        # Icechunk warns on every open that local storage is unsafe for concurrent commits;
        # W6 measures exactly that, so the warning is noise here.
        logging.getLogger("icechunk").setLevel(logging.ERROR)
        self.ic = icechunk
        self.repo: Any = None
        self.session: Any = None

    def _storage(self, path: str) -> Any:
        return self.ic.local_filesystem_storage(path)

    def create(self, path: str) -> None:
        self.path = path
        self.repo = self.ic.Repository.create(self._storage(path))

    def open(self, path: str) -> None:
        self.path = path
        self.repo = self.ic.Repository.open(self._storage(path))

    def begin(self) -> Store:
        self.session = self.repo.writable_session("main")
        return self.session.store

    def commit(self, message: str, *, concurrent: bool = False) -> str | None:
        if concurrent:
            return self.session.commit(message, rebase_with=self.ic.ConflictDetector())
        return self.session.commit(message)

    def reader(self) -> Store:
        return self.repo.readonly_session(branch="main").store

    def log_ids(self) -> list[str]:
        return [s.id for s in self.repo.ancestry(branch="main")]

    def retryable(self) -> tuple[type[BaseException], ...]:
        return (self.ic.ConflictError, self.ic.RebaseFailedError)


ENGINES: dict[str, type[Engine]] = {
    ZARRLAKE: ZarrlakeEngine,
    ICECHUNK: IcechunkEngine,
    ZARR: Engine,
}


def make(name: str) -> Engine:
    return ENGINES[name]()
