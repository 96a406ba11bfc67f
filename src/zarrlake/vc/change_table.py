"""A commit's changes, columnar: metadata documents by key, chunk writes as one sorted
manifest range, chunk deletes as one sorted key column.

Commits of millions of chunks pass through the protocol as these few arrays instead of one
Python object per chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from zarrlake.format import columns
from zarrlake.format.changes import DELETE, WRITE, Move
from zarrlake.format.chunk_ref import ChunkRef
from zarrlake.format.manifest import ManifestRange, RangeView
from zarrlake.format.snapshot import is_meta_key

Change = tuple[str, ChunkRef | None]
"""A key and its new reference (None: deleted)."""


@dataclass(frozen=True)
class ChangeTable:
    """Changes to metadata documents (key -> document, None: deleted) and to chunks."""

    meta: dict[str, bytes | None] = field(default_factory=dict)
    writes: ManifestRange | RangeView = field(default_factory=ManifestRange.empty)  # sorted
    deletes: np.ndarray = field(default_factory=lambda: columns.keys_array([]))  # sorted

    @property
    def empty(self) -> bool:
        """Whether the table changes nothing."""
        return not (self.meta or len(self.writes) or len(self.deletes))

    @classmethod
    def from_list(cls, changes: Iterable[Change]) -> ChangeTable:
        """The table of (key, reference or None) pairs; a later pair for a key wins."""
        latest: dict[str, ChunkRef | None] = dict(changes)
        meta: dict[str, bytes | None] = {}
        writes: dict[bytes, ChunkRef] = {}
        deletes: list[bytes] = []
        for key, ref in latest.items():
            if is_meta_key(key):
                meta[key] = None if ref is None else (ref.data or b"")
            elif ref is None:
                deletes.append(key.encode())
            else:
                writes[key.encode()] = ref
        keys = sorted(writes)
        return cls(
            meta,
            ManifestRange.from_refs(keys, [writes[k] for k in keys]),
            columns.keys_array(sorted(deletes)),
        )

    def to_list(self, inline: Callable[[bytes], ChunkRef]) -> list[Change]:
        """Every change as a (key, reference or None) pair, in key order; `inline` makes
        the reference of a metadata document (with the repository's digest)."""
        out: list[Change] = [(k, None if d is None else inline(d)) for k, d in self.meta.items()]
        writes = self.writes.take(slice(None))
        out += [(bytes(k).decode(), writes.ref_at(i)) for i, k in enumerate(writes.keys)]
        out += [(bytes(k).decode(), None) for k in self.deletes]
        return sorted(out, key=lambda kv: kv[0].encode())

    def __len__(self) -> int:
        return len(self.meta) + len(self.writes) + len(self.deletes)

    def keys_and_ops(self) -> tuple[np.ndarray, np.ndarray]:
        """Every changed key (sorted) with its op (WRITE or DELETE)."""
        if not self.meta and not len(self.deletes):  # chunk writes only (a small commit)
            return self.writes.keys, np.full(len(self.writes), WRITE, np.uint8)
        meta_keys = sorted(self.meta)
        mkeys = columns.keys_array([k.encode() for k in meta_keys])
        mops = np.array(
            [WRITE if self.meta[k] is not None else DELETE for k in meta_keys], np.uint8
        )
        if not len(self.deletes):  # the usual case: documents slot into the sorted writes
            at = np.searchsorted(self.writes.keys, mkeys)
            width = max(mkeys.dtype.itemsize, self.writes.keys.dtype.itemsize)
            keys = np.insert(self.writes.keys.astype(f"S{width}", copy=False), at, mkeys)
            ops = np.insert(np.full(len(self.writes), WRITE, np.uint8), at, mops)
            return keys, ops
        keys = np.concatenate([mkeys, self.writes.keys, self.deletes])
        ops = np.concatenate(
            [
                mops,
                np.full(len(self.writes), WRITE, np.uint8),
                np.full(len(self.deletes), DELETE, np.uint8),
            ]
        )
        order = np.argsort(keys, kind="stable")
        return keys[order], ops[order]

    def docs_changed_from(self, meta: dict[str, bytes]) -> ChangeTable:
        """This table less the documents `meta` already holds as they are (and deletes of
        documents it lacks): writes that change nothing there."""
        kept = {k: d for k, d in self.meta.items() if meta.get(k) != d}
        return self if len(kept) == len(self.meta) else replace(self, meta=kept)

    def without(self, keys: np.ndarray) -> ChangeTable:
        """This table less the chunk changes of `keys`."""
        if not len(keys):
            return self
        kept = self.deletes[~np.isin(self.deletes, keys)] if len(self.deletes) else self.deletes
        return ChangeTable(self.meta, self.writes.without_keys(keys), kept)


@dataclass(frozen=True)
class Gathered:
    """What a session's commit applies: its changes, what it read and listed
    (serializable sessions), fragments held in records that the commit writes out, and the
    nodes it moved (in order; their changes are in `changes` too)."""

    changes: ChangeTable
    reads: list[str]
    listed: list[str]
    blobs: list[tuple[str, bytes]]
    moves: tuple[Move, ...] = ()
    fragments: tuple[str, ...] = ()
    """The staged fragments merged (their locations, in merge order)."""
