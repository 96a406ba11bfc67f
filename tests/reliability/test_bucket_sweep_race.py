"""The bucket metastore's page sweep against a writer that stalled: the writer's first page
PUT landed but its reply was lost, and its retry (the same page again, then the head swap
naming it) runs at the worst moment, after the sweep's fresh look at the page's
last-modified time (`moment="look"`) or just before the sweep's delete of that page
(`moment="delete"`). Deterministic: the two metastores run in two threads, handed back and
forth by events inside their storage wrappers; no sleeps.

Where the service's clock only moves forward (`clock="forward"`, a day's stall), a page
judged old was written before the head the sweep read, so its writer's head swap is
conditional on a head that is gone: refused, the writer plans again with new pages. Where
the clock steps back (`clock="back"`, a day: an S3-compatible server on a host whose clock
was stepped), a page of a write planned on the current head looks old; a sweep that only
judged by age deleted it under the writer's landing swap (the head named a page that was
gone, and the writer's acknowledged entries could not be read). The sweep now deletes by
age only after a conditional swap of the head it judged by (its fence) landed: the
writer's swap and the fence cannot both land."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from zarrlake.errors import TransientError
from zarrlake.metastore.bucket import BucketMetaStore
from zarrlake.metastore.bucket.format import Names, decode_head
from zarrlake.storage import ObjectStore, WrapperObjectStore, open_storage

P = "part"
DAY = 86_400.0
WAIT = 60.0
"""Seconds an event is waited for before the test fails (a hand-over that never came)."""


class Service(WrapperObjectStore):
    """The storage service every client shares, with a clock that steps: after `step(s)`,
    objects written report last-modified times `s` seconds off (the service's clock
    moved by `s`, forward as after a stall, or back)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.offset = 0.0
        self.written: dict[str, float] = {}

    def step(self, seconds: float) -> None:
        self.offset += seconds

    def put(self, key: str, data: bytes | memoryview) -> None:
        self.inner.put(key, data)
        self.written[key] = self.offset

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        new = self.inner.put_if(key, data, tag)
        self.written[key] = self.offset
        return new

    def list_modified(self, prefix: str = "") -> Iterator[tuple[str, float]]:
        listed = self.inner.list_modified(prefix)
        return iter([(k, t + self.written.get(k, 0.0)) for k, t in listed])


