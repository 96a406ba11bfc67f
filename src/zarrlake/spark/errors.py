"""zarrlake's own errors out of Spark.

A zarrlake error in a write task does not fail the task: the task returns it as data
(`TaskError`, in its message to the driver), so Spark logs no failed task, no stack trace
and no retry, and the driver raises it again as itself. Any other failure, and an error
raised where Spark plans a read or write, reaches the driver as AnalysisException /
PythonException / Py4JJavaError with the Python traceback as text; `zarrlake_errors()`
re-raises the zarrlake error it names, with its one-line message.

A ConflictError's details (path, kind, chunk coordinates of each conflict) travel in that
text too: code that Spark runs in its own Python processes is wrapped in `keep_conflicts`,
which adds them to the error as a note (the traceback text includes notes)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from zarrlake import errors

_LINE = re.compile(r"^(?:zarrlake\.errors\.)?(\w+(?:Error)): (.*)$", re.MULTILINE)
_NOTE = "zarrlake conflicts: "
_CONFLICTS = re.compile("^" + re.escape(_NOTE) + r"(\[.*\])\s*$", re.MULTILINE)


def conflicts_note(conflicts: list[errors.Conflict]) -> str:
    """One line naming every conflict, which `unwrap` reads back."""
    rows = [[c.path, c.kind, c.chunks, c.detail] for c in conflicts]
    return _NOTE + json.dumps(rows, separators=(",", ":"))


def keep_conflicts[**P, R](fn: Callable[P, R]) -> Callable[P, R]:
    """For code Spark runs in its Python workers: a ConflictError leaving `fn` carries its
    conflicts in a note, so the driver's `zarrlake_errors()` rebuilds them."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except errors.ConflictError as e:
            note = conflicts_note(e.conflicts)
            if note not in getattr(e, "__notes__", ()):
                e.add_note(note)
            raise

    return run


def _conflicts(text: str) -> list[errors.Conflict]:
    found = _CONFLICTS.findall(text)
    if not found:
        return []
    try:
        return _rebuilt(json.loads(found[-1]))
    except (ValueError, TypeError):
        return []


def _rebuilt(rows: list) -> list[errors.Conflict]:
    return [
        errors.Conflict(
            path,
            errors.ConflictKind(kind),
            [tuple(c) for c in chunks] if chunks else chunks,
            detail,
        )
        for path, kind, chunks, detail in rows
    ]


@dataclass(frozen=True)
class TaskError:
    """A zarrlake error a Spark task met, carried to the driver as data: its class name,
    message, and a ConflictError's conflicts as (path, kind, chunks, detail) rows."""

    kind: str
    message: str
    conflicts: tuple = ()

    @classmethod
    def of(cls, e: errors.ZarrLakeError) -> TaskError:
        """What the driver needs to raise `e` again."""
        rows = [(c.path, str(c.kind), c.chunks, c.detail) for c in getattr(e, "conflicts", ())]
        return cls(type(e).__name__, str(e), tuple(rows))

    def error(self) -> errors.ZarrLakeError:
        """The error again, of its own class (ZarrLakeError if the class is unknown here)."""
        cls = getattr(errors, self.kind, None)
        if not (isinstance(cls, type) and issubclass(cls, errors.ZarrLakeError)):
            return errors.ZarrLakeError(self.message)
        if issubclass(cls, errors.ConflictError):
            return cls(_rebuilt([list(r) for r in self.conflicts]), self.message)
        try:
            return cls(self.message)
        except TypeError:  # an error class with more arguments than a message
            return errors.ZarrLakeError(self.message)


def raise_first(found: list[TaskError]) -> None:
    """Raise the first error tasks returned, as itself (a one-line message, no Spark
    traceback behind it)."""
    if found:
        raise found[0].error() from None


def unwrap(exc: BaseException) -> errors.ZarrLakeError | None:
    """The zarrlake error named last in `exc`'s text (the one that ended the Python code),
    rebuilt with its message (and a ConflictError's conflicts); None if it names none."""
    text = str(exc)
    found = None
    for match in _LINE.finditer(text):
        cls = getattr(errors, match.group(1), None)
        if isinstance(cls, type) and issubclass(cls, errors.ZarrLakeError):
            found = (cls, match.group(2).strip())
    if found is None:
        return None
    cls, message = found
    message = message.removesuffix(" SQLSTATE: 38000").strip()
    if issubclass(cls, errors.ConflictError):  # and BranchMovedError, FastForwardError
        return cls(_conflicts(text), message)
    if cls is errors.ExpiredHistoryError:
        return errors.NotFoundError(message)
    return cls(message)


def _from_spark(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("pyspark", "py4j"))


@contextmanager
def zarrlake_errors() -> Iterator[None]:
    """Re-raise a zarrlake error wrapped by Spark as the zarrlake error itself.

    It keeps the same class and message, and a ConflictError's conflicts. The Spark
    exception (with the JVM's stack) is kept as its `spark_error` attribute, not chained,
    so the traceback shows the one-line zarrlake error alone.
    """
    try:
        yield
    except Exception as e:
        if not _from_spark(e):
            raise
        inner = unwrap(e)
        if inner is None:
            raise
        inner.spark_error = e  # type: ignore[attr-defined]
        raise inner from None
