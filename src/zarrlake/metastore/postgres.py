"""PostgreSQL metastore (psycopg 3): for repositories shared by many machines.

Every operation is one autocommit statement (``set_many`` one transaction) on a pooled
connection; compare-and-swap is a single conditional UPDATE or INSERT, so it is atomic
without explicit locks. Versions come from a sequence, which never repeats (even on
rollback). The pool is opened lazily and recreated after fork: a connection's socket must
never be used, or even closed, by two processes.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext, suppress
from typing import Any

from zarrlake._util.forksafe import ForkGuard, PerProcess
from zarrlake.errors import (
    BackendError,
    CASFailedError,
    ConfigurationError,
    InvalidInputError,
    TransientError,
)
from zarrlake.metastore import register
from zarrlake.metastore.base import Item, MetaStoreBackend, Reading
from zarrlake.metastore.checks import check_found, check_meta_key, check_partition, scan_range

try:
    import psycopg
    import psycopg.conninfo
    import psycopg_pool
except ImportError as _e:  # pragma: no cover - depends on the installed extras
    raise ConfigurationError(
        "the PostgreSQL metastore needs psycopg: pip install 'zarrlake[postgres]'"
    ) from _e

TABLE = "zarrlake_kv"
SEQUENCE = "zarrlake_kv_version"
CONNECT_TIMEOUT = 10
"""Seconds to wait for a connection unless the URL sets ``connect_timeout``."""
POOL_MAX = 4
POOL_TIMEOUT = 15.0
"""Seconds an operation waits for a pooled connection before raising TransientError."""
CLOCK_CHECK = 300.0
"""Seconds between reads of the server's clock (`clock`)."""
CLOCK_ROUND = 1.0
"""A reading that took longer than this (seconds) is taken again: its error is half its
length."""
CLOCK_TRIES = 5
_SCHEMA_LOCK = 0x7A61_726C_616B_6501  # pg_advisory_xact_lock key serialising schema creation

_SCHEMA = (
    f'CREATE TABLE IF NOT EXISTS {TABLE} (partition text COLLATE "C" NOT NULL, '
    "key bytea NOT NULL, value bytea NOT NULL, version bigint NOT NULL, "
    "PRIMARY KEY (partition, key))",
    f"CREATE SEQUENCE IF NOT EXISTS {SEQUENCE}",
)
_UPSERT_TAIL = (
    "ON CONFLICT (partition, key) DO UPDATE SET value = EXCLUDED.value, "
    "version = EXCLUDED.version RETURNING version"
)

_SETUP_STATES = ("28", "3D", "42")
"""SQLSTATE classes that mean the backend is set up wrongly: authorization, missing
database, missing table or privilege."""


def parse_postgres_url(url: str) -> tuple[dict[str, str], str]:
    """(libpq connection parameters, "host:port/db" for messages) of a postgresql:// URL."""
    if not isinstance(url, str) or not url.lower().startswith(("postgresql://", "postgres://")):
        raise InvalidInputError(
            f"not a PostgreSQL metastore URL: {_redact(url)!r}"
            "; write it as postgresql://USER@HOST:PORT/DB"
        )
    try:
        given = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as e:
        raise InvalidInputError(f"invalid PostgreSQL URL {_redact(url)!r}: {e}") from None
    params = {k: str(v) for k, v in given.items()}
    where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
    if not params.get("dbname"):
        raise InvalidInputError(
            f"PostgreSQL metastore URL {_redact(url)!r} names no database: "
            "postgresql://USER@HOST:PORT/DB"
            "; add the database name"
        )
    if not all(p.isdigit() for p in params.get("port", "5432").split(",")):
        raise InvalidInputError(
            f"PostgreSQL metastore URL {_redact(url)!r}: bad port; give the port as a number"
        )
    params.setdefault("connect_timeout", str(CONNECT_TIMEOUT))
    params.setdefault("application_name", "zarrlake")
    return params, f"{where}/{params['dbname']}"


def _redact(url: Any) -> Any:
    """The URL with its password replaced by ***."""
    if not isinstance(url, str) or "@" not in url:
        return url
    head, _, tail = url.rpartition("@")
    scheme, sep, userinfo = head.partition("://")
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user}{':***' if colon else ''}@{tail}"


