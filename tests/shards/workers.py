"""Worker functions for the shard tests: module level, so every start method imports them.
Each joins a session by id and writes its inner chunks of one shard, one zarr write (a
read-modify-write of the whole shard) at a time, flushing after each so the others see it
in the middle of theirs."""

from __future__ import annotations

import multiprocessing.synchronize

import numpy as np
import zarr

import zarrlake as zl

SHAPE = (4, 4096)
INNER = (1, 512)  # 4 KiB of float64: staged inline
BIG_INNER = (1, 2048)  # 16 KiB: uploaded as chunk objects
SHARD = (4, 4096)


def values(inner: tuple[int, int]) -> np.ndarray:
    """What the array holds once every worker wrote: a distinct value per element."""
    del inner
    return np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE) + 1


def cells(inner: tuple[int, int]) -> list[tuple[int, int]]:
    """(row, column block) of every inner chunk of the one shard."""
    return [(r, c) for r in range(SHAPE[0]) for c in range(SHAPE[1] // inner[1])]


def mine(worker: int, workers: int, inner: tuple[int, int]) -> list[tuple[int, int]]:
    """The inner chunks worker `worker` writes: interleaved with the others'."""
    return [cell for i, cell in enumerate(cells(inner)) if i % workers == worker]


def write_inner(
    where: dict,
    session_id: str,
    worker: int,
    workers: int,
    inner: tuple[int, int],
    barrier: multiprocessing.synchronize.Barrier,
) -> None:
    """Join, wait for every worker, write this worker's inner chunks one by one."""
    session = zl.Repo.open(**where).join_session(session_id)
    arr = zarr.open_array(session.store, path="a", mode="r+")
    want = values(inner)
    barrier.wait(timeout=60)
    for r, c in mine(worker, workers, inner):
        cols = slice(c * inner[1], (c + 1) * inner[1])
        arr[r, cols] = want[r, cols]
        session.flush()
    session.close()
