"""Opening a repository on S3 whose metastore is a server of its own (PostgreSQL): the
connection is made while the repository's config is read, not after it (issue 34: the
open on S3 + PostgreSQL paid the connection's round trips after the config's GET). What
goes wrong is said as before: a missing repository, a metastore of another kind."""

from __future__ import annotations

import threading

import psycopg
import pytest

import zarrlake as zl
from zarrlake import connection
from zarrlake.errors import ConfigurationError, NotFoundError


@pytest.fixture
def s3_pg(any_metastore: dict) -> dict:
    return any_metastore


@pytest.mark.parametrize("any_metastore", ["s3-postgres"], indirect=True)
def test_the_metastore_connects_while_the_config_is_read(s3_pg: dict, monkeypatch) -> None:
    zl.Repo.create(**s3_pg).close()
    connecting = threading.Event()
    connect = psycopg.connect

    def noted(*args, **kwargs):
        connecting.set()
        return connect(*args, **kwargs)

    read_config = connection._read_config
    overlapped: list[bool] = []

    def slow_config(store):  # the config's GET answers only once the connection is under way
        overlapped.append(connecting.wait(10))
        return read_config(store)

    monkeypatch.setattr(psycopg, "connect", noted)
    monkeypatch.setattr(connection, "_read_config", slow_config)
    repo = zl.Repo.open(**s3_pg)
    assert overlapped == [True]
    assert repo.log("main")[0].message  # and it works: the branch is read from PostgreSQL
    repo.close()


@pytest.mark.parametrize("any_metastore", ["s3-postgres"], indirect=True)
def test_a_missing_repository_is_still_not_found(s3_pg: dict) -> None:
    with pytest.raises(NotFoundError, match="no zarrlake repository at s3://"):
        zl.Repo.open(**s3_pg)


@pytest.mark.parametrize("any_metastore", ["s3-postgres"], indirect=True)
def test_a_metastore_of_another_kind_is_still_refused(s3_pg: dict, tmp_path) -> None:
    bucket_only = {k: v for k, v in s3_pg.items() if k != "metastore"}
    zl.Repo.create(**bucket_only).close()
    with pytest.raises(ConfigurationError, match="would fork its history"):
        zl.Repo.open(**s3_pg)
    assert zl.Repo.open(**bucket_only).log("main")  # the repository is as it was
