"""A session's staging records, held in its own metastore partition.

- `w<key>\\0<writer>`: a metadata document (`zarr.json`) staged by one handle, inline. They
  are few, durable as soon as staged, and seen at once by every worker of the session.
- `f<writer><seq>`: one record per staged fragment (format/fragment.py), the chunk writes,
  deletes and reads one handle flushed together.
- `d<writer><generation>`: a handle holds chunk writes it has not flushed yet (its host,
  pid and since when). A commit waits for these to go, or refuses, naming the worker:
  writes that were never made durable are never silently left out.
- `a<tag>`: the writers whose fragments carrying `tag` count (a Spark job accepts the task
  attempts that committed; the fragments of failed or speculative attempts do not count).

Every worker of a cooperative session stages under its own writer id, so two workers
staging different bytes for one key are detected at commit instead of one replacing the
other.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import groupby

from zarrlake import runtime
from zarrlake.format.chunk_ref import ChunkRef
from zarrlake.format.fragment import FragmentRecord
from zarrlake.format.staged import OP_DELETE, OP_WRITE, StagedRecord
from zarrlake.metastore.base import MetaStore

META = b"w"
FRAGMENT = b"f"
DIRTY = b"d"
ACCEPT = b"a"


@dataclass(frozen=True)
class Unflushed:
    """A marker left by a handle holding writes it has not flushed."""

    writer: str
    host: str
    pid: int
    since: float
    tag: str | None = None
    error: str | None = None  # its writes failed to settle

    @property
    def alive(self) -> bool | None:
        """Whether its process still runs: None when it runs on another host."""
        return runtime.alive(self.host, self.pid)


@dataclass(frozen=True)
class State:
    """Everything staged in a session, read in one scan."""

    meta: dict[str, bytes | None]  # metadata documents (None: deleted)
    clashes: list[str]  # documents two workers staged with different bytes
    fragments: list[FragmentRecord]
    unflushed: list[Unflushed]
    accepted: dict[str, set[str]]


class Staging:
    """The staging records of one session, as seen by the handle `writer` (8 bytes)."""

    def __init__(self, meta: MetaStore, partition: str, writer: bytes) -> None:
        self.meta = meta
        self.partition = partition
        self.writer = writer

    # metadata documents -------------------------------------------------------------------

    def stage_meta(self, items: Iterable[tuple[str, ChunkRef | None]]) -> None:
        """Stage metadata documents (inline references) or their deletion, durably."""
        self.meta.set_many(
            self.partition,
            [
                (
                    META + k.encode() + b"\0" + self.writer,
                    StagedRecord(OP_WRITE if r else OP_DELETE, self.writer, r).encode(),
                )
                for k, r in items
            ],
        )

    def lookup_meta(self, key: str) -> tuple[bool, ChunkRef | None]:
        """(staged?, ref) of the latest record of any worker; ref None with staged=True means
        the document was deleted."""
        latest = max(
            self.meta.scan(self.partition, prefix=META + key.encode() + b"\0"),
            key=lambda item: item[2],
            default=None,
        )
        if latest is None:
            return False, None
        return True, StagedRecord.decode(latest[1], key).ref

    def meta_keys(self, prefix: str = "") -> Iterator[tuple[str, bool]]:
        """(key, deleted?) of staged documents under `prefix`, in key order (the latest
        record of any worker decides, as in `lookup_meta`)."""
        for key, group in groupby(
            self.meta.scan(self.partition, prefix=META + prefix.encode()),
            key=lambda item: item[0][1:-9],  # strip "w" and "\\0" + 8-byte writer
        ):
            k = key.decode()
            _, value, _ = max(group, key=lambda item: item[2])
            yield k, StagedRecord.decode(value, k).op == OP_DELETE

    def state(self) -> State:
        """Every staging record of the session, from one scan."""
        meta: dict[str, bytes | None] = {}
        clashes: list[str] = []
        fragments, unflushed, accepted = [], [], {}
        prev, name, content = None, "", b""
        for k, v, _ in self.meta.scan(self.partition):
            kind = k[:1]
            if kind == META:
                key = k[1:-9]  # strip "w" and "\0" + 8-byte writer
                if key == prev:
                    if StagedRecord.content(v) != content and clashes[-1:] != [name]:
                        clashes.append(name)
                    continue
                prev, name, content = key, key.decode(), StagedRecord.content(v)
                ref = StagedRecord.decode(v, name).ref
                meta[name] = None if ref is None else (ref.data or b"")
            elif kind == FRAGMENT:
                fragments.append(FragmentRecord.decode(v))
            elif kind == DIRTY:
                unflushed.append(_unflushed(k, v))
            elif kind == ACCEPT:
                accepted[k[1:].decode()] = set(json.loads(v))
        return State(meta, clashes, fragments, unflushed, accepted)

    # fragments ----------------------------------------------------------------------------

    def register(self, record: FragmentRecord, markers: Iterable[int]) -> None:
        """Register a flushed fragment and, in the same transaction, drop the markers of the
        writes it holds."""
        items: list[tuple[bytes, bytes | None]] = [(_fragment_key(record), record.encode())]
        items += [(self._marker(g), None) for g in markers]
        self.meta.set_many(self.partition, items)

    def unregister(self, record: FragmentRecord, marker: int, error: str) -> None:
        """Withdraw a fragment whose writes could not be settled, and leave a marker that
        says so in its place (a commit then refuses, naming this worker)."""
        doc = self._marker_doc(0.0, None) | {"error": error}
        self.meta.set_many(
            self.partition,
            [(_fragment_key(record), None), (self._marker(marker), json.dumps(doc).encode())],
        )

    def fragments(self) -> list[FragmentRecord]:
        """The records of every fragment staged in this session, by any worker."""
        scan = self.meta.scan(self.partition, FRAGMENT, FRAGMENT)
        return [FragmentRecord.decode(v) for _, v, _ in scan]

    def visible_fragments(self) -> list[FragmentRecord]:
        """The fragments reads see: untagged ones, this handle's own, and tagged ones of
        accepted writers (one scan over the `a`..`f` records)."""
        records, accepts = [], {}
        for k, v, _ in self.meta.scan(self.partition, ACCEPT):
            if k[:1] > FRAGMENT:
                break
            if k[:1] == ACCEPT:
                accepts[k[1:].decode()] = set(json.loads(v))
            elif k[:1] == FRAGMENT:
                records.append(FragmentRecord.decode(v))
        own = self.writer.hex()
        return [
            r
            for r in records
            if r.tag is None or r.writer == own or r.writer in accepts.get(r.tag, ())
        ]

    # unflushed writes -----------------------------------------------------------------------

    def _marker(self, generation: int) -> bytes:
        return DIRTY + self.writer.hex().encode() + f"{generation:08x}".encode()

    @staticmethod
    def _marker_doc(since: float, tag: str | None) -> dict:
        return {"host": runtime.host(), "pid": runtime.pid(), "since": since, "tag": tag}

    def mark_unflushed(self, generation: int, since: float, tag: str | None) -> None:
        """Note that this handle holds buffered writes of `generation` since `since`.

        A commit finds the markers and waits for (or refuses) workers that never flushed."""
        doc = self._marker_doc(since, tag)
        self.meta.set_many(self.partition, [(self._marker(generation), json.dumps(doc).encode())])

    def unflushed(self) -> list[Unflushed]:
        """The markers of every handle that holds writes it has not flushed."""
        return [_unflushed(k, v) for k, v, _ in self.meta.scan(self.partition, DIRTY, DIRTY)]

    def drop_markers(self, generations: Iterable[int]) -> None:
        """Remove this handle's markers for flushed `generations`."""
        self.meta.set_many(self.partition, [(self._marker(g), None) for g in generations])

    def forget_unflushed(self, markers: Iterable[Unflushed]) -> None:
        """Drop markers (their writes are given up: `commit(unflushed="discard")`)."""
        keys = {m.writer for m in markers}
        drop = [
            (k, None)
            for k, _, _ in self.meta.scan(self.partition, DIRTY, DIRTY)
            if k[1:17].decode() in keys
        ]
        if drop:
            self.meta.set_many(self.partition, drop)

    # accepted writers (Spark task commits) ------------------------------------------------

    def accept(self, tag: str, writers: Iterable[str]) -> None:
        """Record the writers whose fragments a Spark task commit `tag` accepts."""
        self.meta.set_many(
            self.partition, [(ACCEPT + tag.encode(), json.dumps(sorted(set(writers))).encode())]
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


def _unflushed(key: bytes, value: bytes) -> Unflushed:
    doc = json.loads(value)
    return Unflushed(
        key[1:17].decode(),
        doc["host"],
        doc["pid"],
        doc["since"],
        doc.get("tag"),
        doc.get("error"),
    )


def _fragment_key(record: FragmentRecord) -> bytes:
    return FRAGMENT + f"{record.writer}{record.seq:08x}".encode()
