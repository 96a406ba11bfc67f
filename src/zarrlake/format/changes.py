"""Change sets: which keys a commit wrote or deleted, and how it changed each node.

Conflict checks and diffs read change sets instead of comparing whole snapshots, so they
cost O(changes), not O(repository).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from zarrlake.errors import CorruptionError
from zarrlake.format import columns, envelope
from zarrlake.format.digest import Hash

WRITE = 1
DELETE = 2


class NodeChangeKind(StrEnum):
    """How a commit changed one node's metadata document (zarr.json); the values are what
    change sets store."""

    CREATED = "created"
    DELETED = "deleted"
    RESIZED = "resized"
    """Only the array's shape changed."""
    REDEFINED = "redefined"
    """Chunk grid, dtype, codecs or other structure changed."""
    ATTRIBUTES = "attributes"
    """Only attributes (or other harmless fields) changed."""


@dataclass(frozen=True)
class NodeChange:
    """How a commit changed one node: its kind of change and whether the node is an array (else a
    group)."""

    kind: NodeChangeKind
    is_array: bool

    def to_json(self) -> list:
        """The compact `[kind, is_array]` form stored in the change set's header."""
        return [str(self.kind), self.is_array]


@dataclass(frozen=True)
class ChangeSet:
    """The keys a commit wrote or deleted (sorted, with one op each) and its node changes."""

    keys: np.ndarray = field(default_factory=lambda: columns.keys_array([]))  # sorted
    ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))  # WRITE / DELETE
    nodes: dict[str, NodeChange] = field(default_factory=dict)  # node path -> change

    def __len__(self) -> int:
        return len(self.keys)

    def encode(self, algo: Hash = Hash.SHA256) -> tuple[str, bytes]:
        """Frame the change set as a columnar object; returns (object id, bytes)."""
        return envelope.encode_columns(
            envelope.KIND_CHANGES,
            {"nodes": {p: n.to_json() for p, n in self.nodes.items()}},
            {"keys": self.keys, "ops": self.ops},
            algo,
        )

    @classmethod
    def decode(cls, oid: str, data: bytes) -> ChangeSet:
        """Read back a change set stored under `oid`, verifying its checksum."""
        payload = envelope.decode(envelope.KIND_CHANGES, oid, data)
        meta, c = columns.unpack(payload, f"changes object {oid}")
        try:
            nodes = {
                p: NodeChange(NodeChangeKind(k), bool(a)) for p, (k, a) in meta["nodes"].items()
            }
        except ValueError as e:
            raise CorruptionError(f"changes object {oid}: {e}") from None
        return cls(c["keys"], c["ops"], nodes)
