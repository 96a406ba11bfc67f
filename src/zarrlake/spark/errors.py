"""zarrlake's own errors out of Spark's wrappers: an error raised in a Python data source or
a task reaches the driver as AnalysisException / PythonException / Py4JJavaError with the
Python traceback as text; `zarrlake_errors()` re-raises the zarrlake error it names."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from zarrlake import errors

_LINE = re.compile(r"^(?:zarrlake\.errors\.)?(\w+(?:Error)): (.*)$", re.MULTILINE)


def unwrap(exc: BaseException) -> errors.ZarrLakeError | None:
    """The zarrlake error named last in `exc`'s text (the one that ended the Python code),
    rebuilt with its message; None if it names none."""
    found = None
    for match in _LINE.finditer(str(exc)):
        cls = getattr(errors, match.group(1), None)
        if isinstance(cls, type) and issubclass(cls, errors.ZarrLakeError):
            found = (cls, match.group(2).strip())
    if found is None:
        return None
    cls, message = found
    message = message.removesuffix(" SQLSTATE: 38000").strip()
    if cls is errors.ConflictError:
        return errors.ConflictError([], message)
    return cls(message)


def _from_spark(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("pyspark", "py4j"))


@contextmanager
def zarrlake_errors() -> Iterator[None]:
    """Re-raise a zarrlake error wrapped by Spark as the zarrlake error itself (same class and
    message; the Spark exception is its __cause__)."""
    try:
        yield
    except Exception as e:
        if not _from_spark(e):
            raise
        inner = unwrap(e)
        if inner is None:
            raise
        raise inner from e
