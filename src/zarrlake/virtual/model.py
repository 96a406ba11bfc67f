"""Virtual datasets as plain data: coordinates in memory, and per variable its zarr metadata
and a grid of (source URL, offset, length) references. Small and picklable, so Spark tasks
can return one per file and the driver can put them together in order."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import xarray as xr

from zarrlake.errors import InvalidInputError

NO_PATH = ""
"""The path of a grid position with no chunk (it reads as the fill value)."""


@dataclass(frozen=True)
class VirtualArray:
    """One virtual variable: dims, attributes, zarr v3 metadata (no attributes, no
    dimension names) and its chunk grid of references."""

    dims: tuple[str, ...]
    attrs: dict[str, Any]
    metadata: dict[str, Any]
    paths: np.ndarray  # object (str), chunk-grid shaped; NO_PATH where there is no chunk
    offsets: np.ndarray  # uint64
    lengths: np.ndarray  # uint64
    inlined: dict[tuple[int, ...], bytes] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape, from its metadata."""
        return tuple(self.metadata["shape"])

    @property
    def chunks(self) -> tuple[int, ...]:
        """The array's chunk shape, from its metadata."""
        return tuple(self.metadata["chunk_grid"]["configuration"]["chunk_shape"])

    def layout(self) -> dict[str, Any]:
        """What must agree for two arrays to be put together: all metadata but the shape."""
        return {k: v for k, v in self.metadata.items() if k != "shape"}

    def refs(self) -> int:
        """How many chunks hold a reference (the others read as fill value)."""
        return int((self.paths != NO_PATH).sum())


@dataclass(frozen=True)
class VirtualDataset:
    """A virtual dataset, from one file (`sources` then names it) or put together."""

    coords: dict[str, xr.Variable]  # loaded in memory: written as ordinary chunks
    arrays: dict[str, VirtualArray]
    attrs: dict[str, Any]
    sources: dict[str, str]  # URL -> identity at import
    label: str = ""  # the file it came from, for messages

    def urls(self) -> set[str]:
        """Every source URL the dataset's references point into."""
        out: set[str] = set()
        for arr in self.arrays.values():
            out.update(str(p) for p in np.unique(arr.paths) if p != NO_PATH)
        return out


def from_xarray(vds: xr.Dataset, sources: dict[str, str], label: str = "") -> VirtualDataset:
    """A VirtualiZarr dataset (ManifestArray variables) as a VirtualDataset."""
    from virtualizarr.manifests import ManifestArray

    coords: dict[str, xr.Variable] = {}
    arrays: dict[str, VirtualArray] = {}
    for name, var in vds.variables.items():
        if isinstance(var.data, ManifestArray):
            manifest = var.data.manifest
            meta = var.data.metadata.to_dict()
            meta.pop("attributes", None)
            meta.pop("dimension_names", None)
            meta["chunk_key_encoding"] = {"name": "default", "configuration": {"separator": "/"}}
            paths = np.asarray(manifest._paths, dtype=object)
            inlined = dict(manifest._inlined)
            for idx in inlined:
                paths[idx] = NO_PATH
            arrays[str(name)] = VirtualArray(
                tuple(str(d) for d in var.dims),
                dict(var.attrs),
                meta,
                paths,
                np.asarray(manifest._offsets, np.uint64),
                np.asarray(manifest._lengths, np.uint64),
                inlined,
            )
        else:
            coords[str(name)] = var.load() if hasattr(var, "load") else var
    return VirtualDataset(coords, arrays, dict(vds.attrs), dict(sources), label)


def _concat_dim_values(ds: VirtualDataset, dim: str) -> np.ndarray:
    var = ds.coords.get(dim)
    if var is None or var.dims != (dim,):
        raise InvalidInputError(
            f"{ds.label or 'the dataset'} has no coordinate {dim!r} to join on"
            "; add that coordinate, or import the files separately"
        )
    return np.asarray(var.values)


