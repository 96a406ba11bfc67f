"""Listing a remote store in key ranges at once (ObjectStore.list_parallel, what a full gc
lists with) gives the keys a plain listing gives, each once: on moto's S3 server, with keys
on the ranges' bounds, past the last bound, beside the prefix and fewer than a page."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from zarrlake.storage import obstore, open_storage

PAGE = 40  # the listing batch, made small so a few hundred keys span several


def test_parallel_listing_gives_every_key_once(
    s3_location: tuple[str, dict[str, Any]], monkeypatch
) -> None:
    monkeypatch.setattr(obstore, "LIST_CHUNK", PAGE)
    ranges: list[tuple] = []
    real = obstore.ObstoreObjectStore._range
    monkeypatch.setattr(
        obstore.ObstoreObjectStore, "_range", lambda s, *a: ranges.append(a) or real(s, *a)
    )
    location, options = s3_location
    store = open_storage(location, **options)
    hashed = [f"chunks/{hashlib.sha256(str(i).encode()).hexdigest()}" for i in range(6 * PAGE)]
    edges = ["chunks/08", "chunks/80", "chunks/f8", "chunks/zz", "chunks/0", "chunks/A"]
    beside = ["chunksx/1", "chunk", "commits/ab", "chunks-old/08"]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: store.put(k, b"x"), [*hashed, *edges, *beside]))
    listed = list(store.list_parallel("chunks/"))
    assert len(ranges) > 16  # after the first batch, the rest in ranges at once
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted([*hashed, *edges])
    assert sorted(store.list_parallel("chunks/", ways=7)) == sorted([*hashed, *edges])
    assert sorted(store.list_parallel("chunks/0")) == sorted(
        k for k in [*hashed, *edges] if k.startswith("chunks/0")
    )
    assert list(store.list_parallel("commits/")) == ["commits/ab"]  # under a page: one listing
    assert sorted(store.list_parallel("")) == sorted(store.list(""))
