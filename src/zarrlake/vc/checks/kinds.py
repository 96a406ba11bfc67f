"""The built-in kinds of check: small frozen dataclasses that serialise to JSON with a
`kind` field and evaluate on a ChangeView, reading only the chunks the change touches."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import numpy as np

from zarrlake.errors import InvalidInputError, ZarrLakeError
from zarrlake.vc.checks import custom
from zarrlake.vc.checks.context import ChangeView, Coords, Known, Outcome, where

KINDS: dict[str, type[Check]] = {}


def _array(value: object, what: str = "array") -> str:
    if not isinstance(value, str) or not value.strip("/"):
        raise InvalidInputError(f"{what} must be an array path such as 't2m', not {value!r}")
    return value.strip("/")


def _number(value: object, what: str, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise InvalidInputError(f"{what} must be a number, not {value!r}")
    return value


def _failed(outcome: Outcome, text: str) -> Outcome:
    """`outcome` with its message naming the array and the chunks."""
    at = where(outcome.chunks, outcome.failing)
    msg = f"{text} in array {outcome.array!r}" + (f" at {at}" if at else "")
    return Outcome(False, msg, outcome.array, outcome.chunks, outcome.failing)


class Check:
    """Base of every kind: JSON with a `kind` field, and `evaluate(view) -> Outcome`."""

    kind: ClassVar[str]

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "kind" in cls.__dict__:  # a concrete kind (not an intermediate base)
            KINDS[cls.kind] = cls

    def to_json(self) -> dict[str, Any]:
        """The check as stored: {"kind": ..., its fields...}."""
        return {"kind": self.kind, **{f.name: _plain(getattr(self, f.name)) for f in fields(self)}}

    def evaluate(self, view: ChangeView) -> Outcome:
        """Run the check on a change."""
        raise NotImplementedError

    @property
    def array_name(self) -> str | None:
        """The array the check is about (None: the whole change)."""
        return getattr(self, "array", None) or getattr(self, "coord", None)


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def check_from_json(doc: object) -> Check:
    """The check a `to_json` document describes; InvalidInputError naming what is wrong."""
    if not isinstance(doc, dict) or "kind" not in doc:
        raise InvalidInputError(
            f"a check is a JSON object with a 'kind', not {doc!r}"
            '; give an object like {"kind": "ValueRange", "array": "t2m", ...}'
        )
    kind = doc["kind"]
    cls = KINDS.get(kind)
    if cls is None:
        raise InvalidInputError(
            f"unknown check kind {kind!r} (kinds: {', '.join(sorted(KINDS))})"
            "; use one of those kinds"
        )
    params = {k: v for k, v in doc.items() if k != "kind"}
    if cls is Custom:
        return Custom(params.pop("entry_point", None), **(params.get("params") or {}))
    try:
        return cls(**params)
    except TypeError as e:
        raise InvalidInputError(f"check kind {kind!r}: {e}") from None


# chunk values -------------------------------------------------------------------------


def _fill(doc: dict) -> object:
    return doc.get("fill_value")


def _missing(data: np.ndarray, fill: object) -> np.ndarray:
    """Where `data` holds NaN or the fill value."""
    mask = np.zeros(data.shape, bool)
    if data.dtype.kind in "fc":
        mask |= np.isnan(data)
    if fill is not None and not (isinstance(fill, str) and fill.lower() == "nan"):
        with contextlib.suppress(TypeError, ValueError):  # a fill the dtype cannot hold
            mask |= data == np.asarray(fill, dtype=data.dtype)
    return mask


def _inside(coords: Coords, doc: dict, chunk: tuple[int, ...]) -> bool:
    """Whether chunk `coords` lies within the array's shape (a deleted one may not)."""
    return all(c * n < s for c, n, s in zip(coords, chunk, doc["shape"], strict=False))


