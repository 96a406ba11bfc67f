"""SQLite metastore: the embedded default, safe for many threads and processes on one machine.

One table ``kv`` holds every partition; versions come from a one-row counter bumped inside
the writing transaction, so they never repeat. WAL mode lets readers run beside the single
writer; writes take the lock up front (BEGIN IMMEDIATE) so a compare-and-swap's read and
write are one atomic step. Each thread of each process has its own connection: SQLite
connections must never cross a fork.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl

from zarrlake._util.forksafe import ForkGuard, PerProcess
from zarrlake.errors import (
    BackendError,
    ConfigurationError,
    InvalidInputError,
    TransientError,
)
from zarrlake.metastore import register
from zarrlake.metastore.base import Item, MetaStoreBackend, Reading
from zarrlake.metastore.checks import (
    check_found,
    check_meta_key,
    check_partition,
    scan_range,
)
from zarrlake.metastore.filelock import FileLock, file_lock, holder

log = logging.getLogger("zarrlake")

BUSY_TIMEOUT = 30.0
"""Seconds a write waits for another writer's lock before raising TransientError (this
module's turn at the write lock, then SQLite's own: see `take_turn`)."""
TURN_TIMEOUT = 1.0
"""Seconds `take_turns` waits for its turn before going on without one."""
BATCH_VERSIONS = 16
"""Versions a batch's transaction reserves from the counter at once (`_Write.versions`):
a commit's batches write up to five records, each a statement of the counter before."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv (partition TEXT NOT NULL, key BLOB NOT NULL, "
    "value BLOB NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (partition, key)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY CHECK (id = 0), "
    "version INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO counter (id, version) VALUES (0, 0)",
)
_UPSERT = "INSERT OR REPLACE INTO kv (partition, key, value, version) VALUES (?, ?, ?, ?)"

_CREATE = (
    "INSERT INTO kv (partition, key, value, version) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (partition, key) DO NOTHING"
)
_SWAP = "UPDATE kv SET value = ?, version = ? WHERE partition = ? AND key = ? AND version = ?"

_SYNCHRONOUS = {"normal": "NORMAL", "full": "FULL"}

_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_SETUP = {
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PERM,
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_AUTH,
}

_FORK = ForkGuard()
"""SQLite's calls (connect, queries, close) and fork() wait for each other."""


def _ended(thread: threading.Thread) -> bool:
    """Whether `thread` ended, so its connection may be closed. The main thread counts as
    running until the process ends: at interpreter exit Python marks it stopped before the
    `atexit` handlers run in it (writers finish there: txn/writers.py `finish_all`)."""
    return not thread.is_alive() and thread is not threading.main_thread()


class _Slot:
    """One thread's connection and the right to use it. Its thread holds `use` through
    each call and through a whole write transaction (`with slot as conn:`); another thread
    closes the connection only when it can take `use` (so never under a call: that crashes
    the interpreter) or once the thread ended. A re-entrant lock: a read inside a batch's
    transaction, or a batch's writes, nest in it."""

    __slots__ = ("conn", "errors", "thread", "use")

    def __init__(self, conn: sqlite3.Connection, errors: _Errors) -> None:
        self.conn: sqlite3.Connection | None = conn  # None: closed
        self.errors = errors
        self.thread = threading.current_thread()
        self.use = threading.RLock()

    def __enter__(self) -> sqlite3.Connection:
        self.use.acquire()
        conn = self.conn
        if conn is None:  # closed from another thread since this one took the slot
            self.use.release()
            raise TransientError(
                f"SQLite metastore {self.errors.path}: this thread's connection was closed "
                "(its repository closing, or the process exiting); try again"
            )
        self.errors.__enter__()
        return conn

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        try:
            self.errors.__exit__(kind, error, tb)  # raises it translated, or returns
        finally:
            self.use.release()

    def close(self) -> bool:
        """Close the connection unless its thread is using it (inside a call, or a write
        transaction of its own, which closing would roll back); whether it is closed. On
        the thread's own slot that is whether the thread is between transactions."""
        if _ended(self.thread):  # it cannot be inside a call, whatever `use` says
            self._close()
            return True
        if not self.use.acquire(blocking=False):
            return False
        try:
            if self.conn is not None and self.conn.in_transaction:
                return False
            self._close()
            return True
        finally:
            self.use.release()

    def _close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()


