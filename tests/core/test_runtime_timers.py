"""runtime.call_later: one timer thread per process; a timer fires once, on a thread of its
own, unless cancelled first."""

from __future__ import annotations

import threading
import time

from zarrlake._util import runtime


def test_a_timer_fires_once_on_a_thread_of_its_own() -> None:
    fired: list[str] = []
    done = threading.Event()

    def fn() -> None:
        fired.append(threading.current_thread().name)
        done.set()

    runtime.call_later(0.01, fn)
    assert done.wait(5)
    time.sleep(0.05)
    assert fired == ["zarrlake-timer"]


def test_a_cancelled_timer_never_fires() -> None:
    fired: list[int] = []
    done = threading.Event()
    runtime.call_later(0.02, lambda: fired.append(1)).cancel()
    runtime.call_later(0.05, done.set)
    assert done.wait(5)
    time.sleep(0.05)
    assert fired == []


def test_timers_fire_in_order_of_their_time_and_a_slow_one_delays_none() -> None:
    order: list[str] = []
    release = threading.Event()
    done = threading.Event()

    def slow() -> None:
        order.append("slow")
        release.wait(5)

    def last() -> None:
        order.append("late")
        done.set()

    runtime.call_later(0.08, last)
    runtime.call_later(0.01, slow)
    runtime.call_later(0.04, lambda: order.append("early"))
    assert done.wait(5)
    release.set()
    assert order == ["slow", "early", "late"]
