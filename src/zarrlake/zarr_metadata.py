"""Checking zarr v3 metadata documents when a session writes them.

A `zarr.json` that declares `"zarr_format": 3` must parse with zarr's own metadata classes,
so a malformed document is refused when written (naming its key) instead of breaking every
later reader. Other bytes pass through unchanged: the store stays a faithful key-value store
for zarr v2 documents and for whatever a caller stores under such a key.
"""

from __future__ import annotations

import json

from zarrlake.errors import InvalidInputError


def check_metadata(key: str, data: bytes) -> None:
    """Refuse a zarr v3 metadata document that zarr itself could not open.

    Raises InvalidInputError naming `key` when the document's node_type is unknown or its fields are
    invalid; other JSON (and non-v3 documents) is left alone."""
    try:
        doc = json.loads(data)
    except ValueError:
        return
    if not isinstance(doc, dict) or doc.get("zarr_format") != 3:
        return
    from zarr.core.group import GroupMetadata
    from zarr.core.metadata.v3 import ArrayV3Metadata

    parsers = {"array": ArrayV3Metadata.from_dict, "group": GroupMetadata.from_dict}
    parse = parsers.get(doc.get("node_type"))  # type: ignore[arg-type]
    if parse is None:
        raise InvalidInputError(
            f"metadata document {key!r}: node_type must be 'array' or 'group', "
            f"not {doc.get('node_type')!r}"
        )
    try:
        parse(dict(doc))
    except Exception as e:  # zarr raises ValueError, TypeError, KeyError, ... on bad fields
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InvalidInputError(f"metadata document {key!r} is not valid zarr v3: {detail}") from e
