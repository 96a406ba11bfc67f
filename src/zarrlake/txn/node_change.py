"""Refusing a `zarr.json` write that changes a node's type over what exists below it.

An array's keys below its path are its chunks, a group's are its children. Writing a group
document over an array that has chunks (or an array document over a group that has
children) would leave them behind as junk zarr cannot reach, or read them as something they
are not, so it is refused until the session deletes them (as zarr does when it overwrites a
node).
"""

from __future__ import annotations

from zarrlake._util.zarr_metadata import node_type_of
from zarrlake.errors import InvalidInputError
from zarrlake.txn.overlay import Overlay


def first_key_below(overlay: Overlay, key: str) -> str | None:
    """A key the session sees below the node of metadata key `key` (other than `key`),
    or None. Staged writes are looked at first; no read is recorded."""
    prefix = key[: -len("zarr.json")]  # "a/b/" or "" for the root
    staged = overlay.staged_keys(prefix)  # key -> deleted?
    for k, deleted in staged.items():
        if not deleted and k != key:
            return k
    for k in overlay.view.keys(prefix):
        if k != key and not staged.get(k, False):
            return k
    return None


def check_node_change(overlay: Overlay, key: str, node_type: str) -> None:
    """Raise InvalidInputError if writing a `node_type` document under `key` turns an
    array with chunks into a group, or a group with children into an array."""
    ref = overlay.lookup(key)
    if ref is None:
        return
    was = node_type_of(bytes(overlay.objects.read_ref(ref, f"key {key!r}")))
    if was not in ("array", "group") or was == node_type:
        return
    below = first_key_below(overlay, key)
    if below is None:
        return
    node = key[: -len("zarr.json")].rstrip("/") or "/"
    what, into = ("chunks", "a group") if was == "array" else ("children", "an array")
    raise InvalidInputError(
        f"metadata document {key!r} would turn the {was} {node!r} into {into} while it has "
        f"{what} (e.g. {below!r}): delete them first (in this session), then write it"
    )
