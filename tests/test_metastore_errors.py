"""Bad input to the metastore gives a clear zarrlake error, never a raw driver traceback."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.fixtures.postgres import create_database, drop_database
from zarrlake.errors import ConfigurationError, InvalidInputError, TransientError, ZarrLakeError
from zarrlake.metastore import MetaStore, open_metastore
from zarrlake.metastore.retrying import RetryingMetaStore


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("foo://x", "scheme"),
        ("no-scheme-at-all", "scheme"),
        ("", "scheme"),
        ("sqlite://", "sqlite"),
        ("sqlite:///", "no database file"),
        ("sqlite://host/x.db", "host"),
        ("sqlite:///dir/", "no database file"),
        ("sqlite:///:memory:", "memory://"),
        ("sqlite:///x.db?journal=off", "unknown option"),
        ("sqlite:///x.db?synchronous=sometimes", "unknown option"),
        ("memory://", "needs a name"),
        ("postgresql://127.0.0.1:5432", "names no database"),
        ("postgresql://user:secret@127.0.0.1:port/db", "bad port"),
        ("postgres://127.0.0.1/db?no_such_option=1", "invalid PostgreSQL URL"),
    ],
)
def test_invalid_urls(url: str, complaint: str):
    with pytest.raises(InvalidInputError, match=complaint) as info:
        open_metastore(url)
    assert "secret" not in str(info.value)


def test_url_must_be_a_string():
    with pytest.raises(InvalidInputError, match="string"):
        open_metastore(42)  # type: ignore[arg-type]


def test_unreachable_postgres_is_a_quick_configuration_error():
    began = time.monotonic()
    with pytest.raises(ConfigurationError) as info:
        open_metastore("postgresql://someone:hunter22@127.0.0.1:1/none?connect_timeout=3")
    assert time.monotonic() - began < 10
    message = str(info.value)
    assert "127.0.0.1:1/none" in message and "refused" in message
    assert "hunter22" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.fixture
def bob(postgres_url: str) -> Iterator[str]:
    """A login role with a password and a database of its own; returns the database name."""
    role = f"bob_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'right-password'")
    name = create_database(postgres_url, owner=role)
    try:
        yield role, name
    finally:
        drop_database(postgres_url, name)
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")


def _port(postgres_url: str) -> str:
    return postgres_url.rsplit(":", 1)[1].split("/")[0]


def test_wrong_postgres_password(postgres_url: str, bob):
    role, db = bob
    port = _port(postgres_url)
    with pytest.raises(ConfigurationError) as info:
        open_metastore(f"postgresql://{role}:wrong-password@127.0.0.1:{port}/{db}")
    message = str(info.value)
    assert "authentication failed" in message and role in message
    assert f"127.0.0.1:{port}/{db}" in message
    assert "wrong-password" not in message and "right-password" not in message
    # ... while the right password works, creating the schema in bob's database
    meta = open_metastore(f"postgresql://{role}:right-password@127.0.0.1:{port}/{db}")
    try:
        assert meta.set_if("p", b"k", b"v", None) > 0
        assert "right-password" not in repr(meta)
    finally:
        meta.close()


def test_unknown_postgres_database(postgres_url: str):
    url = postgres_url.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(ConfigurationError, match="database does not exist"):
        open_metastore(url)


def test_postgres_role_without_privileges(postgres_url: str, pg_metastore_url: str):
    """A role that may log in but not create the table gets a ConfigurationError."""
    role = f"eve_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    try:
        db = pg_metastore_url.rsplit("/", 1)[1]
        url = f"postgresql://{role}:pw@127.0.0.1:{_port(postgres_url)}/{db}"
        with pytest.raises(ConfigurationError, match="permission denied"):
            open_metastore(url)
    finally:
        with psycopg.connect(pg_metastore_url, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")


def test_sqlite_in_a_missing_directory(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "meta.db"
    with pytest.raises(ConfigurationError, match="does not exist") as info:
        open_metastore(f"sqlite:///{path}")
    assert str(path.parent) in str(info.value)


def test_sqlite_path_is_a_directory(tmp_path):
    (tmp_path / "adir").mkdir()
    with pytest.raises(ConfigurationError) as info:
        open_metastore(f"sqlite:///{tmp_path}/adir")
    assert str(tmp_path / "adir") in str(info.value)


def test_sqlite_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ConfigurationError, match="not a database") as info:
        open_metastore(f"sqlite:///{path}")
    assert str(path) in str(info.value)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[MetaStore]:
    if request.param == "memory":
        url = f"memory://errors-{uuid.uuid4().hex}"
    elif request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/meta.db"
    else:
        url = request.getfixturevalue("pg_metastore_url")
    meta = open_metastore(url)
    yield meta
    meta.close()


BAD_CALLS = {
    "str key to get": (lambda m: m.get("p", "key"), "must be bytes, not str"),
    "str key to set": (lambda m: m.set("p", "key", b"v"), "must be bytes, not str"),
    "str value": (lambda m: m.set("p", b"key", "value"), "value must be bytes, not str"),
    "int key to delete": (lambda m: m.delete("p", 5), "must be bytes, not int"),
    "str key to set_if": (lambda m: m.set_if("p", "k", b"v", None), "must be bytes, not str"),
    "str version": (lambda m: m.set_if("p", b"k", b"v", "1"), "expected version"),
    "bool version": (lambda m: m.set_if("p", b"k", b"v", True), "expected version"),
    "str key in batch": (lambda m: m.set_many("p", [("k", b"v")]), "must be bytes, not str"),
    "not pairs": (lambda m: m.set_many("p", [b"kv"]), "pairs"),
    "not iterable": (lambda m: m.set_many("p", 5), "iterable"),
    "str scan start": (lambda m: list(m.scan("p", start="a")), "scan start must be bytes"),
    "str scan prefix": (lambda m: list(m.scan("p", prefix="a")), "scan prefix must be bytes"),
    "negative limit": (lambda m: list(m.scan("p", limit=-1)), "limit"),
    "bytes partition": (lambda m: m.get(b"p", b"k"), "partition must be a str"),
    "NUL in partition": (lambda m: m.get("p\x00q", b"k"), "NUL"),
    "huge key": (lambda m: m.set("p", b"k" * 5000, b"v"), "limit is 2048"),
    "bad partition drop": (lambda m: m.drop_partition(None), "partition must be a str"),
}


@pytest.mark.parametrize("call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_arguments_are_invalid_input(store: MetaStore, call):
    fn, complaint = call
    with pytest.raises(InvalidInputError, match=complaint) as info:
        fn(store)
    assert isinstance(info.value, ZarrLakeError) and isinstance(info.value, ValueError)
    assert list(store.scan("p")) == []  # nothing was written


def test_closed_store_says_so(store: MetaStore):
    store.set("p", b"k", b"v")
    store.close()
    with pytest.raises(ConfigurationError, match="closed"):
        store.get("p", b"k")


def test_dropped_postgres_connection_is_transient(postgres_url: str, pg_metastore_url: str):
    meta = open_metastore(pg_metastore_url)
    try:
        meta.set("p", b"k", b"v")  # the pool now holds an open connection
        db = pg_metastore_url.rsplit("/", 1)[1]

        def kill_sessions() -> int:
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                return len(
                    conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = %s AND pid <> pg_backend_pid()",
                        (db,),
                    ).fetchall()
                )

        assert kill_sessions() >= 1
        with pytest.raises(TransientError) as info:
            meta.get("p", b"k")
        assert db in str(info.value) and info.value.__cause__ is None
        kill_sessions()
        assert RetryingMetaStore(meta).get("p", b"k")[0] == b"v"
    finally:
        meta.close()


def test_sqlite_locked_past_the_timeout_is_transient(tmp_path, monkeypatch):
    import sqlite3

    import zarrlake.metastore.sqlite as sqlite_backend

    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT", 0.2)
    path = tmp_path / "meta.db"
    meta = open_metastore(f"sqlite:///{path}")
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        with pytest.raises(TransientError, match="locked") as info:
            meta.set("p", b"k", b"v")
        assert str(path) in str(info.value)
        assert meta.get("p", b"k") is None  # WAL: readers are not blocked
        holder.execute("ROLLBACK")
        assert meta.set("p", b"k", b"v") > 0
    finally:
        holder.close()
        meta.close()