class _Connections:
    """One process's connections to one database: one per thread, closed when their thread
    has ended, when the store closes, or at interpreter exit (`close_at_exit`). A forked
    child gets a new set (see zarrlake._util.forksafe)."""

    def __init__(self, writer: FileLock) -> None:
        self.local = threading.local()
        self.lock = threading.Lock()
        self.slots: list[_Slot] = []
        self.writer = writer  # this process's turn at the database's write lock
        self.ready = False  # the file was found set up (WAL, tables): later ones skip the look
        self.pid = os.getpid()
        _OPEN.add(self)
        _close_at_exit_of(self.pid)

    def add(self, slot: _Slot) -> None:
        with _FORK.call(), self.lock:  # close the connections of threads that have ended
            alive = []
            for other in self.slots:
                if _ended(other.thread):
                    other.close()
                else:
                    alive.append(other)
            self.slots = [*alive, slot]
        self.local.slot = slot

    def close(self) -> None:
        """Close every connection no thread is using (`_Slot.close`). A thread inside a
        call keeps its own (closing it under the call crashes the interpreter): when the
        store closed, that thread closes it at its next call, which the store refuses;
        otherwise at interpreter exit."""
        with _FORK.call(), self.lock:
            self.slots = [slot for slot in self.slots if not slot.close()]

    def drop_mine(self) -> None:
        """Close the calling thread's connection (its store was closed meanwhile), unless
        a write transaction of this thread is still open on it (a batch ending commits it;
        the next call closes it)."""
        slot: _Slot | None = getattr(self.local, "slot", None)
        if slot is None:
            return
        with _FORK.call(), self.lock:
            if slot.close():
                self.local.slot = None
                self.slots = [s for s in self.slots if s is not slot]


_OPEN: weakref.WeakSet[_Connections] = weakref.WeakSet()
"""Every process's sets of connections (each closes only its own process's)."""
_EXIT_HOOKED: set[int] = set()  # pids whose exit close was looked at (`_close_at_exit_of`)


def _close_at_exit_of(pid: int) -> None:
    """Close this process's connections when it ends. `atexit` (registered below, when
    this module is imported) runs after Python's `threading._shutdown` has joined every
    thread pool's workers (concurrent.futures' exit hook) and every non-daemon thread, so
    their connections are closed too; and, its hooks running last registered first,
    after writers finish (txn/writers.py `finish_all`, registered at a process's first
    write), which need them. (Writers of another metastore's repository registered
    before this module was imported finish after it: a connection their finish opens
    again stays open.) A child process of `multiprocessing` may leave by `os._exit`,
    skipping `atexit`: its finalizers close them, after writers' (exit priority 100)."""
    if pid in _EXIT_HOOKED:
        return
    _EXIT_HOOKED.add(pid)
    mp = sys.modules.get("multiprocessing.util")
    if mp is not None and sys.modules["multiprocessing"].parent_process() is not None:
        mp.Finalize(None, close_at_exit, exitpriority=-100)


def close_at_exit() -> None:
    """Close every connection of this process no thread is using (`_Connections.close`;
    the stores stay open: a later call opens its thread a new one). The last connection
    to a database closed checkpoints its write-ahead log into the file and removes it, so
    the next process to open the database does not read and replay it."""
    pid = os.getpid()
    for conns in list(_OPEN):
        if conns.pid == pid:
            with contextlib.suppress(Exception):  # a process ending reports nothing here
                conns.close()


atexit.register(close_at_exit)