def _connect_problem(e: BaseException, params: dict[str, str]) -> str:
    """One line saying why a connection failed, never containing the password."""
    state = getattr(e, "sqlstate", None)
    text = str(e)
    if state in ("28P01", "28000") or "authentication failed" in text:
        return f"authentication failed for user {params.get('user', '')!r}"
    if state == "3D000" or ("database" in text and "does not exist" in text):
        return "database does not exist"
    if "Connection refused" in text:
        return "connection refused (is the server running on that host and port?)"
    if "timeout expired" in text:
        return f"no answer within {params.get('connect_timeout')} s (connect_timeout)"
    diag = getattr(e, "diag", None)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = (diag and diag.message_primary) or (lines[0] if lines else type(e).__name__)
    password = params.get("password")
    return line.replace(password, "***") if password else line


def _close_quietly(pool: psycopg_pool.ConnectionPool) -> None:
    with suppress(Exception):
        pool.close(timeout=2.0)


def _release_pool(per_process: PerProcess[psycopg_pool.ConnectionPool]) -> None:
    """Close this process's pool; from a thread other than the main one (a pool worker,
    when garbage collection runs there), in a thread of its own, which can join the workers."""
    pool = per_process.take()
    if pool is None or pool.closed:
        return
    if threading.current_thread() is threading.main_thread():
        _close_quietly(pool)
    else:
        threading.Thread(target=_close_quietly, args=(pool,), name="zarrlake-pool-close").start()


_CONNECTING = ForkGuard()
"""fork() waits for connections being made: libpq takes OpenSSL's process-wide locks while
it connects (also to a server without TLS), and a child forked meanwhile (multiprocessing's
default on Linux) deadlocks on its own first connection."""


def _connect(connect: Callable[[], psycopg.Connection]) -> psycopg.Connection:
    """`connect()`, kept apart from fork() (`_CONNECTING`)."""
    with _CONNECTING.call():
        return connect()


def _adopting(first: psycopg.Connection | None) -> type[psycopg.Connection]:
    """A connection class whose first connect() returns `first`, so a pool starts with the
    connection that checked the schema instead of opening another (four round trips)."""

    class Adopting(psycopg.Connection):
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> psycopg.Connection:  # type: ignore[override]
            nonlocal first
            conn, first = first, None
            if conn is not None:
                return conn
            return _connect(lambda: super(Adopting, cls).connect(*args, **kwargs))

    return Adopting


