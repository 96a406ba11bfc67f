"""Writing a virtual dataset into a session: coordinates as ordinary chunks, each virtual
variable as an array whose `zarr.json` holds the source's codecs, and one staged virtual
reference per chunk. Everything that can fail is checked before the first write, so a
refused import stages nothing."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from zarrlake.errors import AlreadyExistsError, InvalidInputError
from zarrlake.format.chunk_ref import ChunkRef
from zarrlake.vc.sources import VirtualSources
from zarrlake.virtual.model import NO_PATH, VirtualArray, VirtualDataset

if TYPE_CHECKING:
    from zarrlake.session import Session

_ENCODING_KEYS = ("units", "calendar", "dtype", "_FillValue")
"""Encoding of loaded coordinates kept when they are written (how times are stored)."""


def group_prefix(group: str) -> str:
    """The store prefix of `group` (slashes stripped); InvalidInputError unless a string."""
    if not isinstance(group, str):
        raise InvalidInputError(f"group must be a string path, not {group!r}")
    return group.strip("/")


def _key(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def array_document(arr: VirtualArray, shape: list[int]) -> bytes:
    """The array's `zarr.json`, as zarr itself encodes it (attributes made JSON-safe)."""
    from xarray.backends.zarr import encode_zarr_attr_value
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.metadata.v3 import ArrayV3Metadata

    doc = {
        **arr.metadata,
        "shape": shape,
        "dimension_names": list(arr.dims),
        "attributes": {k: encode_zarr_attr_value(v) for k, v in arr.attrs.items()},
    }
    meta = ArrayV3Metadata.from_dict(doc)
    return meta.to_buffer_dict(default_buffer_prototype())["zarr.json"].to_bytes()


def _existing(session: Session, prefix: str) -> dict[str, Any] | None:
    """The group's documents (name -> zarr.json) if the group exists, else None."""
    raw = session.read(_key(prefix, "zarr.json"))
    if raw is None:
        return None
    if json.loads(raw).get("node_type") != "group":
        raise InvalidInputError(f"{prefix or '/'} is an array, not a group; choose a group path")
    out = {}
    for name in session.list_dir(prefix):
        doc = session.read(_key(prefix, f"{name}/zarr.json"))
        if doc is not None:
            out[name] = json.loads(doc)
    return out