def parse_sqlite_url(url: str) -> tuple[str, str]:
    """(absolute database path, synchronous mode) of a sqlite:// URL.

    SQLAlchemy's convention: ``sqlite:///rel.db`` is relative to the working directory,
    ``sqlite:////abs/x.db`` is absolute. Since ``sqlite:///tmp/x.db`` usually means
    /tmp/x.db, a relative path whose directory does not exist here but does exist from the
    root is taken as that absolute path (see `_resolve`).
    """
    if not isinstance(url, str) or not url.lower().startswith("sqlite://"):
        raise InvalidInputError(f"not a sqlite metastore URL: {url!r}; write it as sqlite:///PATH")
    rest = url[len("sqlite://") :]
    rest, _, query = rest.partition("?")
    if not rest.startswith("/"):
        raise InvalidInputError(
            f"sqlite metastore URL {url!r} must be sqlite:///relative/path or "
            "sqlite:////absolute/path (a host part is not allowed)"
        )
    path = rest[1:]
    if not path or path.endswith("/"):
        raise InvalidInputError(
            f"sqlite metastore URL {url!r} names no database file"
            "; add the file's path, e.g. sqlite:///PATH"
        )
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
                "; remove that option"
            )
        sync = _SYNCHRONOUS[value.lower()]
    return _resolve(path), sync


def _resolve(path: str) -> str:
    """The absolute database path of the path in a sqlite:/// URL: relative to the working
    directory when the file or its directory exists there, else from the root when its
    directory exists there (sqlite:///tmp/x.db is /tmp/x.db), else relative."""
    relative = os.path.abspath(path)
    if os.path.isabs(path) or os.path.exists(relative):
        return relative
    rooted = os.path.abspath(os.sep + path)
    if not os.path.isdir(os.path.dirname(relative)) and os.path.isdir(os.path.dirname(rooted)):
        return rooted
    return relative


