"""Conformance of conditional updates (`get_tagged`, `put_if`) and conditional deletes (`tag`,
`delete_if`, `retag`), for object stores that have them (S3, memory): a metastore kept in the
bucket rests on the first, the fence on a garbage collector's deletes on the second. Mix into
an ObjectStoreTests subclass."""

from __future__ import annotations

import threading

import pytest

from zarrlake.errors import CASFailedError, NotFoundError
from zarrlake.storage import ObjectStore

RACERS = 8
INCREMENTS = 10


class ConditionalObjectStoreTests:
    """Needs ObjectStoreTests' fixtures."""

    def test_put_if_creates_only_when_absent(self, store: ObjectStore) -> None:
        """`put_if(key, data, None)` creates a missing object only."""
        tag = store.put_if("c/k", b"first", None)
        assert store.get_tagged("c/k") == (b"first", tag)
        with pytest.raises(CASFailedError, match="c/k"):
            store.put_if("c/k", b"second", None)
        assert store.get("c/k") == b"first"

    def test_put_if_replaces_only_the_version_read(self, store: ObjectStore) -> None:
        """`put_if` replaces only the version its tag names; a stale tag is refused."""
        tag = store.put_if("c/k", b"one", None)
        newer = store.put_if("c/k", b"two", tag)
        assert newer != tag
        with pytest.raises(CASFailedError):
            store.put_if("c/k", b"three", tag)  # stale tag
        assert store.get_tagged("c/k") == (b"two", newer)
        store.put("c/k", b"overwritten")
        with pytest.raises(CASFailedError):
            store.put_if("c/k", b"four", newer)  # changed by a plain put
        assert store.get("c/k") == b"overwritten"

    def test_put_if_with_a_tag_on_a_missing_object_is_refused(self, store: ObjectStore) -> None:
        """`put_if` with a tag is refused once the object was deleted."""
        tag = store.put_if("c/k", b"one", None)
        store.delete("c/k")
        with pytest.raises(CASFailedError):
            store.put_if("c/k", b"two", tag)
        with pytest.raises(NotFoundError):
            store.get_tagged("c/k")

    def test_put_if_race_threads(self, store: ObjectStore) -> None:
        """Read-modify-write increments from threads: none is lost, none counted twice."""
        store.put_if("c/counter", b"0", None)
        errors: list[BaseException] = []

        def racer() -> None:
            try:
                for _ in range(INCREMENTS):
                    while True:
                        data, tag = store.get_tagged("c/counter")
                        try:
                            store.put_if("c/counter", str(int(data) + 1).encode(), tag)
                            break
                        except CASFailedError:
                            continue
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=racer) for _ in range(RACERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert store.get("c/counter") == str(RACERS * INCREMENTS).encode()

    def test_delete_if_deletes_only_the_tag_read(self, store: ObjectStore) -> None:
        """`delete_if` deletes only while the entity tag is the one given; `retag` writes the
        same bytes under a new tag, so a delete holding the old one is refused."""
        store.put("c/k", b"value")
        tag = store.tag("c/k")
        assert store.delete_if("c/k", '"another"') is False and store.exists("c/k")
        new = store.retag("c/k")
        assert new != tag and store.tag("c/k") == new and store.get("c/k") == b"value"
        assert store.delete_if("c/k", tag) is False and store.exists("c/k")
        assert store.delete_if("c/k", new) is True and not store.exists("c/k")
        assert store.delete_if("c/k", new) is False  # gone
        with pytest.raises(NotFoundError):
            store.tag("c/k")
