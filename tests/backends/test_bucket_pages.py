"""The bucket metastore's sweep of pages no head names judges their age by the storage
service's clock, not by the time another host wrote into a page's name: a write in flight
on a host whose clock is an hour behind keeps its pages."""

from __future__ import annotations

import time
import uuid

from zarrlake.metastore import open_metastore
from zarrlake.metastore.bucket.format import Names, page_born


def spill(meta, partition: str, tag: bytes) -> None:
    """Writes that outgrow the head's inline limit: new pages, then a sweep."""
    meta.set_many(partition, [(tag + b"%05d" % i, b"v" * 1000) for i in range(100)])


def test_a_page_whose_name_says_old_is_kept_while_young_by_the_service():
    meta = open_metastore(f"bucket+memory://pages-{uuid.uuid4().hex}")
    try:
        names = Names("p")
        spill(meta, "p", b"a")
        store = meta.store
        ours = [k for k in store.list(names.pages)]
        assert ours and all(page_born(k[len(names.pages) :]) for k in ours)
        behind = int((time.time() - 7200) * 1000)  # a host two hours behind, mid-write
        in_flight = f"{names.pages}0000abcd-{behind:011x}-deadbeef"
        store.put(in_flight, b"a page its head will name")
        spill(meta, "p", b"b")
        assert in_flight in set(store.list(names.pages))
        assert meta.get("p", b"a00042") is not None and meta.get("p", b"b00099") is not None
    finally:
        meta.close()
