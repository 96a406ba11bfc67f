"""A metastore in the repository's own bucket, built on conditional writes: no server to run.

Each partition is one small head object, `meta/<partition>/head`, changed only by a
conditional PUT (If-None-Match: * to create it, If-Match: <ETag> to replace the version
read), so every write, `set_many` included, is one atomic swap of the head, and
compare-and-swap checks the key's version in the head it replaces. The head holds the recent
entries inline; when they outgrow 64 KiB the write that grew them moves them into immutable
pages (`meta/<partition>/pages/<id>`, size-tiered runs, see bucket.runs), so a head stays
small while a partition grows with history. A read is one GET of the head (plus a page, for
an old key not yet cached); a write is one conditional PUT when this process holds the
current head (it keeps the last one it read or wrote), else a GET and a PUT.

The ambiguous write: a PUT whose reply is lost may or may not have landed, and a delayed one
may still land later. Each write carries a random id that the head keeps among the ids of
its last 128 writes. After a lost reply the writer reads the head back: its id there means
the write landed; an unchanged ETag means nothing landed yet, so the same bytes go again on
the same condition (at most one of the two can land); a changed ETag without its id means it
never will land (its condition is gone), so the write is planned again on the new head.
Nothing is guessed from values, and a write is never given up while it may still land.
URLs are in bucket.url; `metastore="bucket"` uses the one at the repository's location.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from cachetools import LRUCache

from zarrlake._util import runtime
from zarrlake._util.retry import DEFAULT_POLICY, RetryPolicy
from zarrlake.errors import (
    CASFailedError,
    ConfigurationError,
    CorruptionError,
    InvalidInputError,
    NotFoundError,
    TransientError,
    ZarrLakeError,
)
from zarrlake.metastore.base import Item, MetaStoreBackend, Reading, paged_scan
from zarrlake.metastore.bucket import runs
from zarrlake.metastore.bucket.format import (
    ROOT,
    Head,
    Names,
    PageRef,
    Run,
    Table,
    decode_head,
    decode_page,
    encode_head,
    encode_page,
    page_born,
    page_id,
)
from zarrlake.metastore.bucket.runs import Load
from zarrlake.metastore.checks import check_found, check_meta_key, check_partition, scan_range
from zarrlake.storage import ObjectStore, open_storage
from zarrlake.storage.retrying import RetryingObjectStore

RECENT = 128
"""Ids of the last writes a head remembers, for reading back a write whose reply was lost."""
SETTLE = RetryPolicy(
    attempts=None, base_delay=0.002, max_delay=1.0, timeout=60.0, over_retried=True
)
"""How long a writer keeps reading back after a lost reply before it says it cannot tell
(through obstore's own retries too: an outage longer than theirs must not end it)."""
BUSY_TIMEOUT = 60.0
"""Seconds a write keeps retrying while other writes to the partition keep winning."""
ORPHAN_GRACE = 3600.0
"""Seconds after which a page no head names is a leftover (younger: a write in flight)."""
PREPARED_MAX_AGE = 600.0
"""A write whose new pages are this old is planned again, so they never pass for leftovers."""
CLOCK_CHECK = 300.0
"""Seconds between reads of the storage service's clock (`clock`)."""
CLOCK_ROUND = 1.0
"""A reading of the service's clock that took longer than this (seconds) is taken again:
its error is half its length."""
CLOCK_TRIES = 5
HEADS_CACHED = 512
PAGE_CACHE_BYTES = 64 << 20


class Earlier(Enum):
    """What became of an earlier attempt of a write whose reply was lost."""

    LANDED = "landed"
    """It is in the head: the write is done."""
    GONE = "gone"
    """It can no longer land (or planning it again is harmless): plan it again."""
    UNKNOWN = "unknown"
    """Cannot be told (too many writes since, and the key changed): give up, say so."""


class _PageGone(Exception):
    """A page the head named was deleted: the head read is stale."""


class _Unpage(Exception):
    """A write needs pages on a head still marked pageless: the mark goes first."""


Plan = Callable[[Head | None, Load], tuple[list[tuple[bytes, bytes]], list[bytes]]]
"""From the current head: (writes, deletes), each sorted by key; may raise CASFailedError."""


@dataclass
class _Prepared:
    head: Head
    data: bytes
    versions: list[int]
    created: list[str]
    retired: list[str]
    made: float
    cas: tuple[bytes, int | None, int] | None
    """For a compare-and-swap: (key, the version it expects, the version it writes)."""


class BucketMetaStore(MetaStoreBackend):
    """A metastore in object storage that has conditional writes (S3, memory)."""

    remote = True
    writes_after_reads = True  # a write to a head not held guesses it absent: 412, GET, PUT

    def __init__(
        self,
        store: ObjectStore,
        url: str,
        reopen: tuple[str, dict[str, Any]] | None = None,
        policy: RetryPolicy = DEFAULT_POLICY,
    ) -> None:
        self.url = url
        self._raw = store  # conditional PUTs go here: only this class resolves lost replies
        self._store = RetryingObjectStore(store, policy)
        self._settle = RetryingObjectStore(store, SETTLE)
        self._reopen = reopen
        self._closed = False
        self._lock = threading.Lock()
        self._heads: LRUCache[str, tuple[Head, str]] = LRUCache(HEADS_CACHED)
        self._clock: tuple[float, float] | None = None  # (service minus monotonic, when read)
        self._pages: LRUCache[str, Table] = LRUCache(
            PAGE_CACHE_BYTES, getsizeof=lambda t: t.size + 48 * len(t)
        )

    @classmethod
    def open(
        cls, location: str, storage_options: dict[str, Any], url: str | None = None
    ) -> BucketMetaStore:
        """The metastore kept under the repository location `location`."""
        store = open_storage(location, retry_policy=None, **storage_options)
        return cls(store, url or f"bucket+{location}", (location, dict(storage_options)))

    def holds(self, partition: str) -> bool:
        """Whether this process holds a head of `partition` (the last it read or wrote): a
        write then goes as one conditional PUT (a 412, a GET and a PUT if another process
        wrote since)."""
        with self._lock:
            return partition in self._heads

    @property
    def store(self) -> ObjectStore:
        """The object storage this metastore keeps its objects in (under meta/)."""
        return self._raw

    def __reduce__(self) -> tuple[Any, ...]:
        if self._reopen is None:
            raise InvalidInputError(
                f"{self!r} was made over a store object and cannot be pickled"
                "; open it by its URL in each process"
            )
        return (BucketMetaStore.open, (*self._reopen, self.url))

    def close(self) -> None:
        """Refuse further calls and close the underlying object store."""
        self._closed = True
        self._raw.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError(f"metastore {self.url} is closed; open the repository again")

    # reading -----------------------------------------------------------------------------

    def _load(self, names: Names, store: ObjectStore | None = None) -> tuple[Head | None, str]:
        """The partition's head as stored now, and its ETag ("" when there is none)."""
        self._check_open()
        try:
            data, tag = (store or self._store).get_tagged(names.head)
        except NotFoundError:
            with self._lock:
                self._heads.pop(names.partition, None)
            return None, ""
        head = decode_head(data, f"{self.url} {names.head}")
        with self._lock:
            self._heads[names.partition] = (head, tag)
        return head, tag

    def _page(self, names: Names, ref: PageRef) -> Table:
        key = names.page(ref.id)
        with self._lock:
            table = self._pages.get(key)
        if table is None:
            try:
                data = self._store.get(key)
            except NotFoundError:
                raise _PageGone(ref.id) from None
            table = decode_page(data, f"{self.url} {key}")
            with self._lock:
                self._pages[key] = table
        return table

    def _read[T](self, partition: str, fn: Callable[[Head, Load], T], empty: T) -> T:
        names = Names(partition)
        seen = None
        while True:
            head, tag = self._load(names)
            if head is None:
                return empty
            try:
                return fn(head, lambda ref: self._page(names, ref))
            except _PageGone as gone:
                if tag == seen:
                    raise CorruptionError(
                        f"{self.url}: page {gone} of partition {partition!r} is missing"
                        "; run `zarrlake fsck`"
                    ) from None
                seen = tag  # a write replaced the page since the head was read: read again

    def _get(self, partition: str, key: bytes) -> tuple[bytes, int] | None:
        return self._read(partition, lambda head, load: runs.lookup(head, key, load), None)

    def _scan(self, partition: str, low: bytes, high: bytes | None, size: int) -> list[Item]:
        return self._read(partition, lambda head, load: runs.scan(head, low, high, size, load), [])

    def read(
        self, partition: str, keys: Sequence[bytes] = (), prefixes: Sequence[bytes] = ()
    ) -> Reading:
        """The keys and prefix scans from one read of the partition's head (one GET, plus
        any page an old key or a long prefix needs)."""
        check_partition(partition)
        wanted = [check_meta_key(k) for k in keys]
        ranges = [scan_range(b"", p) for p in prefixes]

        def answer(head: Head, load: Load) -> Reading:
            def whole(low: bytes, high: bytes | None) -> list[Item]:
                return list(paged_scan(lambda at, n: runs.scan(head, at, high, n, load), low, None))

            return [runs.lookup(head, k, load) for k in wanted], [whole(*r) for r in ranges]

        empty: Reading = ([None] * len(wanted), [[] for _ in ranges])
        return self._read(partition, answer, empty)

    # writing -----------------------------------------------------------------------------

    def _write(
        self, partition: str, writes: list[tuple[bytes, bytes]], deletes: list[bytes]
    ) -> list[int]:
        return self._mutate(partition, lambda head, load: (writes, deletes))

    def _set_if(self, partition: str, key: bytes, value: bytes, expected: int | None) -> int:
        def plan(head: Head | None, load: Load) -> tuple[list[tuple[bytes, bytes]], list]:
            current = None if head is None else runs.lookup(head, key, load)
            check_found(partition, key, None if current is None else current[1], expected)
            return [(key, value)], []

        return self._mutate(partition, plan, cas=(key, expected))[0]

    def _delete_if(self, partition: str, key: bytes, expected: int) -> None:
        def plan(head: Head | None, load: Load) -> tuple[list[tuple[bytes, bytes]], list]:
            current = None if head is None else runs.lookup(head, key, load)
            check_found(partition, key, None if current is None else current[1], expected)
            return [], [key]

        self._mutate(partition, plan)

    def _write_if(
        self,
        partition: str,
        writes: list[tuple[bytes, bytes]],
        deletes: list[bytes],
        checks: dict[bytes, int | None],
    ) -> list[int]:
        def plan(head: Head | None, load: Load) -> tuple[list[tuple[bytes, bytes]], list]:
            found = {k: None if head is None else runs.lookup(head, k, load) for k in checks}
            try:
                for key, expected in checks.items():
                    current = found[key]
                    check_found(partition, key, None if current is None else current[1], expected)
            except CASFailedError as refused:
                refused.found = found  # the caller needs no read to see what refused it
                raise
            return writes, deletes

        # a key both checked and written tells, after a lost reply, whether it landed
        cas = next(((k, checks[k]) for k, _ in writes if k in checks), None)
        return self._mutate(partition, plan, cas=cas)

    def clock(self) -> float:
        """The storage service's clock: the last-modified time of a small object written
        for the purpose, read once every CLOCK_CHECK seconds and carried forward on this
        host's monotonic clock in between (to within half a round trip and the service's
        one-second resolution)."""
        with self._lock:
            known = self._clock
        if known is None or runtime.monotonic() - known[1] > CLOCK_CHECK:
            known = _shared_reading(self.url)  # this host's other processes' reading
        if known is None or runtime.monotonic() - known[1] > CLOCK_CHECK:
            for attempt in range(CLOCK_TRIES):  # a reading that took long says little
                key = f"{ROOT}/~clock/{secrets.token_hex(8)}"  # no partition's segment
                before = runtime.monotonic()
                self._store.put(key, b"")
                stamps = [t for k, t in self._store.list_modified(key) if k == key]
                after = runtime.monotonic()
                self._delete_quietly(key)
                if not stamps:
                    raise TransientError(
                        f"{self.url}: the clock object {key} was not listed; retry (the bucket's "
                        "listing lags its writes)"
                    )
                if after - before <= CLOCK_ROUND or attempt == CLOCK_TRIES - 1:
                    break
            stamp = stamps[0] + (0.5 if stamps[0] == int(stamps[0]) else 0.0)  # whole seconds
            known = (stamp - (before + after) / 2, after)
            _share_reading(self.url, known)
        with self._lock:
            self._clock = known
        return known[0] + runtime.monotonic()

    def _mutate(
        self,
        partition: str,
        plan: Plan,
        cas: tuple[bytes, int | None] | None = None,
        unpage: bool = False,
    ) -> list[int]:
        """Apply what `plan` decides on the current head as one conditional write of it;
        returns the new versions of the written keys, in order. `unpage`: clear the head's
        pageless mark (see `Head.pageless`), writing no page."""
        self._check_open()
        names = Names(partition)
        txn = secrets.randbits(63) | 1
        with self._lock:
            cached = self._heads.get(partition)
        # Not cached: try creating it (a new partition costs one request; an existing one
        # refuses, and is then read).
        head, tag = cached if cached else (None, "")
        fresh = uncertain = False  # head read just now / an attempt may have landed
        pending: _Prepared | None = None
        deadline = runtime.monotonic() + BUSY_TIMEOUT
        for attempt in range(1_000_000):
            stale = pending is not None and runtime.monotonic() - pending.made > PREPARED_MAX_AGE
            if pending is None or (stale and pending.created and not uncertain):
                if pending is not None:
                    self._discard(names, pending)
                try:
                    pending = self._prepare(names, head, plan, txn, cas, unpage)
                except _Unpage:  # rare: the partition's first pages; its mark goes first
                    self._mutate(partition, lambda head, load: ([], []), unpage=True)
                    (head, tag), fresh, pending = self._load(names), False, None
                    continue
                except (CASFailedError, _PageGone) as e:
                    if fresh and isinstance(e, CASFailedError):
                        raise
                    seen, (head, tag), fresh, pending = tag, self._load(names), True, None
                    if isinstance(e, _PageGone) and tag == seen:
                        raise CorruptionError(
                            f"{self.url}: page {e} of {partition!r} is missing; run `zarrlake fsck`"
                        ) from None
                    continue
                if pending.created and runtime.monotonic() - pending.made > PREPARED_MAX_AGE:
                    continue  # its pages took that long to write (a stall): new ones, new names
            try:
                new_tag = self._raw.put_if(names.head, pending.data, tag or None)
            except CASFailedError:
                lost = False
            except TransientError:
                lost = uncertain = True
            else:
                self._landed(names, pending, pending.head, new_tag)
                return pending.versions
            current, current_tag = self._load(names, self._settle)
            earlier = (
                self._landed_before(names, current, txn, pending) if uncertain else Earlier.GONE
            )
            if earlier is Earlier.LANDED:
                self._landed(names, pending, None, "")
                return pending.versions
            if lost and current_tag == tag:
                continue  # nothing landed since: the same bytes again, on the same condition
            if earlier is Earlier.UNKNOWN:
                raise TransientError(
                    f"{self.url}: cannot tell whether a compare-and-swap in {partition!r} "
                    f"landed: more than {RECENT} writes came in between, and the key changed"
                    "; read it again and retry"
                )
            self._discard(names, pending)  # its condition is gone: it can never land
            pending, head, tag, fresh = None, current, current_tag, True
            if runtime.monotonic() > deadline:
                raise TransientError(
                    f"{self.url}: partition {partition!r} kept changing for {BUSY_TIMEOUT:.0f} s"
                    "; try again"
                )
            if attempt >= 2:  # others keep winning: spread the retries out
                runtime.sleep(secrets.randbelow(1000) / 1000 * min(0.05, 0.001 * 2**attempt))
        raise AssertionError("unreachable")

    def _landed_before(
        self, names: Names, current: Head | None, txn: int, pending: _Prepared
    ) -> Earlier:
        """Whether an earlier attempt of this write is in `current` (see `Earlier`)."""
        if current is None:
            return Earlier.GONE  # dropped since: planned again, the write lands after the drop
        if txn in current.recent:
            return Earlier.LANDED
        if current.salt != pending.head.salt:
            return Earlier.GONE
        if current.gen - pending.head.gen < RECENT or pending.cas is None:
            return Earlier.GONE  # a blind write may take effect twice, as any retried write may
        # Its id has left the head. The key tells: our version (it landed), the version it
        # replaces (it did not: versions never come back), or another (cannot tell).
        key, expected, version = pending.cas
        try:
            found = runs.lookup(current, key, lambda ref: self._page(names, ref))
        except _PageGone:
            return Earlier.UNKNOWN  # the head moved on again while being read
        now = None if found is None else found[1]
        if now == version:
            return Earlier.LANDED
        return Earlier.GONE if now == expected and expected is not None else Earlier.UNKNOWN

    def _prepare(
        self,
        names: Names,
        head: Head | None,
        plan: Plan,
        txn: int,
        cas: tuple[bytes, int | None] | None,
        unpage: bool = False,
    ) -> _Prepared:
        """The new head for `plan` on `head`, with any pages a flush needs already written
        (`_Unpage` first while the head is marked pageless; `unpage` clears the mark and
        writes no page)."""
        load = lambda ref: self._page(names, ref)  # noqa: E731
        began = runtime.monotonic()  # before its pages are written: their age counts from here
        writes, deletes = plan(head, load)
        if head is None:  # a new incarnation: no page of it written yet
            head = Head(secrets.randbits(32), secrets.randbits(40), 0, [], [], Table(), True)
        versions = [((head.seq + i) << 22) | (txn & 0x3FFFFF) for i in range(len(writes))]
        changes = Table(
            [k for k, _ in writes] + deletes,
            [v for _, v in writes] + [None] * len(deletes),
            versions + [0] * len(deletes),
        )
        if deletes and writes:  # each sorted; together they need sorting
            changes = runs.sort_table(changes)
        table = runs.merge(changes, head.table, tombstones=bool(head.runs))
        new = Head(
            head.salt,
            head.seq + len(writes),
            head.gen + 1,
            [*head.recent, txn][-RECENT:],
            list(head.runs),
            table,
            head.pageless and not unpage,
        )
        created: list[str] = []
        retired: list[str] = []
        if table.size > runs.INLINE_BYTES and not unpage:
            if new.pageless:
                raise _Unpage()
            merged, replaced = runs.flush(new, load)
            run = self._write_run(names, new.salt, merged)
            created = [p.id for p in run.pages] if run else []
            retired = [p.id for r in replaced for p in r.pages]
            new.runs = ([run] if run else []) + new.runs[len(replaced) :]
            new.table = Table()
        key_version = (*cas, versions[0]) if cas is not None else None
        return _Prepared(new, encode_head(new), versions, created, retired, began, key_version)

    def _write_run(self, names: Names, salt: int, table: Table) -> Run | None:
        pages = []
        for page in runs.paginate(table):
            name = page_id(salt)
            self._store.put(names.page(name), encode_page(page))
            with self._lock:
                self._pages[names.page(name)] = page
            pages.append(PageRef(name, page.keys[0], page.keys[-1], len(page), page.size))
        return Run(tuple(pages)) if pages else None

    def _landed(self, names: Names, pending: _Prepared, head: Head | None, tag: str) -> None:
        """After `pending` landed: remember the head, delete the pages it retired, and after
        a flush, the partition's leftovers."""
        if head is not None:
            with self._lock:
                self._heads[names.partition] = (head, tag)
        for name in pending.retired:
            self._delete_quietly(names.page(name))
        if pending.created:
            keep = {p.id for run in pending.head.runs for p in run.pages}
            self._sweep(names, keep, dead_salt=None)

    def _discard(self, names: Names, pending: _Prepared) -> None:
        for name in pending.created:  # written for a write that can no longer land
            self._delete_quietly(names.page(name))

    def _delete_quietly(self, key: str) -> None:
        with contextlib.suppress(ZarrLakeError):  # a leftover at worst, swept later
            self._store.delete(key)

    def _sweep(self, names: Names, keep: set[str], dead_salt: int | None) -> None:
        """Delete pages of the partition that no head names: those of a dropped incarnation,
        and leftovers older than ORPHAN_GRACE, once the head they were judged against is
        fenced (`_fence`). Age is the storage service's: a page's last-modified time against
        the head's (never this host's clock against a time another host wrote into a name),
        by the listing and by a fresh look taken after the head was read again, so a page a
        newer head names, or written again since, stays. Without a head, only a dropped
        incarnation's go (no head of its salt can land again: a new one gets a new salt)."""
        listed = list(self._store.list_modified(names.pages))
        if not listed:  # nothing to judge: no time or head to read
            return
        now = max((t for _, t in self._store.list_modified(names.head)), default=None)
        current, tag = self._load(names)
        if current is not None:
            keep = keep | {p.id for run in current.runs for p in run.pages}
        aged = []
        for key, modified in listed:
            name = key[len(names.pages) :]
            born = page_born(name)
            if name in keep or born is None:
                continue
            if born[0] == dead_salt:
                self._delete_quietly(key)
            elif (
                now is not None
                and now - modified > ORPHAN_GRACE
                and now - self._modified(key) > ORPHAN_GRACE
            ):
                aged.append(key)
        if aged and current is not None and self._fence(names, current, tag):
            for key in aged:
                self._delete_quietly(key)

    def _fence(self, names: Names, current: Head, tag: str) -> bool:
        """Swap the head the sweep judged against for itself one generation on (the same
        entries and pages, its own id among the recent ones), conditional on its ETag:
        True once that landed. Every page the sweep listed was written by a write planned
        on that head or an older one (its pages are written after its head is read, and
        before the listing), so its head swap is conditional on a head that is gone once
        the fence lands: refused, it plans again with new pages, and a resend of the same
        bytes after a lost reply is refused the same way (an ETag never comes back: a
        head's bytes carry its incarnation's salt and its generation). False (nothing is
        deleted: a later sweep finds the leftovers) when a write landed since the head was
        read, or the fence's reply was lost and reading back does not find its id."""
        txn = secrets.randbits(63) | 1
        fenced = replace(current, gen=current.gen + 1, recent=[*current.recent, txn][-RECENT:])
        try:
            new_tag = self._raw.put_if(names.head, encode_head(fenced), tag)
        except CASFailedError:
            return False
        except TransientError:
            with contextlib.suppress(ZarrLakeError):
                head, _ = self._load(names, self._settle)
                return head is not None and txn in head.recent
            return False
        with self._lock:
            self._heads[names.partition] = (fenced, new_tag)
        return True

    def _modified(self, key: str) -> float:
        """The service's last-modified time of `key` now (-inf once it is gone): a page the
        listing showed old may have been written again since by a writer retrying after a
        stall, and is judged by this fresh look, taken after the head was read again."""
        return max(
            (t for k, t in self._store.list_modified(key) if k == key), default=float("-inf")
        )

    def _drop_partition(self, partition: str) -> None:
        # The head this process last read or wrote names the incarnation whose pages go
        # (a drop follows a scan of the partition): read only when there is none. A head
        # replaced meanwhile by another incarnation is deleted all the same; its pages
        # are then judged by age, as any leftover. A pageless head still the current one (a
        # conditional delete) had no page written: nothing to list.
        names = Names(partition)
        with self._lock:
            cached = self._heads.pop(partition, None)
        head, tag = cached if cached is not None else self._load(names)
        if head is not None and head.pageless and not head.runs:
            # (a store without the condition; a lost reply: the read below tells)
            with contextlib.suppress(ConfigurationError, TransientError):
                if self._store.delete_if(names.head, tag):
                    with self._lock:
                        self._heads.pop(partition, None)
                    return
            head = self._load(names)[0]  # changed or gone since it was read: read it now
        if head is not None:
            self._store.delete(names.head)
        with self._lock:
            self._heads.pop(partition, None)
        self._sweep(names, set(), dead_salt=None if head is None else head.salt)


def _reading_file(url: str) -> str | None:
    """Where this host's processes share their reading of `url`'s clock: one file per
    bucket and boot (the reading is carried on the monotonic clock, which one boot's
    processes share), None where the boot cannot be told or under the simulator."""
    if runtime.current() is not runtime.REAL:
        return None
    import hashlib  # here: the clock is read by a writer, not by every open
    import tempfile

    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return None
    name = hashlib.blake2b(f"{boot} {url}".encode(), digest_size=10).hexdigest()
    return os.path.join(tempfile.gettempdir(), f"zarrlake-clock-{name}.json")


def _shared_reading(url: str) -> tuple[float, float] | None:
    """The (offset, when) another process of this host read for `url`, if any: processes
    that share one reading order their stamps exactly, where each one's own reading is
    good to the service's one-second resolution."""
    path = _reading_file(url)
    if path is None:
        return None
    try:
        with open(path) as f:
            offset, when = json.load(f)
        return float(offset), float(when)
    except (OSError, ValueError, TypeError):
        return None


def _share_reading(url: str, known: tuple[float, float]) -> None:
    """Offer this process's reading to the host's other processes (best effort)."""
    path = _reading_file(url)
    if path is None:
        return
    staged = f"{path}.{os.getpid()}"
    with contextlib.suppress(OSError):
        with open(staged, "w") as f:
            json.dump(list(known), f)
        os.replace(staged, path)
