"""Client processes for the consistency scenarios: each `Client` is a separate Python process
(multiprocessing "spawn") that runs zarrlake operations sent by the test, one at a time, and
sends back their results. Sessions live inside the client process, named by the test.

zarrlake errors come back as `Failed` values (their conflicts included) rather than being
re-raised, since ConflictError does not survive pickling; anything else comes back as a
ClientError carrying the client's traceback.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

RESULT_TIMEOUT = 120.0


@dataclass(frozen=True)
class Failed:
    """A zarrlake error raised in a client."""

    error: str
    message: str
    conflicts: tuple[tuple[str, str, tuple[tuple[int, ...], ...] | None], ...] = ()


class ClientError(AssertionError):
    """An unexpected exception in a client process (its traceback is the message)."""


# operations (run inside the client process) ------------------------------------------


def _open(state: dict, location: str) -> str:
    import zarrlake as zl

    if state.get("repo") is not None:
        state["repo"].close()
    state["repo"] = zl.Repo.open(location)
    state["sessions"] = {}
    return state["repo"].resolve("main")


def _create_session(
    state: dict, name: str, branch: str = "main", isolation: str = "snapshot"
) -> str:
    s = state["repo"].create_session(branch, isolation=isolation, message=name)
    state["sessions"][name] = s
    return s.id


def _join(state: dict, name: str, session_id: str) -> str:
    state["sessions"][name] = state["repo"].join_session(session_id)
    return state["sessions"][name].base_commit


def _adopt(state: dict, name: str, pickled: bytes) -> str | None:
    """Take over a session pickled by another process (it re-joins the same transaction)."""
    state["sessions"][name] = pickle.loads(pickled)
    return state["sessions"][name].id


def _readonly(state: dict, name: str, ref: str = "main") -> str:
    state["sessions"][name] = state["repo"].readonly_session(ref)
    return state["sessions"][name].base_commit


def _array(state: dict, name: str, path: str, mode: str = "r+") -> Any:
    import zarr

    return zarr.open_array(state["sessions"][name].store, path=path, mode=mode)


def _write(state: dict, name: str, path: str, start: int, stop: int, value: float) -> None:
    """Write and flush: a worker's writes are acknowledged once durable."""
    _array(state, name, path)[start:stop] = value
    state["sessions"][name].flush()


def _write_regions(state: dict, name: str, path: str, regions: list[tuple[int, int, float]]) -> int:
    arr = _array(state, name, path)
    for start, stop, value in regions:
        arr[start:stop] = value
    state["sessions"][name].flush()
    return os.getpid()


def _read(state: dict, name: str, path: str) -> Any:
    return _array(state, name, path, "r")[:]


def _resize(state: dict, name: str, path: str, shape: tuple[int, ...]) -> None:
    _array(state, name, path).resize(shape)


def _derive(state: dict, name: str, src: str, dst: str) -> None:
    """Read array `src` and write `dst` = 2 * src (a derived product)."""
    import zarr

    store = state["sessions"][name].store
    data = zarr.open_array(store, path=src, mode="r")[:]
    root = zarr.open_group(store, mode="a")
    out = root.require_array(dst, shape=data.shape, chunks=(10,), dtype=data.dtype, fill_value=0)
    out[:] = data * 2
    state["sessions"][name].flush()


def _commit(state: dict, name: str, message: str, on_conflict: str = "fail") -> str:
    return state["sessions"][name].commit(message, on_conflict=on_conflict)


def _abandon(state: dict, name: str) -> None:
    state["sessions"][name].abandon()


def _status(state: dict, name: str) -> str:
    return state["sessions"][name].state


def _update_expiration(state: dict, name: str, seconds: float) -> float:
    s = state["sessions"][name]
    s.update_expiration(timedelta(seconds=seconds))
    return s.expires_at.timestamp()


def _watch(state: dict, path: str, old: float, flag: str) -> dict:
    """Read `path` over and over until `flag` exists (then once more): through the pinned
    session "pinned", which must show `old` everywhere, and through a fresh read-only
    session each time, which must show one commit's values everywhere (never a mix)."""
    import numpy as np

    reads, fresh_values = 0, set()
    while True:
        done = Path(flag).exists()
        pinned = _read(state, "pinned", path)
        if not (pinned == old).all():
            return {"error": f"pinned reader saw {np.unique(pinned).tolist()}"}
        _readonly(state, "fresh")
        fresh = _read(state, "fresh", path)
        seen = np.unique(fresh).tolist()
        if len(seen) != 1:
            return {"error": f"fresh reader saw a mix of commits: {seen}"}
        fresh_values.add(seen[0])
        reads += 1
        if done:
            return {"reads": reads, "fresh_values": fresh_values}


OPS = {
    "open": _open,
    "create_session": _create_session,
    "join": _join,
    "adopt": _adopt,
    "readonly": _readonly,
    "write": _write,
    "write_regions": _write_regions,
    "read": _read,
    "resize": _resize,
    "derive": _derive,
    "commit": _commit,
    "abandon": _abandon,
    "status": _status,
    "update_expiration": _update_expiration,
    "watch": _watch,
}


def _serve(inbox: mp.Queue, outbox: mp.Queue) -> None:
    from zarrlake.errors import ConflictError, ZarrLakeError

    state: dict[str, Any] = {"repo": None, "sessions": {}}
    while (msg := inbox.get()) is not None:
        op, args = msg
        try:
            outbox.put(("ok", OPS[op](state, *args)))
        except ConflictError as e:
            conflicts = tuple(
                (c.path, c.kind, tuple(c.chunks) if c.chunks is not None else None)
                for c in e.conflicts
            )
            outbox.put(("ok", Failed("ConflictError", str(e), conflicts)))
        except ZarrLakeError as e:
            outbox.put(("ok", Failed(type(e).__name__, str(e))))
        except BaseException:
            outbox.put(("raised", traceback.format_exc()))
    if state["repo"] is not None:
        state["repo"].close()


# the test side ------------------------------------------------------------------------


class Client:
    """One client process. `send` starts an operation, `result` waits for its answer;
    `call` does both."""

    def __init__(self, name: str) -> None:
        ctx = mp.get_context("spawn")
        self.name = name
        self.inbox: mp.Queue = ctx.Queue()
        self.outbox: mp.Queue = ctx.Queue()
        self.process = ctx.Process(
            target=_serve, args=(self.inbox, self.outbox), name=name, daemon=True
        )
        self.process.start()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def send(self, op: str, *args: Any) -> None:
        self.inbox.put((op, args))

    def result(self, timeout: float = RESULT_TIMEOUT) -> Any:
        try:
            kind, value = self.outbox.get(timeout=timeout)
        except queue.Empty:
            alive = self.process.is_alive()
            raise ClientError(f"client {self.name} gave no answer (alive: {alive})") from None
        if kind == "raised":
            raise ClientError(f"client {self.name} failed:\n{value}")
        return value

    def call(self, op: str, *args: Any) -> Any:
        self.send(op, *args)
        return self.result()

    def stop(self) -> None:
        """Ask the process to exit; kill it (by its own handle) if it does not."""
        if self.process.is_alive():
            self.inbox.put(None)
            self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=30)
        self.inbox.close()
        self.outbox.close()