class SqliteMetaStore(MetaStoreBackend):
    """A metastore in one SQLite file; one connection per thread and process."""

    remote = False

    def __init__(self, url: str) -> None:
        self.url = url
        self.path, self.synchronous = parse_sqlite_url(url)
        self._closed = False
        self._conns = PerProcess(lambda: _Connections(file_lock(self.path + "-writer")))
        self._fail = _Errors(self.path, opening=False)
        self._slot()  # fail now, naming the path, if the file cannot be opened

    def __reduce__(self) -> tuple[Any, ...]:
        # Reopen by absolute path, so a process with another working directory finds it.
        query = "?synchronous=full" if self.synchronous == "FULL" else ""
        return (SqliteMetaStore, (f"sqlite:///{self.path}{query}",))

    # connections -------------------------------------------------------------------------

    def _slot(self, conns: _Connections | None = None) -> _Slot:
        """This thread's connection, to use as `with slot as conn:` (`conns`: this
        process's, if the caller has them); opened if it has none, or if its last one was
        closed at process exit."""
        conns = conns or self._conns.get()
        slot: _Slot | None = getattr(conns.local, "slot", None)
        if slot is not None and slot.conn is not None and not self._closed:
            return slot
        if self._closed:
            conns.drop_mine()
            raise ConfigurationError(f"metastore {self.url} is closed; open the repository again")
        slot = _Slot(self._connect(), self._fail)
        conns.add(slot)
        return slot

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (for a look from outside a call: tests, tools)."""
        conn = self._slot().conn
        assert conn is not None
        return conn

    def _connect(self) -> sqlite3.Connection:
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            raise ConfigurationError(
                f"cannot open SQLite metastore {self.path}: directory {folder} does not exist"
                "; create the directory first"
            )
        try:
            with _FORK.call():
                conn = sqlite3.connect(
                    self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
                )
        except sqlite3.Error as e:
            raise ConfigurationError(f"cannot open SQLite metastore {self.path}: {e}") from None
        conns = self._conns.get()
        try:
            with self._errors(opening=True):  # (connect's timeout is the busy timeout)
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            if not conns.ready and not _set_up(conn):
                # Under the writer lock: connections setting up a brand-new file at once
                # (its journal mode, its schema) otherwise meet SQLite's busy errors, which
                # its busy handler does not wait out. A file set up already is not waited
                # for: a thread's first read never waits for another's batch of writes.
                with _Turn(conns.writer, self.path), self._errors(opening=True):
                    self._set_up_file(conn)
            conns.ready = True
        except BaseException:
            conn.close()
            raise
        return conn

    def _set_up_file(self, conn: sqlite3.Connection) -> None:
        """Put a new file in WAL mode and create its tables (under the writer lock)."""
        # A file already in WAL mode was set up by an earlier connection: setting the modes
        # again costs a millisecond per connection.
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            # Takes effect only in a new file (before WAL mode and the first table): a
            # dropped partition's pages then go back to the file system at once.
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise ConfigurationError(
                    f"SQLite metastore {self.path} cannot use WAL mode (got {mode})"
                    "; put the file on a local file system that supports WAL"
                )
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'counter'").fetchone():
            self._create_schema(conn)

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

    def close(self) -> None:
        """Refuse further calls and close the connections of every thread, those inside a
        call excepted (each closes its own at its next call; see `_Connections.close`).
        The last connection to the database closed checkpoints the write-ahead log into
        the file and removes it."""
        self._closed = True
        self._conns.get().close()

    @contextmanager
    def take_turns(self, name: str) -> Iterator[bool]:
        """One turn lock per database for every name: an embedded metastore's commits take
        milliseconds, so turns per name would only add lock files. A caller waits at most
        TURN_TIMEOUT for its turn, then goes on without (a turn holder may be waiting for
        it: compare-and-swap keeps that safe)."""
        lock = file_lock(self.path + "-turns")
        taken = lock.acquire(TURN_TIMEOUT)
        try:
            yield taken
        finally:
            if taken:
                lock.release()

    def vacuum(self, min_free: int = 1 << 20) -> int:
        """Give pages freed by deleted rows (dropped staged records) back to the file system
        when at least `min_free` bytes are free; returns the bytes the file shrank by."""
        slot = self._slot()
        with _Turn(self._conns.get().writer, self.path), slot as conn:
            page = conn.execute("PRAGMA page_size").fetchone()[0]
            free = conn.execute("PRAGMA freelist_count").fetchone()[0] * page
            if free < min_free:
                return 0
            before = os.path.getsize(self.path)
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # an older file converts here
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return max(0, before - os.path.getsize(self.path))

    # errors and transactions -------------------------------------------------------------

    def _errors(self, opening: bool = False) -> _Errors:
        """Translate sqlite3 errors (see `_Errors`); the calls inside are kept apart from
        fork()."""
        return _Errors(self.path, opening) if opening else self._fail

    def _transaction(self) -> _Write | _Joined:
        """A write transaction holding the database's write lock from the start; inside a
        `batch` of this thread, the batch's (begun by its first write)."""
        conns = self._conns.get()
        batch: _Batch | None = getattr(conns.local, "batch", None)
        if batch is not None:
            return batch.join(self._slot(conns))
        return _Write(self._slot(conns), conns.writer)

    def batch(self) -> _Batch:
        """This thread's writes inside the block as one write transaction (see
        MetaStore.batch): a commit's record and branch writes take the write lock, and
        reach the file, once instead of once each. A block inside another joins it."""
        return _Batch(self._conns.get(), self._fail)

    def commit_batch(self) -> None:
        """End this thread's batch's transaction so far (see MetaStore.commit_batch)."""
        batch: _Batch | None = getattr(self._conns.get().local, "batch", None)
        if batch is not None:
            batch.commit()

    # primitives --------------------------------------------------------------------------

    def _get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        with self._slot() as conn:
            row = conn.execute(
                "SELECT value, version FROM kv WHERE partition = ? AND key = ?", (partition, key)
            ).fetchone()
        return None if row is None else (row[0], row[1])

    def _scan(self, partition: str, low: bytes, high: bytes | None, size: int) -> list[Item]:
        sql = "SELECT key, value, version FROM kv WHERE partition = ? AND key >= ?"
        if high is not None:
            sql += " AND key < ?"
        args = (partition, low) + ((high,) if high is not None else ()) + (size,)
        with self._slot() as conn:
            return conn.execute(sql + " ORDER BY key LIMIT ?", args).fetchall()

    def read(
        self, partition: str, keys: Sequence[bytes] = (), prefixes: Sequence[bytes] = ()
    ) -> Reading:
        """Several keys and whole prefix scans of one partition (see MetaStore.read) in one
        statement, so from one snapshot of the file: a commit's look at its branch, its
        landing fence and the protection rules is one SELECT instead of three."""
        check_partition(partition)
        keys = [check_meta_key(k) for k in keys]
        spans = [scan_range(b"", p) for p in prefixes]
        if not (keys or spans) or len(keys) > _IN_MAX:
            return super().read(partition, keys, prefixes)
        parts, args = [], []
        if keys:
            marks = ", ".join("?" * len(keys))
            parts.append(
                f"SELECT -1, key, value, version FROM kv WHERE partition = ? AND key IN ({marks})"
            )
            args += [partition, *keys]
        for i, (low, high) in enumerate(spans):
            sql = f"SELECT {i}, key, value, version FROM kv WHERE partition = ? AND key >= ?"
            args += [partition, low]
            if high is not None:
                sql += " AND key < ?"
                args.append(high)
            parts.append(sql)
        with self._slot() as conn:
            rows = conn.execute(" UNION ALL ".join(parts) + " ORDER BY 1, 2", args).fetchall()
        found: dict[bytes, tuple[bytes, int]] = {}
        items: list[list[Item]] = [[] for _ in spans]
        for part, key, value, version in rows:
            if part < 0:
                found[key] = (value, version)
            else:
                items[part].append((key, value, version))
        return [found.get(k) for k in keys], items

    def _write(
        self, partition: str, writes: list[tuple[bytes, bytes]], deletes: list[bytes]
    ) -> list[int]:
        with self._transaction() as tx:
            return self._apply(tx, partition, writes, deletes)

    @staticmethod
    def _apply(
        tx: _Write | _Joined,
        partition: str,
        writes: list[tuple[bytes, bytes]],
        deletes: list[bytes],
    ) -> list[int]:
        """Inside a write transaction: delete `deletes`, write `writes` with new versions."""
        conn = tx.conn
        if deletes:
            conn.executemany(
                "DELETE FROM kv WHERE partition = ? AND key = ?", [(partition, k) for k in deletes]
            )
        if not writes:
            return []
        first = tx.versions(len(writes))
        versions = list(range(first, first + len(writes)))
        conn.executemany(
            _UPSERT, [(partition, k, v, n) for (k, v), n in zip(writes, versions, strict=True)]
        )
        return versions

    def _set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        # The write is itself the check (it changes a row only where the version is the one
        # expected); the version is read only to name it when the check fails.
        with self._transaction() as tx:
            conn = tx.conn
            version = tx.versions(1)
            if expected is None:
                done = conn.execute(_CREATE, (partition, key, value, version))
            else:
                done = conn.execute(_SWAP, (value, version, partition, key, expected))
            if done.rowcount != 1:
                found = _versions(conn, partition, [key]).get(key)
                check_found(partition, key, found, expected)
                raise AssertionError(
                    f"{partition}/{key!r}: version {found} matched but not written"
                )
        return version

    def _delete_if(self, partition: str, key: bytes, expected: int) -> None:
        with self._transaction() as tx:
            conn = tx.conn
            row = conn.execute(
                "SELECT version FROM kv WHERE partition = ? AND key = ?", (partition, key)
            ).fetchone()
            check_found(partition, key, None if row is None else row[0], expected)
            conn.execute("DELETE FROM kv WHERE partition = ? AND key = ?", (partition, key))

    def _write_if(
        self,
        partition: str,
        writes: list[tuple[bytes, bytes]],
        deletes: list[bytes],
        checks: dict[bytes, int | None],
    ) -> list[int]:
        with self._transaction() as tx:  # BEGIN IMMEDIATE: the checks and writes are one step
            if _guarded_swap(writes, deletes, checks):
                return [self._guarded_swap(tx, partition, writes[0], checks)]
            if checks:
                found = _versions(tx.conn, partition, list(checks))
                for key, expected in checks.items():
                    check_found(partition, key, found.get(key), expected)
            return self._apply(tx, partition, writes, deletes)

    @staticmethod
    def _guarded_swap(
        tx: _Write | _Joined,
        partition: str,
        write: tuple[bytes, bytes],
        checks: dict[bytes, int | None],
    ) -> int:
        """A compare-and-swap of one key with more checks (a branch swap with its fences)
        as one statement: the `UPDATE` changes the row only where every check holds; the
        versions are read only to name the one that failed."""
        key, value = write
        version = tx.versions(1)
        sql = [_SWAP]
        args: list[object] = [value, version, partition, key, checks[key]]
        for other, expected in checks.items():
            if other == key:
                continue
            if expected is None:
                sql.append("NOT EXISTS (SELECT 1 FROM kv WHERE partition = ? AND key = ?)")
                args += [partition, other]
            else:
                sql.append(
                    "EXISTS (SELECT 1 FROM kv WHERE partition = ? AND key = ? AND version = ?)"
                )
                args += [partition, other, expected]
        if tx.conn.execute(" AND ".join(sql), args).rowcount == 1:
            return version
        found = _versions(tx.conn, partition, list(checks))
        for other, expected in checks.items():
            check_found(partition, other, found.get(other), expected)
        raise AssertionError(f"{partition}/{key!r}: every check held but nothing was written")

    def clock(self) -> float:
        """The host's clock: every process using the database file runs on this machine
        (a file on a network share is not supported), so all read the same one, whatever
        a process believes its own time to be."""
        return time.time()

    def _drop_partition(self, partition: str) -> None:
        with self._transaction() as tx:
            tx.conn.execute("DELETE FROM kv WHERE partition = ?", (partition,))
            tx.vacuum()  # its pages go back to the file system as the transaction ends


