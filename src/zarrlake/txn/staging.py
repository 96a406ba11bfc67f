"""A session's staging records, held in its own metastore partition.

Keys (`StagingKeys` encodes and parses them; `<writer>` is a handle's writer id in hex):
- `w<key>\\0<writer>`: a metadata document (`zarr.json`) staged by one handle, inline. They
  are few, durable as soon as staged, and seen at once by every worker of the session.
- `f<writer><seq>`: one record per staged fragment (format/fragment.py), the chunk writes,
  deletes and reads one handle flushed together.
- `d<writer><generation>`: a handle holds chunk writes it has not flushed yet (who and since
  when). A commit waits for these to go, or refuses, naming the worker: writes that were
  never made durable are never silently left out.
- `s<writer>`: a writer's state (writing, finished, failed) and its process, so a commit can
  tell a worker that ended normally from one that failed or died (txn/writers.py).
- `a<tag>`: the writers whose fragments carrying `tag` count (a Spark job accepts the task
  attempts that committed; the fragments of failed or speculative attempts do not count).
- `m<time><writer>`: a node moved (its source and destination), registered in one
  transaction with the fragment and documents that carry it out; keyed in time order.

Every worker of a cooperative session stages under its own writer id, so two workers
staging different bytes for one key are detected at commit instead of one replacing the
other.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import groupby, islice

from zarrlake._util import runtime
from zarrlake.errors import SessionClosedError
from zarrlake.format.chunk_ref import ChunkRef
from zarrlake.format.fragment import FragmentRecord
from zarrlake.format.staged import OP_DELETE, OP_WRITE, StagedRecord
from zarrlake.metastore.base import MetaStore

META = b"w"
FRAGMENT = b"f"
DIRTY = b"d"
ACCEPT = b"a"
WRITER = b"s"
MOVE = b"m"
_WRITER_HEX = 16
MARKER_KEYS = 8
"""Chunk keys an unflushed-writes marker records: those its batch began with. The rest of
a batch is known only once flushed (a marker is written once per batch, not per write)."""


class StagingKeys:
    """The one codec of staging record keys (writer ids in hex everywhere)."""

    @staticmethod
    def meta(key: str, writer: str) -> bytes:
        """The key of `writer`'s record of metadata document `key`."""
        return META + key.encode() + b"\0" + writer.encode()

    @staticmethod
    def meta_prefix(key: str = "") -> bytes:
        """The prefix of every writer's record of `key` (of keys under `key` if it ends
        without the separator: `meta_prefix("")` is every metadata record)."""
        return META + key.encode() + (b"\0" if key else b"")

    @staticmethod
    def parse_meta(k: bytes) -> tuple[str, str]:
        """(document key, writer) of a metadata record key; zarr keys hold no NUL, and
        records staged before writer ids were hex hold the 8 raw bytes."""
        key, writer = k[1:].split(b"\0", 1)
        return key.decode(), writer.decode() if len(writer) == _WRITER_HEX else writer.hex()

    @staticmethod
    def fragment(writer: str, seq: int) -> bytes:
        """The key of `writer`'s fragment number `seq`."""
        return FRAGMENT + f"{writer}{seq:08x}".encode()

    @staticmethod
    def marker(writer: str, generation: int) -> bytes:
        """The key of `writer`'s unflushed-writes marker for one buffer generation."""
        return DIRTY + f"{writer}{generation:08x}".encode()

    @staticmethod
    def marker_writer(k: bytes) -> str:
        """The writer of an unflushed-writes marker key."""
        return k[1 : 1 + _WRITER_HEX].decode()

    @staticmethod
    def writer(writer: str) -> bytes:
        """The key of a writer's state record."""
        return WRITER + writer.encode()

    @staticmethod
    def accept(tag: str) -> bytes:
        """The key of the accepted writers of task-commit `tag`."""
        return ACCEPT + tag.encode()

    @staticmethod
    def move(at_ns: int, writer: str) -> bytes:
        """The key of a move `writer` made at `at_ns` (nanoseconds: keys sort by time)."""
        return MOVE + f"{at_ns:020d}{writer}".encode()


