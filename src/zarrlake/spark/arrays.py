"""What the Spark integration needs to know about one array: its dimensions, chunking and
dtype, how its rows look in Spark, and how to create it from data source options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import zarr
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StructField,
    StructType,
)

from zarrlake.errors import InvalidInputError, NotFoundError
from zarrlake.session import Session
from zarrlake.spark import options as opts

_SPARK_TYPES: dict[str, DataType] = {
    "bool": BooleanType(),
    "int8": ByteType(),
    "int16": ShortType(),
    "int32": IntegerType(),
    "int64": LongType(),
    "uint8": ShortType(),
    "uint16": IntegerType(),
    "uint32": LongType(),
    "float32": FloatType(),
    "float64": DoubleType(),
}
_WIDENED = {"uint8": "int16", "uint16": "int32", "uint32": "int64"}
"""Unsigned dtypes are read as the next wider signed Spark type."""
INTEGER_TYPES = (ByteType, ShortType, IntegerType, LongType)

_NUMPY_OF_SPARK = {
    "boolean": "bool",
    "tinyint": "int8",
    "smallint": "int16",
    "int": "int32",
    "bigint": "int64",
    "float": "float32",
    "double": "float64",
}


def numpy_dtype(data_type: DataType) -> np.dtype | None:
    """The numpy dtype of a Spark column type, None if it has none here."""
    name = _NUMPY_OF_SPARK.get(data_type.simpleString())
    return None if name is None else np.dtype(name)


def check_value_type(column: str, data_type: DataType, info: ArrayInfo) -> None:
    """InvalidInputError unless Spark values of `data_type` cast to the array's dtype
    without changing kind."""
    source = _NUMPY_OF_SPARK.get(data_type.simpleString())
    target = np.dtype(info.dtype)
    widened = target.kind == "u" and source == _WIDENED.get(str(target))  # as read back
    ok = source is not None and (
        (np.can_cast(source, target, casting="same_kind") or widened)
        and not (isinstance(data_type, BooleanType) and target.kind != "b")
    )
    if not ok:
        raise InvalidInputError(
            f"value column {column!r} has type {data_type.simpleString()}, which does not "
            f"fit array {info.path!r} of dtype {info.dtype}"
            "; cast the column to the array's dtype first"
        )


@dataclass(frozen=True)
class ArrayInfo:
    """One array's shape, chunking and naming as stored at some version. `chunks` is the
    shape of the stored objects (the shards of a sharded array), `inner` a sharded array's
    inner chunk shape (None: not sharded, or rows that follow the shards)."""

    path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dims: tuple[str, ...]
    dtype: str
    inner: tuple[int, ...] | None = None

    @property
    def unit(self) -> tuple[int, ...]:
        """The shape reads work in and chunk-layout rows have: the inner chunks of a
        sharded array (a partition reads only the inner chunks it needs), else the chunks."""
        return self.inner or self.chunks

    @property
    def per_shard(self) -> tuple[int, ...]:
        """Units per stored object along each dimension (all 1 unless sharded)."""
        return tuple(c // u for c, u in zip(self.chunks, self.unit, strict=True))

    @property
    def unit_grid(self) -> tuple[int, ...]:
        """The number of units along each dimension."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.unit, strict=True))

    @property
    def name(self) -> str:
        """The array's last path segment."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def column(self) -> str:
        """The name of the value column: the array's last path segment; `<name>_value` for
        an array named like one of its dimensions (a coordinate such as `time(time)`, whose
        index column is `time`)."""
        return f"{self.name}_value" if self.name in self.dims else self.name

    @property
    def grid(self) -> tuple[int, ...]:
        """The number of chunks along each dimension."""
        return tuple(-(-s // c) for s, c in zip(self.shape, self.chunks, strict=True))

    @property
    def spark_type(self) -> DataType:
        """The Spark type of the value column; InvalidInputError for a dtype Spark lacks."""
        try:
            return _SPARK_TYPES[self.dtype]
        except KeyError:
            raise InvalidInputError(
                f"array {self.path!r} has dtype {self.dtype}, which has no Spark column type "
                f"here (supported: {', '.join(_SPARK_TYPES)})"
                "; use one of those dtypes"
            ) from None

    @property
    def spark_dtype(self) -> str:
        """The numpy dtype of the value column as Spark holds it."""
        return _WIDENED.get(self.dtype, self.dtype)

    def schema(self) -> StructType:
        """The cell-layout schema: one long per dimension, then the value column."""
        fields = [StructField(d, LongType(), False) for d in self.dims]
        return StructType([*fields, StructField(self.column, self.spark_type, False)])

    def chunk_key(self, array: zarr.Array, coords: tuple[int, ...]) -> str:
        """The store key of chunk `coords` of `array` (its chunk key encoding applied)."""
        return f"{self.path}/{array.metadata.encode_chunk_key(coords)}"

    @classmethod
    def of(cls, array: zarr.Array, path: str) -> ArrayInfo:
        """What the data source needs of `array` at `path`; its dimension names become columns.

        Raises InvalidInputError when the array has no (or repeated) dimension names, or one equal
        to its value column."""
        dims = array.metadata.dimension_names if array.metadata.zarr_format == 3 else None
        if not dims or any(not d for d in dims):
            raise InvalidInputError(
                f"array {path!r} has no dimension_names; the Spark data source names its index "
                "columns after them (set them with zarr's dimension_names)"
            )
        if len(set(dims)) != len(dims):
            raise InvalidInputError(
                f"array {path!r} repeats a dimension name: {dims}; give each dimension its own name"
            )
        name = path.rsplit("/", 1)[-1]
        if name in dims and f"{name}_value" in dims:
            raise InvalidInputError(
                f"array {path!r}'s value column would be named like one of its dimensions {dims}"
                "; rename the array or that dimension"
            )
        chunks = array.shards or array.chunks  # the stored object is the shard
        inner = tuple(array.chunks) if array.shards else None
        return cls(path, tuple(array.shape), tuple(chunks), tuple(dims), str(array.dtype), inner)


def open_array(session: Session, path: str, *, ref: str) -> zarr.Array:
    """Open array `path` in `session`; NotFoundError naming the array and the ref if absent."""
    try:
        node = zarr.open(session.store, path=path, mode="r" if session.read_only else "r+")
    except (FileNotFoundError, KeyError, zarr.errors.NodeNotFoundError) as e:
        raise NotFoundError(
            f"no array {path!r} at {ref!r}; run `zarrlake ls REF` to see the arrays"
        ) from e
    if not isinstance(node, zarr.Array):
        raise InvalidInputError(f"{path!r} at {ref!r} is a group, not an array; give an array path")
    return node


def cast_values(values: np.ndarray, dtype: str, what: str) -> np.ndarray:
    """`values` as `dtype`; InvalidInputError naming `what` if an integer does not fit."""
    target = np.dtype(dtype)
    if values.dtype == target:
        return values
    if target.kind in "iu" and values.dtype.kind in "iu" and values.size:
        info = np.iinfo(target)
        low, high = values.min(), values.max()
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise InvalidInputError(
                f"{what} holds {bad}, outside the range of {dtype}; cast or clip the values first"
            )
    return values.astype(target)


def creation_options(options: Mapping[str, str]) -> dict | None:
    """zarr.create_array keywords from options shape/chunks/dtype/dims, or None if no shape."""
    shape = opts.get_ints(options, "shape")
    if shape is None:
        return None
    chunks = opts.get_ints(options, "chunks")
    dims = opts.get_names(options, "dims", "dimension_names")
    dtype = {k.lower(): v for k, v in options.items()}.get("dtype", "float64")
    if chunks is None or dims is None:
        raise InvalidInputError(
            "to create an array give options shape, chunks and dims (dimension names), "
            f"e.g. shape='100,100', chunks='10,10', dims='y,x'; got shape={shape}, "
            f"chunks={chunks}, dims={dims}"
        )
    if not (len(shape) == len(chunks) == len(dims)):
        raise InvalidInputError(
            f"options shape {shape}, chunks {chunks} and dims {dims} must have the same length"
        )
    if any(c == 0 for c in chunks):
        raise InvalidInputError(f"option chunks must be positive integers, not {chunks}")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise InvalidInputError(
            f"option dtype {dtype!r} is not a numpy dtype; give one such as 'float32'"
        ) from None
    if str(dt) not in _SPARK_TYPES:
        raise InvalidInputError(
            f"option dtype {dtype!r} is not supported (use one of {', '.join(_SPARK_TYPES)})"
        )
    fill = {k.lower(): v for k, v in options.items()}.get("fill_value")
    fill_value = dt.type(0) if fill is None else dt.type(fill)
    return {
        "shape": shape,
        "chunks": chunks,
        "dtype": dt,
        "dimension_names": list(dims),
        "fill_value": fill_value,
    }


def create_array(session: Session, path: str, spec: dict, *, replace: bool) -> zarr.Array:
    """Create array `path` in the session (parent groups too). With `replace`, write the new
    metadata over an existing array's without staging deletes of its chunks (the writer's
    commit deletes chunks the job did not write)."""
    if not replace:
        return zarr.create_array(session.store, name=path, **spec)
    scratch = zarr.storage.MemoryStore()
    zarr.create_array(scratch, name=path, **spec)
    doc = scratch._store_dict[f"{path}/zarr.json"].to_bytes()
    session.write(f"{path}/zarr.json", doc)
    return zarr.open_array(session.store, path=path, mode="r+")
