"""Per-chunk value statistics as manifest entries carry them: one record per entry, stored
as columns beside the references (format version 3 of the statistics).

A record says what kind of values its chunk holds (`kind`; UNKNOWN: nothing is known), how
many elements it holds (`count`, its whole chunk shape as decoded), how many are NaN
(`nan`) and equal to the array's fill value (`fill`; a NaN fill value counts NaN), the
smallest and largest value ignoring NaN (`min`, `max`, as the bits of the value widened to
64 bits: float64, int64 or uint64 by kind; both NaN when every element is NaN) and the
sum ignoring NaN (`sum`, float64).

A range whose entries all lack statistics is stored as before (no statistics columns), so
manifests written before statistics, or with them turned off, read as "unknown". A field
equal in every entry is a constant in the header (0, the usual count of NaN and of fill
values, is not even named). The others are stored as narrow as their values allow (integers
in the fewest bytes that hold them, min and max in the array's own float32 when that is
exact, the sum as float32 only when that is exact), min, max and sum as the differences of
their bits from the previous entry's, laid side by side in one record per entry and
compressed together: one Blosc frame (zstd after a bit shuffle, by numcodecs) a range.
Staged fragments keep the narrowed records uncompressed (`plain`), so a commit gathers
them as they are; so do ranges under SMALL entries. A range read back keeps its
statistics as stored (`Stored`) until they are used. The
statistics stay exact; what they cost is about the entropy of the sum's low bits and of the
extremes. Formats 1 (each column uncompressed) and 2 (each column its own Blosc frame) are
still read.
"""

from __future__ import annotations

import math
from functools import cache, lru_cache
from typing import Any, NamedTuple

import numpy as np

from zarrlake.errors import CorruptionError

VERSION = 3
"""The statistics format written; a header naming a newer one is refused. 1: the narrowed
columns as they are; 2: each compressed (its dtype in the header's `dt`); 3: the varying
fields compressed together in one column (`rows`, their dtypes in the header's `cols`)."""

UNKNOWN, FLOAT, INT, UINT, BOOL = 0, 1, 2, 3, 4
"""Kinds of values: what the `min` and `max` bits hold (UNKNOWN: no statistics)."""
WIDE = {FLOAT: np.float64, INT: np.int64, UINT: np.uint64, BOOL: np.uint64}
"""The 64-bit type whose bits a record's `min` and `max` hold, by kind."""

STATS = np.dtype(
    [
        ("kind", "u1"),
        ("count", "<u8"),
        ("nan", "<u8"),
        ("fill", "<u8"),
        ("min", "<u8"),
        ("max", "<u8"),
        ("sum", "<f8"),
    ]
)
"""One record per manifest entry (all zeros: unknown)."""
FIELDS: tuple[str, ...] = STATS.names or ()  # (a structured dtype's names)
PREFIX = "s."
"""Column names of statistics in a columnar payload: `s.<field>`."""


class ChunkStats(NamedTuple):
    """The statistics of one chunk (see the module): what a chunk reference carries."""

    kind: int
    count: int  # type: ignore[assignment]  # (shadows tuple.count)
    nan: int
    fill: int
    min: int  # bits of the widened value
    max: int
    sum: float

    @property
    def known(self) -> bool:
        """Whether anything is known (kind is not UNKNOWN)."""
        return self.kind != UNKNOWN

    @property
    def low(self) -> float | int | None:
        """The smallest value ignoring NaN, as a Python number; None when every element is
        NaN (or nothing is known)."""
        return _value(self.kind, self.min)

    @property
    def high(self) -> float | int | None:
        """The largest value ignoring NaN, as a Python number; None as for `low`."""
        return _value(self.kind, self.max)


def _value(kind: int, bits: int) -> float | int | None:
    if kind == UNKNOWN:
        return None
    value = np.array(bits, np.uint64).view(WIDE[kind]).item()
    if kind == FLOAT and math.isnan(value):
        return None
    return bool(value) if kind == BOOL else value


def bits(kind: int, values: np.ndarray) -> np.ndarray:
    """`values` (numbers of `kind`) as the uint64 bits records hold."""
    return np.asarray(values).astype(WIDE[kind]).view(np.uint64)


