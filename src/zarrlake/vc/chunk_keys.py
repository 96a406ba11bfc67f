"""Mapping store keys to the node (array or group) they belong to and to chunk coordinates."""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from zarrlake.format.shard import ShardLayout, layout_of, split_inner_key
from zarrlake.format.snapshot import is_meta_key, node_path

if TYPE_CHECKING:
    from zarr.core.chunk_key_encodings import ChunkKeyEncoding
    from zarr.core.common import JSON


def load_doc(doc: bytes | None) -> dict:
    """A zarr.json document as a dict; {} when absent, malformed or not an object."""
    if not doc:
        return {}
    try:
        value = json.loads(doc)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def is_array_doc(doc: bytes | None) -> bool:
    """Whether a zarr.json document describes an array (else a group or nothing)."""
    return load_doc(doc).get("node_type") == "array"


DEFAULT_ENCODING: dict[str, JSON] = {"name": "default", "configuration": {"separator": "/"}}


class KeyNamer:
    """Names keys by node path and chunk coordinates, given metadata documents
    (metadata key -> zarr.json bytes) of one or more snapshots."""

    def __init__(self, *docs: Mapping[str, bytes]) -> None:
        self.docs: dict[str, bytes] = {}
        for d in docs:
            self.docs.update(d)
        self._encodings: dict[str, ChunkKeyEncoding] = {}

    def node_of(self, key: str) -> str:
        """The deepest node whose metadata exists and whose path prefixes the key."""
        if is_meta_key(key):
            return node_path(key)
        parts = key.split("/")
        for n in range(len(parts) - 1, 0, -1):
            path = "/".join(parts[:n])
            if f"{path}/zarr.json" in self.docs:
                return path
        return "/".join(parts[:-1])

    def coords(self, node: str, key: str) -> tuple[int, ...] | None:
        """Chunk coordinates of `key` in array `node`, per its chunk key encoding (zarr's
        own decoder, looked up once per node); None if `key` is not a chunk key."""
        inner = split_inner_key(key)
        if inner is not None:  # an inner chunk: its coordinates in the grid of inner chunks
            shard = self.coords(node, inner[0])
            layout = layout_of(self.docs.get(f"{node}/zarr.json" if node else "zarr.json"))
            return None if shard is None or layout is None else layout.coords(shard, inner[1])
        suffix = key[len(node) + 1 :] if node else key
        try:
            return tuple(int(c) for c in self._encoding(node).decode_chunk_key(suffix))
        except ValueError:
            return None

    def _encoding(self, node: str) -> ChunkKeyEncoding:
        enc = self._encodings.get(node)
        if enc is None:
            from zarr.core.chunk_key_encodings import parse_chunk_key_encoding

            doc = load_doc(self.docs.get(f"{node}/zarr.json" if node else "zarr.json"))
            try:
                enc = parse_chunk_key_encoding(doc.get("chunk_key_encoding") or DEFAULT_ENCODING)
            except (TypeError, ValueError, KeyError):
                enc = parse_chunk_key_encoding(DEFAULT_ENCODING)
            self._encodings[node] = enc
        return enc

    def name(self, key: str) -> tuple[str, tuple[int, ...] | None]:
        """(node path, chunk coordinates or None) of a store key."""
        node = self.node_of(key)
        return node, self.coords(node, key)

    def layout(self, node: str) -> ShardLayout | None:
        """The shard layout of array `node` if zarrlake stores its shards as inner chunks."""
        return layout_of(self.docs.get(f"{node}/zarr.json" if node else "zarr.json"))

    def inner_of_shard(self, node: str, key: str) -> list[tuple[int, ...]] | None:
        """The coordinates (in the grid of inner chunks) of every inner chunk inside the
        array's shape of the shard `key` when it is a shard stored whole (written before
        shards were split) of an array whose shards are split; None for other keys."""
        if split_inner_key(key) is not None:
            return None
        layout = self.layout(node)
        shard = None if layout is None else self.coords(node, key)
        if layout is None or shard is None or len(shard) != len(layout.chunks_per_shard):
            return None
        doc = load_doc(self.docs.get(f"{node}/zarr.json" if node else "zarr.json"))
        try:
            shape = [int(n) for n in doc["shape"]]
            shard_shape = [int(n) for n in doc["chunk_grid"]["configuration"]["chunk_shape"]]
        except (KeyError, TypeError, ValueError):
            return None
        per = layout.chunks_per_shard
        inner = [s // n for s, n in zip(shard_shape, per, strict=True)]
        ranges = [
            range(k * n, min((k + 1) * n, -(-size // c)))
            for k, n, size, c in zip(shard, per, shape, inner, strict=True)
        ]
        return list(itertools.product(*ranges))
