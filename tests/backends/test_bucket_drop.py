"""Dropping a partition of the bucket metastore: the pages of a partition that spilled go
with it, and one that never spilled costs one request (its head deleted on condition that
it is still the one read, whose incarnation had no page written: no listing) after this
process read or wrote it, two otherwise (the head is read first), not the five of a sweep
that has pages to judge. A head that changed since it was read is read again, deleted and
its pages listed, as before. A partition's first pages are written only once its head no
longer says it has none."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.backends.test_metastore_bucket import bucket_url
from zarrlake.metastore import open_metastore
from zarrlake.metastore.bucket.format import Names, decode_head
from zarrlake.storage.base import ObjectStore

CALLS = (
    "get",
    "get_tagged",
    "put",
    "put_if",
    "delete",
    "delete_if",
    "delete_many",
    "list",
    "list_modified",
)


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


def marks_when_pages_are_written(meta, monkeypatch, names: Names) -> list[bool]:
    """The stored head's pageless mark each time a run of pages is about to be written."""
    seen: list[bool] = []
    write_run = meta._write_run

    def noted(*args, **kwargs):
        seen.append(decode_head(meta.store.get(names.head), names.partition).pageless)
        return write_run(*args, **kwargs)

    monkeypatch.setattr(meta, "_write_run", noted)
    return seen


def test_a_partition_that_never_spilled_is_dropped_in_one_request(meta, monkeypatch):
    meta.set_many("p", [(b"k%d" % i, b"v") for i in range(10)])
    calls = counted(monkeypatch, meta.store)
    meta.drop_partition("p")
    assert calls == {"delete_if": 1}, calls
    assert list(meta.scan("p")) == []
    assert meta.get("p", b"k1") is None


def test_a_partition_this_process_never_read_is_read_before_its_drop(meta, monkeypatch):
    meta.set_many("p", [(b"k%d" % i, b"v") for i in range(10)])
    meta._heads.clear()  # as in a process that never read it
    calls = counted(monkeypatch, meta.store)
    meta.drop_partition("p")
    assert calls == {"get_tagged": 1, "delete_if": 1}, calls
    assert list(meta.scan("p")) == []


def test_a_head_written_since_it_was_read_is_read_again_and_its_pages_listed(meta, monkeypatch):
    meta.set_many("p", [(b"k%d" % i, b"v") for i in range(10)])
    other = open_metastore(meta.url)  # another process writes after this one read
    other.set("p", b"late", b"1")
    calls = counted(monkeypatch, meta.store)
    meta.drop_partition("p")
    assert calls == {"delete_if": 1, "get_tagged": 1, "delete": 1, "list_modified": 1}, calls
    assert list(meta.scan("p")) == [] and list(other.scan("p")) == []
    other.close()


def test_the_first_pages_are_written_after_the_head_lost_its_pageless_mark(meta, monkeypatch):
    names = Names("p")
    meta.set_many("p", [(b"small", b"v")])
    assert decode_head(meta.store.get(names.head), "p").pageless
    seen = marks_when_pages_are_written(meta, monkeypatch, names)
    meta.set_many("p", [(b"k%05d" % i, b"v" * 1000) for i in range(100)])  # past 64 KiB
    assert seen == [False]  # the mark went in a write of its own, before the page
    head = decode_head(meta.store.get(names.head), "p")
    assert head.runs and not head.pageless
    assert meta.get("p", b"small") is not None and meta.get("p", b"k00042") is not None
    calls = counted(monkeypatch, meta.store)
    meta.drop_partition("p")  # it has pages: they are listed and go with it
    assert calls["list_modified"] >= 1 and not calls["delete_if"], calls
    assert list(meta.store.list(names.pages)) == []


def test_a_dropped_partition_takes_its_pages_along(meta):
    names = Names("p")
    meta.set_many("p", [(b"k%05d" % i, b"v" * 1000) for i in range(100)])  # past 64 KiB
    assert list(meta.store.list(names.pages))
    meta.drop_partition("p")
    assert list(meta.store.list(names.pages)) == []
    assert list(meta.scan("p")) == []
    meta.set("p", b"again", b"1")  # a new incarnation starts empty
    assert [k for k, _, _ in meta.scan("p")] == [b"again"]


def test_a_first_write_that_spills_marks_its_new_head_before_its_pages(meta, monkeypatch):
    names = Names("q")
    seen = marks_when_pages_are_written(meta, monkeypatch, names)
    meta.set_many("q", [(b"k%05d" % i, b"v" * 1000) for i in range(100)])  # past 64 KiB
    assert seen == [False]  # an empty head without the mark, then the pages
    assert meta.get("q", b"k00099") is not None
    meta.drop_partition("q")
    assert list(meta.store.list(names.pages)) == [] and list(meta.scan("q")) == []
