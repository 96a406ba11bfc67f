"""The large chunks of one zarr array write, held until zarr has handed over its last one,
then recorded, uploaded and staged together.

zarr's codec pipeline calls the store's `set` once per chunk, as each chunk's encoding
finishes, at most `async.concurrency` at a time. Uploading each at once would record each
object in the session's uploads partition alone (an object is durable there before its
upload starts, so the garbage collector finds it if the writer dies): one metastore write
per chunk. Held until the write's end, every object of the write is recorded in one
metastore write, then all are uploaded in parallel and staged in one call.

A write holds about `HOLD_MAX` bytes at most: the `set` that passes it sends what is held
before it returns, and later ones wait for that send. A `set` outside a pipeline write
(zarr called alone, another pipeline) is stored at once, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from zarrlake.vc.statistics import ChunkValues

HOLD_MAX = 64 << 20
"""Bytes of chunks one write holds (or is sending) before it sends them on: one metastore
write records at least this many bytes of 1 MiB chunks, at this much memory."""

Held = tuple[str, Any, ChunkValues | None]
"""(key, the chunk's bytes as zarr gave them, the values they encode or None)."""
Send = Callable[[list[Held]], Awaitable[None]]
"""A store's way to record, upload and stage held chunks (`SessionStore._send`)."""


class WriteScope:
    """The chunks held by one array write, per store."""

    def __init__(self) -> None:
        self.held: dict[int, tuple[Send, list[Held]]] = {}
        self.bytes = 0  # held or being sent
        self.open = True
        self._sending = asyncio.Lock()

    def hold(self, store: object, send: Send, item: Held) -> bool:
        """Hold `item` for `store` (sent by `send`); False once the write is over (the
        caller stores it itself: a `set` that zarr started before a failure ended it)."""
        if not self.open:
            return False
        self.held.setdefault(id(store), (send, []))[1].append(item)
        self.bytes += len(item[1])
        return True

    async def settle(self) -> None:
        """After a hold: once HOLD_MAX bytes are held or being sent, wait for the send in
        progress, then send what is held if it still passes HOLD_MAX (so zarr does not
        encode far ahead of the uploads)."""
        if self.bytes < HOLD_MAX:
            return
        async with self._sending:
            if self.bytes >= HOLD_MAX:
                await self.send()

    async def send(self) -> None:
        """Record, upload and stage every chunk held so far (chunks held meanwhile wait
        for the next send)."""
        held, self.held = self.held, {}
        size = sum(len(item[1]) for _, items in held.values() for item in items)
        try:
            for send, items in held.values():
                await send(items)
        finally:
            self.bytes -= size

    def close(self) -> None:
        """End the write: what is held is dropped (the write failed, or was sent)."""
        self.open = False
        self.held, self.bytes = {}, 0


_SCOPE: ContextVar[WriteScope | None] = ContextVar("zarrlake_write_scope", default=None)
"""The array write in progress in this task (and the tasks it starts)."""


def current() -> WriteScope | None:
    """The array write in progress, whose chunks a session store holds; None outside one."""
    return _SCOPE.get()


async def within[T](run: Callable[[], Awaitable[T]]) -> T:
    """Run the array write `run` with its large chunks held, then send them: they are
    recorded, uploaded and staged before this returns. If `run` raises, the held chunks
    are dropped (none of them was recorded or uploaded)."""
    scope = WriteScope()
    token = _SCOPE.set(scope)
    try:
        result = await run()
        await scope.send()
        return result
    finally:
        _SCOPE.reset(token)
        scope.close()