class Tally:
    """What a chunkwise check accumulates over the changed chunks of its array."""

    def __init__(self, check: Chunkwise, doc: dict) -> None:
        self.check = check
        self.doc = doc
        self.bad: list[Coords] = []
        self.from_stats = 0  # chunks decided from their statistics

    def visit(self, coords: Coords, data: np.ndarray) -> None:
        """Look at one changed chunk's values."""
        raise NotImplementedError

    def decide(self, coords: Coords, known: Known) -> bool:
        """Take one changed chunk from its statistics if they settle it as its values
        would; False: it must be read (`visit`)."""
        return False

    def outcome(self) -> Outcome:
        """The answer once every changed chunk was visited."""
        raise NotImplementedError


class Chunkwise(Check):
    """A check that looks at each written chunk of one array on its own: the runner reads
    each chunk once for every chunkwise check of that array."""

    array: str

    def tally(self, view: ChangeView) -> Tally | Outcome:
        """A fresh tally, or the outcome when no chunk need be read (array absent)."""
        doc = view.doc(self.array)
        if doc is None:
            return Outcome(True, f"array {self.array!r} is not in the commit", self.array)
        return self._tally(view, doc)

    def _tally(self, view: ChangeView, doc: dict) -> Tally:
        raise NotImplementedError

    def evaluate(self, view: ChangeView) -> Outcome:
        """Visit every written chunk of the array (alone; the runner shares the reads)."""
        tally = self.tally(view)
        if isinstance(tally, Outcome):
            return tally
        return tallied(view, self.array, [tally])[0]


def tallied(view: ChangeView, array: str, tallies: list[Tally]) -> list[Outcome]:
    """The outcomes of `tallies` (of checks on `array`) over its written chunks: each chunk
    is taken from its statistics by the tallies they settle it for, and read once for the
    others (only when some tally needs it)."""
    written = view.written(array)
    statistics = getattr(view, "statistics", None)  # (a view made before statistics)
    known = statistics(array, written) if statistics is not None and written else []
    to_read: list[Coords] = []
    waiting: dict[Coords, list[Tally]] = {}
    for i, coords in enumerate(written):
        facts = known[i] if known else None
        left = list(tallies)
        if facts is not None:
            left = [t for t in tallies if not t.decide(coords, facts)]
            for t in tallies:
                if t not in left:
                    t.from_stats += 1
        if left:
            to_read.append(coords)
            waiting[coords] = left
    for coords, data in view.chunks(array, to_read):
        for t in waiting[coords]:
            t.visit(coords, data)
    return [replace(t.outcome(), from_stats=t.from_stats) for t in tallies]


class _NaNTally(Tally):
    check: MaxNaNFraction

    def __init__(self, check: MaxNaNFraction, doc: dict, deleted: list[Coords]) -> None:
        super().__init__(check, doc)
        self.bad = deleted
        self.worst = 1.0 if deleted else 0.0
        self.fill = _fill(doc)

    def visit(self, coords: Coords, data: np.ndarray) -> None:
        frac = float(_missing(data, self.fill).mean()) if data.size else 0.0
        self._tally(coords, frac)

    def _tally(self, coords: Coords, frac: float) -> None:
        self.worst = max(self.worst, frac)
        if frac > self.check.fraction:
            self.bad.append(coords)

    def decide(self, coords: Coords, known: Known) -> bool:
        """Settled by statistics of exactly the chunk's elements inside the shape (a chunk
        at the upper edge, whose statistics count more, is read)."""
        if not known.exact:
            return False
        nan_fill = isinstance(self.fill, str) and self.fill.lower() == "nan"
        missing = known.nan + known.fill - (known.nan if nan_fill else 0)
        self._tally(coords, missing / known.count if known.count else 0.0)
        return True

    def outcome(self) -> Outcome:
        array, limit = self.check.array, self.check.fraction
        if self.bad:
            out = Outcome.fail("", array, self.bad)
            return _failed(out, f"NaN/fill fraction up to {self.worst:.3g} > {limit:g}")
        return Outcome(True, f"NaN/fill fraction at most {self.worst:.3g}", array)


