"""Change sets: which keys a commit wrote or deleted, how it changed each node, and the
nodes it moved.

Conflict checks and diffs read change sets instead of comparing whole snapshots, so they
cost O(changes), not O(repository).

A move is also in the keys and node changes (its source deleted, its destination written
with the same references), so a reader that ignores `moves` still sees what changed.
Change sets with moves are version 2 (`"v": 2` in the header); those without keep the
version 1 encoding byte for byte.
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
VERSION = 2
"""The newest change-set version this zarrlake reads (2: moves)."""

Move = tuple[str, str]
"""A node moved: (source path, destination path), without leading slashes."""


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
    """The keys a commit wrote or deleted (sorted, with one op each), its node changes, and
    the nodes it moved, in the order they were moved."""

    keys: np.ndarray = field(default_factory=lambda: columns.keys_array([]))  # sorted
    ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))  # WRITE / DELETE
    nodes: dict[str, NodeChange] = field(default_factory=dict)  # node path -> change
    moves: tuple[Move, ...] = ()

    def __len__(self) -> int:
        return len(self.keys)

    def encode(self, algo: Hash = Hash.SHA256) -> tuple[str, bytes]:
        """Frame the change set as a columnar object; returns (object id, bytes)."""
        header: dict = {"nodes": {p: n.to_json() for p, n in self.nodes.items()}}
        if self.moves:  # without moves: the version 1 bytes (and object id) as before
            header |= {"v": VERSION, "moves": [list(m) for m in self.moves]}
        return envelope.encode_columns(
            envelope.KIND_CHANGES, header, {"keys": self.keys, "ops": self.ops}, algo
        )

    @classmethod
    def decode(cls, oid: str, data: bytes) -> ChangeSet:
        """Read back a change set stored under `oid`, verifying its checksum."""
        payload = envelope.decode(envelope.KIND_CHANGES, oid, data)
        meta, c = columns.unpack(payload, f"changes object {oid}")
        version = meta.get("v", 1)
        if not isinstance(version, int) or version > VERSION:
            raise CorruptionError(
                f"changes object {oid}: change-set version {version} is newer than this "
                f"zarrlake ({VERSION}); upgrade zarrlake to read it"
            )
        try:
            nodes = {
                p: NodeChange(NodeChangeKind(k), bool(a)) for p, (k, a) in meta["nodes"].items()
            }
            moves = tuple((str(a), str(b)) for a, b in meta.get("moves", ()))
        except (ValueError, TypeError) as e:
            raise CorruptionError(f"changes object {oid}: {e}") from None
        return cls(c["keys"], c["ops"], nodes, moves)
