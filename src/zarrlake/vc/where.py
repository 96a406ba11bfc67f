"""Value filters (`where`): "t2m > 40", "t2m >= 0 AND t2m < 10", "isnan(t2m)", "t2m IN (1,
2)": parsed once, then asked which chunks may hold a match (from their statistics) and
which values match (from the values themselves).

Grammar (keywords in any case): comparisons `NAME op NUMBER` or `NUMBER op NAME` with op
one of `= == < <= > >=`; `NAME IS NULL` or `isnan(NAME)` (the value is NaN); `NAME IS NOT
NULL` or `NOT isnan(NAME)`; `NAME IN (NUMBER, ...)`; joined with `AND` and `OR` and grouped
with parentheses. NAME is the value's name (the array's, as the rows of a Spark read name
it; backquotes allowed). NUMBER is an integer or decimal number, or `inf`/`-inf`.

NaN compares as numpy and IEEE say: no comparison holds for it, it matches only `isnan`
(`IS NULL`). A comparison of integer values with a non-integral number is exact (`n > 2.5`
holds for 3 and more). Statistics answer conservatively: a chunk whose statistics are
unknown may match; one whose statistics cannot match is skipped.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from zarrlake._util import arrow
from zarrlake.errors import InvalidInputError

_TOKEN = re.compile(
    r"\s*(?:(?P<num>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|inf(?:inity)?\b))"
    r"|(?P<op><=|>=|==|=|<|>)|(?P<name>`[^`]+`|[A-Za-z_][\w.]*)|(?P<punct>[(),]))",
    re.IGNORECASE,
)
_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_FLIP = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class Chunks:
    """What pruning needs of the chunks considered: per chunk, the smallest and largest
    value ignoring NaN (numbers of the array's kind), whether it holds a value that is not
    NaN and one that is, and whether its statistics are known at all."""

    low: np.ndarray
    high: np.ndarray
    has_value: np.ndarray
    has_nan: np.ndarray
    known: np.ndarray

    @classmethod
    def of_table(cls, table: Any) -> Chunks:
        """The chunks of a statistics table (`Repo.chunk_stats`), or of some of its rows."""
        known = _column(table["known"], False).astype(bool)
        count = _column(table["count"], 0)
        nan = _column(table["nan_count"], 0)
        return cls(
            low=_column(table["min"], 0),
            high=_column(table["max"], 0),
            has_value=nan < count,
            has_nan=nan > 0,
            known=known,
        )


def _column(column: Any, null: object) -> np.ndarray:
    """A table column as numpy, nulls replaced by `null` (where nothing is read of it);
    without pyarrow's `to_numpy`, which imports pandas in a new process."""
    return arrow.to_numpy(column, null)


class Node:
    """A parsed filter."""

    def may_match(self, c: Chunks) -> np.ndarray:
        """Per chunk: whether its statistics allow a matching value (unknown ones do)."""
        raise NotImplementedError

    def matches(self, values: np.ndarray) -> np.ndarray:
        """Per value: whether it matches."""
        raise NotImplementedError


@dataclass(frozen=True)
class Compare(Node):
    """`value op number`."""

    op: str
    number: float | int

    def may_match(self, c: Chunks) -> np.ndarray:  # noqa: D102
        if self.op == "=":
            hit = _cmp(c.low, "<=", self.number) & _cmp(c.high, ">=", self.number)
        elif self.op in (">", ">="):
            hit = _cmp(c.high, self.op, self.number)
        else:
            hit = _cmp(c.low, self.op, self.number)
        return (hit & c.has_value) | ~c.known

    def matches(self, values: np.ndarray) -> np.ndarray:  # noqa: D102
        return _cmp(values, self.op, self.number)


@dataclass(frozen=True)
class In(Node):
    """`value IN (numbers)`."""

    numbers: tuple[float | int, ...]

    def may_match(self, c: Chunks) -> np.ndarray:  # noqa: D102
        out = ~c.known
        for n in self.numbers:
            out = out | (Compare("=", n).may_match(c))
        return out

    def matches(self, values: np.ndarray) -> np.ndarray:  # noqa: D102
        out = np.zeros(values.shape, bool)
        for n in self.numbers:
            out |= _cmp(values, "=", n)
        return out


@dataclass(frozen=True)
class IsNaN(Node):
    """`isnan(value)` (negated: `NOT isnan(value)`)."""

    negated: bool = False

    def may_match(self, c: Chunks) -> np.ndarray:  # noqa: D102
        return (c.has_value if self.negated else c.has_nan) | ~c.known

    def matches(self, values: np.ndarray) -> np.ndarray:  # noqa: D102
        nan = np.isnan(values) if values.dtype.kind in "fc" else np.zeros(values.shape, bool)
        return ~nan if self.negated else nan


@dataclass(frozen=True)
class Both(Node):
    """`a AND b`."""

    parts: tuple[Node, ...]

    def may_match(self, c: Chunks) -> np.ndarray:  # noqa: D102
        out = self.parts[0].may_match(c)
        for p in self.parts[1:]:
            out = out & p.may_match(c)
        return out

    def matches(self, values: np.ndarray) -> np.ndarray:  # noqa: D102
        out = self.parts[0].matches(values)
        for p in self.parts[1:]:
            out &= p.matches(values)
        return out


@dataclass(frozen=True)
class Either(Node):
    """`a OR b`."""

    parts: tuple[Node, ...]

    def may_match(self, c: Chunks) -> np.ndarray:  # noqa: D102
        out = self.parts[0].may_match(c)
        for p in self.parts[1:]:
            out = out | p.may_match(c)
        return out

    def matches(self, values: np.ndarray) -> np.ndarray:  # noqa: D102
        out = self.parts[0].matches(values)
        for p in self.parts[1:]:
            out |= p.matches(values)
        return out


def _cmp(values: np.ndarray, op: str, number: float | int) -> np.ndarray:
    """`values op number`, exactly: integers compare with the number as integers (a
    non-integral number or one beyond the dtype's range decides by itself), floats in
    float64 (never rounding the number to a narrower float)."""
    kind = values.dtype.kind
    if kind not in "iub":
        with np.errstate(invalid="ignore"):
            return np.asarray(_OPS[op](values, np.float64(number)))
    if isinstance(number, float):
        if math.isinf(number):
            return np.full(values.shape, (number > 0) == (op in ("<", "<=")))
        if not number.is_integer():
            if op == "=":
                return np.zeros(values.shape, bool)
            op, number = (op, math.floor(number)) if op in (">", "<=") else (op, math.ceil(number))
        number = int(number)
    lo, hi = (0, 1) if kind == "b" else (np.iinfo(values.dtype).min, np.iinfo(values.dtype).max)
    if number < lo or number > hi:
        below = number < lo  # every value is above the number, or every one below
        holds = op in (">", ">=") if below else op in ("<", "<=")
        return np.full(values.shape, holds)
    ints = values.astype(np.int64 if kind != "u" else np.uint64, copy=False)
    return np.asarray(_OPS[op](ints, ints.dtype.type(number)))


def parse(text: str, names: Iterable[str]) -> Node:
    """The filter `text` names its value by one of `names`; InvalidInputError saying what
    is wrong otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"a where filter is text such as 't2m > 40', not {text!r}")
    allowed = tuple(names)
    parser = _Parser(text, allowed)
    node = parser.expr()
    if parser.peek() is not None:
        parser.fail(f"unexpected {parser.peek()!r}")
    return node


class _Parser:
    def __init__(self, text: str, names: tuple[str, ...]) -> None:
        self.text = text
        self.names = names
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                self.fail(f"cannot read {text[pos:].strip()[:20]!r}")
            assert m is not None
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.at = 0

    def fail(self, why: str) -> None:
        raise InvalidInputError(
            f"where {self.text!r}: {why} (filters look like '{self.names[0]} > 40', "
            f"'{self.names[0]} >= 0 AND {self.names[0]} < 10', 'isnan({self.names[0]})', "
            f"'{self.names[0]} IN (1, 2)'); write the filter in that form"
        )

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def word(self) -> str | None:
        tok = self.peek()
        return tok.upper() if tok is not None else None

    def take(self) -> tuple[str, str]:
        if self.at >= len(self.tokens):
            self.fail("it ends too early")
        tok = self.tokens[self.at]
        self.at += 1
        return tok

    def expect(self, value: str) -> None:
        _, tok = self.take()
        if tok.upper() != value:
            self.fail(f"expected {value!r}, found {tok!r}")

    def expr(self) -> Node:
        parts = [self.conj()]
        while self.word() == "OR":
            self.take()
            parts.append(self.conj())
        return parts[0] if len(parts) == 1 else Either(tuple(parts))

    def conj(self) -> Node:
        parts = [self.atom()]
        while self.word() == "AND":
            self.take()
            parts.append(self.atom())
        return parts[0] if len(parts) == 1 else Both(tuple(parts))

    def atom(self) -> Node:
        kind, tok = self.take()
        if tok == "(":
            node = self.expr()
            self.expect(")")
            return node
        if tok.upper() == "NOT":
            self.expect("ISNAN")
            return self.isnan(negated=True)
        if tok.upper() == "ISNAN":
            return self.isnan(negated=False)
        if kind == "num":
            number = self.number(tok)
            op = self.op()
            self.name()
            return Compare(_FLIP[op], number)
        if kind == "name":
            self.check_name(tok)
            word = self.word()
            if word == "IS":
                self.take()
                negated = self.word() == "NOT"
                if negated:
                    self.take()
                self.expect("NULL")
                return IsNaN(negated)
            if word == "IN":
                self.take()
                self.expect("(")
                numbers = [self.number(self.take()[1])]
                while self.peek() == ",":
                    self.take()
                    numbers.append(self.number(self.take()[1]))
                self.expect(")")
                return In(tuple(numbers))
            op = self.op()
            return Compare(op, self.number(self.take()[1]))
        self.fail(f"unexpected {tok!r}")
        raise AssertionError  # unreachable

    def isnan(self, negated: bool) -> Node:
        self.expect("(")
        self.name()
        self.expect(")")
        return IsNaN(negated)

    def op(self) -> str:
        kind, tok = self.take()
        if kind != "op":
            self.fail(f"expected a comparison (=, <, <=, >, >=), found {tok!r}")
        return "=" if tok == "==" else tok

    def name(self) -> None:
        kind, tok = self.take()
        if kind != "name":
            self.fail(f"expected the value's name, found {tok!r}")
        self.check_name(tok)

    def check_name(self, tok: str) -> None:
        name = tok.strip("`")
        if name not in self.names:
            known = " or ".join(repr(n) for n in self.names)
            self.fail(
                f"it names {name!r}; the value is named {known} (after the array). Dimensions "
                "are selected by index instead (isel, or the selection)"
            )

    def number(self, tok: str) -> float | int:
        text = tok.lower()
        if "inf" in text:
            return -math.inf if text.startswith("-") else math.inf
        try:
            return int(text) if re.fullmatch(r"[-+]?\d+", text) else float(text)
        except ValueError:
            self.fail(f"expected a number, found {tok!r}")
            raise AssertionError from None  # unreachable
