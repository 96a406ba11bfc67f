"""Checking zarr v3 metadata documents (`zarr.json`) when a session writes them, and in fsck.

Every `zarr.json` must be what zarr itself could open: a JSON object declaring
`"zarr_format": 3` and a `node_type` of "array" or "group" that parses with zarr's own
metadata classes (the path zarr takes when it reads a `zarr.json`). Anything else is refused
when written, naming its key, instead of being committed and breaking every later reader.
"""

from __future__ import annotations

import json
from typing import Literal

from zarrlake.errors import InvalidInputError

NodeType = Literal["array", "group"]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def check_metadata(key: str, data: bytes | memoryview) -> NodeType:
    """The node type of the `zarr.json` document `data` stored under `key`; raises
    InvalidInputError naming `key` and the reason when zarr could not open it."""
    try:
        doc = json.loads(bytes(data))  # as zarr does (bytes: UTF-8/16/32; NaN and Infinity allowed)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise InvalidInputError(
            f"metadata document {key!r} is not JSON: {_first_line(e)}; write valid JSON"
        ) from e
    if not isinstance(doc, dict):
        raise InvalidInputError(
            f"metadata document {key!r} must be a JSON object, not {type(doc).__name__}"
        )
    if doc.get("zarr_format") != 3:
        found = repr(doc["zarr_format"]) if "zarr_format" in doc else "missing"
        raise InvalidInputError(
            f"metadata document {key!r}: zarr_format must be 3 (zarr.json is zarr v3 "
            f"metadata), not {found}"
        )
    node_type = doc.get("node_type")
    if node_type not in ("array", "group"):
        found = repr(node_type) if "node_type" in doc else "missing"
        raise InvalidInputError(
            f"metadata document {key!r}: node_type must be 'array' or 'group', not {found}"
        )
    # zarr's own reader (zarr.core.group._build_metadata_v3) dispatches to these two classes.
    from zarr.core.group import GroupMetadata
    from zarr.core.metadata.v3 import ArrayV3Metadata

    path = key[: -len("zarr.json")].rstrip("/")  # the node, for zarr's warnings
    parse = ArrayV3Metadata.from_dict if node_type == "array" else GroupMetadata.from_dict
    try:
        parse(doc, path=path)
    except Exception as e:  # zarr raises ValueError, TypeError, KeyError, ... on bad fields
        detail = _first_line(e)
        if isinstance(e, KeyError):
            detail = f"missing field {detail}"
        raise InvalidInputError(
            f"metadata document {key!r} is not valid zarr v3: {detail}"
            "; write zarr v3 metadata (zarr_format 3)"
        ) from e
    return node_type


def node_type_of(data: bytes) -> str | None:
    """The `node_type` a stored `zarr.json` declares, without validating the rest (None if
    it declares none): what the node was before a write replaces its document."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    node_type = doc.get("node_type") if isinstance(doc, dict) else None
    return node_type if isinstance(node_type, str) else None
