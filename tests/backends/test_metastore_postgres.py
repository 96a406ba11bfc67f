"""The PostgreSQL metastore passes the conformance suites (on a real server started by
tests/fixtures/postgres.py); its own connection, credential and privilege errors."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.fixtures.postgres import create_database, drop_database
from zarrlake.errors import ConfigurationError, TransientError
from zarrlake.metastore import open_metastore
from zarrlake.metastore.retrying import RetryingMetaStore
from zarrlake.testing.metastore import MetaStoreTests
from zarrlake.testing.metastore_shared import SharedMetaStoreTests


class TestPostgresMetaStore(MetaStoreTests, SharedMetaStoreTests):
    @pytest.fixture
    def store_url(self, pg_metastore_url: str) -> str:
        return pg_metastore_url


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


def test_opening_and_first_use_cost_one_connection(pg_metastore_url: str, monkeypatch):
    """The connection that checks the schema becomes the pool's first (issue 15: a new
    process reading one chunk paid three connection start-ups, four round trips each)."""
    opened = []
    connect = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]

    def counting(cls, *args, **kwargs):
        opened.append(cls)
        return connect(cls, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(counting))
    monkeypatch.setattr(psycopg, "connect", psycopg.Connection.connect)  # bound at import
    meta = open_metastore(pg_metastore_url)
    try:
        meta.set("p", b"k", b"v")
        assert meta.get("p", b"k")[0] == b"v"
        assert len(opened) == 1
    finally:
        meta.close()


def test_connections_are_made_apart_from_fork(pg_metastore_url: str, monkeypatch) -> None:
    """libpq takes OpenSSL's process-wide locks while it connects: a child forked meanwhile
    deadlocked on its own first connection (a racer of tests/pulls hung in Repo.open). Every
    connection, the schema check's and the pool's, is made inside the fork guard."""
    from zarrlake.metastore import postgres

    seen: list[int] = []
    real = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]

    def connect(cls, *args, **kwargs):
        seen.append(postgres._CONNECTING._active)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(connect))
    monkeypatch.setattr(
        postgres.psycopg, "connect", lambda *a, **k: connect(psycopg.Connection, *a, **k)
    )
    store = open_metastore(pg_metastore_url)
    try:
        conn = postgres._adopting(None).connect(**store._params)  # a pool's next connection
        conn.close()
    finally:
        store.close()
    assert seen == [1, 1]
    assert postgres._CONNECTING._active == 0
