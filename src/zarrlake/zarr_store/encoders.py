"""The threads that encode an array write's whole large chunks: one per core, each chunk's
statistics, codecs and hash one task on one of them, taken in order through a window.

zarr's batched pipeline runs each chunk through a dozen coroutines on its event loop's
thread (about 450 us of Python a 1 MiB chunk here) and hands the codecs to the default
executor's threads, cores + 4 of them. The event loop then holds the GIL for long stretches,
and each numpy call of a chunk's statistics, which releases the GIL, waits to take it back,
while more encoding threads than cores evict each other's values from the core's cache.
Here the event loop only submits a chunk and hands its bytes to the store; the threads
take the GIL back from each other's short stretches of Python.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import zarr

from zarrlake._util import forksafe

WORKERS = max(
    1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
)
"""Encoding threads: one per core the process may run on (more only take turns on the same
cores, each evicting the others' values and zstd's tables from the core's cache)."""

_POOL = forksafe.PerProcess(
    lambda: ThreadPoolExecutor(WORKERS, thread_name_prefix="zarrlake-encode")
)


async def in_order[T, R](
    items: Iterable[T], encode: Callable[[T], R], store: Callable[[T, R], Awaitable[None]]
) -> None:
    """`encode` each of `items` on the encoding threads, two a thread in flight at most
    (and no more than zarr's `async.concurrency`), and `store` each result on this event
    loop in the items' order. If one raises, the encodes in flight are waited for (none
    outlives the write) and the error is raised."""
    pool = _POOL.get()
    window = max(1, min(2 * WORKERS, int(zarr.config.get("async.concurrency") or 1)))
    pending: deque[tuple[T, Future[R]]] = deque()
    try:
        for item in items:
            if len(pending) >= window:
                await _stored(pending, store)
            pending.append((item, pool.submit(encode, item)))
        while pending:
            await _stored(pending, store)
    finally:
        if pending:  # (an error or a cancellation: the others end, their errors dropped)
            await asyncio.wait([asyncio.wrap_future(fut) for _, fut in pending])
            for _, fut in pending:
                if not fut.cancelled():
                    fut.exception()


async def _stored[T, R](
    pending: deque[tuple[T, Future[R]]], store: Callable[[T, R], Awaitable[None]]
) -> None:
    """`store` the first pending job's result, then drop the job: its result taken as it
    is if the thread has finished it (the event loop is not woken for it), else awaited
    (still pending meanwhile, so an error or a cancellation waits for it too)."""
    item, fut = pending[0]
    got = fut.result() if fut.done() else await asyncio.wrap_future(fut)
    pending.popleft()
    await store(item, got)