class PostgresMetaStore(MetaStoreBackend):
    """A metastore in one PostgreSQL table, shared by every process that opens the URL."""

    _params: dict[str, Any]  # libpq parameters, psycopg's keyword arguments

    def __init__(self, url: str) -> None:
        self.url = url
        self._params, self.where = parse_postgres_url(url)
        self._closed = False
        self._clock: tuple[float, float] | None = None  # (server minus monotonic, when read)
        self._clock_lock = threading.Lock()
        self._spare: PerProcess[psycopg.Connection] = PerProcess()  # the pool's first
        self._ensure_schema()
        self._pool = PerProcess(self._new_pool)  # opened on first use, again after fork
        # Close the pool when the store goes away or, at the latest, at exit: a pool left to
        # its __del__ may be collected on its own worker thread ("cannot join current thread").
        weakref.finalize(self, _release_pool, self._pool)

    def __repr__(self) -> str:
        return f"PostgresMetaStore({_redact(self.url)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (PostgresMetaStore, (self.url,))

    # connections -------------------------------------------------------------------------

    def _ensure_schema(self) -> None:
        """Connect once (failing fast and clearly) and create the table if missing; the
        connection then becomes the pool's first, so opening costs one connection."""
        try:
            conn = _connect(
                lambda: psycopg.connect(**self._params, autocommit=True, prepare_threshold=None)
            )
        except psycopg.Error as e:
            raise ConfigurationError(
                f"cannot connect to PostgreSQL at {self.where}: {_connect_problem(e, self._params)}"
            ) from None
        try:
            with self._errors(opening=True):
                found = conn.execute(
                    "SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL",
                    (TABLE, SEQUENCE),
                ).fetchone()
                if not (found and found[0]):
                    # Concurrent CREATE ... IF NOT EXISTS can still collide on the catalog's
                    # unique indexes; an advisory lock makes creators take turns.
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                        for statement in _SCHEMA:
                            conn.execute(statement)
        except BaseException:
            conn.close()
            raise
        self._spare.put(conn)

    def _take_spare(self) -> psycopg.Connection | None:
        spare = self._spare.take()  # never a parent process's: no connection crosses fork
        return spare if spare is not None and not spare.closed else None

    def _new_pool(self) -> psycopg_pool.ConnectionPool:
        if self._closed:
            raise ConfigurationError(f"metastore {self!r} is closed; open the repository again")
        pool = psycopg_pool.ConnectionPool(
            conninfo="",
            kwargs={**self._params, "autocommit": True, "prepare_threshold": None},
            connection_class=_adopting(self._take_spare()),
            min_size=1,
            max_size=POOL_MAX,
            timeout=POOL_TIMEOUT,
            num_workers=1,
            name=f"zarrlake-{self.where}",
            open=False,
        )
        pool.open(wait=True, timeout=POOL_TIMEOUT)  # a waiting first query would grow it
        return pool

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        pool = self._pool.get()
        with self._errors(), pool.connection() as conn:
            yield conn

    @contextmanager
    def _errors(self, opening: bool = False) -> Iterator[None]:
        """Translate psycopg errors: lost connections, serialization failures and deadlocks
        are transient; authorization, missing objects and privileges are configuration; the
        rest (disk full, internal errors, ...) is a BackendError."""
        try:
            yield
        except psycopg.OperationalError as e:
            problem = _connect_problem(e, self._params)
            if opening:
                raise ConfigurationError(f"PostgreSQL at {self.where}: {problem}") from None
            raise TransientError(f"PostgreSQL at {self.where}: {problem}") from None
        except psycopg.InterfaceError as e:
            raise TransientError(f"PostgreSQL at {self.where}: {e}") from None
        except psycopg.Error as e:
            problem = _connect_problem(e, self._params)
            if opening or (e.sqlstate or "")[:2] in _SETUP_STATES:
                raise ConfigurationError(f"PostgreSQL at {self.where}: {problem}") from None
            raise BackendError(f"PostgreSQL at {self.where}: {problem}") from None

    def close(self) -> None:
        """Refuse further calls and close the spare connection and the pool."""
        self._closed = True
        spare = self._take_spare()
        if spare is not None:
            spare.close()
        pool = self._pool.take()
        if pool is not None:
            pool.close()

    # primitives --------------------------------------------------------------------------

    def _get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        with self._connection() as conn:
            row = conn.execute(
                f"SELECT value, version FROM {TABLE} WHERE partition = %s AND key = %s",
                (partition, key),
            ).fetchone()
        return None if row is None else (bytes(row[0]), row[1])

    def _scan(self, partition: str, low: bytes, high: bytes | None, size: int) -> list[Item]:
        sql = f"SELECT key, value, version FROM {TABLE} WHERE partition = %s AND key >= %s"
        if high is not None:
            sql += " AND key < %s"
        args = (partition, low) + ((high,) if high is not None else ()) + (size,)
        with self._connection() as conn:  # back to the pool before the caller sees a row
            rows = conn.execute(sql + " ORDER BY key LIMIT %s", args).fetchall()
        return [(bytes(k), bytes(v), ver) for k, v, ver in rows]

    def read(
        self, partition: str, keys: Sequence[bytes] = (), prefixes: Sequence[bytes] = ()
    ) -> Reading:
        """The keys and whole prefixes in one statement (one round trip, one snapshot)."""
        check_partition(partition)
        wanted = [check_meta_key(k) for k in keys]
        ranges = [scan_range(b"", p) for p in prefixes]
        where = ["key = ANY(%s)"] + [
            "(key >= %s" + (" AND key < %s)" if high is not None else ")") for _, high in ranges
        ]
        args: list[Any] = [partition, wanted]
        for low, high in ranges:
            args += [low] if high is None else [low, high]
        sql = f"SELECT key, value, version FROM {TABLE} WHERE partition = %s AND "
        with self._connection() as conn:
            rows = conn.execute(f"{sql}({' OR '.join(where)}) ORDER BY key", args).fetchall()
        items = [(bytes(k), bytes(v), ver) for k, v, ver in rows]
        found = {k: (v, ver) for k, v, ver in items}
        return (
            [found.get(k) for k in wanted],
            [
                [i for i in items if low <= i[0] and (high is None or i[0] < high)]
                for low, high in ranges
            ],
        )

    def _write(
        self, partition: str, writes: list[tuple[bytes, bytes]], deletes: list[bytes]
    ) -> list[int]:
        # One statement commits on its own (autocommit); two need a transaction.
        with (
            self._connection() as conn,
            conn.transaction() if writes and deletes else nullcontext(),
        ):
            return self._apply(conn, partition, writes, deletes)

    @staticmethod
    def _apply(
        conn: psycopg.Connection,
        partition: str,
        writes: list[tuple[bytes, bytes]],
        deletes: list[bytes],
    ) -> list[int]:
        """Delete `deletes`, then write `writes` with new versions (returned in order)."""
        if deletes:
            conn.execute(
                f"DELETE FROM {TABLE} WHERE partition = %s AND key = ANY(%s)", (partition, deletes)
            )
        if not writes:
            return []
        rows = conn.execute(
            f"INSERT INTO {TABLE} (partition, key, value, version) "
            f"SELECT %s, k, v, nextval('{SEQUENCE}') "
            "FROM unnest(%s::bytea[], %s::bytea[]) AS t(k, v) ORDER BY k "
            f"{_UPSERT_TAIL}, key",
            (partition, [k for k, _ in writes], [v for _, v in writes]),
        ).fetchall()
        versions = {bytes(k): version for version, k in rows}
        return [versions[k] for k, _ in writes]

    def _write_if(
        self,
        partition: str,
        writes: list[tuple[bytes, bytes]],
        deletes: list[bytes],
        checks: dict[bytes, int | None],
    ) -> list[int]:
        """One transaction that first locks every checked key, present or not: a present
        row by SELECT ... FOR UPDATE, an absent one by inserting a placeholder row (version
        -1, deleted again before the commit, so nobody ever reads it), whose unique-index
        entry makes any other insert of that key wait for this transaction. Every other
        write of a checked key (any call) therefore lands wholly before or after it."""
        keys = sorted(checks)
        with self._connection() as conn, conn.transaction():
            placeholders: list[bytes] = []
            if keys:
                conn.execute(
                    f"INSERT INTO {TABLE} (partition, key, value, version) "
                    "SELECT %s, k, ''::bytea, -1 FROM unnest(%s::bytea[]) AS t(k) ORDER BY k "
                    "ON CONFLICT (partition, key) DO NOTHING",
                    (partition, keys),
                )
                rows = conn.execute(
                    f"SELECT key, version FROM {TABLE} WHERE partition = %s AND key = ANY(%s) "
                    "ORDER BY key FOR UPDATE",
                    (partition, keys),
                ).fetchall()
                found = {bytes(k): None if v == -1 else v for k, v in rows}
                for key in keys:  # a refusal rolls the transaction (and placeholders) back
                    check_found(partition, key, found.get(key), checks[key])
                placeholders = [k for k in keys if found.get(k) is None]
            written = {k for k, _ in writes}
            gone = sorted(set(deletes) | {k for k in placeholders if k not in written})
            return self._apply(conn, partition, writes, gone)

    def clock(self) -> float:
        """The server's clock (clock_timestamp()), read once every CLOCK_CHECK seconds
        and carried forward on this host's monotonic clock in between: every client
        judges leases and expiries on the one clock of the server, to within half a
        round trip."""
        with self._clock_lock:
            if self._clock is None or time.monotonic() - self._clock[1] > CLOCK_CHECK:
                for _ in range(CLOCK_TRIES):  # a reading that took long says little
                    before = time.monotonic()
                    with self._connection() as conn:
                        row = conn.execute(
                            "SELECT extract(epoch FROM clock_timestamp())"
                        ).fetchone()
                    after = time.monotonic()
                    if after - before <= CLOCK_ROUND:
                        break
                assert row is not None
                self._clock = (float(row[0]) - (before + after) / 2, after)
            return self._clock[0] + time.monotonic()

    def _set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        with self._connection() as conn:
            if expected is None:
                row = conn.execute(
                    f"INSERT INTO {TABLE} (partition, key, value, version) "
                    f"VALUES (%s, %s, %s, nextval('{SEQUENCE}')) "
                    "ON CONFLICT (partition, key) DO NOTHING RETURNING version",
                    (partition, key, value),
                ).fetchone()
            else:
                row = conn.execute(
                    f"UPDATE {TABLE} SET value = %s, version = nextval('{SEQUENCE}') "
                    "WHERE partition = %s AND key = %s AND version = %s RETURNING version",
                    (value, partition, key, expected),
                ).fetchone()
        if row is None:
            if expected is None:
                raise CASFailedError(f"{partition}/{key!r} already exists; read it again and retry")
            raise CASFailedError(
                f"{partition}/{key!r}: version is no longer {expected}; read it again and retry"
            )
        return row[0]

    def _delete_if(self, partition: str, key: bytes, expected: int) -> None:
        with self._connection() as conn:
            row = conn.execute(
                f"DELETE FROM {TABLE} WHERE partition = %s AND key = %s AND version = %s "
                "RETURNING version",
                (partition, key, expected),
            ).fetchone()
        if row is None:
            raise CASFailedError(
                f"{partition}/{key!r}: version is no longer {expected}; read it again and retry"
            )

    def _drop_partition(self, partition: str) -> None:
        with self._connection() as conn:
            conn.execute(f"DELETE FROM {TABLE} WHERE partition = %s", (partition,))


register("postgresql", PostgresMetaStore)
register("postgres", PostgresMetaStore)
