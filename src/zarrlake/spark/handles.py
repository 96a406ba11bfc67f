"""Sessions shipped to Spark tasks, re-joined once per Python worker process.

Spark reuses its Python workers between tasks (`spark.python.worker.reuse`, on by default),
so a worker that already joined a job's session keeps it, and its opened zarr arrays, for
that job's later tasks: a task then costs no metastore or object reads before its own work.
"""

from __future__ import annotations

import os
import pickle
import threading
from typing import Any

import zarr
from cachetools import LRUCache

from zarrlake.session import Session

_KEEP = 8
"""Sessions kept per process (a worker serves a few jobs at a time at most)."""

_cache: LRUCache[tuple, tuple[Session, dict[str, zarr.Array]]] = LRUCache(_KEEP)
_lock = threading.Lock()  # cachetools caches are not thread-safe


class SessionHandle:
    """A picklable reference to a session: the key it is cached under in each worker, and
    the session's own pickle (which re-joins it) for the first task in each worker."""

    def __init__(self, session: Session) -> None:
        self.key = (session.spec, session.id, session.base_commit)
        self.blob = pickle.dumps(session)
        self._local: Session | None = session
        self._local_arrays: dict[str, zarr.Array] = {}
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        return {"key": self.key, "blob": self.blob}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _local=None, _local_arrays={}, _pid=None)

    @property
    def session(self) -> Session:
        """The session in this process: the driver's own object, else the worker's cached
        one, joining it on first use."""
        if self._local is not None and self._pid == os.getpid():
            return self._local
        return _entry(self)[0]

    def array(self, path: str, open_fn) -> zarr.Array:
        """Array `path` of the session, opened once per process with open_fn(session)."""
        if self._local is not None and self._pid == os.getpid():
            session, arrays = self._local, self._local_arrays
        else:
            session, arrays = _entry(self)
        array = arrays.get(path)
        if array is None:
            array = open_fn(session)
            arrays[path] = array
        return array

    def forget(self) -> None:
        """Drop this process's cached copy (the session was committed or abandoned)."""
        with _lock:
            _cache.pop(self.key, None)


def _entry(handle: SessionHandle) -> tuple[Session, dict[str, zarr.Array]]:
    with _lock:
        hit = _cache.get(handle.key)
        if hit is not None:
            return hit
    session = pickle.loads(handle.blob)
    with _lock:
        hit = _cache.setdefault(handle.key, (session, {}))
        return hit