class Client(WrapperObjectStore):
    """One process's requests to the service; each of `before` and `after` sees (op, key)
    of the requests it hooks (puts, conditional puts, deletes, listings)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.hooks: list[Callable[[str, str, str], None]] = []

    def before(self, op: str, key: str) -> None:
        for hook in list(self.hooks):
            hook("before", op, key)

    def after(self, op: str, key: str) -> None:
        for hook in list(self.hooks):
            hook("after", op, key)

    def put(self, key: str, data: bytes | memoryview) -> None:
        self.before("put", key)
        self.inner.put(key, data)
        self.after("put", key)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        self.before("put_if", key)
        return self.inner.put_if(key, data, tag)

    def delete(self, key: str) -> None:
        self.before("delete", key)
        self.inner.delete(key)

    def list_modified(self, prefix: str = "") -> Iterator[tuple[str, float]]:
        self.before("list", prefix)
        listed = list(self.inner.list_modified(prefix))
        self.after("list", prefix)
        return iter(listed)


def spill(meta: BucketMetaStore, tag: bytes) -> None:
    """100 entries (about 100 KB, past the head's inline limit): new pages, then a sweep."""
    meta.set_many(P, [(tag + b"%05d" % i, tag * 1000) for i in range(100)])


class World:
    """A sweeper and a writer, each a BucketMetaStore with its own `Client` of one
    `Service` (memory, or moto's S3 server), and the check that nothing was lost."""

    def __init__(self, where: str, request: pytest.FixtureRequest) -> None:
        if where == "s3":
            self.location, self.options = request.getfixturevalue("s3_location")
        else:
            self.location, self.options = f"memory://sweep-race-{uuid.uuid4().hex}", {}
        self.service = Service(open_storage(self.location, retry_policy=None, **self.options))
        self.sweeper_io, self.writer_io = Client(self.service), Client(self.service)
        self.sweeper = BucketMetaStore(self.sweeper_io, f"bucket+{self.location}")
        self.writer = BucketMetaStore(self.writer_io, f"bucket+{self.location}")

    def check(self, tags: bytes) -> None:
        """Every page the head names is stored, and every acknowledged entry (100 a tag,
        each tag's byte for its tag) reads back as written, through a clean reader."""
        clean = BucketMetaStore.open(self.location, self.options)
        names = Names(P)
        head = decode_head(clean.store.get(names.head), names.head)
        named = [names.page(p.id) for run in head.runs for p in run.pages]
        stored = set(clean.store.list(names.pages))
        assert [p for p in named if p not in stored] == [], "the head names pages that are gone"
        for tag in (tags[i : i + 1] for i in range(len(tags))):
            got = {k: v for k, v, _ in clean.scan(P, prefix=tag)}
            assert got == {tag + b"%05d" % i: tag * 1000 for i in range(100)}


class Writer(threading.Thread):
    """The stalled writer: `spill(c)` in a thread whose first page PUT lands, loses its
    reply, and waits for `go` before its retry goes on (the same page again, the head)."""

    def __init__(self, meta: BucketMetaStore, io: Client) -> None:
        super().__init__(daemon=True)
        self.meta, self.landed, self.go = meta, threading.Event(), threading.Event()
        self.page = ""
        self.error: BaseException | None = None

        def after(when: str, op: str, key: str) -> None:
            if (when, op) == ("after", "put") and "/pages/" in key and not self.page:
                self.page = key
                self.landed.set()
                assert self.go.wait(WAIT), "the sweep never let the writer retry"
                raise TransientError("injected: the page PUT's reply was lost (it landed)")

        io.hooks.append(after)

    def run(self) -> None:
        try:
            spill(self.meta, b"c")
        except BaseException as e:
            self.error = e


@pytest.mark.parametrize("moment", ["look", "delete"])
@pytest.mark.parametrize("clock", ["forward", "back"])
@pytest.mark.parametrize("where", ["memory", "s3"])
def test_a_stalled_writers_retry_during_the_page_sweep_loses_nothing(where, clock, moment, request):
    w = World(where, request)
    service, sweeper_io, writer_io = w.service, w.sweeper_io, w.writer_io
    sweeper, writer, names = w.sweeper, w.writer, Names(P)
    spill(sweeper, b"a")  # pages and a head; the sweeper holds it
    stalled = Writer(writer, writer_io)
    judged: list[str] = []

    def start_writer() -> None:
        assert writer.get(P, b"a00000") is not None  # it holds the head it plans on
        stalled.start()
        assert stalled.landed.wait(WAIT), "the writer's page never landed"

    def retry_writer() -> None:
        if not judged:
            judged.append(stalled.page)
            stalled.go.set()
            stalled.join(WAIT)
            assert not stalled.is_alive(), "the writer's retry did not finish"

    if clock == "forward":  # the writer plans on the head before the sweeper's flush
        start_writer()
        service.step(DAY)  # a day's stall: the sweeper's flush lands a day later
    else:  # the writer plans on the sweeper's head, then the clock steps back a day

        def listing(when: str, op: str, key: str) -> None:
            if (when, op, key) == ("before", "list", names.pages) and not stalled.page:
                service.step(-DAY)
                start_writer()

        sweeper_io.hooks.append(listing)

    def moment_of_retry(when: str, op: str, key: str) -> None:
        looked, deleting = ("after", "list"), ("before", "delete")
        if key == stalled.page and (when, op) == (looked if moment == "look" else deleting):
            retry_writer()

    sweeper_io.hooks.append(moment_of_retry)
    spill(sweeper, b"b")  # a flush, then the sweep that meets the stalled writer's page
    assert judged == [stalled.page], "the sweep never judged the writer's page old"
    if stalled.error is not None:
        raise stalled.error
    w.check(b"abc")


def test_the_fence_is_one_head_write_and_only_for_an_old_leftover():
    """A flush with no leftovers writes the head once; one that finds a leftover older
    than ORPHAN_GRACE writes it once more (the fence) and deletes it; the next flush, with
    the leftover gone, once again."""
    location = f"memory://sweep-fence-{uuid.uuid4().hex}"
    service = Service(open_storage(location, retry_policy=None))
    io = Client(service)
    meta = BucketMetaStore(io, f"bucket+{location}")
    names = Names(P)
    heads: list[str] = []
    io.hooks.append(lambda when, op, key: heads.append(key) if op == "put_if" else None)
    spill(meta, b"a")
    salt = next(iter(service.list(names.pages)))[len(names.pages) :].split("-")[0]
    counts = []
    for tag in (b"b", b"c", b"d"):
        if tag == b"c":  # a crashed writer's page, a day old by the service's clock
            service.step(-DAY)
            leftover = f"{names.pages}{salt}-00000000000-0dead0ff"
            service.put(leftover, b"never named")
            service.step(DAY)
        heads.clear()
        spill(meta, tag)
        counts.append(len(heads))
        if tag == b"c":
            assert leftover not in set(service.list(names.pages))
    assert counts == [1, 2, 1]
    for tag in (b"a", b"b", b"c", b"d"):
        assert len(list(meta.scan(P, prefix=tag))) == 100


@pytest.mark.parametrize("where", ["memory", "s3"])
def test_a_resend_after_a_lost_reply_loses_to_the_fence(where, request):
    """The writer's head swap fails before it ran (a 503); it reads the head back, finds it
    unchanged, and sends the same bytes again on the same condition. Just before that
    resend, a sweep that stalled after its own flush runs (the writer's page looks a day
    old: the service's clock stepped back): it fences, then deletes the page. The resend
    is refused, the writer does not find its id in the head, plans again with new pages,
    and nothing is lost (without the fence the resend landed naming the deleted page)."""
    w = World(where, request)
    service, writer_io = w.service, w.writer_io
    sweeper, writer, names = w.sweeper, w.writer, Names(P)
    spill(sweeper, b"a")  # pages and a head; the sweeper holds it
    assert writer.get(P, b"a00000") is not None  # it holds the head it plans on
    service.step(-DAY)
    swaps: list[str] = []

    def hook(when: str, op: str, key: str) -> None:
        if (when, op, key) != ("before", "put_if", names.head):
            return
        swaps.append(key)
        if len(swaps) == 1:
            raise TransientError("injected: 503, the head swap did not run")
        if len(swaps) == 2:  # the resend: the stalled sweep runs first
            sweeper._sweep(names, set(), dead_salt=None)

    writer_io.hooks.append(hook)
    spill(writer, b"c")
    assert len(swaps) == 3, "the resend was not refused and planned again"
    w.check(b"ac")