def _set_up(conn: sqlite3.Connection) -> bool:
    """Whether the file is in WAL mode with its tables (read without the writer lock; a
    file being set up meanwhile, or any error, answers no: it is looked at again under
    the lock)."""
    with _FORK.call():
        try:
            wal = conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
            return wal and bool(
                conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'counter'").fetchone()
            )
        except sqlite3.Error:
            return False


def _vacuum(conn: sqlite3.Connection) -> None:
    """Free the pages of deleted rows (see `_Write.vacuum`). Only space is at stake: a
    failure leaves them free inside the file, for later rows, and the writes go on to
    COMMIT (which fails in turn if the error undid the transaction)."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("PRAGMA incremental_vacuum").fetchall()


_IN_MAX = 500
"""Keys one statement reads at most (SQLite allows 32,766 parameters since 3.32)."""
_GUARDS_MAX = 8
"""Checks a guarded compare-and-swap of one key folds into its `UPDATE` at most."""


def _guarded_swap(
    writes: list[tuple[bytes, bytes]], deletes: list[bytes], checks: dict[bytes, int | None]
) -> bool:
    """Whether a guarded write is one key's compare-and-swap with a few more checks (see
    `SqliteMetaStore._guarded_swap`): one write, no delete, the written key checked at a
    version (not absent) among at most _GUARDS_MAX checks."""
    return (
        len(writes) == 1
        and not deletes
        and 1 < len(checks) <= _GUARDS_MAX
        and checks.get(writes[0][0]) is not None
    )


def _versions(conn: sqlite3.Connection, partition: str, keys: list[bytes]) -> dict[bytes, int]:
    """The versions of those of `keys` that exist, read with one statement per _IN_MAX."""
    found: dict[bytes, int] = {}
    for at in range(0, len(keys), _IN_MAX):
        part = keys[at : at + _IN_MAX]
        marks = ", ".join("?" * len(part))
        found.update(
            conn.execute(
                f"SELECT key, version FROM kv WHERE partition = ? AND key IN ({marks})",
                (partition, *part),
            ).fetchall()
        )
    return found


class _Errors:
    """Translates sqlite3 errors: a busy database is transient; a file that cannot be opened
    or used as a database is configuration; the rest (disk full, I/O error, a damaged file) is
    a BackendError. The calls inside are kept apart from fork(). A class, not a generator:
    it runs around every call."""

    __slots__ = ("opening", "path")

    def __init__(self, path: str, opening: bool) -> None:
        self.path, self.opening = path, opening

    def __enter__(self) -> None:
        _FORK._enter()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: Any
    ) -> None:
        _FORK._exit()
        if error is None or not isinstance(error, sqlite3.Error):
            return
        code = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF
        text = str(error)
        if code in _BUSY or "locked" in text or "busy" in text:
            raise TransientError(
                f"SQLite metastore {self.path} stayed locked for {BUSY_TIMEOUT:.0f} s: {text}"
            ) from None
        if self.opening or code in _SETUP:
            raise ConfigurationError(f"SQLite metastore {self.path}: {text}") from None
        raise BackendError(f"SQLite metastore {self.path}: {text}") from None


def take_turn(lock: FileLock, path: str) -> None:
    """Take this process's turn at the database's write lock (`lock`), waiting at most
    BUSY_TIMEOUT: a writer stopped inside its transaction (SIGSTOP, a suspended job, a
    debugger's breakpoint) holds it until it continues or ends, and every other writer
    would wait for it without a word. Raises TransientError naming the holder, also
    logged at once (the retrying wrapper's attempts each wait again)."""
    if lock.wait(BUSY_TIMEOUT):
        return
    who = holder(lock.path) or "another process"
    message = (
        f"SQLite metastore {path} stayed locked for {BUSY_TIMEOUT:.0f} s: its write lock is "
        f"held by {who}; a process stopped inside a write (Ctrl-Z, SIGSTOP, a debugger) "
        "holds it until it continues (kill -CONT PID) or ends"
    )
    log.warning("zarrlake: %s", message)
    raise TransientError(message)


class _Turn:
    """`take_turn` as a context manager (set-up of a new file, vacuum)."""

    __slots__ = ("lock", "path")

    def __init__(self, lock: FileLock, path: str) -> None:
        self.lock, self.path = lock, path

    def __enter__(self) -> None:
        take_turn(self.lock, self.path)

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


class _Batch:
    """One thread's writes as one transaction (`SqliteMetaStore.batch`): the first write
    begins it (`join`), the end of the outermost block commits it; an interrupt or a crash
    (an exception that is not an Exception) rolls it back."""

    __slots__ = ("conns", "errors", "outer", "write")

    def __init__(self, conns: _Connections, errors: _Errors) -> None:
        self.conns, self.errors = conns, errors
        self.write: _Write | None = None
        self.outer = False

    def join(self, slot: _Slot) -> _Joined:
        """The batch's transaction for one write, begun if this is the first."""
        if self.write is None:
            write = _Write(slot, self.conns.writer, BATCH_VERSIONS)
            write.__enter__()
            self.write = write
        elif not self.write.conn.in_transaction:  # SQLite rolled it back (an I/O error)
            raise BackendError(
                f"SQLite metastore {self.errors.path}: a batch's transaction was rolled back "
                "by an earlier error; check the disk the file is on, then try again"
            )
        return _Joined(self.write)

    def commit(self) -> None:
        """Commit the writes so far and release the write lock; the next write begins a
        new transaction. A failed COMMIT rolls them back and raises (the lock released)."""
        write, self.write = self.write, None
        if write is not None:
            write.__exit__(None, None, None)

    def __enter__(self) -> None:
        self.outer = getattr(self.conns.local, "batch", None) is None
        if self.outer:
            self.conns.local.batch = self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: Any
    ) -> None:
        if not self.outer:
            return
        self.conns.local.batch = None
        if error is None or isinstance(error, Exception):  # each write that returned stays
            self.commit()
            return
        write, self.write = self.write, None
        if write is not None:
            write.__exit__(kind, error, None)  # rolled back


class _Joined:
    """One write inside a batch: its errors translated; a failed statement undoes only
    itself (SQLite's statement atomicity), the batch's other writes stay."""

    __slots__ = ("conn", "slot", "write")

    def __init__(self, write: _Write) -> None:
        self.write, self.conn, self.slot = write, write.conn, write.slot

    def versions(self, n: int) -> int:
        """The first of `n` new versions (see `_Write.versions`: the batch's reservation)."""
        return self.write.versions(n)

    def vacuum(self) -> None:
        """Free the pages of deleted rows as the batch's transaction ends (`_Write.vacuum`)."""
        self.write.vacuum()

    def __enter__(self) -> _Joined:
        self.slot.__enter__()  # the batch's transaction holds it already: never closed here
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        self.slot.__exit__(kind, error, tb)


class _Write:
    """A write transaction: this process's turn at the write lock, then BEGIN IMMEDIATE;
    COMMIT on leaving, ROLLBACK on an error. It holds its thread's connection (`_Slot`)
    throughout. Its writes' versions come from the counter, `block` at a time at least
    (see `versions`)."""

    __slots__ = ("block", "conn", "end", "freed", "lock", "next", "slot")

    def __init__(self, slot: _Slot, lock: FileLock, block: int = 1) -> None:
        self.slot, self.lock, self.block = slot, lock, block
        self.conn: sqlite3.Connection = slot.conn  # type: ignore[assignment]  # (see __enter__)
        self.next, self.end = 1, 0  # versions reserved and not used yet: [next, end]
        self.freed = False  # rows were deleted whose pages go back before COMMIT

    def vacuum(self) -> None:
        """Give the pages of the rows this transaction deleted back to the file system
        before it commits (SQLite's incremental vacuum, one statement however many drops:
        a commit's clean-up drops two partitions in one batch)."""
        self.freed = True

    def versions(self, n: int) -> int:
        """The first of `n` new versions (they follow it), from those this transaction
        reserved: the counter is bumped once for `block` of them, or `n` if more, and again
        only when they run out. Unused ones are never handed out (the counter moved past
        them), so versions still never repeat and grow with every write; a batch's writes
        then cost one statement of the counter, not one each."""
        first = self.next
        if first + n - 1 > self.end:
            take = max(n, self.block)
            self.end = self.conn.execute(
                "UPDATE counter SET version = version + ? WHERE id = 0 RETURNING version", (take,)
            ).fetchone()[0]
            first = self.end - take + 1
        self.next = first + n
        return first

    def __enter__(self) -> _Write:
        take_turn(self.lock, self.slot.errors.path)
        try:
            self.conn = self.slot.__enter__()
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except BaseException as e:
                self.slot.__exit__(type(e), e, None)
                raise
        except BaseException:
            self.lock.release()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _: Any
    ) -> None:
        conn = self.conn
        try:
            try:
                if error is None:
                    try:
                        if self.freed:
                            _vacuum(conn)
                        conn.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                elif conn.in_transaction:
                    conn.execute("ROLLBACK")
            except BaseException as e:
                self.slot.__exit__(type(e), e, None)  # raises it translated, or returns
                raise
            self.slot.__exit__(kind, error, None)
        finally:
            self.lock.release()


register("sqlite", SqliteMetaStore)
