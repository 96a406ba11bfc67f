"""Every error zarrlake exports survives pickling whole: an error raised in a worker process
(a process pool, Dask, Spark) reaches the caller as the same class with the same message and
attributes."""

from __future__ import annotations

import inspect
import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

import zarrlake.errors as errors
from zarrlake.errors import Conflict, ConflictError, ConflictKind, ZarrLakeError

CONFLICT = Conflict("t2m", ConflictKind.CHUNK, [(1, 2)], "written on both sides")

SAMPLES: dict[str, object] = {
    "message": "something went wrong; do this instead",
    "conflicts": [CONFLICT],
    "workers": ["worker 1a2b (pid 42 on vm, gone)"],
    "commit": "c0ffee" * 6,
    "expired_at": 1_700_000_000.5,
    "results": ["a check result"],
    "reasons": ["approvals: 0 of 1"],
    "purge": "5eb2c1a0d4e3f617",
    "array": "weather/t2m",
    "coords": (3, 1),
    "key": "weather/t2m/c/3/1",
    "reason": "Zstd decompression error: invalid input data",
}
"""A value for each constructor parameter the error classes take, by name."""

CLASSES = sorted(
    (
        c
        for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, ZarrLakeError) and c.__module__ == errors.__name__
    ),
    key=lambda c: c.__name__,
)


def instance(cls: type[ZarrLakeError]) -> ZarrLakeError:
    """An instance of `cls` built through its own `__init__`, with sample arguments."""
    try:
        params = list(inspect.signature(cls).parameters.values())
    except ValueError:  # no __init__ of its own: Exception's (*args)
        params = []
    kwargs = {}
    for p in params:
        if p.default is not p.empty:
            continue
        assert p.name in SAMPLES, f"{cls.__name__} takes {p.name!r}: add a sample for it"
        kwargs[p.name] = SAMPLES[p.name]
    error = cls(**kwargs) if kwargs else cls(SAMPLES["message"])
    error.note = "set after construction"  # an attribute set by a raise site travels too
    return error


def test_every_exported_error_class_is_covered():
    assert len(CLASSES) >= 30
    assert {"ConflictError", "UnflushedWritesError", "UnfinishedWritersError"} <= {
        c.__name__ for c in CLASSES
    }


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_an_error_round_trips_through_pickle(cls):
    error = instance(cls)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert str(back) == str(error)
    assert back.args == error.args
    assert vars(back) == vars(error)


def _raise_conflict() -> None:
    raise ConflictError([CONFLICT])


def test_a_conflict_raised_in_a_worker_process_arrives_whole():
    with ProcessPoolExecutor(1) as pool, pytest.raises(ConflictError) as caught:
        pool.submit(_raise_conflict).result()
    assert caught.value.conflicts == [CONFLICT]
    assert str(caught.value) == str(ConflictError([CONFLICT]))
    assert "c; o; m" not in str(caught.value)