class WriterState(StrEnum):
    """A writer's life: writing, then finished (it ended normally) or failed (it raised, or
    its Spark attempt failed). A writer still writing whose process is dead is gone."""

    WRITING = "writing"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True)
class Writer:
    """The state record of one writer of a session."""

    writer: str
    state: WriterState
    identity: str  # runtime.identity() of its process
    since: float  # when it entered this state (epoch seconds)
    tag: str | None = None
    error: str | None = None
    dropped: tuple[str, ...] = ()
    """A failed writer's unflushed writes, given up when it failed: their first keys (up
    to MARKER_KEYS), so a commit can tell whether that part was written again."""

    @property
    def host(self) -> str:
        """The host its process runs on."""
        return runtime.identity_pid(self.identity)[0]

    @property
    def pid(self) -> int:
        """Its process id."""
        return runtime.identity_pid(self.identity)[1]

    @property
    def alive(self) -> bool | None:
        """Whether its process still runs: None when that cannot be told from here."""
        return runtime.identity_alive(self.identity)

    def encode(self) -> bytes:
        """The record as stored (JSON)."""
        doc = {"state": str(self.state), "identity": self.identity, "since": self.since}
        doc |= {k: v for k, v in (("tag", self.tag), ("error", self.error)) if v is not None}
        if self.dropped:
            doc["dropped"] = list(self.dropped)
        return json.dumps(doc).encode()

    @classmethod
    def decode(cls, writer: str, data: bytes) -> Writer:
        """A stored record of `writer`."""
        doc = json.loads(data)
        state = WriterState(doc["state"])
        return cls(
            writer,
            state,
            doc["identity"],
            doc["since"],
            doc.get("tag"),
            doc.get("error"),
            tuple(doc.get("dropped", ())),
        )


@dataclass(frozen=True)
class Unflushed:
    """A marker left by a handle holding writes it has not flushed."""

    writer: str
    host: str
    pid: int
    since: float
    tag: str | None = None
    error: str | None = None  # its writes failed to settle
    identity: str | None = None
    keys: tuple[str, ...] | None = None
    """The first chunk keys of the batch (see `MARKER_KEYS`); None if unknown (a batch
    begun by a read, or a marker of an older version)."""

    @property
    def alive(self) -> bool | None:
        """Whether its process still runs: None when it runs on another host."""
        if self.identity is not None:
            return runtime.identity_alive(self.identity)
        return runtime.alive(self.host, self.pid)


@dataclass(frozen=True)
class State:
    """Everything staged in a session, read in one scan."""

    meta: dict[str, bytes | None]  # metadata documents (None: deleted)
    clashes: list[str]  # documents two workers staged with different bytes
    fragments: list[FragmentRecord]
    unflushed: list[Unflushed]
    accepted: dict[str, set[str]]
    writers: dict[str, Writer] = field(default_factory=dict)
    meta_writers: set[str] = field(default_factory=set)  # writers that staged metadata
    moves: tuple[tuple[str, str], ...] = ()  # (source, destination) of moved nodes, in order
    meta_by_writer: dict[str, dict[str, tuple[bytes, int]]] = field(default_factory=dict)
    """Each writer's metadata records: document key -> (content, metastore version)."""


def counts(
    writer: str, tag: str | None, accepts: dict[str, set[str]], own: str | None = None
) -> bool:
    """Whether what `writer` staged counts: untagged writers, the reading handle's own, and
    tagged writers their task commit accepted (not a failed or speculative Spark attempt)."""
    return tag is None or writer == own or writer in accepts.get(tag, ())