def concat(parts: list[VirtualDataset], dim: str) -> VirtualDataset:
    """Datasets put together along `dim`, ordered by its coordinate. Overlapping parts, and
    parts that differ in variables, shapes, dtypes, codecs or other coordinates, raise
    InvalidInputError naming both."""
    if not parts:
        raise InvalidInputError("no files to import; give at least one file")
    firsts = [_concat_dim_values(p, dim) for p in parts]
    order = sorted(range(len(parts)), key=lambda i: (firsts[i][0] if len(firsts[i]) else 0, i))
    parts = [parts[i] for i in order]
    values = [firsts[i] for i in order]
    for a, b, va, vb in zip(parts, parts[1:], values, values[1:], strict=False):
        if len(va) and len(vb) and not va[-1] < vb[0]:
            raise InvalidInputError(
                f"{a.label} and {b.label} overlap along {dim!r} (both cover {vb[0]})"
                "; leave one of them out"
            )
    for p in parts[1:]:
        check_compatible(parts[0], p, dim)
    coords = dict(parts[0].coords)
    for name, var in parts[0].coords.items():
        if dim in var.dims:
            coords[name] = xr.Variable.concat([p.coords[name] for p in parts], dim)
    arrays = {
        name: concat_arrays([p.arrays[name] for p in parts], dim, [p.label for p in parts])
        for name in parts[0].arrays
    }
    sources: dict[str, str] = {}
    for p in parts:
        sources.update(p.sources)
    return VirtualDataset(coords, arrays, dict(parts[0].attrs), sources, parts[0].label)


def check_compatible(a: VirtualDataset, b: VirtualDataset, dim: str) -> None:
    """InvalidInputError naming both unless `b` can follow `a` along `dim`."""

    def fail(what: str) -> None:
        raise InvalidInputError(
            f"{a.label} and {b.label} cannot be joined along {dim!r}: {what}"
            "; import them separately"
        )

    if set(a.arrays) != set(b.arrays):
        fail(f"variables {sorted(a.arrays)} vs {sorted(b.arrays)}")
    if set(a.coords) != set(b.coords):
        fail(f"coordinates {sorted(a.coords)} vs {sorted(b.coords)}")
    for name, va in a.arrays.items():
        vb = b.arrays[name]
        if va.dims != vb.dims:
            fail(f"{name!r} has dimensions {va.dims} vs {vb.dims}")
        if dim not in va.dims:
            fail(f"{name!r} does not have the dimension {dim!r}")
        if va.metadata["data_type"] != vb.metadata["data_type"]:
            fail(f"{name!r} has dtype {va.metadata['data_type']} vs {vb.metadata['data_type']}")
        axis = va.dims.index(dim)
        same = [n for i, n in enumerate(va.shape) if i != axis]
        if same != [n for i, n in enumerate(vb.shape) if i != axis]:
            fail(f"{name!r} has shape {va.shape} vs {vb.shape}")
        if va.layout() != vb.layout():
            fail(f"{name!r} is stored differently (chunks, codecs or fill value)")
    for name, ca in a.coords.items():
        cb = b.coords[name]
        if dim not in ca.dims and not ca.equals(cb):
            fail(f"coordinate {name!r} differs")


def concat_arrays(arrays: list[VirtualArray], dim: str, labels: list[str]) -> VirtualArray:
    """Reference grids joined along `dim`; every part but the last must fill whole chunks."""
    first = arrays[0]
    axis = first.dims.index(dim)
    step = first.chunks[axis]
    offset = 0
    inlined: dict[tuple[int, ...], bytes] = {}
    for arr, label, nxt in zip(arrays, labels, [*labels[1:], ""], strict=True):
        if nxt and arr.shape[axis] % step:
            raise InvalidInputError(
                f"{label} has {arr.shape[axis]} steps along {dim!r}, not a multiple of its "
                f"chunk size {step}: {nxt} cannot follow it without rechunking"
                "; import them with chunks that divide that length, or as separate arrays"
            )
        for idx, data in arr.inlined.items():
            inlined[(*idx[:axis], idx[axis] + offset, *idx[axis + 1 :])] = data
        offset += arr.paths.shape[axis]
    shape = list(first.shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    return replace(
        first,
        metadata={**first.metadata, "shape": shape},
        paths=np.concatenate([a.paths for a in arrays], axis=axis),
        offsets=np.concatenate([a.offsets for a in arrays], axis=axis),
        lengths=np.concatenate([a.lengths for a in arrays], axis=axis),
        inlined=inlined,
    )
