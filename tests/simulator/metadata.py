"""Metadata documents under simulation: what zarr writes to a session's store when a user
changes an array's attributes, resizes it or creates a new array (zarr's own metadata
classes make the bytes), and the model's reading of them: documents compared by content,
how a document changed (attributes only, or its structure), and the attribute merge of a
three-way merge.

The actors write these documents through `Session.write`/`delete` rather than through
`zarr.open_array(session.store)`: zarr's synchronous API runs its coroutines on an event
loop thread, which a scheduler that runs every actor as a greenlet of one thread cannot
interleave. The bytes are zarr's all the same.
"""

from __future__ import annotations

import json
from typing import Any

from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata.v3 import ArrayV3Metadata

META_SUFFIX = "zarr.json"
ATTRIBUTE_NAMES = ("units", "scale")
ATTRIBUTE_VALUES = ("m", "km", 1, 2)
SHAPES = (4, 6)
"""Shapes resizes choose (chunk keys 0..5 exist at 6; a shrink to 4 deletes 4 and 5)."""
NEW_ARRAY = "b/zarr.json"
"""The node actors create (and delete) after set-up."""


def is_meta(key: str) -> bool:
    """Whether `key` is a node's metadata document."""
    return key == META_SUFFIX or key.endswith("/" + META_SUFFIX)


def node_of(key: str) -> str:
    """The node a metadata document describes ('' for the root)."""
    return key[: -len(META_SUFFIX)].rstrip("/")


def canonical(doc: bytes | None) -> bytes | None:
    """`doc` in one spelling (sorted keys, no spaces): the model compares content, not
    layout (a merge writes the attributes it merged in its own layout)."""
    if doc is None:
        return None
    try:
        parsed = json.loads(doc)
    except ValueError:
        return doc
    return json.dumps(parsed, sort_keys=True, separators=(",", ":")).encode()


def _zarr_bytes(meta: ArrayV3Metadata) -> bytes:
    return meta.to_buffer_dict(default_buffer_prototype())["zarr.json"].to_bytes()


def _load(doc: bytes) -> ArrayV3Metadata:
    return ArrayV3Metadata.from_dict(json.loads(doc))


def with_attribute(doc: bytes, name: str, value: Any) -> bytes:
    """The document zarr writes for `array.attrs[name] = value` on the array `doc` describes."""
    meta = _load(doc)
    attrs = dict(meta.attributes)
    attrs[name] = value
    return _zarr_bytes(meta.update_attributes(attrs))


def resized(doc: bytes, length: int) -> bytes:
    """The document zarr writes for `array.resize((length,))`."""
    return _zarr_bytes(_load(doc).update_shape((length,)))


def new_array(shape: int, units: str) -> bytes:
    """The document zarr writes for a new one-dimensional uint8 array with an attribute."""
    meta = ArrayV3Metadata.from_dict(
        {
            "zarr_format": 3,
            "node_type": "array",
            "shape": [shape],
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0,
            "codecs": [{"name": "bytes"}],
            "attributes": {"units": units},
        }
    )
    return _zarr_bytes(meta)


def shape_of(doc: bytes | None) -> int | None:
    """The length of the one-dimensional array `doc` describes (None: no array)."""
    if doc is None:
        return None
    try:
        return int(json.loads(doc)["shape"][0])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def change_kind(old: bytes | None, new: bytes | None) -> str | None:
    """How a node's document changed, by content: None (it did not), 'created', 'deleted',
    'attributes' (only they changed), or 'structure' (shape, chunks, type...)."""
    if canonical(old) == canonical(new):
        return None
    if old is None:
        return "created"
    if new is None:
        return "deleted"
    a, b = json.loads(old), json.loads(new)
    a.pop("attributes", None)
    b.pop("attributes", None)
    return "attributes" if a == b else "structure"


def is_array(*docs: bytes | None) -> bool:
    """Whether any of the documents describes an array."""
    for doc in docs:
        if doc is not None:
            try:
                if json.loads(doc).get("node_type") == "array":
                    return True
            except ValueError:
                continue
    return False


def guards_chunks(old: bytes | None, new: bytes | None) -> bool:
    """Whether this change of a node conflicts with chunk writes under it on the other side
    (a resize, re-chunk, re-type or creation of an array, or a deletion)."""
    kind = change_kind(old, new)
    if kind is None or kind == "attributes":
        return False
    return kind == "deleted" or is_array(old, new)


def merge_attributes(base: bytes | None, ours: bytes, theirs: bytes) -> bytes | None:
    """Both sides changed only attributes: ours with the attributes merged name by name
    (canonical), or None when they set one differently."""
    missing = object()
    b = (json.loads(base) if base else {}).get("attributes") or {}
    o_doc = json.loads(ours)
    o, t = o_doc.get("attributes") or {}, json.loads(theirs).get("attributes") or {}
    merged = {}
    for name in sorted(b.keys() | o.keys() | t.keys()):
        bv, ov, tv = (d.get(name, missing) for d in (b, o, t))
        if ov == tv:
            value = ov
        elif ov == bv:
            value = tv
        elif tv == bv:
            value = ov
        else:
            return None
        if value is not missing:
            merged[name] = value
    o_doc["attributes"] = merged
    return canonical(json.dumps(o_doc).encode())


def under(node: str, key: str) -> bool:
    """Whether data key `key` lies inside node `node`."""
    return key.startswith(node + "/") if node else True
