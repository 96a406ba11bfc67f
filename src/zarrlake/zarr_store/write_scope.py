"""The large chunks of one zarr array write, held and sent on in batches: each batch
recorded in one metastore write, then uploaded and staged together, in the background
while zarr encodes the next.

zarr's codec pipeline calls the store's `set` once per chunk, as each chunk's encoding
finishes, at most `async.concurrency` at a time. Uploading each at once would record each
object in the session's uploads partition alone (an object is durable there before its
upload starts, so the garbage collector finds it if the writer dies): one metastore write
per chunk. Held, the objects of a batch are recorded in one metastore write, then
uploaded in parallel and staged in one call.

A batch is sent once half of `HOLD_MAX` bytes are held, by a task of its own: zarr goes on
encoding while it is recorded, uploaded and staged (a send that blocked every `set` left
a core idle while it ran). One send is in flight at a time; a `set` that finds
`HOLD_MAX` bytes held or being sent waits for it, so a write holds about `HOLD_MAX` bytes
at most. The write's end waits for the send in flight, then sends the rest; a send's
error is raised by the next `set` or by the write's end. A `set` outside a pipeline write
(zarr called alone, another pipeline) is stored at once, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from zarrlake.vc.statistics import ChunkValues

HOLD_MAX = 64 << 20
"""Bytes of chunks one write holds or is sending at most (beside the `set`s zarr has in
progress): its memory for them. Half of it is a batch, sent while the next is held: one
metastore write records about 32 MiB of 1 MiB chunks."""

Held = tuple[str, Any, ChunkValues | None]
"""(key, the chunk's bytes as zarr gave them, the values they encode or None)."""
Send = Callable[[list[Held]], Awaitable[None]]
"""A store's way to record, upload and stage held chunks (`SessionStore._send`)."""


class WriteScope:
    """The chunks held by one array write, per store, and the send in flight."""

    def __init__(self) -> None:
        self.held: dict[int, tuple[Send, list[Held]]] = {}
        self.bytes = 0  # held, not being sent yet
        self.sending = 0  # in the send in flight
        self.open = True
        self._flight: asyncio.Task[None] | None = None

    def hold(self, store: object, send: Send, item: Held) -> bool:
        """Hold `item` for `store` (sent by `send`); False once the write is over (the
        caller stores it itself: a `set` that zarr started before a failure ended it)."""
        if not self.open:
            return False
        self.held.setdefault(id(store), (send, []))[1].append(item)
        self.bytes += len(item[1])
        return True

    async def settle(self) -> None:
        """After a hold: send what is held once it passes half of HOLD_MAX bytes and no
        send is in flight; wait for the send in flight while HOLD_MAX bytes are held or being
        sent. Raises what a finished send raised."""
        while True:
            flight = self._flight
            if flight is not None and flight.done():
                self._landed(flight)
                continue
            if flight is None:
                if self.bytes >= HOLD_MAX // 2:
                    self._start()
                return
            if self.bytes + self.sending < HOLD_MAX:
                return
            await asyncio.shield(flight)  # (a cancelled `set` leaves the send running)

    def _start(self) -> None:
        """Send what is held, in a task of its own (chunks held meanwhile wait for the
        next send)."""
        held, self.held = self.held, {}
        self.sending, self.bytes = self.bytes, 0
        self._flight = asyncio.get_running_loop().create_task(_send(held))

    def _landed(self, flight: asyncio.Task[None]) -> None:
        """Forget the finished send `flight`; raise what it raised."""
        if self._flight is flight:
            self._flight, self.sending = None, 0
        flight.result()

    async def send(self) -> None:
        """Wait for the send in flight, then record, upload and stage every chunk held."""
        await self.drain()
        held, self.held, self.bytes = self.held, {}, 0
        await _send(held)

    async def drain(self) -> None:
        """Wait for the send in flight, if any, to end; raise what it raised."""
        flight = self._flight
        if flight is not None:
            await asyncio.wait([flight])  # (its end, not its result: cancelling the
            # waiter leaves the send running, and `_landed` raises its error once)
            self._landed(flight)

    def close(self) -> None:
        """End the write: what is held is dropped (the write failed, or was sent)."""
        self.open = False
        self.held, self.bytes = {}, 0


async def _send(held: dict[int, tuple[Send, list[Held]]]) -> None:
    """Record, upload and stage `held` (each store's chunks by its `send`)."""
    for send, items in held.values():
        await send(items)


_SCOPE: ContextVar[WriteScope | None] = ContextVar("zarrlake_write_scope", default=None)
"""The array write in progress in this task (and the tasks it starts)."""


def current() -> WriteScope | None:
    """The array write in progress, whose chunks a session store holds; None outside one."""
    return _SCOPE.get()


async def within[T](run: Callable[[], Awaitable[T]]) -> T:
    """Run the array write `run` with its large chunks held and sent in batches: they are
    all recorded, uploaded and staged before this returns. If `run` raises, the chunks
    still held are dropped (none of them was recorded or uploaded), once the send in
    flight, if any, has ended (its error, if any, is not the one raised)."""
    scope = WriteScope()
    token = _SCOPE.set(scope)
    try:
        result = await run()
        await scope.send()
        return result
    except BaseException:
        with contextlib.suppress(Exception):  # (the write's own error is the one raised)
            await scope.drain()
        raise
    finally:
        _SCOPE.reset(token)
        scope.close()
