"""Moving a repository between metastores: SQLite to its bucket, the bucket to PostgreSQL,
PostgreSQL to SQLite, each copy verified and switched, with the history, refs, protection
rules, sessions and garbage candidates intact; refused while not offline, into a target
that already holds the repository, and (leaving the repository as it was) when the copy
reads back wrong. Also through `zarrlake metastore copy`."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

import zarrlake as zl
from tests.helpers.lifecycle import chunk
from zarrlake import metastore as metastores
from zarrlake.errors import (
    AlreadyExistsError,
    ConfigurationError,
    CorruptionError,
    InvalidInputError,
    ZarrLakeError,
)
from zarrlake.metastore.base import MetaStore, WrapperMetaStore
from zarrlake.vc.gc_protocol import GcState


def _fill(repo: zl.Repo) -> dict:
    """Commits, a branch, a tag, a protection rule, an abandoned session and garbage
    candidates; returns what a copy must keep."""
    for i in range(3):
        s = repo.create_session()
        s.write_many([("a/c/0", chunk(i)), (f"b/c/{i}", chunk(10 + i, 300))])
        s.commit(f"c{i}")
    repo.create_branch("dev", "main")
    repo.create_tag("v1", "main~1")
    repo.protect_branch("main")
    gone = repo.create_session()
    gone.write("x/c/0", chunk(99))
    gone.abandon()
    return _state(repo)


def _state(repo: zl.Repo) -> dict:
    ctx = repo._context
    return {
        "log": [c.id for c in repo.log()],
        "branches": repo.list_branches(),
        "tags": repo.list_tags(),
        "protected": repo.protected_branches(),
        "sessions": sorted((r.id, r.status) for r in ctx.records.scan()),
        "candidates": sorted(GcState(ctx).candidates()),
        "a": repo.readonly_session().read("a/c/0"),
    }


@pytest.fixture
def s3_repo(s3_location, tmp_path) -> Iterator[tuple[zl.Repo, str, dict]]:
    """A repository on S3 with a SQLite metastore (as one moved off a laptop)."""
    location, options = s3_location
    sqlite = f"sqlite:///{tmp_path}/metastore.sqlite"
    repo = zl.Repo.create(location, metastore=sqlite, storage_options=options)
    yield repo, sqlite, options
    repo.close()


def test_sqlite_to_bucket_to_postgres_to_sqlite(s3_repo, pg_metastore_url, tmp_path):
    repo, sqlite, options = s3_repo
    location = repo.spec.location
    expected = _fill(repo)
    assert expected["candidates"]  # the abandoned session's upload

    report = repo.copy_metastore("bucket")
    assert (report.source, report.target, report.switched) == ("sqlite", "bucket", True)
    assert report.refs == 4  # main, dev, v1 and the protection rule
    assert report.sessions == len(expected["sessions"])
    bucket_only = zl.Repo.open(location, storage_options=options)
    assert bucket_only.spec.metastore == "bucket"
    assert _state(bucket_only) == expected
    with pytest.raises(ConfigurationError, match="uses a metastore in its own bucket"):
        zl.Repo.open(location, metastore=sqlite, storage_options=options)

    bucket_only.copy_metastore(pg_metastore_url)
    with pytest.raises(InvalidInputError, match="PostgreSQL"):
        zl.Repo.open(location, storage_options=options)
    on_pg = zl.Repo.open(location, metastore=pg_metastore_url, storage_options=options)
    assert _state(on_pg) == expected

    back = f"sqlite:///{tmp_path}/back.sqlite"
    on_pg.copy_metastore(back)
    on_sqlite = zl.Repo.open(location, metastore=back, storage_options=options)
    assert _state(on_sqlite) == expected
    s = on_sqlite.create_session("dev")  # main is protected: dev takes the commit
    s.write("a/c/0", chunk(7))
    s.commit("after the moves")
    assert on_sqlite.readonly_session("dev").read("a/c/0") == chunk(7)
    with pytest.raises(AlreadyExistsError, match="already holds refs"):
        on_sqlite.copy_metastore("bucket")  # the bucket still holds the first copy


def test_copy_is_offline(s3_repo):
    repo, _, _ = s3_repo  # open sessions move along: tests/admin/test_metastore_copy_sessions
    holder = GcState(repo._context)
    holder.acquire()
    with pytest.raises(ZarrLakeError, match="garbage collector holds its lock"):
        repo.copy_metastore("bucket")
    holder.release()
    assert repo.copy_metastore("bucket", switch=False).switched is False
    assert zl.Repo.open(
        repo.spec.location,
        metastore=repo.spec.metastore,
        storage_options=dict(repo.spec.storage_options),
    ).log()


class _Garbling(WrapperMetaStore):
    def set_many(self, partition, items):
        items = list(items)
        if partition.endswith("/refs"):
            items[0] = (items[0][0], b"garbled")
        self.inner.set_many(partition, items)


def test_a_copy_that_reads_back_wrong_changes_nothing(s3_repo):
    repo, sqlite, options = s3_repo
    expected = _fill(repo)

    def garble(meta: MetaStore) -> MetaStore:
        return _Garbling(meta)

    metastores.registry.add_hook(garble)
    try:
        with pytest.raises(CorruptionError, match="differs from the original"):
            repo.copy_metastore("bucket")
    finally:
        metastores.registry.remove_hook(garble)
    config = json.loads(repo._context.object_store.get("zarrlake.json"))
    assert config["metastore"] == "sqlite"
    again = zl.Repo.open(repo.spec.location, metastore=sqlite, storage_options=options)
    assert _state(again) == expected


def test_cli_metastore_copy(s3_repo, capsys):
    from zarrlake.cli import main

    repo, sqlite, options = s3_repo
    _fill(repo)
    storage = [
        "--endpoint-url", options["endpoint_url"], "--region", options["region"],
        "--access-key-id", "test", "--secret-access-key", "test", "--allow-http",
    ]  # fmt: skip
    where = ["-r", repo.spec.location, *storage]
    with pytest.raises(SystemExit) as done:
        main([*where, "--metastore", sqlite, "metastore", "copy", "--to", "bucket", "--json"])
    assert done.value.code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["target"] == "bucket" and report["switched"] and report["refs"] == 4
    with pytest.raises(SystemExit) as done:
        main([*where, "log", "--limit", "1"])  # no metastore URL needed now
    assert done.value.code == 0
    assert "c2" in capsys.readouterr().out