@dataclass(frozen=True)
class MaxNaNFraction(Chunkwise):
    """Each changed chunk of `array` holds at most `fraction` NaN or fill values.

    A chunk deleted inside the shape reads as all fill.
    """

    kind: ClassVar[str] = "max-nan-fraction"
    array: str
    fraction: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "array", _array(self.array))
        f = _number(self.fraction, "fraction")
        if not 0 <= f <= 1:  # type: ignore[operator]
            raise InvalidInputError(f"fraction must be between 0 and 1, not {self.fraction!r}")

    def _tally(self, view: ChangeView, doc: dict) -> Tally:
        deleted = view.deleted(self.array)
        shape = view.chunk_shape(self.array) if deleted else ()
        return _NaNTally(self, doc, [c for c in deleted if _inside(c, doc, shape)])


class _RangeTally(Tally):
    check: ValueRange

    def __init__(self, check: ValueRange, doc: dict) -> None:
        super().__init__(check, doc)
        self.lo, self.hi = math.inf, -math.inf

    def visit(self, coords: Coords, data: np.ndarray) -> None:
        vals = data[~np.isnan(data)] if data.dtype.kind in "fc" else data
        if not vals.size:
            return
        self._tally(coords, float(vals.min()), float(vals.max()))

    def decide(self, coords: Coords, known: Known) -> bool:
        """Settled by statistics of exactly the chunk's elements inside the shape, or of a
        chunk with no value but NaN (at an upper edge too: the elements inside have none)."""
        if known.low is None or known.high is None:
            return True
        if not known.exact:
            return False
        self._tally(coords, float(known.low), float(known.high))
        return True

    def _tally(self, coords: Coords, a: float, b: float) -> None:
        self.lo, self.hi = min(self.lo, a), max(self.hi, b)
        lo, hi = self.check.min, self.check.max
        if (lo is not None and a < lo) or (hi is not None and b > hi):
            self.bad.append(coords)

    def outcome(self) -> Outcome:
        c = self.check
        if self.bad:
            out = Outcome.fail("", c.array, self.bad)
            return _failed(out, f"values {self.lo:g}..{self.hi:g} outside [{c.min}, {c.max}]")
        if self.lo > self.hi:
            return Outcome(True, "no changed values", c.array)
        return Outcome(True, f"values {self.lo:g}..{self.hi:g}", c.array)


