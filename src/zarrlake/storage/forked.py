"""Object storage in a process forked after obstore started its I/O runtime.

obstore runs every request on one process-wide tokio runtime whose threads do not survive
fork(): in a forked child any S3 or local-directory call waits forever, whichever client it
uses (a half-sent request can also stall the server for the parent). So a child hands its
obstore calls to a helper process of its own, started fresh (its runtime is alive), which
opens the same location and answers over a pipe. The helper ends when the child's end of
the pipe closes, at the latest when the child exits. In-memory stores need no helper.
"""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
from typing import IO, Any

from zarrlake.errors import TransientError, ZarrLakeError

_LENGTH = struct.Struct("<Q")

Recipe = tuple[str, tuple[tuple[str, Any], ...]]
"""How to open the same store again: (location, storage options)."""


def _send(pipe: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_LENGTH.pack(len(data)) + data)
    pipe.flush()


def _receive(pipe: IO[bytes]) -> Any:
    head = pipe.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError
    (size,) = _LENGTH.unpack(head)
    data = pipe.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


class Helper:
    """A helper process that runs one store's primitives for this (forked) process."""

    def __init__(self, recipe: Recipe) -> None:
        self._lock = threading.Lock()
        self.dead = False
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "zarrlake.storage.forked"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._to, self._from = self._proc.stdin, self._proc.stdout
        _send(self._to, recipe)

    def call(self, method: str, *args: Any) -> Any:
        """`store.<method>(*args)` in the helper; its zarrlake errors are raised here."""
        with self._lock:
            try:
                _send(self._to, (method, args))
                ok, value = _receive(self._from)
            except (EOFError, OSError) as e:
                self.dead = True  # the next call starts another
                raise TransientError(
                    f"the storage helper of process {os.getpid()} ended: {e!r}"
                ) from None
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Close the pipe to the helper process and wait for it to exit."""
        self._to.close()
        self._proc.wait()


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The helper's loop: open the store named by the first message, then answer calls."""
    from zarrlake.storage import open_storage

    location, options = _receive(stdin)
    store = open_storage(location, retry_policy=None, **dict(options))
    while True:
        try:
            method, args = _receive(stdin)
        except EOFError:
            return
        try:
            value = getattr(store, method)(*args)
            if method in ("_list", "_list_modified"):
                value = list(value)
            answer: tuple[bool, Any] = (True, value)
        except ZarrLakeError as e:
            answer = (False, e)
        except Exception as e:  # a bug, not a storage answer: still say what it was
            answer = (False, ZarrLakeError(f"storage helper: {type(e).__name__}: {e}"))
        _send(stdout, answer)


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
