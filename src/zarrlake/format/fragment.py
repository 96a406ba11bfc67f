"""Staged fragments: what one session handle staged between two flushes, as one object.

A fragment object holds the bytes of the small chunks it stages (the data section) followed
by its index: the chunk keys written (a manifest range whose small chunks point into the
data section), the keys deleted, and for serializable sessions the keys read and prefixes
listed. One metastore record per fragment (`FragmentRecord`) names the object and where its
index lies, so staging a million chunks writes a few objects and records instead of a
million rows, and a commit never copies the staged bytes: the data section becomes a pack
that the new manifests point into.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import numpy as np
from cachetools import LRUCache

from zarrlake.errors import CorruptionError
from zarrlake.format import columns, envelope
from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.format.digest import Hash
from zarrlake.format.manifest import ManifestRange, take_from

PREFIX = "fragments/"
"""Object keys of fragments: `fragments/<random id>` (written once, never modified)."""

INLINE_MAX = 64
"""Chunks at most this large stay inside the index (and later inside manifests)."""

RECORD_MAX = 32 << 10
"""Fragments at most this large travel inside their metastore record instead of as an
object (a session of a few chunks then writes no object before its commit, which writes
the fragment out with its other objects if manifests must point into it)."""

_EMPTY_KEYS = columns.keys_array([])

KNOWN = 64
"""Fragment indexes a process keeps decoded by id, and fragment records by their stored
bytes: those it made or read last (indexes of at most KNOWN_ENTRIES entries, records of
at most KNOWN_RECORD_BYTES: a few MB in all). A session's final flush makes both, and its
commit's gather and the clean-up after it read them back from the record just stored:
`decode` then neither parses nor hashes them again (an index's id is its content's hash;
a record is its bytes)."""
KNOWN_ENTRIES = 256
KNOWN_RECORD_BYTES = 8 << 10
_known: LRUCache[str, FragmentIndex] = LRUCache(maxsize=KNOWN)
_known_records: LRUCache[bytes, FragmentRecord] = LRUCache(maxsize=KNOWN)
_known_lock = threading.Lock()  # cachetools caches are not thread-safe


def _recall[K, V](known: LRUCache[K, V], key: K) -> V | None:
    """What `known` holds under `key`, if anything."""
    with _known_lock:
        return known.get(key)


def _remember[K, V](known: LRUCache[K, V], key: K, value: V) -> None:
    """Keep `value` under `key` in `known` (the least recently used of more than KNOWN go)."""
    with _known_lock:
        known[key] = value


@dataclass(frozen=True)
class FragmentIndex:
    """The index of one fragment: sorted, unique keys in each column."""

    writes: ManifestRange
    deletes: np.ndarray = field(default_factory=lambda: _EMPTY_KEYS)
    reads: np.ndarray = field(default_factory=lambda: _EMPTY_KEYS)
    listed: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.writes) + len(self.deletes)

    def encode(self, algo: Hash = Hash.SHA256) -> tuple[str, bytes]:
        """Frame the index as a columnar object; returns (object id, bytes)."""
        meta, cols = self.writes.columns(staged=True)
        return envelope.encode_columns(
            envelope.KIND_FRAGMENT,
            {"writes": meta, "listed": list(self.listed)},
            {
                **{f"w.{name}": col for name, col in cols.items()},
                "deletes": self.deletes,
                "reads": self.reads,
            },
            algo,
        )

    @classmethod
    def decode(cls, oid: str, data: bytes) -> FragmentIndex:
        """Read back a fragment index stored under `oid`, verifying its checksum; one this
        process built or read lately is the one it knows (the id is the content's hash)."""
        known = _recall(_known, oid)
        if known is not None:
            return known
        payload = envelope.decode(envelope.KIND_FRAGMENT, oid, data)
        meta, c = columns.unpack(payload, f"fragment index {oid}")
        writes = ManifestRange.from_columns(
            meta["writes"], {k[2:]: v for k, v in c.items() if k.startswith("w.")}
        )
        index = cls(writes, c["deletes"], c["reads"], tuple(meta["listed"]))
        if len(index) <= KNOWN_ENTRIES:
            _remember(_known, oid, index)
        return index


@dataclass(frozen=True)
class FragmentRecord:
    """The metastore record that registers one fragment object with its session."""

    location: str  # the object key
    index_offset: int
    index_length: int
    index_id: str  # the index's content hash: checked when it is read
    entries: int
    data_bytes: int
    writer: str  # hex id of the session handle that staged it
    seq: int  # the writer's flush count: later fragments of a writer win
    at: float  # when it was registered (orders different writers, for reads only)
    tag: str | None = None  # set by jobs whose fragments count only once accepted (Spark)
    blob: bytes | None = None  # the whole fragment, when it is small (no object written)

    def encode(self) -> bytes:
        """The record as stored: a JSON head, then the inline blob if it has one."""
        doc = {name: getattr(self, name) for name in _RECORD_FIELDS}  # asdict deep-copies
        head = json.dumps(doc, separators=(",", ":")).encode()
        data = head if self.blob is None else head + b"\n" + self.blob
        if len(data) <= KNOWN_RECORD_BYTES:
            _remember(_known_records, data, self)
        return data

    @classmethod
    def decode(cls, data: bytes) -> FragmentRecord:
        """Parse a stored record (one this process made or read lately: as it is known);
        raises CorruptionError when it is malformed."""
        known = _recall(_known_records, data)
        if known is not None:
            return known
        head, sep, blob = data.partition(b"\n")
        try:
            record = cls(**json.loads(head), blob=blob if sep else None)
        except (ValueError, TypeError) as e:
            raise CorruptionError(
                f"staged fragment record cannot be decoded ({e})"
                "; abandon the session and write its data again in a new one"
            ) from None
        if len(data) <= KNOWN_RECORD_BYTES:
            _remember(_known_records, bytes(data), record)
        return record

    @property
    def needs_object(self) -> bool:
        """Whether a commit must write this record's fragment out: it is held in the record
        and manifests will point into its data section."""
        return self.blob is not None and self.data_bytes > 0

    @property
    def span(self) -> tuple[int, int]:
        """The (start, end) byte range of the index within the fragment object."""
        return self.index_offset, self.index_offset + self.index_length

    @property
    def index(self) -> tuple[int, int, str]:
        """Where the index lies and its id: (offset, length, id)."""
        return self.index_offset, self.index_length, self.index_id


_RECORD_FIELDS = tuple(f.name for f in fields(FragmentRecord) if f.name != "blob")
"""The fields of a record's JSON head (its blob follows the head)."""


def build(
    location: str,
    changes: Mapping[str, ChunkRef | None],
    reads: set[str] | frozenset[str] = frozenset(),
    listed: set[str] | frozenset[str] = frozenset(),
    algo: Hash = Hash.SHA256,
    carried: tuple[ManifestRange, np.ndarray] | None = None,
) -> tuple[bytes, FragmentIndex, str, int]:
    """(object bytes, index, index id, index offset) of a fragment at `location` staging
    `changes` (key -> reference, None: deleted). Inline chunks bigger than INLINE_MAX move
    into the data section, referenced by location. `carried`: more writes and deletes,
    columnar, whose references stay as they are (a move's: the bytes are stored already);
    their keys are not among `changes`."""
    written = sorted(k.encode() for k, r in changes.items() if r is not None)
    data_parts: list[bytes] = []
    refs: list[ChunkRef] = []
    pos = 0
    for key in written:
        ref = changes[key.decode()]
        assert ref is not None
        if ref.kind == RefKind.INLINE and ref.length > INLINE_MAX:
            assert ref.data is not None
            data_parts.append(ref.data)
            ref = ChunkRef(RefKind.LOCATION, ref.digest, ref.length, pos, location, stats=ref.stats)
            pos += ref.length
        refs.append(ref)
    writes = ManifestRange.from_refs(written, refs)
    deletes = columns.keys_array(sorted(k.encode() for k, r in changes.items() if r is None))
    if carried is not None:
        more, gone = carried
        if not len(writes):
            writes = more
        elif len(more):
            both = np.concatenate([writes.keys, more.keys])
            writes = take_from([writes, more], np.argsort(both, kind="stable"))
        deletes = np.unique(np.concatenate([deletes, gone])) if len(gone) else deletes
    index = FragmentIndex(
        writes,
        deletes,
        columns.keys_array(sorted(k.encode() for k in reads)),
        tuple(sorted(listed)),
    )
    index_id, index_bytes = index.encode(algo)
    if len(index) <= KNOWN_ENTRIES:
        _remember(_known, index_id, index)
    return b"".join([*data_parts, index_bytes]), index, index_id, pos
