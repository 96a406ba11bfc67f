"""What a write writes, planned on the driver from the data source options and the
DataFrame's schema: the target arrays (opened, or created), checked against the options and
the columns; which of them are data arrays (sharing their dimensions) and which coordinate
arrays (some of those dimensions); and the write's rules (overwrite, append_dim,
duplicates)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import zarr
from pyspark.sql.types import StructType

from zarrlake.errors import InvalidInputError, NotFoundError
from zarrlake.session import Session
from zarrlake.spark import options as opts
from zarrlake.spark.append import Append
from zarrlake.spark.arrays import (
    INTEGER_TYPES,
    ArrayInfo,
    check_value_type,
    create_array,
    creation_options,
    numpy_dtype,
    open_array,
)
from zarrlake.spark.duplicates import refuses_duplicates
from zarrlake.spark.layout import CELLS, CHUNKS, check_chunk_schema, layout_of, rows_grid


@dataclass(frozen=True)
class Targets:
    """A write's arrays and rules. `infos`: the data arrays (one row per cell of each);
    `coords`: coordinate arrays whose cells the rows repeat; `replace`: overwrite without
    append_dim (the arrays' contents are replaced); `append`: grow along a dimension."""

    infos: list[ArrayInfo]
    coords: list[ArrayInfo] = field(default_factory=list)
    layout: str = CELLS
    replace: bool = False
    append: Append | None = None
    refuse_duplicates: bool = True

    @property
    def everything(self) -> list[ArrayInfo]:
        """The data arrays, then the coordinate arrays."""
        return [*self.infos, *self.coords]


def plan(
    session: Session, options: Mapping[str, str], schema: StructType, overwrite: bool
) -> Targets:
    """The targets of a write into `session` (a read-only session: the arrays must exist).

    Raises
    ------
    NotFoundError
        If an array is missing and the options do not say how to create it.
    InvalidInputError
        If options contradict an existing array, or the columns do not fit the arrays.
    """
    given = {k.lower(): v for k, v in dict(options).items()}
    branch = given.get("branch") or "main"
    layout = layout_of(options)
    dim = given.get("append_dim")
    append = Append(dim.strip(), overwrite) if dim and dim.strip() else None
    fields = {f.name: f.dataType for f in schema.fields}
    arrays = {}
    for path in opts.array_paths(options):
        arrays[path] = _target(session, path, branch, options, fields, overwrite, append)
    infos = [ArrayInfo.of(a, p) for p, a in arrays.items()]
    width = max(len(i.dims) for i in infos)
    data = [i for i in infos if len(i.dims) == width]
    coords = [i for i in infos if len(i.dims) < width]
    _check_dims(data, coords)
    for info in data:
        _check_matches(arrays[info.path], info.path, options, append)
    if layout == CHUNKS:
        check_chunk_schema(schema, infos)
        data = [rows_grid(options, i) for i in data]
    else:
        check_write_schema(schema, data, coords)
    if append is not None:
        append.check(data)
    return Targets(
        data, coords, layout, overwrite and append is None, append, refuses_duplicates(options)
    )


def _target(
    session: Session,
    path: str,
    branch: str,
    options: Mapping[str, str],
    fields: dict,
    overwrite: bool,
    append: Append | None,
) -> zarr.Array:
    """Array `path`, opened; created if missing (or, with overwrite and no append_dim,
    replaced) as the creation options say."""
    try:
        array = open_array(session, path, ref=branch)
    except NotFoundError:
        if session.read_only:  # the streaming sink
            raise NotFoundError(
                f"no array {path!r} on branch {branch!r}; the streaming sink writes into "
                "existing arrays (create it with a batch write first)"
            ) from None
        create = creation_options(options)
        if create is None:
            raise NotFoundError(
                f"no array {path!r} on branch {branch!r}; to create it give options shape, "
                "chunks, dtype and dims"
            ) from None
        return create_array(session, path, _spec_of(path, create, fields, append), replace=False)
    if overwrite and append is None and (create := creation_options(options)) is not None:
        return create_array(session, path, _spec_of(path, create, fields, append), replace=True)
    return array


def _spec_of(path: str, create: dict, fields: dict, append: Append | None) -> dict:
    """The creation keywords of `path`: the options'; for an array named like one of their
    dimensions, that dimension's coordinate (1-D, the dtype of its value column). With
    append_dim, the array starts empty along it."""
    if append is not None and append.dim in create["dimension_names"]:
        shape = list(create["shape"])
        shape[create["dimension_names"].index(append.dim)] = 0
        create = {**create, "shape": tuple(shape)}
    name = path.rsplit("/", 1)[-1]
    dims = create["dimension_names"]
    if name not in dims or len(dims) == 1:
        return create
    d = dims.index(name)
    spark_type = fields.get(f"{name}_value")
    dtype = (numpy_dtype(spark_type) if spark_type is not None else None) or np.dtype("f8")
    return {
        "shape": (create["shape"][d],),
        "chunks": (create["chunks"][d],),
        "dtype": dtype,
        "dimension_names": [name],
        "fill_value": dtype.type(0),
    }


def _check_dims(data: list[ArrayInfo], coords: list[ArrayInfo]) -> None:
    dims = data[0].dims
    for info in data[1:]:
        if info.dims != dims:
            raise InvalidInputError(
                f"arrays written together must share dimensions: {data[0].path!r} has "
                f"{dims}, {info.path!r} has {info.dims}"
            )
    for info in coords:
        if not set(info.dims) <= set(dims):
            raise InvalidInputError(
                f"array {info.path!r} (dims {list(info.dims)}) is written with "
                f"{data[0].path!r} (dims {list(dims)}): its dimensions must be among those"
            )


def _check_matches(array: zarr.Array, path: str, options: Mapping[str, str], append) -> None:
    """Options shape, chunks, dims and dtype given for an existing array must describe it
    (the shape along append_dim excepted): InvalidInputError naming both otherwise."""
    dims = list(array.metadata.dimension_names or [])
    have: dict[str, object] = {
        "shape": tuple(array.shape),
        "chunks": tuple(array.chunks),
        "dims": dims,
        "dtype": str(array.dtype),
    }
    want: dict[str, object] = {}
    if (shape := opts.get_ints(options, "shape")) is not None:
        want["shape"] = shape
    if (chunks := opts.get_ints(options, "chunks")) is not None:
        want["chunks"] = chunks
    if (names := opts.get_names(options, "dims", "dimension_names")) is not None:
        want["dims"] = list(names)
    if (dtype := {k.lower(): v for k, v in options.items()}.get("dtype")) is not None:
        try:
            want["dtype"] = str(np.dtype(dtype))
        except TypeError:
            raise InvalidInputError(
                f"option dtype {dtype!r} is not a numpy dtype; give one such as 'float32'"
            ) from None
    if "shape" in want and append is not None and append.dim in dims:
        axis = dims.index(append.dim)
        shape = list(want["shape"])  # type: ignore[call-overload]
        if len(shape) == len(dims):
            shape[axis] = array.shape[axis]  # grows along append_dim
        want["shape"] = tuple(shape)
    wrong = [k for k in want if want[k] != have[k]]
    if wrong:
        is_ = ", ".join(f"{k} {_shown(have[k])}" for k in wrong)
        said = ", ".join(f"{k} {_shown(want[k])}" for k in wrong)
        raise InvalidInputError(
            f"array {path!r} exists with {is_}; the options say {said}: leave them out, or "
            "replace the array (mode('overwrite') with shape, chunks, dims and dtype)"
        )


def _shown(value: object) -> str:
    return str(value) if not isinstance(value, list) else "[" + ", ".join(map(str, value)) + "]"


def check_write_schema(
    schema: StructType, infos: list[ArrayInfo], coords: list[ArrayInfo] = ()
) -> None:
    """The DataFrame must have an integer column per dimension and a value column per array
    whose type casts to the array's dtype without changing kind."""
    dims = infos[0].dims
    fields = {f.name: f.dataType for f in schema.fields}
    missing = [d for d in dims if d not in fields]
    if missing:
        raise InvalidInputError(
            f"the DataFrame has no column(s) {missing} for dimension(s) of array "
            f"{infos[0].path!r} (dims {list(dims)}; columns {list(fields)})"
            "; add those columns, or rename them to the dimension names"
        )
    for d in dims:
        if not isinstance(fields[d], INTEGER_TYPES):
            raise InvalidInputError(
                f"dimension column {d!r} must have an integer type, not {fields[d].simpleString()}"
            )
    for info in [*infos, *coords]:
        col = info.column
        if col not in fields:
            raise InvalidInputError(
                f"the DataFrame has no value column {col!r} for array {info.path!r} "
                f"(columns {list(fields)})"
                "; add a column named after the array"
            )
        check_value_type(col, fields[col], info)
