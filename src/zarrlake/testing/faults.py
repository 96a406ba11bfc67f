"""Fault injection for tests, after Materialize persist's "unreliable" blob and consensus
wrappers: an operation may fail before it runs (error_rate), a write may run and then lose
its response (lost_response_rate, the case that makes retrying a conditional write subtle),
and any operation may be delayed by up to `latency` seconds (the sleep is the injected
fault, not synchronisation).

`enable_from_env()` wires the wrappers in from outside the production open path: with
ZARRLAKE_FAULTS set, every backend the registries open afterwards in this process is
wrapped, so ``Repo.open`` gives Retrying(Faulty(raw)) stores.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from zarrlake import metastore, storage
from zarrlake.errors import CASFailedError, InvalidInputError, TransientError
from zarrlake.metastore.base import Call, Item, MetaStore, T, WrapperMetaStore
from zarrlake.storage.base import ByteRange, ObjectStore, WrapperObjectStore

SCAN_FAULT_EVERY = 100
"""A scan may also fail after every this many items, as if a page fetch failed."""

ENV = "ZARRLAKE_FAULTS"
_KINDS = {"seed": int, "error_rate": float, "lost_response_rate": float, "latency": float}


class FaultDice:
    """Thread-safe, seeded decisions; counts what it injected so tests can assert it. The
    rates and latency may be changed while in use (e.g. to stop injecting faults)."""

    def __init__(
        self,
        *,
        seed: int,
        error_rate: float = 0.0,
        lost_response_rate: float = 0.0,
        latency: float = 0.0,
    ) -> None:
        for name, rate in (("error_rate", error_rate), ("lost_response_rate", lost_response_rate)):
            if not 0.0 <= rate <= 1.0:
                raise InvalidInputError(f"{name} must be within [0, 1], not {rate!r}")
        if latency < 0:
            raise InvalidInputError(f"latency must be >= 0 seconds, not {latency!r}")
        self.error_rate = error_rate
        self.lost_response_rate = lost_response_rate
        self.latency = latency
        self.errors_injected = 0
        self.responses_lost = 0
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def before(self, what: str) -> None:
        """Maybe wait, then maybe raise (the operation does not run)."""
        with self._lock:
            delay = self._random.uniform(0, self.latency) if self.latency else 0.0
            fail = bool(self.error_rate) and self._random.random() < self.error_rate
            self.errors_injected += fail
        if delay:
            time.sleep(delay)  # the injected latency itself
        if fail:
            raise TransientError(f"injected fault: {what} failed before it ran")

    def after_write(self, what: str) -> None:
        """Maybe raise as if the response of a write that did run was lost."""
        with self._lock:
            lost = bool(self.lost_response_rate) and self._random.random() < self.lost_response_rate
            self.responses_lost += lost
        if lost:
            raise TransientError(f"injected fault: response lost: {what} ran")


class _Injects:
    """What both fault wrappers share: the dice, and its counts readable on the wrapper."""

    dice: FaultDice

    def _make_dice(self, seed: int, error_rate: float, lost_rate: float, latency: float) -> None:
        self.dice = FaultDice(
            seed=seed, error_rate=error_rate, lost_response_rate=lost_rate, latency=latency
        )

    @property
    def errors_injected(self) -> int:
        return self.dice.errors_injected

    @property
    def responses_lost(self) -> int:
        return self.dice.responses_lost


class FaultyMetaStore(_Injects, WrapperMetaStore):
    """Wraps `inner` and injects seeded faults; settings live in `dice`."""

    def __init__(
        self,
        inner: MetaStore,
        *,
        seed: int,
        error_rate: float = 0.0,
        lost_response_rate: float = 0.0,
        latency: float = 0.0,
    ) -> None:
        super().__init__(inner)
        self._make_dice(seed, error_rate, lost_response_rate, latency)

    def _around(self, call: Call, run: Callable[[], T]) -> T:
        """Maybe fail before the call runs; after a write ran, maybe lose its reply (a
        refused compare-and-swap's too)."""
        self.dice.before(call.op)
        if not call.write:
            return run()
        try:
            result = run()
        except CASFailedError:
            self.dice.after_write(call.op)  # the "failed" answer can be lost too
            raise
        self.dice.after_write(call.op)
        return result

    def scan(
        self,
        partition: str,
        start: bytes = b"",
        prefix: bytes | None = None,
        limit: int | None = None,
    ) -> Iterator[Item]:
        """Scan through the inner store; the start and each page may fail."""
        return self._pages(super().scan(partition, start, prefix, limit))

    def _pages(self, items: Iterator[Item]) -> Iterator[Item]:
        for n, item in enumerate(items, 1):
            yield item
            if n % SCAN_FAULT_EVERY == 0:
                self.dice.before("scan page")


class FaultyObjectStore(_Injects, WrapperObjectStore):
    """Wraps `inner` and injects seeded faults; settings live in `dice`."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        seed: int,
        error_rate: float = 0.0,
        lost_response_rate: float = 0.0,
        latency: float = 0.0,
    ) -> None:
        super().__init__(inner)
        self._make_dice(seed, error_rate, lost_response_rate, latency)

    def _before(self, op: str, key: str) -> None:
        self.dice.before(f"{op} {key!r} on {self.url}")

    def _after_write(self, op: str, key: str) -> None:
        self.dice.after_write(f"{op} {key!r} on {self.url}")

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """Read through the inner store, after maybe failing first (an injected error)."""
        self._before("GET", key)
        return self.inner.get(key, byte_range)

    def put(self, key: str, data: bytes | memoryview) -> None:
        """Write through the inner store; may fail before, or lose the reply after it landed."""
        self._before("PUT", key)
        self.inner.put(key, data)
        self._after_write("PUT", key)

    def put_if_absent(self, key: str, data: bytes | memoryview) -> bool:
        """Create through the inner store; may fail before, or lose the reply after."""
        self._before("PUT-IF-ABSENT", key)
        written = self.inner.put_if_absent(key, data)
        self._after_write("PUT-IF-ABSENT", key)
        return written

    def delete(self, key: str) -> None:
        """Delete through the inner store; may fail before, or lose the reply after."""
        self._before("DELETE", key)
        self.inner.delete(key)
        self._after_write("DELETE", key)

    def delete_many(self, keys: list[str]) -> None:
        """Delete the keys through the inner store; may fail before, or lose the reply after."""
        self._before("DELETE-MANY", f"{len(keys)} keys")
        self.inner.delete_many(keys)
        self._after_write("DELETE-MANY", f"{len(keys)} keys")

    def list(self, prefix: str = "") -> Iterator[str]:
        """List through the inner store, after maybe failing first."""
        self._before("LIST", prefix)
        return self.inner.list(prefix)

    def exists(self, key: str) -> bool:
        """Ask the inner store, after maybe failing first."""
        self._before("HEAD", key)
        return self.inner.exists(key)

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        """Read with its tag through the inner store, after maybe failing first."""
        self._before("GET", key)
        return self.inner.get_tagged(key)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Update conditionally through the inner store; may fail before, or lose the reply
        after."""
        self._before("CONDITIONAL PUT", key)
        try:
            new = self.inner.put_if(key, data, tag)
        except CASFailedError:
            self._after_write("CONDITIONAL PUT", key)  # the refusal can be lost too
            raise
        self._after_write("CONDITIONAL PUT", key)
        return new


def parse_spec(spec: str) -> dict[str, Any]:
    """FaultDice settings from ``seed=N,error_rate=F,lost_response_rate=F,latency=SECONDS``
    (any subset; seed defaults to 0); InvalidInputError naming a bad item."""
    settings: dict[str, Any] = {"seed": 0}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, value = (x.strip() for x in part.partition("="))
        try:
            settings[name] = _KINDS[name](value)
        except (KeyError, ValueError):
            raise InvalidInputError(
                f"{ENV} item {part!r}: use seed=N,error_rate=F,lost_response_rate=F,latency=SECONDS"
            ) from None
    FaultDice(**settings)  # checks the ranges now, not at the first open
    return settings


_enabled: list[Any] = []


def enable(spec: str) -> None:
    """Wrap every backend opened from now on in this process: object storage in
    FaultyObjectStore(seed), metastores in FaultyMetaStore(seed + 1). Idempotent per process
    (a second call replaces the first)."""
    settings = parse_spec(spec)
    disable()

    def faulty_storage(store: ObjectStore) -> ObjectStore:
        return FaultyObjectStore(store, **settings)

    def faulty_metastore(meta: MetaStore) -> MetaStore:
        return FaultyMetaStore(meta, **{**settings, "seed": settings["seed"] + 1})

    storage.registry.add_hook(faulty_storage)
    metastore.registry.add_hook(faulty_metastore)
    _enabled[:] = [faulty_storage, faulty_metastore]
    # Retries are the expected outcome of injected faults: do not log each one as a warning.
    logging.getLogger("stamina").setLevel(logging.ERROR)


def disable() -> None:
    """Stop wrapping backends opened from now on (stores already open keep their faults)."""
    if _enabled:
        storage.registry.remove_hook(_enabled[0])
        metastore.registry.remove_hook(_enabled[1])
        _enabled.clear()


def enable_from_env() -> bool:
    """`enable(os.environ["ZARRLAKE_FAULTS"])` if it is set and not empty; whether it was."""
    spec = os.environ.get(ENV, "")
    if spec.strip():
        enable(spec)
        return True
    return False
