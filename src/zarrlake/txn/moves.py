"""Moving a node inside a session: the checks, and the changes that carry a move out.

A move writes every key below the source again below the destination, with the reference
it has (no chunk is read or copied: the new manifests point at the same bytes), and deletes
the source's keys. The move itself is recorded beside those changes (txn/staging.py), so
diffs, blame, history and conflict reports tell it from a delete and a create (vc/moves.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from zarrlake._util.validate import check_zarr_key
from zarrlake._util.zarr_metadata import node_type_of
from zarrlake.errors import (
    AlreadyExistsError,
    Conflict,
    ConflictError,
    ConflictKind,
    InvalidInputError,
    NotFoundError,
)
from zarrlake.format import columns
from zarrlake.format.changes import Move
from zarrlake.format.manifest import ManifestRange, take_from
from zarrlake.format.snapshot import is_meta_key
from zarrlake.metastore.checks import prefix_upper_bound
from zarrlake.txn.node_change import first_key_below
from zarrlake.txn.overlay import Overlay
from zarrlake.vc.change_table import Change, ChangeTable
from zarrlake.vc.moves import rekey


@dataclass(frozen=True)
class MovePlan:
    """The changes of one move: metadata documents and staged chunk changes (few, as
    references), and the base commit's chunks under the source carried over columnar."""

    src: str
    dst: str
    meta: list[Change]
    staged: list[Change]
    carried: tuple[ManifestRange, np.ndarray]  # entries under dst, keys under src to delete


def node_arg(path: object, what: str) -> str:
    """A node path given to `move`: '/'-separated, leading and trailing '/' ignored, not
    the root."""
    if not isinstance(path, str):
        raise InvalidInputError(f"the {what} of a move must be a string, not {path!r}")
    node = path.strip("/")
    if not node:
        raise InvalidInputError(
            f"the {what} of a move cannot be the root group; name a group or array below the root"
        )
    check_zarr_key(node)
    return node


def plan(overlay: Overlay, src: str, dst: str) -> MovePlan:
    """The changes moving node `src` (a group or an array, with everything below it) to
    `dst`, as the session sees them; bad input raises before anything is staged."""
    src, dst = node_arg(src, "source"), node_arg(dst, "destination")
    if dst == src:
        raise InvalidInputError(f"cannot move {src!r} to itself; give another destination")
    if dst.startswith(src + "/"):
        raise InvalidInputError(
            f"cannot move {src!r} into itself ({dst!r} lies inside it)"
            "; give a destination outside it"
        )
    docs = overlay.metadata_documents()
    if f"{src}/zarr.json" not in docs:
        raise NotFoundError(
            f"cannot move {src!r}: there is no group or array there"
            "; run `zarrlake ls` to see the tree"
        )
    if f"{dst}/zarr.json" in docs:
        raise AlreadyExistsError(
            f"cannot move {src!r} to {dst!r}: {dst!r} exists already (a move does not "
            "replace a node: delete it first, or choose another name)"
        )
    stray = first_key_below(overlay, f"{dst}/zarr.json")
    if stray is not None:
        raise AlreadyExistsError(
            f"cannot move {src!r} to {dst!r}: keys exist below {dst!r} (e.g. {stray!r})"
            "; move to a free path, or delete those keys first"
        )
    parent = dst.rpartition("/")[0]
    parent_doc = docs.get(f"{parent}/zarr.json" if parent else "zarr.json")
    if parent and parent_doc is None:
        raise NotFoundError(
            f"cannot move {src!r} to {dst!r}: there is no group {parent!r} to hold it "
            "(create it first, e.g. zarr.open_group(session.store).require_group("
            f"{parent!r}))"
        )
    if parent_doc is not None and node_type_of(parent_doc) != "group":
        raise InvalidInputError(
            f"cannot move {src!r} to {dst!r}: {parent or '/'!r} is an array, not a group"
            "; choose a destination inside a group"
        )

    meta: list[Change] = []
    objects = overlay.objects
    for key, doc in docs.items():
        if key == f"{src}/zarr.json" or key.startswith(src + "/"):
            meta += [(dst + key[len(src) :], objects.inline(doc)), (key, None)]

    old, new = (src + "/").encode(), (dst + "/").encode()
    staged = {k: gone for k, gone in overlay.staged_keys(src + "/").items() if not is_meta_key(k)}
    changes: list[Change] = []
    for key, gone in staged.items():
        ref = None if gone else overlay.staged(key)[1]
        if ref is not None:
            changes += [(dst + key[len(src) :], ref), (key, None)]
    skip = columns.keys_array(sorted(k.encode() for k in staged))
    pieces = [r.without_keys(skip) if len(skip) else r for r in overlay.view.entries_under(old)]
    total = sum(len(r) for r in pieces)
    base = take_from(pieces, np.arange(total)) if total else ManifestRange.empty()
    if not total:
        carried = (base, columns.keys_array([]))
    else:
        carried = (replace(base, keys=rekey(base.keys, old, new)), base.keys)
    return MovePlan(src, dst, meta, changes, carried)


def check_moved(moves: tuple[Move, ...], changes: ChangeTable, meta: dict[str, bytes]) -> None:
    """ConflictError if a chunk lands below a node this session moved away and did not
    make again (another worker wrote there after the move): it would be left in no array."""
    if not moves or not len(changes.writes):
        return
    keys = changes.writes.keys
    for src, _ in moves:
        if f"{src}/zarr.json" in meta:
            continue
        prefix = (src + "/").encode()
        lo = int(np.searchsorted(keys, prefix))
        stop = prefix_upper_bound(prefix)
        hi = len(keys) if stop is None else int(np.searchsorted(keys, stop))
        if hi > lo:
            first = bytes(keys[lo]).decode()
            raise ConflictError(
                [
                    Conflict(
                        src,
                        ConflictKind.RENAMED,
                        None,
                        f"{hi - lo} chunk(s) were written below {src!r} after this session "
                        f"moved it away (e.g. {first!r}); write them below its new path",
                    )
                ]
            )