def values(kind: int, column: np.ndarray) -> np.ndarray:
    """The numbers a `min` or `max` column holds for entries of `kind` (float64, int64,
    uint64 or bool)."""
    out = np.asarray(column, np.uint64).view(WIDE[kind])
    return out.astype(bool) if kind == BOOL else out


def records(stats: list[ChunkStats | None]) -> np.ndarray | None:
    """The records of `stats` (None: unknown); None when none is known."""
    if not any(s is not None and s.known for s in stats):
        return None
    out = np.zeros(len(stats), STATS)
    for i, s in enumerate(stats):
        if s is not None:
            out[i] = s
    return out


def at(column: np.ndarray | None, i: int) -> ChunkStats | None:
    """The statistics of entry `i` of a records column (None: unknown)."""
    if column is None or not column["kind"][i]:
        return None
    return ChunkStats._make(column[i].tolist())


def unknown(n: int) -> np.ndarray:
    """`n` records saying nothing is known."""
    return np.zeros(n, STATS)


def joined(parts: list[tuple[np.ndarray | None, int]]) -> np.ndarray | None:
    """The records of ranges laid end to end ((records or None, entries) each); None when
    none has any."""
    if all(r is None for r, _ in parts):
        return None
    return np.concatenate([unknown(n) if r is None else r for r, n in parts])


# encoding -------------------------------------------------------------------------------

DELTA = ("min", "max", "sum")
"""Columns stored (format 3) as differences of their bits from the previous entry's:
neighbouring chunks hold neighbouring values, whose bits then differ in the low planes only."""
COLUMN = PREFIX + "rows"
"""Format 3: the one column holding every varying field, compressed together."""


SMALL = 64
"""Ranges of fewer entries keep their records `plain` (as staged fragments do): a Blosc
frame's header and bit planes take about as many bytes as the few records they would hold
(at most a few hundred more than the frame, beside the 60 bytes or so of each entry's
reference), and its call, mostly zstd setting up, costs more than the rest of the encoding
and again at every read (the first commits of an array, W5's)."""


def encode(
    column: np.ndarray | Stored | None, staged: bool = False
) -> tuple[dict[str, Any] | None, dict[str, np.ndarray]]:
    """(header entry, columns) of a range's records; (None, {}) when nothing is known, so
    the range keeps the encoding it had before statistics. `staged`: for a staged
    fragment, which lives until its commit and is read once by it: the records narrowed
    but neither differenced nor compressed (`plain`), so the commit reads them with a copy
    per field instead of a decompression (so are ranges under SMALL entries, and those a
    small commit rewrote: `ManifestRange.plain_stats`). Records
    still as stored in the current format are written as they are, not encoded again."""
    if isinstance(column, Stored):
        as_stored = _encode_stored(column, staged or column.n < SMALL)
        if as_stored is not None:
            return as_stored
        column = column.records()
    if column is None:
        return None, {}
    n = len(column)
    if n == 1:
        return _encode_one(column, staged)
    if not column["kind"].any():
        return None, {}
    same = _constant(column)
    const: dict[str, Any] = {}
    varying: dict[str, np.ndarray] = {}
    kind = int(column["kind"][0])
    for name, constant in zip(FIELDS, same, strict=True):
        col = column[name]
        if name == "sum":
            if constant and np.isfinite(col[0]):  # (bits: a sum of -0.0 stays -0.0)
                if col.view(np.uint64)[0]:
                    const[name] = float(col[0])
                continue
            narrow = col.astype(np.float32)
            varying[name] = narrow if _exact(narrow, col) else col
            continue
        if constant:
            if col[0]:  # a field in neither `const` nor `cols` is 0 everywhere
                const[name] = int(col[0])
            continue
        if name in ("min", "max") and "kind" in const:  # (one kind)
            varying[name] = _narrow_values(kind, values(kind, col))
            continue
        varying[name] = col.astype(np.min_scalar_type(int(col.max())))
    return _framed(const, varying, n, staged or n < SMALL)


