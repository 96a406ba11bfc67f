"""A counting TCP relay: sits between an engine and a server (S3, PostgreSQL) and counts, per
measured window, the requests the client makes and the sequential round trips they cost.

- a *request* is a client->server send that opens a connection's first exchange or follows
  a server reply on that connection (the turns of the conversation; a request written in
  several pieces is one request);
- a request *waits* from its first byte until the first byte of the reply is handed to
  the client;
- a request that starts while no other request of the same relay is waiting starts a new
  *round* (sequential round trip); requests that overlap share a round. The hub also counts
  rounds over all its relays together (S3 and PostgreSQL requests that overlap share one).

A relay can delay every piece of data by a fixed time in each direction (a one-way network
latency: a request-reply exchange then costs twice that, however many bytes it has), and
log each request (HTTP request line and status; PostgreSQL message types, SQL text and
command tags) with its round.

The relays run in a process of their own (`RelayProcess`), so the engine under test does not
share its interpreter lock with them; the parent drives it over stdin/stdout, one JSON line
per command. Their event loop waits with select(2), precise to tens of microseconds.

    python -m benchmarks.relay HOST:PORT [--delay-ms 10] [--log]   # one relay, manual use
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import selectors
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from benchmarks.procs import child_env, stop
from benchmarks.wire import describe_reply, describe_request, format_log

# counting ------------------------------------------------------------------------------------


@dataclass
class Rounds:
    """Sequential round trips over a set of connections."""

    waiting: set[tuple[str, int]] = field(default_factory=set)
    rounds: int = 0

    def request(self, key: tuple[str, int]) -> bool:
        """A request starts on connection `key`; whether it opens a new round."""
        new = not self.waiting
        if new:
            self.rounds += 1
        self.waiting.add(key)
        return new

    def reply(self, key: tuple[str, int]) -> None:
        self.waiting.discard(key)


@dataclass
class Conn:
    key: tuple[str, int]
    last: str = ""  # "c": the client spoke last, "s": the server
    entry: dict[str, Any] | None = None  # log entry of the request waiting for its reply
    statements: dict[bytes, str] = field(default_factory=dict)  # PG prepared name -> SQL


class Hub:
    """Relays on one event loop, with per-window counts and events. Event times are
    time.perf_counter() values (CLOCK_MONOTONIC, the same in every process of the machine),
    so a caller can split a window at its own timestamps (see `split`)."""

    def __init__(self) -> None:
        self.relays: dict[str, Relay] = {}
        self.all_rounds = Rounds()
        self.counts: Counter[str] = Counter()
        self.events: list[dict[str, Any]] = []
        self.log: list[dict[str, Any]] | None = None
        self.t0 = time.perf_counter()
        self._ids = itertools.count(1)

    async def add(self, name: str, host: str, port: int, delay_s: float = 0.0) -> int:
        relay = Relay(self, name, host, port, delay_s)
        self.relays[name] = relay
        return await relay.start()

    def start_window(self, log: bool = False) -> None:
        self.counts.clear()
        self.events = []
        self.all_rounds.rounds = 0
        for relay in self.relays.values():
            relay.rounds.rounds = 0
        self.log = [] if log else None
        self.t0 = time.perf_counter()

    def window(self) -> dict[str, Any]:
        """Counts since start_window: {NAME_requests, NAME_rounds, NAME_connections, ...,
        all_rounds}; `events` (each request: time, relay, whether it opened a round of its
        relay and of all relays; each connection: time, relay); `t0`; the log if kept."""
        out: dict[str, Any] = {}
        for name, relay in self.relays.items():
            for what in ("requests", "connections", "bytes_up", "bytes_down"):
                out[f"{name}_{what}"] = self.counts[f"{name}_{what}"]
            out[f"{name}_rounds"] = relay.rounds.rounds
        out["all_rounds"] = self.all_rounds.rounds
        out["events"] = self.events
        out["t0"] = self.t0
        if self.log is not None:
            out["log"] = self.log
        return out

    def now_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000

    # events, called on the loop --------------------------------------------------------------

    def opened(self, relay: Relay) -> Conn:
        conn = Conn((relay.name, next(self._ids)))
        self.counts[f"{relay.name}_connections"] += 1
        self.events.append({"at": time.perf_counter(), "relay": relay.name, "conn": True})
        if self.log is not None:
            self.log.append({"t": self.now_ms(), "relay": relay.name, "conn": conn.key[1],
                             "what": "(new connection)"})  # fmt: skip
        return conn

    def client_data(self, relay: Relay, conn: Conn, data: bytes) -> None:
        self.counts[f"{relay.name}_bytes_up"] += len(data)
        if conn.last == "c":
            return  # more of the same request
        conn.last = "c"
        self.counts[f"{relay.name}_requests"] += 1
        new = relay.rounds.request(conn.key)
        new_all = self.all_rounds.request(conn.key)
        self.events.append(
            {"at": time.perf_counter(), "relay": relay.name, "new": new, "new_all": new_all}
        )
        what = describe_request(conn.statements, data)  # always: it learns prepared statements
        if self.log is not None:
            conn.entry = {
                "t": self.now_ms(),
                "relay": relay.name,
                "conn": conn.key[1],
                "round": self.all_rounds.rounds,
                "new_round": new_all,
                "what": what,
            }
            self.log.append(conn.entry)

    def server_data(self, relay: Relay, conn: Conn, data: bytes) -> None:
        """Reply bytes handed to the client."""
        self.counts[f"{relay.name}_bytes_down"] += len(data)
        if conn.last == "s":
            return
        replying = conn.last == "c"
        conn.last = "s"
        if replying:
            relay.rounds.reply(conn.key)
            self.all_rounds.reply(conn.key)
            if conn.entry is not None:
                conn.entry["reply"] = describe_reply(data)
                conn.entry["ms"] = self.now_ms() - conn.entry["t"]
                conn.entry = None

    def closed(self, conn: Conn) -> None:
        for rounds in (self.all_rounds, *(r.rounds for r in self.relays.values())):
            rounds.reply(conn.key)


class Relay:
    """One listening port on 127.0.0.1 forwarding to `host:port`."""

    def __init__(self, hub: Hub, name: str, host: str, port: int, delay_s: float) -> None:
        self.hub, self.name, self.host, self.port = hub, name, host, port
        self.delay_s = delay_s
        self.rounds = Rounds()
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        conn = self.hub.opened(self)
        uwriter: asyncio.StreamWriter | None = None
        try:
            ureader, uwriter = await asyncio.open_connection(self.host, self.port)
            await asyncio.gather(
                self._pipe(creader, uwriter, lambda d: self.hub.client_data(self, conn, d), None),
                self._pipe(ureader, cwriter, None, lambda d: self.hub.server_data(self, conn, d)),
            )
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a side went away, or the relay is closing (its task ends quietly)
        finally:
            self.hub.closed(conn)
            for writer in (cwriter, uwriter):
                if writer is not None:
                    writer.close()
            self.tasks.discard(task)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_read: Any,
        on_deliver: Any,
    ) -> None:
        """Copy one direction, each piece `delay_s` after it was read; on EOF close the
        other side (HTTP and PostgreSQL do not half-close)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def deliver() -> None:
            while (item := await queue.get()) is not None:
                due, data = item
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)  # the emulated network latency
                if on_deliver is not None:
                    on_deliver(data)
                writer.write(data)
                await writer.drain()
            writer.close()

        sender = asyncio.create_task(deliver())
        try:
            while data := await reader.read(1 << 16):
                if on_read is not None:
                    on_read(data)
                queue.put_nowait((loop.time() + self.delay_s, data))
        finally:
            queue.put_nowait(None)
            await sender


