"""Group commit: concurrent callers share one durable write instead of queueing for many.

The first caller to arrive writes everything queued so far in one call; callers arriving
meanwhile wait, and the next of them writes the next batch. Each caller returns (or raises)
only once the batch holding its items is done, so nothing is acknowledged before it is
durable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Ticket[T]:
    items: list[T]
    done: bool = False
    error: BaseException | None = None


class GroupCommit[T]:
    """Shares one call of `write` among callers that arrive while a write is in flight."""

    def __init__(self, write: Callable[[list[T]], None]) -> None:
        self._write = write
        self._cond = threading.Condition()
        self._queue: list[_Ticket[T]] = []
        self._busy = False

    def submit(self, items: list[T]) -> None:
        """Have `items` written, in this caller's batch or a concurrent one; returns once durable.

        Raises what the write of the batch holding `items` raised."""
        ticket = _Ticket(items)
        with self._cond:
            self._queue.append(ticket)
            while self._busy and not ticket.done:
                self._cond.wait()
            if ticket.done:
                if ticket.error is not None:
                    raise ticket.error
                return
            self._busy = True
            batch, self._queue = self._queue, []
        error: BaseException | None = None
        try:
            self._write([item for t in batch for item in t.items])
        except BaseException as e:
            error = e
        with self._cond:
            for t in batch:
                t.done, t.error = True, error
            self._busy = False
            self._cond.notify_all()
        if error is not None:
            raise error
