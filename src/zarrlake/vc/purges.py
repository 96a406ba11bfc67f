"""Purge records: what `Repo.purge` removed, kept in the metastore beside the refs.

A purge removes the bytes of chunks from every version while commits, ids and manifests
stay as they were: a purged chunk object (`chunks/<digest>`) is replaced by a tombstone
naming the purge, and a purged range of a shared object (a fragment, a pack, a shard stored
whole) is overwritten with zeros. Manifests keep the digests, so a read still knows what it
wanted; it finds a tombstone or zeros instead, and the index below names the purge.

Records live in the refs partition (`purge/<id>`: who, when, why, which arrays, counts),
with the purged digests (`purge-lists/<id>/d/<n>`, raw digests) and ranges
(`purge-lists/<id>/r/<n>`, JSON) in batches, so a metastore copy or a clone carries them
like any other ref record.

A tombstone is shorter than any chunk object (those hold more than 64 bytes), and a shared
chunk object whose range was zeroed gets a trailer: either way the object's size no longer
matches its bytes, which is how a writer whose upload found the object already there (a
deduplicated write) learns that its address was retired (`Objects.store_chunk`).
"""

from __future__ import annotations

import json
import secrets
import threading
from dataclasses import asdict, dataclass, field, fields, replace

from zarrlake.errors import CorruptionError, NotFoundError
from zarrlake.metastore.base import MetaStore

PREFIX = "purge/"
"""Purge records: `purge/<id>`."""
LISTS = "purge-lists/"
"""Their digests and ranges, in batches: `purge-lists/<id>/d/<n>` and `.../r/<n>` (apart, so
listing the records reads none of them)."""
TOMBSTONE = b"zarrlake purged "
"""A tombstone's bytes: this, the purge id, a newline (33 bytes; chunk objects are longer)."""
TRAILER = b"\nzarrlake purged ranges "
"""Appended (with the purge id and a newline) to a content-addressed object whose ranges a
purge zeroed, so its size no longer matches its name's bytes."""
BATCH = 1024
"""Digests (or ranges) per metastore record."""
PENDING, DONE = "pending", "done"

Span = tuple[str, int, int, bytes]
"""A purged range: (object key, offset, length, digest of the bytes it held)."""


def new_id() -> str:
    """A fresh purge id (16 hex digits)."""
    return secrets.token_hex(8)


def tombstone(purge_id: str) -> bytes:
    """What takes the place of a purged chunk object."""
    return TOMBSTONE + purge_id.encode() + b"\n"


def tombstone_of(data: bytes | memoryview) -> str | None:
    """The purge id a tombstone names, or None if `data` is not a tombstone."""
    raw = bytes(data[:64])
    if not raw.startswith(TOMBSTONE) or not raw.endswith(b"\n"):
        return None
    return raw[len(TOMBSTONE) : -1].decode(errors="replace")


def trailer(purge_id: str) -> bytes:
    """What a purge appends to a content-addressed object whose ranges it zeroed."""
    return TRAILER + purge_id.encode() + b"\n"


def has_trailer(data: bytes | memoryview) -> bool:
    """Whether a purge already appended its trailer to these object bytes."""
    return bytes(data[-64:]).rfind(TRAILER) >= 0


