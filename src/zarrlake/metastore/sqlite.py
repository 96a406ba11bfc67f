"""SQLite metastore: the embedded default, safe for many threads and processes on one machine.

One table ``kv`` holds every partition; versions come from a one-row counter bumped inside
the writing transaction, so they never repeat. WAL mode lets readers run beside the single
writer; writes take the lock up front (BEGIN IMMEDIATE) so a compare-and-swap's read and
write are one atomic step. Each thread of each process has its own connection: SQLite
connections must never cross a fork.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl

from zarrlake.errors import (
    CASFailedError,
    ConfigurationError,
    InvalidInputError,
    TransientError,
)
from zarrlake.metastore import (
    check_expected,
    check_items,
    check_key,
    check_limit,
    check_partition,
    check_value,
    paged_scan,
    scan_range,
)
from zarrlake.metastore.base import Item, MetaStore

BUSY_TIMEOUT = 30.0
"""Seconds a write waits for another writer's lock before raising TransientError."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv (partition TEXT NOT NULL, key BLOB NOT NULL, "
    "value BLOB NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (partition, key)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY CHECK (id = 0), "
    "version INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO counter (id, version) VALUES (0, 0)",
)

_SYNCHRONOUS = {"normal": "NORMAL", "full": "FULL"}

# Connections inherited across fork(): kept referenced forever so that the child never
# closes them (closing would touch the parent's locks and files).
_INHERITED: list[Any] = []
_STORES: weakref.WeakSet[SqliteMetaStore] = weakref.WeakSet()