@dataclass(frozen=True)
class ValueRange(Chunkwise):
    """Every value of `array`'s changed chunks lies within [min, max].

    NaN is ignored; either bound may be None.
    """

    kind: ClassVar[str] = "value-range"
    array: str
    min: float | None = None
    max: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "array", _array(self.array))
        lo, hi = _number(self.min, "min", True), _number(self.max, "max", True)
        if lo is None and hi is None:
            raise InvalidInputError("a value-range check needs min, max or both")
        if lo is not None and hi is not None and lo > hi:
            raise InvalidInputError(f"min {lo!r} is greater than max {hi!r}; give min <= max")

    def _tally(self, view: ChangeView, doc: dict) -> Tally:
        return _RangeTally(self, doc)


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Consecutive runs [first, last] of sorted chunk indices."""
    out: list[tuple[int, int]] = []
    for i in indices:
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


@dataclass(frozen=True)
class Monotonic(Check):
    """The 1-D coordinate `coord` strictly increases; with `step`, by exactly `step`.

    With `step`, there is no gap or duplicate. Reads the changed chunks and the elements
    either side of them.
    """

    kind: ClassVar[str] = "monotonic"
    coord: str
    step: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "coord", _array(self.coord, "coord"))
        step = _number(self.step, "step", True)
        if step is not None and step <= 0:
            raise InvalidInputError(f"step must be positive, not {self.step!r}")

    def evaluate(self, view: ChangeView) -> Outcome:
        """Run the check on the change (see the class)."""
        doc = view.doc(self.coord)
        if doc is None:
            return Outcome(True, f"coordinate {self.coord!r} is not in the commit", self.coord)
        if len(doc["shape"]) != 1:
            return Outcome.fail(
                f"coordinate {self.coord!r} has {len(doc['shape'])} dimensions; a monotonic "
                "check needs a 1-D array",
                self.coord,
            )
        (n,) = doc["shape"]
        (size,) = view.chunk_shape(self.coord)
        bad: set[Coords] = set()
        for first, last in _runs([c[0] for c in view.written(self.coord)]):
            lo, hi = max(first * size - 1, 0), min((last + 1) * size + 1, n)
            if lo >= hi:
                continue
            vals = view.values(self.coord, (slice(lo, hi),))
            steps = np.diff(vals)
            if steps.dtype.kind == "m":
                steps = steps.astype("int64")
            wrong = steps <= 0
            if self.step is not None:
                if steps.dtype.kind == "f":
                    wrong |= ~np.isclose(steps, self.step)
                else:
                    wrong |= steps != self.step
            for i in np.flatnonzero(wrong).tolist():
                bad.add((min(max((lo + i + 1) // size, first), last),))  # a changed one
        if bad:
            what = "strictly increasing" + (f" by {self.step:g}" if self.step else "")
            return _failed(Outcome.fail("", self.coord, list(bad)), f"not {what}")
        return Outcome(True, "increasing" + (f" by {self.step:g}" if self.step else ""), self.coord)


@dataclass(frozen=True)
class RequiredAttrs(Check):
    """`array` (when in the commit) carries every attribute in `names`.

    For example CF `units`, `standard_name`.
    """

    kind: ClassVar[str] = "required-attrs"
    array: str
    names: Sequence[str]
    """Given as any sequence of names (a list, a tuple) or one name; kept as a tuple."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "array", _array(self.array))
        names = (self.names,) if isinstance(self.names, str) else self.names
        if not names or not all(isinstance(n, str) and n for n in names):
            raise InvalidInputError(f"names must be attribute names, not {self.names!r}")
        object.__setattr__(self, "names", tuple(names))

    def evaluate(self, view: ChangeView) -> Outcome:
        """Run the check on the change (see the class)."""
        doc = view.doc(self.array)
        if doc is None:
            return Outcome(True, f"array {self.array!r} is not in the commit", self.array)
        have = doc.get("attributes") or {}
        missing = [n for n in self.names if n not in have]
        if missing:
            return Outcome(
                False,
                f"array {self.array!r} lacks attribute{'s' if len(missing) > 1 else ''} "
                + ", ".join(repr(m) for m in missing),
                self.array,
            )
        return Outcome(True, "has " + ", ".join(self.names), self.array)