_BYTES = [
    (STATS[name].itemsize, offset)
    for name, offset in zip(FIELDS, [dict(STATS.fields or {})[f][1] for f in FIELDS], strict=True)
]
"""Where each field's bytes lie in a record."""


def _constant(column: np.ndarray) -> list[bool]:
    """Per field: whether its bits are the same in every entry. A few entries are compared
    as bytes, all fields in one call (numpy's cost per call is most of it); many field by
    field (a reduction across the bytes of a record is slower than seven comparisons)."""
    if len(column) > 64:
        return [bool((column[name] == column[name][0]).all()) for name in FIELDS[:-1]] + [
            bool((column["sum"].view(np.uint64) == column["sum"].view(np.uint64)[0]).all())
        ]
    as_bytes = column.view(np.uint8).reshape(len(column), STATS.itemsize)
    same = (as_bytes == as_bytes[0]).all(axis=0).tolist()
    return [all(same[start : start + width]) for width, start in _BYTES]


def _encode_stored(
    column: Stored, plain: bool
) -> tuple[dict[str, Any] | None, dict[str, np.ndarray]] | None:
    """`encode` of statistics as read, without decoding them where it can: as stored when
    they already are as they would be written, compressed as they are when plain (a
    commit's records gathered from staged fragments); None: decode them."""
    if not column.n:
        return None, {}
    head = column.head
    if head["v"] == VERSION and bool(head.get("plain")) == plain:
        return head, {k: v for k, v in column.cols.items() if k == COLUMN}
    rows = column.rows()
    if rows is None:
        return None
    varying = {name: rows[name].view(dt) for name, dt in head["cols"]}
    return _framed(dict(head["const"]), varying, column.n, plain)


def _encode_one(column: np.ndarray, staged: bool) -> tuple[dict[str, Any] | None, dict]:
    """`encode` of a one-entry range (a one-chunk commit's fragment), without numpy: every
    field is a constant, but a sum that is not finite (JSON has no NaN)."""
    rec = column[0].tolist()
    if not rec[0]:
        return None, {}
    const = {name: value for name, value in zip(FIELDS[:-1], rec, strict=False) if value}
    total = rec[-1]
    varying: dict[str, np.ndarray] = {}
    if math.isfinite(total):
        if total or math.copysign(1.0, total) < 0:
            const["sum"] = total
    else:
        varying["sum"] = column["sum"].astype(np.float32)  # inf and NaN are exact in float32
    return _framed(const, varying, 1, True)