# Threads of one process take turns on a database through a Python lock: waiting in
# SQLite's busy handler instead sleeps in growing steps (up to 100 ms) and serialises
# badly. Processes still meet at SQLite's own lock.
_WRITE_LOCKS: dict[str, threading.Lock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock(path: str) -> threading.Lock:
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(path, threading.Lock())


def _after_fork_in_child() -> None:
    global _WRITE_LOCKS_GUARD
    _WRITE_LOCKS_GUARD = threading.Lock()
    _WRITE_LOCKS.clear()
    for store in list(_STORES):
        store._lock = threading.Lock()  # another thread may have held it at the fork
        store._forget_connections()


os.register_at_fork(after_in_child=_after_fork_in_child)


def parse_sqlite_url(url: str) -> tuple[str, str]:
    """(absolute database path, synchronous mode) of a sqlite:// URL.

    SQLAlchemy's convention: ``sqlite:///rel.db`` is relative to the working directory,
    ``sqlite:////abs/x.db`` is absolute.
    """
    if not isinstance(url, str) or not url.lower().startswith("sqlite://"):
        raise InvalidInputError(f"not a sqlite metastore URL: {url!r}")
    rest = url[len("sqlite://") :]
    rest, _, query = rest.partition("?")
    if not rest.startswith("/"):
        raise InvalidInputError(
            f"sqlite metastore URL {url!r} must be sqlite:///relative/path or "
            "sqlite:////absolute/path (a host part is not allowed)"
        )
    path = rest[1:]
    if not path or path.endswith("/"):
        raise InvalidInputError(f"sqlite metastore URL {url!r} names no database file")
    if path == ":memory:":
        raise InvalidInputError(
            f"{url!r}: an in-memory SQLite database is per connection; use memory://NAME"
        )
    sync = "NORMAL"
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name != "synchronous" or value.lower() not in _SYNCHRONOUS:
            raise InvalidInputError(
                f"sqlite metastore URL {url!r}: unknown option {name}={value!r} "
                "(supported: synchronous=normal|full)"
            )
        sync = _SYNCHRONOUS[value.lower()]
    return os.path.abspath(path), sync


class SqliteMetaStore(MetaStore):
    """A metastore in one SQLite file; one connection per thread and process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.path, self.synchronous = parse_sqlite_url(url)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[tuple[int, threading.Thread, sqlite3.Connection]] = []
        self._closed = False
        _STORES.add(self)
        self._conn()  # fail now, naming the path, if the file cannot be opened

    def __reduce__(self) -> tuple[Any, ...]:
        # Reopen by absolute path, so a process with another working directory finds it.
        query = "?synchronous=full" if self.synchronous == "FULL" else ""
        return (SqliteMetaStore, (f"sqlite:///{self.path}{query}",))

    # connections -------------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        pid = os.getpid()
        local = self._local
        if getattr(local, "pid", None) == pid:
            return local.conn
        if self._closed:
            raise ConfigurationError(f"metastore {self.url} is closed")
        if getattr(local, "pid", None) is not None:  # forked: leave the parent's alone
            self._forget_connections()
        conn = self._connect()
        with self._lock:
            self._reap_dead_threads(pid)
            self._conns.append((pid, threading.current_thread(), conn))
        local.pid, local.conn = pid, conn
        return conn

    def _connect(self) -> sqlite3.Connection:
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            raise ConfigurationError(
                f"cannot open SQLite metastore {self.path}: directory {folder} does not exist"
            )
        try:
            conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise ConfigurationError(f"cannot open SQLite metastore {self.path}: {e}") from None
        try:
            with self._errors():
                conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode.lower() != "wal":
                    raise ConfigurationError(
                        f"SQLite metastore {self.path} cannot use WAL mode (got {mode})"
                    )
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
                if not conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE name = 'counter'"
                ).fetchone():
                    self._create_schema(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _create_schema(conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _reap_dead_threads(self, pid: int) -> None:
        """Close connections of threads that have ended (called with the lock held)."""
        alive = []
        for entry in self._conns:
            if entry[0] == pid and not entry[1].is_alive():
                entry[2].close()
            else:
                alive.append(entry)
        self._conns = alive

    def _forget_connections(self) -> None:
        """After fork: park every inherited connection where nothing will close it."""
        pid = os.getpid()
        with self._lock:
            _INHERITED.extend(c for p, _, c in self._conns if p != pid)
            self._conns = [e for e in self._conns if e[0] == pid]
        self._local = threading.local()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pid = os.getpid()
            for p, _, conn in self._conns:
                if p == pid:
                    conn.close()
                else:
                    _INHERITED.append(conn)
            self._conns = []
        self._local = threading.local()
        _STORES.discard(self)

    # errors and transactions -------------------------------------------------------------

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate sqlite3 errors: a busy database is transient, the rest configuration."""
        try:
            yield
        except sqlite3.OperationalError as e:
            text = str(e)
            if "locked" in text or "busy" in text:
                raise TransientError(
                    f"SQLite metastore {self.path} stayed locked for {BUSY_TIMEOUT:.0f} s: {text}"
                ) from None
            raise ConfigurationError(f"SQLite metastore {self.path}: {text}") from None
        except sqlite3.Error as e:
            raise ConfigurationError(f"SQLite metastore {self.path}: {e}") from None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding the database's write lock from the start."""
        conn = self._conn()
        with _write_lock(self.path), self._errors():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @staticmethod
    def _next_versions(conn: sqlite3.Connection, n: int) -> int:
        """Reserve n new versions; returns the last (the reserved ones end at it)."""
        return conn.execute(
            "UPDATE counter SET version = version + ? WHERE id = 0 RETURNING version", (n,)
        ).fetchone()[0]

    # operations --------------------------------------------------------------------------

    def get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        check_partition(partition)
        check_key(key)
        conn = self._conn()
        with self._errors():
            row = conn.execute(
                "SELECT value, version FROM kv WHERE partition = ? AND key = ?", (partition, key)
            ).fetchone()
        return None if row is None else (row[0], row[1])

    def scan(
        self,
        partition: str,
        start: bytes = b"",
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[Item]:
        check_partition(partition)
        low, high = scan_range(start, prefix)
        limit = check_limit(limit)
        return self._scan(partition, low, high, limit)

    def _scan(
        self, partition: str, low: bytes, high: bytes | None, limit: int | None
    ) -> Iterator[Item]:
        sql = "SELECT key, value, version FROM kv WHERE partition = ? AND key >= ?"
        if high is not None:
            sql += " AND key < ?"
        sql += " ORDER BY key LIMIT ?"

        def fetch(start: bytes, size: int) -> list[Item]:
            args = (partition, start) + ((high,) if high is not None else ()) + (size,)
            with self._errors():
                return self._conn().execute(sql, args).fetchall()

        return paged_scan(fetch, low, limit)

    def set(self, partition: str, key: bytes, value: bytes) -> int:
        check_partition(partition)
        check_key(key)
        value = check_value(value)
        with self._write() as conn:
            version = self._next_versions(conn, 1)
            conn.execute(
                "INSERT OR REPLACE INTO kv (partition, key, value, version) VALUES (?, ?, ?, ?)",
                (partition, key, value, version),
            )
        return version

    def set_many(self, partition: str, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        check_partition(partition)
        changes = check_items(items)
        writes = sorted((k, v) for k, v in changes.items() if v is not None)
        deletes = sorted(k for k, v in changes.items() if v is None)
        if not changes:
            return
        with self._write() as conn:
            if deletes:
                conn.executemany(
                    "DELETE FROM kv WHERE partition = ? AND key = ?",
                    [(partition, k) for k in deletes],
                )
            if writes:
                last = self._next_versions(conn, len(writes))
                first = last - len(writes) + 1
                conn.executemany(
                    "INSERT OR REPLACE INTO kv (partition, key, value, version) "
                    "VALUES (?, ?, ?, ?)",
                    [(partition, k, v, first + i) for i, (k, v) in enumerate(writes)],
                )

    def delete(self, partition: str, key: bytes) -> None:
        check_partition(partition)
        check_key(key)
        with self._write() as conn:
            conn.execute("DELETE FROM kv WHERE partition = ? AND key = ?", (partition, key))

    def set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        check_partition(partition)
        check_key(key)
        value = check_value(value)
        expected = check_expected(expected)
        with self._write() as conn:
            row = conn.execute(
                "SELECT version FROM kv WHERE partition = ? AND key = ?", (partition, key)
            ).fetchone()
            found = None if row is None else row[0]
            if found != expected:
                raise CASFailedError(
                    f"{partition}/{key!r}: expected version {expected}, found {found}"
                )
            version = self._next_versions(conn, 1)
            conn.execute(
                "INSERT OR REPLACE INTO kv (partition, key, value, version) VALUES (?, ?, ?, ?)",
                (partition, key, value, version),
            )
        return version

    def drop_partition(self, partition: str) -> None:
        check_partition(partition)
        with self._write() as conn:
            conn.execute("DELETE FROM kv WHERE partition = ?", (partition,))