@dataclass(frozen=True)
class PurgeRecord:
    """One purge: who, when, why, what it selected, and what it removed."""

    id: str
    reason: str
    by: str
    at: float
    paths: tuple[str, ...]
    region: str | None = None
    """The region of the one array purged, as given (None: whole arrays)."""
    state: str = PENDING
    """"pending" while its objects are being removed, "done" once all are."""
    chunks: int = 0
    """Chunk references in all versions whose bytes it removed."""
    objects: int = 0
    """Chunk objects replaced by tombstones."""
    ranges: int = 0
    """Ranges zeroed in shared objects (fragments, packs, shards stored whole)."""
    bytes: int = 0
    """Bytes removed (the objects' and the ranges')."""
    digests: int = 0
    """Distinct purged digests (listed under `purge/<id>/d/`)."""
    commits: int = 0
    """Commits whose versions it read."""
    kept_inline: int = 0
    """Chunks of at most 64 bytes kept inside manifests (the commit ids cover them)."""
    kept_virtual: int = 0
    """Virtual chunks: their bytes live in files outside the repository."""
    kept_at_heads: int = 0
    """Digests of the selection kept because a branch head holds them (keep_heads)."""
    forced: tuple[str, ...] = ()
    """Why it needed force=True (branch heads or other arrays that still held the bytes)."""
    redacted: tuple[str, ...] = ()
    """Records whose messages it redacted (`session <id>`, `pull request #<n>`)."""
    finished: float | None = None
    batches: tuple[int, int] = (0, 0)
    """How many digest and range records follow it."""
    extra: dict = field(default_factory=dict)

    def encode(self) -> bytes:
        """The record as stored (JSON)."""
        doc = asdict(self)
        doc.pop("extra")
        return json.dumps({**self.extra, **doc}, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> PurgeRecord:
        """A stored record; fields a later version added are kept as they are."""
        try:
            doc = json.loads(data)
            known = {f.name for f in fields(cls)} - {"extra"}
            kept = {k: v for k, v in doc.items() if k in known}
            kept["paths"] = tuple(kept.get("paths", ()))
            kept["forced"] = tuple(kept.get("forced", ()))
            kept["redacted"] = tuple(kept.get("redacted", ()))
            kept["batches"] = tuple(kept.get("batches", (0, 0)))
            return cls(**kept, extra={k: v for k, v in doc.items() if k not in known})
        except (ValueError, TypeError) as e:
            raise CorruptionError(
                f"a purge record does not decode ({e}); run `zarrlake fsck`"
            ) from None

    def describe(self) -> str:
        """The record in one line, for messages."""
        from zarrlake.errors import on_date

        return f"purge {self.id} ({self.reason!r}, by {self.by}, {on_date(self.at)})"

    def to_json(self) -> dict:
        """The record as plain JSON values (`--json` output)."""
        doc = asdict(self)
        doc.pop("extra")
        return doc


class PurgeRecords:
    """The purge records of one repository, in its refs partition."""

    def __init__(self, meta: MetaStore, partition: str) -> None:
        self.meta = meta
        self.partition = partition

    @staticmethod
    def _key(purge_id: str, part: str = "") -> bytes:
        return f"{LISTS}{purge_id}{part}".encode() if part else f"{PREFIX}{purge_id}".encode()

    def list(self) -> list[PurgeRecord]:
        """Every purge record, oldest first."""
        out = [
            PurgeRecord.decode(v)
            for _, v, _ in self.meta.scan(self.partition, prefix=PREFIX.encode())
        ]
        return sorted(out, key=lambda r: (r.at, r.id))

    def get(self, purge_id: str) -> PurgeRecord:
        """The record of purge `purge_id`; NotFoundError if there is none."""
        got = self.meta.get(self.partition, self._key(purge_id))
        if got is None:
            raise NotFoundError(f"no purge {purge_id!r}; run `zarrlake purge --list` to see them")
        return PurgeRecord.decode(got[0])

    def save(
        self, record: PurgeRecord, digests: list[bytes] = (), spans: list[Span] = ()
    ) -> PurgeRecord:  # type: ignore[assignment]
        """Store `record` with its digests and ranges (given on the first save only): the
        batches first, the record last, so a record found always has its lists."""
        if digests or spans:
            d_batches = [digests[i : i + BATCH] for i in range(0, len(digests), BATCH)]
            r_batches = [spans[i : i + BATCH] for i in range(0, len(spans), BATCH)]
            items = [
                (self._key(record.id, f"/d/{n:06d}"), b"".join(b)) for n, b in enumerate(d_batches)
            ]
            items += [
                (
                    self._key(record.id, f"/r/{n:06d}"),
                    json.dumps([[k, o, ln, d.hex()] for k, o, ln, d in b]).encode(),
                )
                for n, b in enumerate(r_batches)
            ]
            for i in range(0, len(items), 16):
                self.meta.set_many(self.partition, items[i : i + 16])
            record = replace(record, batches=(len(d_batches), len(r_batches)))
        self.meta.set_many(self.partition, [(self._key(record.id), record.encode())])
        return record

    def digests(self, record: PurgeRecord) -> list[bytes]:
        """The chunk-object digests purge `record` retired."""
        out: list[bytes] = []
        for _, v, _ in self.meta.scan(self.partition, prefix=self._key(record.id, "/d/")):
            out.extend(v[i : i + 32] for i in range(0, len(v), 32))
        return out

    def spans(self, record: PurgeRecord) -> list[Span]:
        """The ranges of shared objects purge `record` zeroed."""
        out: list[Span] = []
        for _, v, _ in self.meta.scan(self.partition, prefix=self._key(record.id, "/r/")):
            out.extend((k, o, ln, bytes.fromhex(d)) for k, o, ln, d in json.loads(v))
        return out

    def raw(self, record: PurgeRecord) -> list[tuple[bytes, bytes]]:
        """Every stored row of `record` (its batches, then itself), to copy elsewhere."""
        rows = [
            (k, v) for k, v, _ in self.meta.scan(self.partition, prefix=self._key(record.id, "/"))
        ]
        got = self.meta.get(self.partition, self._key(record.id))
        return rows + ([(self._key(record.id), got[0])] if got else [])


class PurgeIndex:
    """Which purge removed a digest's bytes, for read errors: loaded from the records when
    a read first fails, and again when one fails on a digest it does not know (a purge made
    since). Reads that succeed never consult it."""

    def __init__(self, records: PurgeRecords) -> None:
        self.records = records
        self._lock = threading.Lock()
        self._known: dict[bytes, PurgeRecord] | None = None
        self._exist: tuple[int, bool] | None = None  # (epoch asked at, whether any exists)

    def _load(self) -> dict[bytes, PurgeRecord]:
        out: dict[bytes, PurgeRecord] = {}
        for rec in self.records.list():
            for d in self.records.digests(rec):
                out.setdefault(d, rec)
            for _, _, _, d in self.records.spans(rec):
                out.setdefault(d, rec)
        return out

    def forget(self) -> None:
        """Read the records afresh next time (this process made a purge)."""
        with self._lock:
            self._known = None
            self._exist = None

    def exist(self, epoch: int) -> bool:
        """Whether any purge record exists, read again when the sweep epoch `epoch` (which
        every purge moves) differs from the one last asked about. Once one exists, it
        always does."""
        with self._lock:
            if self._exist is not None and (self._exist[1] or self._exist[0] == epoch):
                return self._exist[1]
        found = any(
            True
            for _ in self.records.meta.scan(self.records.partition, prefix=PREFIX.encode(), limit=1)
        )
        with self._lock:
            self._exist = (epoch, found)
        return found

    def lookup(self, digest: bytes) -> PurgeRecord | None:
        """The purge that removed the bytes of `digest`, or None."""
        with self._lock:
            known = self._known
        if known is None or digest not in known:
            known = self._load()
            with self._lock:
                self._known = known
        return known.get(digest)