# the relay process and its driver -------------------------------------------------------------


def precise_loop() -> asyncio.AbstractEventLoop:
    """An event loop on select(2), whose timeout has microseconds: epoll's (asyncio's
    default) has milliseconds, rounded up, which would turn a 0.5 ms delay into 1-2 ms."""
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


def serve(stdin: Any = sys.stdin, stdout: Any = sys.stdout) -> None:
    """The relay process: an event loop in a thread, commands on stdin, one JSON reply line
    each. Commands: add NAME HOST PORT [DELAY_S] -> port; delay NAME DELAY_S; start [log];
    window -> counts; quit. Exits at EOF on stdin (its parent has gone)."""
    loop = precise_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    hub = Hub()

    def on_loop(fn: Any, *args: Any) -> Any:
        async def call() -> Any:
            result = fn(*args)
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(call(), loop).result()

    try:
        for line in stdin:
            cmd, *args = line.split()
            if cmd == "add":
                delay = float(args[3]) if len(args) > 3 else 0.0
                reply: Any = on_loop(hub.add, args[0], args[1], int(args[2]), delay)
            elif cmd == "delay":
                hub.relays[args[0]].delay_s = float(args[1])  # read on the loop per piece
                reply = "ok"
            elif cmd == "start":
                reply = on_loop(hub.start_window, bool(args and args[0] == "log")) or "ok"
            elif cmd == "window":
                reply = on_loop(hub.window)
            elif cmd == "quit":
                break
            else:
                reply = {"error": f"unknown command {cmd}"}
            stdout.write(json.dumps(reply) + "\n")
            stdout.flush()
    finally:
        for relay in hub.relays.values():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(relay.close(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


class RelayProcess:
    """The relays of one benchmark process, run in a child process; stopped by PID on
    close (it also exits by itself when its stdin closes)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.relay", "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )

    def _call(self, *words: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(" ".join(map(str, words)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the relay process exited ({self.proc.poll()})")
        reply = json.loads(line)
        if isinstance(reply, dict) and "error" in reply and len(reply) == 1:
            raise RuntimeError(reply["error"])
        return reply

    def add(self, name: str, host: str, port: int, delay_ms: float = 0.0) -> int:
        """A relay `name` to host:port; its port on 127.0.0.1."""
        return self._call("add", name, host, port, delay_ms / 1000)

    def delay(self, name: str, delay_ms: float) -> None:
        """Delay every piece of data through relay `name` by `delay_ms`, each direction."""
        self._call("delay", name, delay_ms / 1000)

    def start(self, log: bool = False) -> None:
        self._call("start", "log" if log else "")

    def window(self) -> dict[str, Any]:
        """Counts since `start` (cumulative: take differences for sub-windows)."""
        return self._call("window")

    def close(self) -> None:
        stop(self.proc, "quit\n")

    def __enter__(self) -> RelayProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("upstream", nargs="?", help="HOST:PORT to relay to")
    ap.add_argument("--serve", action="store_true", help="run as a RelayProcess child")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="delay each direction")
    ap.add_argument("--log", action="store_true", help="print each request as it ends")
    args = ap.parse_args()
    if args.serve:
        serve()
        return
    if not args.upstream:
        ap.error("give HOST:PORT")
    host, port = args.upstream.rsplit(":", 1)

    async def run() -> None:
        hub = Hub()
        local = await hub.add("up", host, int(port), args.delay_ms / 1000)
        hub.start_window(log=args.log)
        print(f"relaying 127.0.0.1:{local} -> {host}:{port}; Ctrl-C prints the counts")
        try:
            await asyncio.Event().wait()
        finally:
            counts = hub.window()
            for line in format_log(counts.pop("log", [])):
                print(line)
            print(counts)

    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=precise_loop) as r:
        r.run(run())


if __name__ == "__main__":
    main()
