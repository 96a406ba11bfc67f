"""A session's staged writes and reads, held in its own metastore partition.

Write records are keyed `w<key>\\0<writer>` so that every worker of a cooperative session
keeps its own record: two workers staging different bytes for one key is detected at
commit instead of one silently replacing the other. Read records (`r<key>`, `p<prefix>`)
are kept only for serializable sessions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import groupby

from zarrlake.format.chunk_ref import ChunkRef
from zarrlake.format.staged import OP_DELETE, OP_WRITE, StagedRecord
from zarrlake.metastore.base import MetaStore

WRITE_PREFIX = b"w"
READ_PREFIX = b"r"
LIST_PREFIX = b"p"


class Staging:
    def __init__(self, meta: MetaStore, partition: str, writer: bytes) -> None:
        self.meta = meta
        self.partition = partition
        self.writer = writer

    def _wkey(self, key: str) -> bytes:
        return WRITE_PREFIX + key.encode() + b"\0" + self.writer

    def stage(self, key: str, ref: ChunkRef | None) -> None:
        op = OP_WRITE if ref is not None else OP_DELETE
        self.meta.set(self.partition, self._wkey(key), StagedRecord(op, self.writer, ref).encode())

    def stage_many(self, items: Iterable[tuple[str, ChunkRef | None]]) -> None:
        self.meta.set_many(
            self.partition,
            [
                (
                    self._wkey(k),
                    StagedRecord(OP_WRITE if r else OP_DELETE, self.writer, r).encode(),
                )
                for k, r in items
            ],
        )

    def lookup(self, key: str) -> tuple[bool, ChunkRef | None]:
        """(staged?, ref) of the latest record of any worker; ref None with staged=True means
        the key was deleted."""
        latest = max(
            self.meta.scan(self.partition, prefix=WRITE_PREFIX + key.encode() + b"\0"),
            key=lambda item: item[2],
            default=None,
        )
        if latest is None:
            return False, None
        return True, StagedRecord.decode(latest[1], key).ref

    def all(self) -> tuple[list[tuple[str, ChunkRef | None]], list[str]]:
        """Every staged key with its new reference (None: deleted), in key order, and the
        keys that two workers staged with different bytes."""
        changes: list[tuple[str, ChunkRef | None]] = []
        clashes: list[str] = []
        prev, name, content = None, "", b""
        for k, v, _ in self.meta.scan(self.partition, prefix=WRITE_PREFIX):
            key = k[1:-9]  # strip "w" and "\0" + 8-byte writer: one record per worker
            if key == prev:
                if StagedRecord.content(v) != content and clashes[-1:] != [name]:
                    clashes.append(name)
                continue
            prev, name, content = key, key.decode(), StagedRecord.content(v)
            changes.append((name, StagedRecord.decode(v, name).ref))
        return changes, clashes

    def keys(self, prefix: str) -> Iterator[tuple[str, bool]]:
        """(key, deleted?) for staged keys starting with prefix, in key order. Like `lookup`,
        the latest record of any worker decides, so listings agree with reads."""
        for key, group in groupby(
            self.meta.scan(self.partition, prefix=WRITE_PREFIX + prefix.encode()),
            key=lambda item: item[0][1:-9],  # strip "w" and "\\0" + 8-byte writer
        ):
            k = key.decode()
            _, value, _ = max(group, key=lambda item: item[2])
            yield k, StagedRecord.decode(value, k).op == OP_DELETE

    # serializable read tracking --------------------------------------------------------

    def record_reads(self, keys: Iterable[str], prefixes: Iterable[str] = ()) -> None:
        items = [(READ_PREFIX + k.encode(), b"") for k in keys]
        items += [(LIST_PREFIX + p.encode(), b"") for p in prefixes]
        if items:
            self.meta.set_many(self.partition, items)

    def reads(self) -> tuple[list[str], list[str]]:
        """(keys read, prefixes listed) by any worker of the session."""
        keys = [k[1:].decode() for k, _, _ in self.meta.scan(self.partition, prefix=READ_PREFIX)]
        prefixes = [
            k[1:].decode() for k, _, _ in self.meta.scan(self.partition, prefix=LIST_PREFIX)
        ]
        return keys, prefixes

    def clear(self) -> None:
        self.meta.drop_partition(self.partition)