def _framed(
    const: dict[str, Any], varying: dict[str, np.ndarray], n: int, plain: bool
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header entry and column of the varying fields laid side by side: plain, or
    min/max/sum as differences from the previous entry, compressed together."""
    head: dict[str, Any] = {"v": VERSION, "const": const}
    head["cols"] = [[name, col.dtype.str] for name, col in varying.items()]
    if plain:
        head["plain"] = 1
    if not varying:
        return head, {}
    rows = np.empty(n, _layout(head["cols"]))
    for name, col in varying.items():
        bits, out = col.view(rows.dtype[name]), rows[name]
        if name in DELTA and not plain:  # (unsigned: wraps as the sums that undo it do)
            out[0] = bits[0]
            np.subtract(bits[1:], bits[:-1], out=out[1:])
        else:
            out[...] = bits
    if plain:
        return head, {COLUMN: rows.view(np.uint8)}
    packed = _codec().encode(rows.view(f"V{rows.dtype.itemsize}"))
    return head, {COLUMN: np.frombuffer(packed, np.uint8)}


def _layout(cols: list[list[str]]) -> np.dtype:
    """Format 3: the record of the varying fields, each as the unsigned integer of its width."""
    return _layout_of(tuple((name, dt) for name, dt in cols))


@lru_cache(maxsize=256)
def _layout_of(cols: tuple[tuple[str, str], ...]) -> np.dtype:
    """`_layout`, made once per layout (a commit asks for it per range and per fragment)."""
    return np.dtype([(name, f"<u{np.dtype(dt).itemsize}") for name, dt in cols])


@cache
def _codec() -> Any:
    """The compressor of the statistics (numcodecs loads with the first one): zstd after a
    bit shuffle, which groups the bits of a record's fields by significance across entries
    (format 2: one column at a time; format 3: the records of all varying fields at once, so
    a range pays one frame). Level 3 (zstd 5): on W1's manifests it compresses as well as
    6 to 9 do (zstd 11 to 22), at half the time of 6 and a thirtieth of 9."""
    from numcodecs import Blosc  # type: ignore[import-untyped]  # (no stubs)

    return Blosc(cname="zstd", clevel=3, shuffle=Blosc.BITSHUFFLE)


def _decompress(col: np.ndarray, dtype: str | np.dtype, n: int) -> np.ndarray:
    out = np.frombuffer(_codec().decode(col), np.dtype(dtype))
    if len(out) != n:
        raise ValueError(f"a column holds {len(out)} entries, not {n}")
    return out


def _exact(narrow: np.ndarray, wide: np.ndarray) -> bool:
    """Whether float32 `narrow` holds every float64 of `wide` exactly (NaN as NaN): what
    `np.array_equal(..., equal_nan=True)` says, its NaN pass made only when one is there."""
    same = narrow == wide  # (float32 against float64: compared as float64)
    if same.all():
        return True
    return bool((same | (np.isnan(narrow) & np.isnan(wide))).all())


def _narrow_values(kind: int, vals: np.ndarray) -> np.ndarray:
    """A min or max column of one kind as stored: its values (not their bits) in the
    narrowest dtype that holds them exactly, whose kind says how to read them back (a
    float or signed integer is a value, an unsigned integer is a value and its bits)."""
    if kind == FLOAT:
        narrow = vals.astype(np.float32)
        return narrow if _exact(narrow, vals) else vals
    if kind == INT:
        lo, hi = int(vals.min()), int(vals.max())
        return vals.astype(np.promote_types(np.min_scalar_type(lo), np.min_scalar_type(hi)))
    return vals.astype(np.min_scalar_type(int(vals.max())))


class Stored:
    """The statistics of a range of `n` entries as stored (its header entry and columns),
    decoded at their first use: reading a chunk's bytes, listing the objects a range refers
    to (gc) or a shard's inner chunks uses none of them. A header naming a newer format is
    refused at once, as before; columns that do not decode, at their first use."""

    __slots__ = ("_records", "_rows", "cols", "head", "n", "what")

    def __init__(self, head: dict[str, Any], cols: dict[str, np.ndarray], n: int, what: str):
        _check_version(head, what)
        self.head, self.cols, self.n, self.what = head, cols, n, what
        self._records: np.ndarray | None = None
        self._rows: np.ndarray | None = None

    def records(self) -> np.ndarray:
        """Every entry's record (decoded once)."""
        if self._records is None:
            self._records = _decoded(self.head, self.cols, self.n, self.what, 0, self.n)
        return self._records

    def rows(self) -> np.ndarray | None:
        """The records as stored when they are plain in the current format (a staged
        fragment's: narrowed, side by side); None when they must be decoded."""
        if self._rows is not None:
            return self._rows
        head = self.head
        if head["v"] != VERSION or not head.get("plain"):
            return None
        layout = _layout(head["cols"])
        if not head["cols"]:
            self._rows = np.zeros(self.n, layout)
            return self._rows
        column = self.cols.get(COLUMN)
        rows = None if column is None else column.view(layout)
        if rows is None or len(rows) != self.n:
            raise _damaged(self.what, ValueError(f"the records do not hold {self.n} entries"))
        self._rows = rows
        return rows

    def taken(self, idx: np.ndarray | slice) -> Stored | None:
        """The statistics of the entries at `idx`, gathered as stored (no decoding) when
        they are plain; None when they must be decoded."""
        rows = self.rows()
        return None if rows is None else Stored.of_rows(self.head, rows[idx], self.what)

    @classmethod
    def of_rows(cls, head: dict[str, Any], rows: np.ndarray, what: str) -> Stored:
        """Plain records `rows` laid out as `head` says."""
        cols = {COLUMN: np.ascontiguousarray(rows).view(np.uint8)} if head["cols"] else {}
        return cls(head, cols, len(rows), what)

    def layout_key(self) -> tuple | None:
        """What two plain records' layouts share when their rows can be laid together
        (None: not plain in the current format)."""
        head = self.head
        if head["v"] != VERSION or not head.get("plain"):
            return None
        return (sorted(head["const"].items()), [tuple(c) for c in head["cols"]])

    def part(self, part: slice) -> np.ndarray:
        """The records of the entries at `part` (a step-1 slice), decoding only as far as
        its end when the whole is not decoded yet (one chunk's reference)."""
        if self._records is not None:
            return self._records[part]
        start, stop, _ = part.indices(self.n)
        return _decoded(self.head, self.cols, self.n, self.what, start, max(start, stop))


def decode(head: dict[str, Any] | None, cols: dict[str, np.ndarray], n: int, what: str):
    """The records of a range of `n` entries from its header entry and columns (None:
    the range has no statistics). CorruptionError naming `what` if they do not fit."""
    if head is None:
        return None
    return Stored(head, cols, n, what).records()


def _check_version(head: dict[str, Any], what: str) -> None:
    try:
        version = int(head["v"])
    except (KeyError, TypeError, ValueError) as e:
        raise _damaged(what, e) from None
    if version > VERSION:
        raise CorruptionError(
            f"{what}: statistics format {version} is newer than this zarrlake ({VERSION}); "
            "upgrade zarrlake to read it"
        )


def _damaged(what: str, e: BaseException) -> CorruptionError:
    return CorruptionError(
        f"{what}: statistics cannot be decoded ({e}); run `zarrlake fsck --decode` to see "
        "which manifests are damaged"
    )


def _decoded(
    head: dict[str, Any], cols: dict[str, np.ndarray], n: int, what: str, start: int, stop: int
) -> np.ndarray:
    """The records of entries [start, stop) of a range of `n`."""
    try:
        version = int(head["v"])
        out = np.zeros(stop - start, STATS)
        for name, value in head["const"].items():
            out[name] = value
        if version >= 3:
            _unpack(head["cols"], cols, out, bool(head.get("plain")), n, start)
            return out
        stored, packed = head.get("as", {}), head.get("dt", {})
        for name in FIELDS:
            if name in head["const"]:
                continue
            col = cols[PREFIX + name]
            as_ = stored.get(name)  # version 1: how min and max are held; 2: their dtype says
            if version >= 2:
                col = _decompress(col, packed[name], n)
            if len(col) != n:
                raise ValueError(f"column {name} has {len(col)} entries, not {n}")
            _put(out, name, col[start:stop], as_)
        return out
    except (KeyError, TypeError, ValueError, RuntimeError) as e:  # (Blosc: RuntimeError)
        raise _damaged(what, e) from None


def _unpack(
    layout: list[list[str]],
    cols: dict[str, np.ndarray],
    out: np.ndarray,
    plain: bool,
    n: int,
    start: int,
) -> None:
    """Format 3: the varying fields of `out` (entries from `start` of `n`) from the one
    column of records (`plain`: as they are, else differenced and compressed)."""
    if not layout:
        return
    if plain:
        rows = cols[COLUMN].view(_layout(layout))
        if len(rows) != n:
            raise ValueError(f"the records hold {len(rows)} entries, not {n}")
    else:
        rows = _decompress(cols[COLUMN], _layout(layout), n)
    stop = start + len(out)
    for name, dtype in layout:
        if name in DELTA and not plain:  # (wraps as the differences did)
            bits = np.cumsum(rows[name][:stop], dtype=rows.dtype[name])[start:]
        else:
            bits = rows[name][start:stop]
        _put(out, name, bits.view(dtype), None)


def _put(out: np.ndarray, name: str, col: np.ndarray, as_: str | None) -> None:
    """Store a column as decoded into the records: a min or max held as float or signed
    values (its dtype says so, or format 1's `as_`) as the bits of the widened value."""
    if name in ("min", "max") and as_ is None:
        as_ = {"f": "float", "i": "int"}.get(col.dtype.kind)
    if as_ == "float":
        out[name] = col.astype(np.float64).view(np.uint64)
    elif as_ == "int":
        out[name] = col.astype(np.int64).view(np.uint64)
    else:
        out[name] = col
