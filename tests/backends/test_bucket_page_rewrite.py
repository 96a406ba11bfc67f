"""The bucket metastore's page sweep judges a page by a fresh look at its last-modified
time, taken after it read the head again: a page a stalled writer wrote again after the
sweep's listing (which showed its first, day-old write) is young, and stays (found by the
simulator: `replay 27 --actors coop,writer,writer,admin`)."""

from __future__ import annotations

import time
import uuid

import pytest

from zarrlake.metastore import open_metastore


def spill(meta, partition: str, tag: bytes) -> None:
    """Writes that outgrow the head's inline limit: new pages, then a sweep."""
    meta.set_many(partition, [(tag + b"%05d" % i, b"v" * 1000) for i in range(100)])


def test_a_page_written_again_after_the_listing_is_kept(monkeypatch: pytest.MonkeyPatch):
    meta = open_metastore(f"bucket+memory://rewrite-{uuid.uuid4().hex}")
    try:
        spill(meta, "p", b"a")
        store = meta.store
        pages = next(k for k in store.list("") if "/pages/" in k).rsplit("/", 1)[0] + "/"
        salt = next(iter(store.list(pages)))[len(pages) :].split("-")[0]
        stalled = f"{pages}{salt}-{int(time.time() * 1000):011x}-5ca1ab1e"
        listed = store.list_modified
        day_ago = time.time() - 86_400
        rewrites = []

        def list_modified(prefix: str = ""):
            found = list(listed(prefix))
            if prefix == pages:  # the sweep's listing: the page's first write, a day ago...
                found.append((stalled, day_ago))
                store.put(stalled, b"a page its writer's next head names")  # ...written again
                rewrites.append(prefix)
            return iter(found)

        monkeypatch.setattr(store, "list_modified", list_modified)
        spill(meta, "p", b"b")
        monkeypatch.undo()
        assert rewrites, "the sweep listed the pages"
        assert stalled in set(store.list(pages))
        assert meta.get("p", b"a00042") is not None and meta.get("p", b"b00099") is not None
    finally:
        meta.close()