class Staging:
    """The staging records of one session, as seen by the handle `writer` (8 bytes).

    It remembers what this handle staged (fragment keys, metadata documents): a read that
    finds one of them gone finds the session's records dropped (gc drops an expired
    session's), and raises the session's state instead of reading its base (soak seed
    1005178). `check_open` raises that state."""

    def __init__(
        self,
        meta: MetaStore,
        partition: str,
        writer: bytes,
        check_open: Callable[[], None] | None = None,
        clock: Callable[[], float] = runtime.now,
    ) -> None:
        self.meta = meta
        self.partition = partition
        self.writer = writer
        self.check_open = check_open
        self.clock = clock  # the metastore's: writer states are compared with fragments' times
        self.own: set[bytes] = set()  # keys of the fragments this handle registered
        self.own_meta: set[str] = set()  # metadata documents this handle staged
        self._move_ns = 0  # the time key of this handle's last move

    def _lost(self) -> None:
        """Raise: records this handle staged are gone, so reads would miss its writes."""
        if self.check_open is not None:
            self.check_open()  # the session's state: expired, abandoned, committed...
        raise SessionClosedError(
            f"the records this handle staged in {self.partition} are gone (the session "
            "ended); its writes can no longer be read: start a new session"
        )

    @property
    def writer_id(self) -> str:
        """This handle's writer id as staging keys carry it."""
        return self.writer.hex()

    # metadata documents -------------------------------------------------------------------

    def stage_meta(
        self, items: Iterable[tuple[str, ChunkRef | None]], also: Iterable[tuple[bytes, bytes]] = ()
    ) -> None:
        """Stage metadata documents (inline references) or their deletion, durably (with
        `also`, more records in the same transaction: the writer's state)."""
        items = list(items)
        self.meta.set_many(self.partition, self.meta_records(items) + list(also))
        self.own_meta.update(k for k, _ in items)

    def meta_records(
        self, items: Iterable[tuple[str, ChunkRef | None]]
    ) -> list[tuple[bytes, bytes]]:
        """The records staging metadata documents (or their deletion), to store; once
        stored, add their keys to `own_meta`."""
        return [
            (
                StagingKeys.meta(k, self.writer_id),
                StagedRecord(OP_WRITE if r else OP_DELETE, self.writer, r).encode(),
            )
            for k, r in items
        ]

    def move_record(self, src: str, dst: str) -> tuple[bytes, bytes]:
        """The record of a move of node `src` to `dst` by this handle, to store."""
        self._move_ns = max(int(runtime.now() * 1e9), self._move_ns + 1)  # this handle's in order
        key = StagingKeys.move(self._move_ns, self.writer_id)
        return key, json.dumps({"from": src, "to": dst}).encode()

    def lookup_meta(self, key: str) -> tuple[bool, ChunkRef | None]:
        """(staged?, ref) of the latest record of any worker; ref None with staged=True means
        the document was deleted."""
        latest = max(
            self.meta.scan(self.partition, prefix=StagingKeys.meta_prefix(key)),
            key=lambda item: item[2],
            default=None,
        )
        if latest is None:
            if key in self.own_meta:
                self._lost()
            return False, None
        return True, StagedRecord.decode(latest[1], key).ref

    def meta_keys(self, prefix: str = "") -> Iterator[tuple[str, bool]]:
        """(key, deleted?) of staged documents under `prefix`, in key order (the latest
        record of any worker decides, as in `lookup_meta`)."""
        for k, group in groupby(
            self.meta.scan(self.partition, prefix=META + prefix.encode()),
            key=lambda item: StagingKeys.parse_meta(item[0])[0],
        ):
            _, value, _ = max(group, key=lambda item: item[2])
            yield k, StagedRecord.decode(value, k).op == OP_DELETE

    def state(self, excluded: frozenset[str] = frozenset()) -> State:
        """Every staging record of the session, from one scan; what the writers in
        `excluded` staged is left out (a commit that discards them)."""
        meta: dict[str, bytes | None] = {}
        clashes: list[str] = []
        fragments, unflushed, accepted, writers = [], [], {}, {}
        meta_writers: set[str] = set()
        moves: list[tuple[str, str]] = []
        meta_by_writer: dict[str, dict[str, tuple[bytes, int]]] = {}
        prev, content = None, b""
        for k, v, version in self.meta.scan(self.partition):
            kind = k[:1]
            if kind == META:
                name, writer = StagingKeys.parse_meta(k)
                meta_writers.add(writer)
                meta_by_writer.setdefault(writer, {})[name] = (StagedRecord.content(v), version)
                if writer in excluded:
                    continue
                if name == prev:
                    if StagedRecord.content(v) != content and clashes[-1:] != [name]:
                        clashes.append(name)
                    continue
                prev, content = name, StagedRecord.content(v)
                ref = StagedRecord.decode(v, name).ref
                meta[name] = None if ref is None else (ref.data or b"")
            elif kind == FRAGMENT:
                record = FragmentRecord.decode(v)
                if record.writer not in excluded:
                    fragments.append(record)
            elif kind == DIRTY:
                unflushed.append(_unflushed(k, v))
            elif kind == ACCEPT:
                accepted[k[1:].decode()] = set(json.loads(v))
            elif kind == WRITER:
                writers[k[1:].decode()] = Writer.decode(k[1:].decode(), v)
            elif kind == MOVE and k[21:].decode() not in excluded:
                doc = json.loads(v)
                moves.append((doc["from"], doc["to"]))
        return State(
            meta,
            clashes,
            fragments,
            unflushed,
            accepted,
            writers,
            meta_writers,
            moves=tuple(moves),
            meta_by_writer=meta_by_writer,
        )

    # fragments ----------------------------------------------------------------------------

    def register(
        self,
        record: FragmentRecord,
        markers: Iterable[int],
        also: Iterable[tuple[bytes, bytes | None]] = (),
    ) -> None:
        """Register a flushed fragment and, in the same transaction, drop the markers of the
        writes it holds (with `also`, more records: the writer's state)."""
        items: list[tuple[bytes, bytes | None]] = [
            (StagingKeys.fragment(record.writer, record.seq), record.encode())
        ]
        items += [(self._marker(g), None) for g in markers]
        self.meta.set_many(self.partition, items + list(also))
        self.own.add(items[0][0])

    def unregister(self, record: FragmentRecord, marker: int, error: str) -> None:
        """Withdraw a fragment whose writes could not be settled, and leave a marker that
        says so in its place (a commit then refuses, naming this worker)."""
        doc = self._marker_doc(0.0, None) | {"error": error}
        self.own.discard(StagingKeys.fragment(record.writer, record.seq))
        self.meta.set_many(
            self.partition,
            [
                (StagingKeys.fragment(record.writer, record.seq), None),
                (self._marker(marker), json.dumps(doc).encode()),
            ],
        )

    def fragments(self) -> list[FragmentRecord]:
        """The records of every fragment staged in this session, by any worker."""
        scan = self.meta.scan(self.partition, FRAGMENT, FRAGMENT)
        return [FragmentRecord.decode(v) for _, v, _ in scan]

    def visible_fragments(self) -> list[FragmentRecord]:
        """The fragments reads see: those that count (`counts`) for this handle (one scan
        over the `a`..`f` records)."""
        records, accepts, missing = [], {}, set(self.own)
        for k, v, _ in self.meta.scan(self.partition, ACCEPT):
            if k[:1] > FRAGMENT:
                break
            if k[:1] == ACCEPT:
                accepts[k[1:].decode()] = set(json.loads(v))
            elif k[:1] == FRAGMENT:
                records.append(FragmentRecord.decode(v))
                missing.discard(k)
        if missing:
            self._lost()
        own = self.writer_id
        return [r for r in records if counts(r.writer, r.tag, accepts, own)]

    # unflushed writes -----------------------------------------------------------------------

    def _marker(self, generation: int) -> bytes:
        return StagingKeys.marker(self.writer_id, generation)

    @staticmethod
    def _marker_doc(since: float, tag: str | None) -> dict:
        return {
            "host": runtime.host(),
            "pid": runtime.pid(),
            "identity": runtime.identity(),
            "since": since,
            "tag": tag,
        }

    def mark_unflushed(
        self,
        generation: int,
        since: float,
        tag: str | None,
        also: Iterable[tuple[bytes, bytes]] = (),
        keys: Iterable[str] | None = None,
    ) -> None:
        """Note that this handle holds buffered writes of `generation` since `since` (with
        `also`, more records in the same transaction: the writer's state), beginning with
        the chunk `keys` (the first MARKER_KEYS are kept; None: a batch begun by a read).

        A commit finds the markers and waits for (or refuses) workers that never flushed;
        the keys tell it whether a dead worker's unflushed part was written again."""
        doc = self._marker_doc(since, tag)
        if keys is not None:
            doc["keys"] = list(islice(keys, MARKER_KEYS))
        self.meta.set_many(
            self.partition, [(self._marker(generation), json.dumps(doc).encode()), *also]
        )

    def unflushed(self) -> list[Unflushed]:
        """The markers of every handle that holds writes it has not flushed."""
        return [_unflushed(k, v) for k, v, _ in self.meta.scan(self.partition, DIRTY, DIRTY)]

    def drop_markers(
        self, generations: Iterable[int], also: Iterable[tuple[bytes, bytes]] = ()
    ) -> None:
        """Remove this handle's markers for flushed `generations` (with `also`, more records
        in the same transaction)."""
        items: list[tuple[bytes, bytes | None]] = [(self._marker(g), None) for g in generations]
        self.meta.set_many(self.partition, items + list(also))

    def forget_unflushed(self, writers: Iterable[str]) -> None:
        """Drop the markers of `writers` (their unflushed writes are given up)."""
        keys = set(writers)
        drop = [
            (k, None)
            for k, _, _ in self.meta.scan(self.partition, DIRTY, DIRTY)
            if StagingKeys.marker_writer(k) in keys
        ]
        if drop:
            self.meta.set_many(self.partition, drop)

    # writer states --------------------------------------------------------------------------

    def writer_record(
        self,
        state: WriterState,
        tag: str | None,
        error: str | None = None,
        dropped: Iterable[str] = (),
    ) -> tuple[bytes, bytes]:
        """This handle's writer state record, to store with other records (`dropped`: the
        keys of the unflushed writes a failing writer gives up; the first MARKER_KEYS)."""
        rec = Writer(
            self.writer_id,
            state,
            runtime.identity(),
            self.clock(),
            tag,
            error,
            tuple(islice(dropped, MARKER_KEYS)),
        )
        return StagingKeys.writer(self.writer_id), rec.encode()

    def writers(self) -> dict[str, Writer]:
        """The state records of every writer of the session."""
        return {
            k[1:].decode(): Writer.decode(k[1:].decode(), v)
            for k, v, _ in self.meta.scan(self.partition, WRITER, WRITER)
        }

    # accepted writers (Spark task commits) ------------------------------------------------

    def accept(self, tag: str, writers: Iterable[str]) -> None:
        """Record the writers whose fragments a Spark task commit `tag` accepts."""
        self.meta.set_many(
            self.partition,
            [(StagingKeys.accept(tag), json.dumps(sorted(set(writers))).encode())],
        )

    def accepted(self) -> dict[str, set[str]]:
        """Accepted writers by task commit tag; a commit ignores fragments of the others."""
        return {
            k[1:].decode(): set(json.loads(v))
            for k, v, _ in self.meta.scan(self.partition, ACCEPT, ACCEPT)
        }

    def clear(self) -> None:
        """Drop every staging record of the session (after commit or abandon)."""
        self.meta.drop_partition(self.partition)
        self.own.clear()
        self.own_meta.clear()


def _unflushed(key: bytes, value: bytes) -> Unflushed:
    doc = json.loads(value)
    return Unflushed(
        StagingKeys.marker_writer(key),
        doc["host"],
        doc["pid"],
        doc["since"],
        doc.get("tag"),
        doc.get("error"),
        doc.get("identity"),
        None if doc.get("keys") is None else tuple(doc["keys"]),
    )
