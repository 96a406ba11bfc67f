"""The objects of a metastore kept in a bucket: one head per partition and immutable pages.

A head holds the partition's recent entries inline, the runs of pages that hold the older
ones (newest run first; within a run, pages are sorted and do not overlap), the counters
that versions come from, and the ids of the last writes that landed (so a writer whose
reply was lost can read back whether its write is in). Every object starts with a magic,
a format version and a kind, and ends with a BLAKE3 checksum of everything before it.
"""

from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass, field

import blake3

from zarrlake._util import runtime
from zarrlake.errors import CorruptionError

ROOT = "meta"
"""Where a repository's metastore objects live, under its location."""
MAGIC = b"ZLMS"
FORMAT = 1
HEAD = 0x48  # "H"
PAGE = 0x50  # "P"
DIGEST_BYTES = 16
TOMBSTONE = 0xFFFFFFFF
"""The value length that marks a deleted key (shadowing older runs)."""
PAGELESS = 0
"""Stored first among a head's recent write ids (which are odd) while no page of its
incarnation was ever written (`Head.pageless`). A writer of an earlier version keeps it
there among the ids it carries forward, or lets it fall off: neither deletes a page."""

_U16, _U32, _U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")


def segment(partition: str) -> str:
    """The partition's name as one object-key segment: [a-z0-9_-] kept, other bytes ~XX."""
    out = [chr(b) if chr(b) in _SAFE else f"~{b:02x}" for b in partition.encode()]
    return "".join(out) or "~"


class Names:
    """The object keys of one partition."""

    def __init__(self, partition: str) -> None:
        base = f"{ROOT}/{segment(partition)}"
        self.partition = partition
        self.head = f"{base}/head"
        self.pages = f"{base}/pages/"

    def page(self, page_id: str) -> str:
        """The object key of the page named `page_id`."""
        return self.pages + page_id


def page_id(salt: int) -> str:
    """A new page's name: its incarnation's salt, its creation time (ms), random bits."""
    return f"{salt:08x}-{int(runtime.now() * 1000):011x}-{secrets.token_hex(4)}"


def page_born(page_id: str) -> tuple[int, float] | None:
    """(salt, creation time in seconds) from a page id, or None for a foreign name."""
    try:
        salt, ms, _ = page_id.split("-")
        return int(salt, 16), int(ms, 16) / 1000
    except ValueError:
        return None


@dataclass
class Table:
    """Entries sorted by key: parallel lists; a value of None is a tombstone."""

    keys: list[bytes] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def size(self) -> int:
        """Bytes of keys and values (what page sizes and flushes are measured in)."""
        return sum(map(len, self.keys)) + sum(len(v) for v in self.values if v is not None)


@dataclass(frozen=True)
class PageRef:
    """An immutable page object: its id (object name), key range, entry count and size."""

    id: str
    first: bytes
    last: bytes
    count: int
    size: int


@dataclass(frozen=True)
class Run:
    """Sorted, non-overlapping pages written together; newer runs shadow older ones."""

    pages: tuple[PageRef, ...]

    @property
    def size(self) -> int:
        """The bytes of keys and values over the run's pages."""
        return sum(p.size for p in self.pages)


@dataclass
class Head:
    """The state of one partition incarnation."""

    salt: int
    """Random per incarnation: in page names, and in versions' low bits."""
    seq: int
    """The next sequence number; each written key takes one (versions are seq << 22 | ...)."""
    gen: int
    """Writes that landed on this incarnation."""
    recent: list[int]
    """Ids of the last writes that landed, oldest first."""
    runs: list[Run]
    table: Table
    """The inline entries (newest of all: they shadow every run)."""
    pageless: bool = False
    """No page of this incarnation was ever written: set when it is created, cleared (by a
    write of its own) before its first page is written, never set again. Dropping such a
    partition, with the head judged still the current one, lists no pages."""


class _Writer:
    def __init__(self, kind: int) -> None:
        self.buf = bytearray(MAGIC)
        self.buf += bytes([FORMAT, kind])

    def u16(self, n: int) -> None:
        self.buf += _U16.pack(n)

    def u32(self, n: int) -> None:
        self.buf += _U32.pack(n)

    def u64(self, n: int) -> None:
        self.buf += _U64.pack(n)

    def blob(self, data: bytes) -> None:
        self.u32(len(data))
        self.buf += data

    def table(self, t: Table) -> None:
        n = len(t.keys)
        self.u32(n)
        self.buf += struct.pack(f"<{n}I", *map(len, t.keys))
        self.buf += struct.pack(f"<{n}I", *(TOMBSTONE if v is None else len(v) for v in t.values))
        self.buf += struct.pack(f"<{n}Q", *t.versions)
        self.buf += b"".join(t.keys)
        self.buf += b"".join(v for v in t.values if v is not None)

    def finish(self) -> bytes:
        self.buf += blake3.blake3(self.buf).digest(DIGEST_BYTES)
        return bytes(self.buf)