@dataclass(frozen=True)
class SchemaUnchanged(Check):
    """`array` keeps its dtype, chunking and codecs.

    Its shape may grow only along `append_dims` (dimension names, or indices).
    """

    kind: ClassVar[str] = "schema-unchanged"
    array: str
    append_dims: Sequence[str | int] = ()
    """Given as any sequence (a list, a tuple) or one name or index; kept as a tuple."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "array", _array(self.array))
        dims = (self.append_dims,) if isinstance(self.append_dims, str | int) else self.append_dims
        if not all(isinstance(d, str | int) and not isinstance(d, bool) for d in dims):
            raise InvalidInputError(
                f"append_dims must be dimension names or indices, not {self.append_dims!r}"
            )
        object.__setattr__(self, "append_dims", tuple(dims))

    def evaluate(self, view: ChangeView) -> Outcome:
        """Run the check on the change (see the class)."""
        old, new = view.doc(self.array, "base"), view.doc(self.array)
        if old is None:
            return Outcome(True, f"array {self.array!r} is new or absent", self.array)
        if new is None:
            return Outcome(False, f"array {self.array!r} was deleted", self.array)
        changed = [
            f
            for f in ("data_type", "chunk_grid", "chunk_key_encoding", "codecs", "fill_value")
            if old.get(f) != new.get(f)
        ]
        if changed:
            return Outcome(
                False, f"array {self.array!r} changed its {', '.join(changed)}", self.array
            )
        a, b = old["shape"], new["shape"]
        if len(a) != len(b):
            return Outcome(False, f"array {self.array!r} changed shape {a} -> {b}", self.array)
        names = new.get("dimension_names") or [None] * len(b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            growable = i in self.append_dims or (
                names[i] is not None and names[i] in self.append_dims
            )
            if y < x or (y > x and not growable):
                dim = names[i] if names[i] is not None else i
                return Outcome(
                    False,
                    f"array {self.array!r} changed shape {a} -> {b} along dimension {dim!r}"
                    + ("" if y < x else " (not an append dimension)"),
                    self.array,
                )
        return Outcome(True, f"schema unchanged (shape {a} -> {b})", self.array)


@dataclass(frozen=True)
class MaxChangedChunks(Check):
    """The change writes or deletes at most `n` chunks in all."""

    kind: ClassVar[str] = "max-changed-chunks"
    n: int

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 0:
            raise InvalidInputError(f"n must be a non-negative integer, not {self.n!r}")

    def evaluate(self, view: ChangeView) -> Outcome:
        """Run the check on the change (see the class)."""
        counts = {a: len(view.written(a)) + len(view.deleted(a)) for a in view.arrays()}
        total = sum(counts.values())
        if total > self.n:
            top = max(counts, key=lambda a: counts[a])
            return Outcome(
                False,
                f"the change touches {total} chunks, more than {self.n} (most in array {top!r}: "
                f"{counts[top]})",
                top,
                failing=total,
            )
        return Outcome(True, f"{total} chunks changed")


@dataclass(frozen=True)
class NoDeletedChunks(Check):
    """The change deletes no chunk (of any array)."""

    kind: ClassVar[str] = "no-deleted-chunks"

    def evaluate(self, view: ChangeView) -> Outcome:
        """Run the check on the change (see the class)."""
        for array in view.arrays():
            gone = view.deleted(array)
            if gone:
                total = sum(len(view.deleted(a)) for a in view.arrays())
                out = Outcome.fail("", array, gone)
                out = _failed(out, f"{total} chunk{'s' if total > 1 else ''} deleted")
                return Outcome(False, out.message, array, out.chunks, out.failing)
        return Outcome(True, "no chunk deleted")


@dataclass(frozen=True, init=False)
class Custom(Check):
    """A callable registered under the entry-point group `zarrlake.checks`.

    It is called with the view and `params` as keywords.
    """

    kind: ClassVar[str] = "custom"
    entry_point: str
    params: dict[str, Any]

    def __init__(self, entry_point_name: str, **params: Any) -> None:
        if not isinstance(entry_point_name, str) or not entry_point_name:
            raise InvalidInputError(
                f"a custom check names its entry point, not {entry_point_name!r}"
                "; give it as 'module:function'"
            )
        try:
            json.dumps(params)
        except (TypeError, ValueError) as e:
            raise InvalidInputError(f"custom check parameters must be JSON: {e}") from None
        object.__setattr__(self, "entry_point", entry_point_name)
        object.__setattr__(self, "params", dict(params))

    def __hash__(self) -> int:
        return hash((self.entry_point, json.dumps(self.params, sort_keys=True)))

    def evaluate(self, view: ChangeView) -> Outcome:
        """Run the check on the change (see the class)."""
        fn = custom.load(self.entry_point)
        try:
            answer = fn(view, **self.params)
        except ZarrLakeError:
            raise
        except Exception as e:  # a bug in the check fails it (a gate fails closed)
            return Outcome(False, f"custom check {self.entry_point!r} raised {e!r}")
        return custom.as_outcome(self.entry_point, answer)
