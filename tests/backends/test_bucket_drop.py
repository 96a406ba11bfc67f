"""Dropping a partition of the bucket metastore: the pages of a partition that spilled go
with it, and one that never spilled costs two requests (delete its head, list its pages)
after this process read or wrote it, three otherwise (the head is read first), not the
five of a sweep that has pages to judge."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.backends.test_metastore_bucket import bucket_url
from zarrlake.metastore import open_metastore
from zarrlake.metastore.bucket.format import Names
from zarrlake.storage.base import ObjectStore

CALLS = ("get", "get_tagged", "put", "put_if", "delete", "delete_many", "list", "list_modified")


@pytest.fixture(params=["memory", "s3"])
def meta(request: pytest.FixtureRequest) -> Iterator:
    """A bucket metastore in memory, and one on moto's S3 server."""
    if request.param == "memory":
        url = f"bucket+memory://drop-{uuid.uuid4().hex}"
    else:
        url = bucket_url(request.getfixturevalue("s3_location"))
    meta = open_metastore(url)
    yield meta
    meta.close()


def counted(monkeypatch: pytest.MonkeyPatch, store: ObjectStore) -> Counter[str]:
    """Count the calls made on `store` from now on, by method name."""
    calls: Counter[str] = Counter()
    for name in CALLS:
        method = getattr(store, name)

        def call(*args, _name=name, _method=method, **kwargs):
            calls[_name] += 1
            return _method(*args, **kwargs)

        monkeypatch.setattr(store, name, call)
    return calls


def test_a_partition_that_never_spilled_is_dropped_in_two_requests(meta, monkeypatch):
    meta.set_many("p", [(b"k%d" % i, b"v") for i in range(10)])
    calls = counted(monkeypatch, meta.store)
    meta.drop_partition("p")
    assert calls == {"delete": 1, "list_modified": 1}, calls
    assert list(meta.scan("p")) == []
    assert meta.get("p", b"k1") is None


def test_a_partition_this_process_never_read_is_read_before_its_drop(meta, monkeypatch):
    meta.set_many("p", [(b"k%d" % i, b"v") for i in range(10)])
    meta._heads.clear()  # as in a process that never read it
    calls = counted(monkeypatch, meta.store)
    meta.drop_partition("p")
    assert calls == {"get_tagged": 1, "delete": 1, "list_modified": 1}, calls
    assert list(meta.scan("p")) == []


def test_a_dropped_partition_takes_its_pages_along(meta):
    names = Names("p")
    meta.set_many("p", [(b"k%05d" % i, b"v" * 1000) for i in range(100)])  # past 64 KiB
    assert list(meta.store.list(names.pages))
    meta.drop_partition("p")
    assert list(meta.store.list(names.pages)) == []
    assert list(meta.scan("p")) == []
    meta.set("p", b"again", b"1")  # a new incarnation starts empty
    assert [k for k, _, _ in meta.scan("p")] == [b"again"]