class _Reader:
    def __init__(self, data: bytes, kind: int, where: str) -> None:
        self.where = where
        if len(data) < 6 + DIGEST_BYTES or data[:4] != MAGIC:
            raise CorruptionError(
                f"metastore object {where} is not a zarrlake metastore object; run `zarrlake fsck`"
            )
        if data[4] > FORMAT:
            raise CorruptionError(
                f"metastore object {where} has format {data[4]}, newer than this zarrlake reads "
                f"({FORMAT}): upgrade zarrlake"
            )
        body, digest = data[:-DIGEST_BYTES], data[-DIGEST_BYTES:]
        if blake3.blake3(body).digest(DIGEST_BYTES) != digest:
            raise CorruptionError(
                f"metastore object {where} failed its checksum; run `zarrlake fsck`"
            )
        if data[5] != kind:
            raise CorruptionError(
                f"metastore object {where} is of the wrong kind; run `zarrlake fsck`"
            )
        self.view = memoryview(body)
        self.at = 6

    def _unpack(self, s: struct.Struct) -> int:
        (n,) = s.unpack_from(self.view, self.at)
        self.at += s.size
        return n

    def u16(self) -> int:
        return self._unpack(_U16)

    def u32(self) -> int:
        return self._unpack(_U32)

    def u64(self) -> int:
        return self._unpack(_U64)

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.view):
            raise CorruptionError(
                f"metastore object {self.where} is truncated; run `zarrlake fsck`"
            )
        out = bytes(self.view[self.at : self.at + n])
        self.at += n
        return out

    def blob(self) -> bytes:
        return self.take(self.u32())

    def array(self, code: str, n: int) -> tuple[int, ...]:
        fmt = struct.Struct(f"<{n}{code}")
        out = fmt.unpack_from(self.view, self.at)
        self.at += fmt.size
        return out

    def table(self) -> Table:
        n = self.u32()
        klens, vlens = self.array("I", n), self.array("I", n)
        versions = list(self.array("Q", n))
        blob = self.take(sum(klens) + sum(v for v in vlens if v != TOMBSTONE))
        keys: list[bytes] = []
        values: list[bytes | None] = []
        at = 0
        for k in klens:
            keys.append(blob[at : at + k])
            at += k
        for v in vlens:
            if v == TOMBSTONE:
                values.append(None)
            else:
                values.append(blob[at : at + v])
                at += v
        return Table(keys, values, versions)

    def done(self) -> None:
        if self.at != len(self.view):
            raise CorruptionError(
                f"metastore object {self.where} has trailing bytes; run `zarrlake fsck`"
            )


def encode_head(head: Head) -> bytes:
    """Serialize a partition head (counters, recent writes, runs, inline entries)."""
    w = _Writer(HEAD)
    w.u64(head.salt)
    w.u64(head.seq)
    w.u64(head.gen)
    recent = [PAGELESS, *head.recent] if head.pageless else head.recent
    w.u16(len(recent))
    for txn in recent:
        w.u64(txn)
    w.u16(len(head.runs))
    for run in head.runs:
        w.u32(len(run.pages))
        for p in run.pages:
            w.blob(p.id.encode())
            w.blob(p.first)
            w.blob(p.last)
            w.u64(p.count)
            w.u64(p.size)
    w.table(head.table)
    return w.finish()


def decode_head(data: bytes, where: str) -> Head:
    """Parse a head object read from `where`; raises CorruptionError when it is malformed."""
    try:
        r = _Reader(data, HEAD, where)
        salt, seq, gen = r.u64(), r.u64(), r.u64()
        recent = [r.u64() for _ in range(r.u16())]
        pageless = bool(recent) and recent[0] == PAGELESS
        runs = []
        for _ in range(r.u16()):
            pages = tuple(
                PageRef(r.blob().decode(), r.blob(), r.blob(), r.u64(), r.u64())
                for _ in range(r.u32())
            )
            runs.append(Run(pages))
        head = Head(salt, seq, gen, recent[pageless:], runs, r.table(), pageless)
        r.done()
    except (struct.error, UnicodeDecodeError):
        raise CorruptionError(
            f"metastore object {where} is truncated or malformed; run `zarrlake fsck`"
        ) from None
    return head


def encode_page(table: Table) -> bytes:
    """Serialize a table as an immutable page object."""
    w = _Writer(PAGE)
    w.table(table)
    return w.finish()


def decode_page(data: bytes, where: str) -> Table:
    """Parse a page object read from `where`; raises CorruptionError when it is malformed."""
    try:
        r = _Reader(data, PAGE, where)
        table = r.table()
        r.done()
    except struct.error:
        raise CorruptionError(
            f"metastore object {where} is truncated or malformed; run `zarrlake fsck`"
        ) from None
    return table
