"""Snapshot roots: the node metadata documents plus the index of manifest ranges.

Metadata keys (`zarr.json`, `<path>/zarr.json`) are held inline in the root, so opening a
repository and listing its groups and arrays costs one object read. Every other key lives in
the manifest ranges; the root holds each range's first key, entry count and object id.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from zarrlake.format import columns, envelope
from zarrlake.format.digest import Hash


def is_meta_key(key: str) -> bool:
    """Whether `key` is a node metadata document, which the snapshot root holds inline."""
    return key == "zarr.json" or key.endswith("/zarr.json")


def node_path(meta_key: str) -> str:
    """'a/b/zarr.json' -> 'a/b'; 'zarr.json' -> ''."""
    return meta_key[: -len("zarr.json")].rstrip("/")


def meta_keys_above(key: str) -> list[str]:
    """The metadata keys of the nodes above chunk key `key`, top first: 'a/b/c/0' ->
    ['a/zarr.json', 'a/b/zarr.json', 'a/b/c/zarr.json'] (its array is one of them)."""
    parts = key.split("/")
    return ["/".join(parts[:n]) + "/zarr.json" for n in range(1, len(parts))]


@dataclass(frozen=True)
class RangeIndex:
    """The snapshot's directory of manifest ranges: first key, object id and entry count of each."""

    first_keys: np.ndarray  # S<n>, sorted
    ids: tuple[str, ...]
    counts: np.ndarray  # uint64

    @classmethod
    def empty(cls) -> RangeIndex:
        """The index of a snapshot without chunks."""
        return cls(columns.keys_array([]), (), np.zeros(0, np.uint64))

    def __len__(self) -> int:
        return len(self.ids)

    def locate(self, key: bytes) -> int:
        """Index of the range that holds (or would hold) `key`; -1 when there are none."""
        if not self.ids:
            return -1
        return max(bisect_right(self.first_keys, key) - 1, 0)  # (see ManifestRange.index)

    def total(self) -> int:
        """The number of chunk entries over all ranges."""
        return int(self.counts.sum())


@dataclass(frozen=True)
class SnapshotRoot:
    """The root of a snapshot: every node's metadata document plus the range index."""

    meta: dict[str, bytes] = field(default_factory=dict)  # metadata key -> document bytes
    ranges: RangeIndex = field(default_factory=RangeIndex.empty)

    def encode(self, algo: Hash = Hash.SHA256) -> tuple[str, bytes]:
        """Frame the root as a columnar object; returns (object id, bytes)."""
        keys = sorted(self.meta)
        docs = [self.meta[k] for k in keys]
        offsets = np.cumsum([0] + [len(d) for d in docs], dtype=np.uint64)
        payload = columns.pack(
            {"meta_keys": keys, "range_ids": list(self.ranges.ids)},
            {
                "meta_offsets": offsets,
                "meta_docs": np.frombuffer(b"".join(docs), np.uint8),
                "range_first": self.ranges.first_keys,
                "range_counts": self.ranges.counts,
            },
        )
        return envelope.encode(envelope.KIND_SNAPSHOT, payload, algo)

    @classmethod
    def decode(cls, oid: str, data: bytes) -> SnapshotRoot:
        """Read back a snapshot root stored under `oid`, verifying its checksum."""
        payload = envelope.decode(envelope.KIND_SNAPSHOT, oid, data)
        meta, c = columns.unpack(payload, f"snapshot object {oid}")
        offs = c["meta_offsets"].tolist()
        blob = c["meta_docs"].tobytes()
        docs = {k: blob[offs[i] : offs[i + 1]] for i, k in enumerate(meta["meta_keys"])}
        ranges = RangeIndex(c["range_first"], tuple(meta["range_ids"]), c["range_counts"])
        return cls(docs, ranges)
