"""Seeded fault dice shared by the storage and metastore fault-injection wrappers.

Modelled on Materialize persist's "unreliable" blob and consensus wrappers: an operation may
fail before it runs (error_rate), a write may run and then lose its response
(lost_response_rate), and any operation may be delayed by up to `latency` seconds.
"""

from __future__ import annotations

import random
import threading

from zarrlake.errors import InvalidInputError, TransientError


class FaultDice:
    """Thread-safe, seeded decisions; counts what it injected so tests can assert it."""

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

    def before(self, what: str) -> float:
        """Maybe raise (the operation does not run); returns the delay to inject first."""
        with self._lock:
            delay = self._random.uniform(0, self.latency) if self.latency else 0.0
            if self.error_rate and self._random.random() < self.error_rate:
                self.errors_injected += 1
                raise TransientError(f"injected fault: {what} failed before it ran")
        return delay

    def after_write(self, what: str) -> None:
        """Maybe raise as if the response of a write that did run was lost."""
        with self._lock:
            if self.lost_response_rate and self._random.random() < self.lost_response_rate:
                self.responses_lost += 1
                raise TransientError(f"injected fault: response lost: {what} ran")


class CountsFaults:
    """Mixin exposing a wrapper's dice counters and settings as attributes (settings may be
    changed while the wrapper is in use, e.g. to stop injecting faults)."""

    dice: FaultDice

    @property
    def errors_injected(self) -> int:
        return self.dice.errors_injected

    @property
    def responses_lost(self) -> int:
        return self.dice.responses_lost

    @property
    def error_rate(self) -> float:
        return self.dice.error_rate

    @error_rate.setter
    def error_rate(self, value: float) -> None:
        self.dice.error_rate = value

    @property
    def lost_response_rate(self) -> float:
        return self.dice.lost_response_rate

    @lost_response_rate.setter
    def lost_response_rate(self, value: float) -> None:
        self.dice.lost_response_rate = value

    @property
    def latency(self) -> float:
        return self.dice.latency

    @latency.setter
    def latency(self, value: float) -> None:
        self.dice.latency = value
