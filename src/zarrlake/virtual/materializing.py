"""Replacing an array's virtual chunks by native ones: each chunk's bytes are read from its
source (checked against its identity at import) and written into the repository, for users
who want to retire the original files."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from zarrlake.errors import InvalidInputError, NotFoundError
from zarrlake.format.chunk_ref import RefKind

if TYPE_CHECKING:
    from zarrlake.session import Session

BATCH = 256
"""Chunks read and staged together."""


def materialize(session: Session, path: str) -> int:
    """Copy the virtual chunks of the array at `path` into the repository (the caller
    commits); returns how many were copied.

    Raises
    ------
    NotFoundError
        No array at `path`.
    StaleVirtualChunkError
        A source changed since import (chunks copied before it stay staged: abandon the
        session rather than commit it).
    """
    path = path.strip("/") if isinstance(path, str) else path
    doc = session.read(f"{path}/zarr.json") if isinstance(path, str) and path else None
    if doc is None:
        raise NotFoundError(f"no array at {path!r}")
    if json.loads(doc).get("node_type") != "array":
        raise InvalidInputError(f"{path!r} is a group, not an array")
    keys = session.list_prefix(f"{path}/c/") + (
        [f"{path}/c"] if session.exists(f"{path}/c") else []
    )
    virtual = []
    for key in keys:
        ref = session._engine.lookup(key)
        if ref is not None and ref.kind == RefKind.VIRTUAL:
            virtual.append((key, ref))
    objects = session._engine.context.objects
    for i in range(0, len(virtual), BATCH):  # bounded memory: a batch at a time
        batch = virtual[i : i + BATCH]
        datas = objects.map(lambda kr: objects.read_ref(kr[1], f"key {kr[0]!r}"), batch)
        session.write_many([(k, d) for (k, _), d in zip(batch, datas, strict=True)])
    return len(virtual)
