"""The bucket metastore: a metastore kept in the repository's own bucket, on conditional writes.

Modules: `store` (BucketMetaStore: reads, the compare-and-swap loop, the page sweep),
`format` (the bytes of heads and pages, their object keys), `runs` (lookups, scans and the
flush over inline entries and runs of pages), `url` (``bucket+s3://`` and ``bucket+memory://``
URLs; the metastore registry imports it by name, and importing it registers both schemes).

Layout. Under the repository's location, each partition is `meta/<segment>/head` plus
immutable pages `meta/<segment>/pages/<salt>-<ms>-<random>`, where <segment> is the
partition's name with bytes outside [a-z0-9_-] written as ~XX. A head holds a salt (random
per incarnation of the partition: a dropped and recreated partition gets a new one), the
next version sequence, a generation, the ids of its last RECENT writes, the runs of pages
(newest first; within a run the pages are sorted and do not overlap), and the recent
entries inline. Every object starts with a magic, format version and kind, and ends with a
BLAKE3 checksum. When the inline entries outgrow runs.INLINE_BYTES (64 KiB), the write that
grew them merges them with the newest runs (size-tiered: about log2(partition / 64 KiB)
runs) into a new run of ~1 MiB pages; the head then names the new run instead.

Compare-and-swap on conditional PUTs. Every write (set, delete, set_many, a CAS) reads the
head (or uses the one this process last read or wrote, with its ETag), plans the new head
(writing any pages a flush needs first, so a head never names a page not yet stored), and
PUTs it with If-Match: <ETag> (If-None-Match: * when creating the partition). A key's CAS
is checked against its version in the head being replaced, so the conditional PUT of the
whole head makes the key check and the write one atomic step. A 412 means another write
won: read the head and plan again. A lost reply (timeout, 5xx) is settled by reading back:
the write's random id among the head's recent ids means it landed; the same ETag means
nothing landed, so the same bytes go again on the same condition; a new ETag without the id
means it can never land (its condition is gone), so its pages are deleted and it is planned
again. Past RECENT intervening writes, a CAS is decided by the key's version (versions never
come back); failing that the write reports that it cannot tell (TransientError), never a
guess. A prepared write older than PREPARED_MAX_AGE is planned afresh, so its pages never
reach ORPHAN_GRACE while it may still land.

The page sweep. After a write that flushed, retired pages are deleted at once and the
partition's pages are listed: a page no head names is deleted when it belongs to a dropped
incarnation (its salt) or is older than ORPHAN_GRACE (an hour) by the storage service's
clock (its last-modified time, listed and looked at again, against the head's, never this
host's clock). The head is read again after listing, so a page a newer head names stays.
Deletes by age wait for a fence: one conditional PUT of the head just read, the same
entries one generation on. Every listed page was written by a write planned on that head or
an older one, so once the fence lands none of them can land (a head's ETag never comes
back); if another write landed first, nothing is deleted by age. Age alone told this apart
only while the service's clock never stepped back; it now only keeps the fence (and the
retries it costs concurrent writers) for leftovers, not writes in flight: about one fence
per batch of leftovers (a crashed writer's pages, a failed delete), none otherwise.
Deletes are best effort: a leftover is swept by a later flush. Dropping a partition
deletes its head and sweeps its pages the same way (a dropped incarnation's pages need no
fence: no head of its salt can land again), except where the head says no page of its
incarnation was ever written (`Head.pageless`: set when the incarnation is created, cleared
by a write of its own before its first page) and it is still the head read: then one
conditional delete (If-Match) of the head is the whole drop, with no listing. Patch the
tunables (ORPHAN_GRACE, INLINE_BYTES, ...) on `store` and `runs`, where they are read, not
on this package.
"""

from __future__ import annotations

from zarrlake.metastore.bucket.store import RECENT, BucketMetaStore

__all__ = ["RECENT", "BucketMetaStore"]
