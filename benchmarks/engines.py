"""The storage engines under test behind one small interface, so every workload runs the
same zarr code against zarrlake, Icechunk and plain zarr.

An engine holds at most one repository and one open writable session at a time:
`create`/`open` a location, `begin()` a session and get its zarr store, `commit()` it.

With `backend="s3pg"` in its parameters (the S3PG group, issue 15), zarrlake and Icechunk
keep their objects on an S3 server instead (moto, from zarrlake.testing.servers, described
by `params["remote"]`) and zarrlake its metastore in PostgreSQL (one database per
repository); with `backend="bucket"` (issue 22) zarrlake keeps its metastore in the bucket
too. The local `path` then only names the repository: its S3 prefix is the path's last
component plus `params["loc"]`. `via()` sends later opens through other endpoints (the
counting relays of relay.py). With `virtual_prefix` (the VIRTUAL group, issue 23), Icechunk
may read virtual chunks from local files under that `file://` prefix.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import zarr
from zarr.abc.store import Store

ZARRLAKE, ICECHUNK, ZARR, FILES = "zarrlake", "icechunk", "zarr", "files"
REMOTE_BACKENDS = ("s3pg", "bucket")


class Engine:
    """Base: plain zarr on a local directory (no versioning; commit is a no-op)."""

    name: ClassVar[str] = ZARR
    versioned: ClassVar[bool] = False

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        self.path = ""
        params = params or {}
        self.remote: dict[str, Any] | None = None
        self.loc = params.get("loc", "")
        self.backend = params.get("backend", "local")
        if self.backend in REMOTE_BACKENDS:
            self.remote = dict(params["remote"])
        self.s3_endpoint = self.remote["s3_endpoint"] if self.remote else ""
        self.pg_url = self.remote["pg_url"] if self.remote else ""

    def spawn_params(self) -> dict[str, Any]:
        """What a worker process needs to reach the same repository (see `make`)."""
        if self.remote is None:
            return {}
        return {"backend": self.backend, "remote": self.remote, "loc": self.loc}

    @property
    def uses_pg(self) -> bool:
        """Whether this engine talks to the PostgreSQL server (zarrlake on s3pg only)."""
        return False

    def via(self, s3_endpoint: str | None = None, pg_url: str | None = None) -> None:
        """Reach the S3 server at `s3_endpoint` and PostgreSQL at `pg_url` from the next
        create/open on (relays in front of the servers); None: the servers themselves."""
        assert self.remote is not None
        self.s3_endpoint = s3_endpoint or self.remote["s3_endpoint"]
        self.pg_url = pg_url or self.remote["pg_url"]

    def remote_name(self, path: str) -> str:
        """The repository's S3 prefix (and PostgreSQL database name): the last component of
        `path` plus `loc`, in lower case letters, digits and underscores."""
        name = Path(path).name + (f"-{self.loc}" if self.loc else "")
        return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")

    def s3_options(self) -> dict[str, Any]:
        """zarrlake's storage options for the S3 server (tests/fixtures/s3.py's s3_options)."""
        assert self.remote is not None
        return {
            "endpoint_url": self.s3_endpoint,
            "region": self.remote["region"],
            "access_key_id": self.remote["access_key_id"],
            "secret_access_key": self.remote["secret_access_key"],
            "allow_http": True,
        }

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

    def close(self) -> None:
        """Let go of the repository (and its connections)."""

    def settle(self) -> None:
        """Wait for work the engine left running in the background after its last call."""


class ZarrlakeEngine(Engine):
    """zarrlake, embedded default: local directory + SQLite metastore."""

    name = ZARRLAKE
    versioned = True

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        import zarrlake

        # The package loads its engine modules on first use of these names: load them now,
        # before any workload starts its clock (as for zarr and Icechunk).
        for name in ("Repo", "Session", "SessionStore"):
            getattr(zarrlake, name, None)
        if self.uses_pg:  # the PostgreSQL metastore imports psycopg (~0.2 s)
            importlib.import_module("zarrlake.metastore.postgres")
        elif self.remote is not None:
            importlib.import_module("zarrlake.metastore.bucket.url")
        else:  # the local drivers load with the first open otherwise
            importlib.import_module("zarrlake.storage.local")
            importlib.import_module("zarrlake.metastore.sqlite")
        self.zl = zarrlake
        self.repo: Any = None
        self.session: Any = None

    @property
    def uses_pg(self) -> bool:
        return self.backend == "s3pg"

    def create(self, path: str) -> None:
        self.path = path
        if self.remote is None:
            self.repo = self.zl.Repo.create(path)
            return
        os.makedirs(path, exist_ok=True)  # for the workload's own files (W6's acks)
        if self.uses_pg:
            import psycopg

            with psycopg.connect(self.remote["pg_url"], autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {self.remote_name(path)} STRATEGY FILE_COPY")
        self.repo = self.zl.Repo.create(**self._where(path))

    def open(self, path: str) -> None:
        self.path = path
        where = {"location": path} if self.remote is None else self._where(path)
        self.repo = self.zl.Repo.open(**where)

    def _where(self, path: str) -> dict[str, Any]:
        """Repo.create/open arguments: s3://BUCKET/NAME, and postgresql://.../NAME on s3pg
        (bucket-only: the metastore is in the bucket, found from the location)."""
        assert self.remote is not None
        name = self.remote_name(path)
        where = {
            "location": f"s3://{self.remote['bucket']}/{name}",
            "storage_options": self.s3_options(),
        }
        if self.uses_pg:
            pg = urlsplit(self.pg_url)
            where["metastore"] = urlunsplit(pg._replace(path=f"/{name}"))
        return where

    def close(self) -> None:
        if self.repo is not None:
            self.repo.close()
            self.repo = None

    def settle(self) -> None:
        # zarrlake drops a committed session's staged records in a background thread
        # (Transaction.cleanup, internal: looked up defensively as it may change).
        txn = getattr(self.session, "_txn", None)
        cleanup = getattr(txn, "cleanup", None)
        if cleanup is not None:
            cleanup.result()

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
        from zarrlake.errors import CommitTimeoutError

        return (self.zl.ConflictError, CommitTimeoutError)


class IcechunkEngine(Engine):
    """Icechunk on `local_filesystem_storage`. Concurrent commits rebase on conflict with
    `ConflictDetector`, as Icechunk's docs prescribe for parallel writers."""

    name = ICECHUNK
    versioned = True

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        super().__init__(params)
        import icechunk

        # Icechunk warns on every open that local storage is unsafe for concurrent commits;
        # W6 measures exactly that, so the warning is noise here.
        logging.getLogger("icechunk").setLevel(logging.ERROR)
        self.ic = icechunk
        self.repo: Any = None
        self.session: Any = None
        self.virtual_prefix: str | None = (params or {}).get("virtual_prefix")

    def _virtual(self) -> dict[str, Any]:
        """Repository.create/open arguments that let it read virtual chunks from local files
        under `virtual_prefix` (a container for the prefix, and access granted to it)."""
        if not self.virtual_prefix:
            return {}
        prefix = self.virtual_prefix
        config = self.ic.RepositoryConfig.default()
        store = self.ic.local_filesystem_store(prefix.removeprefix("file://"))
        config.set_virtual_chunk_container(self.ic.VirtualChunkContainer(prefix, store))
        access = {prefix: self.ic.credentials.LocalFileSystemAccess}
        return {
            "config": config,
            "authorize_virtual_chunk_access": self.ic.containers_credentials(access),
        }

    def _storage(self, path: str) -> Any:
        if self.remote is None:
            return self.ic.local_filesystem_storage(path)
        return self.ic.s3_storage(
            bucket=self.remote["bucket"],
            prefix=self.remote_name(path),
            region=self.remote["region"],
            endpoint_url=self.s3_endpoint,
            allow_http=True,
            force_path_style=True,
            access_key_id=self.remote["access_key_id"],
            secret_access_key=self.remote["secret_access_key"],
        )

    def create(self, path: str) -> None:
        self.path = path
        if self.remote is not None:
            os.makedirs(path, exist_ok=True)  # for the workload's own files (W6's acks)
        self.repo = self.ic.Repository.create(self._storage(path), **self._virtual())

    def open(self, path: str) -> None:
        self.path = path
        self.repo = self.ic.Repository.open(self._storage(path), **self._virtual())

    def begin(self) -> Store:
        self.session = self.repo.writable_session("main")
        return self.session.store

    def commit(self, message: str, *, concurrent: bool = False) -> str | None:
        if concurrent:
            return self.session.commit(message, rebase_with=self.ic.ConflictDetector())
        return self.session.commit(message)

    def reader(self) -> Store:
        return self.repo.readonly_session(branch="main").store

    def close(self) -> None:
        self.repo = self.session = None

    def log_ids(self) -> list[str]:
        return [s.id for s in self.repo.ancestry(branch="main")]

    def retryable(self) -> tuple[type[BaseException], ...]:
        return (self.ic.ConflictError, self.ic.RebaseFailedError)


ENGINES: dict[str, type[Engine]] = {
    ZARRLAKE: ZarrlakeEngine,
    ICECHUNK: IcechunkEngine,
    ZARR: Engine,
}


def make(name: str, params: dict[str, Any] | None = None) -> Engine:
    """The engine `name`; `params` with backend="s3pg" or "bucket" put it on the S3 server
    (+ PG), with `virtual_prefix` let Icechunk read virtual chunks there."""
    return ENGINES[name](params)