class _Plan:
    """What one write will stage: metadata documents, references, loaded coordinates."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.docs: list[tuple[str, bytes]] = []
        self.refs: list[tuple[str, ChunkRef]] = []
        self.inlined: list[tuple[str, bytes]] = []

    def add_array(
        self, name: str, arr: VirtualArray, shape: list[int], first: tuple[int, ...], ids: dict
    ) -> None:
        path = _key(self.prefix, name)
        self.docs.append((f"{path}/zarr.json", array_document(arr, shape)))
        where = np.nonzero(arr.paths != NO_PATH)
        at = np.stack(where, axis=1) + np.asarray(first, np.int64) if where else None
        paths = arr.paths[where]
        offsets, lengths = arr.offsets[where].tolist(), arr.lengths[where].tolist()
        for i, idx in enumerate(at.tolist() if at is not None else []):
            url = str(paths[i])
            key = f"{path}/c/" + "/".join(map(str, idx)) if idx else f"{path}/c"
            self.refs.append((key, ChunkRef.virtual(url, offsets[i], lengths[i], ids[url])))
        for idx, data in arr.inlined.items():
            shifted = [i + f for i, f in zip(idx, first, strict=True)]
            key = f"{path}/c/" + "/".join(map(str, shifted)) if shifted else f"{path}/c"
            self.inlined.append((key, data))


def _coords_dataset(ds: VirtualDataset, names: list[str]) -> xr.Dataset:
    out = {}
    for name in names:
        var = ds.coords[name].copy(deep=False)
        var.encoding = {k: v for k, v in var.encoding.items() if k in _ENCODING_KEYS}
        out[name] = var
    return xr.Dataset(out, attrs=ds.attrs)


def _appendable(label: str, path: str, arr: VirtualArray, doc: dict | None, axis: int) -> int:
    """The length along `axis` of the stored array `doc` that `arr` is to follow;
    InvalidInputError unless all else (shape, dtype, chunks, codecs) matches."""
    if doc is None or doc.get("node_type") != "array":
        raise InvalidInputError(
            f"{label}: there is no array {path} to append to; import the first files without append"
        )

    def layout(d: dict) -> tuple:
        other = [n for i, n in enumerate(d["shape"]) if i != axis]
        return other, {k: v for k, v in d.items() if k not in ("shape", "attributes")}

    if layout(doc) != layout(json.loads(array_document(arr, list(arr.shape)))):
        raise InvalidInputError(
            f"{label}: does not match {path} (shape, dtype, chunks or codecs)"
            "; import files of the same layout, or into another group"
        )
    stored = int(doc["shape"][axis])
    if stored % arr.chunks[axis]:
        raise InvalidInputError(
            f"{path} has {stored} steps along its axis {axis}, not a multiple of its chunk "
            f"size {arr.chunks[axis]}: cannot append"
            "; import into another group"
        )
    return stored


def _append_plan(
    session: Session, ds: VirtualDataset, plan: _Plan, existing: dict, dim: str
) -> list[str]:
    """Plan appending `ds` after the group's data along `dim`; returns the coordinates to
    append. InvalidInputError if it overlaps or does not match what is there."""
    where = plan.prefix or "/"
    if dim not in existing:
        raise InvalidInputError(
            f"group {where} exists but has no coordinate {dim!r}; import into another group"
        )
    old = xr.open_zarr(session.store, group=plan.prefix or None, consolidated=False)
    new_first = ds.coords[dim].values[0]
    if len(old[dim]) and not old[dim].values[-1] < new_first:
        raise InvalidInputError(
            f"{ds.label} overlaps the data already in group {where} along {dim!r} "
            f"(which reaches {old[dim].values[-1]})"
            "; append only files that follow the data already there"
        )
    for name, var in ds.coords.items():
        if dim not in var.dims and name in old.coords and not old[name].variable.equals(var):
            raise InvalidInputError(
                f"{ds.label}: coordinate {name!r} differs from group {where}"
                "; import into another group"
            )
    for name, arr in ds.arrays.items():
        axis = arr.dims.index(dim)
        stored = _appendable(ds.label, f"{where}/{name}", arr, existing.get(name), axis)
        shape = list(arr.shape)
        shape[axis] += stored
        first = tuple(stored // arr.chunks[axis] if i == axis else 0 for i in range(len(shape)))
        plan.add_array(name, arr, shape, first, ds.sources)
    return [n for n, v in ds.coords.items() if dim in v.dims]


def write_dataset(
    session: Session, ds: VirtualDataset, group: str = "", append_dim: str | None = None
) -> None:
    """Stage `ds` under `group`; with `append_dim`, after what an existing group holds."""
    ctx = session._engine.context
    VirtualSources(ctx.meta, ctx.refs.partition).check(sorted(ds.urls()))
    reader = ctx.objects.sources
    sources = dict(ds.sources)
    for url in sorted(ds.urls() - set(sources)):
        sources[url] = reader.identity(url)
    ds = VirtualDataset(ds.coords, ds.arrays, ds.attrs, sources, ds.label)
    plan = _Plan(group_prefix(group))
    existing = _existing(session, plan.prefix)
    if existing is not None and append_dim is not None:
        appended = _append_plan(session, ds, plan, existing, append_dim)
    else:
        taken = [n for n in ds.arrays if existing and n in existing]
        if taken:
            where = plan.prefix or "/"
            raise AlreadyExistsError(
                f"group {where} already has array(s) {', '.join(taken)}: import into another "
                "group, or append along a dimension (append_dim)"
            )
        for name, arr in ds.arrays.items():
            plan.add_array(name, arr, list(arr.shape), (0,) * len(arr.shape), ds.sources)
        appended = None
    # Checked; now write: coordinates through xarray, then documents and references.
    target = {"group": plan.prefix or None, "zarr_format": 3, "consolidated": False}
    if appended is None:
        _coords_dataset(ds, list(ds.coords)).to_zarr(session.store, mode="a", **target)
    elif appended:
        _coords_dataset(ds, appended).to_zarr(session.store, append_dim=append_dim, **target)
    session.write_many(plan.docs + plan.inlined)
    session._engine.stage(list(plan.refs))
