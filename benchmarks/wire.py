"""What the relays (relay.py) make of the traffic they carry: HTTP request lines and
statuses, PostgreSQL frontend message types with their SQL and first parameters, reply
command tags, and the counts and log of a measured window. Pure functions of their input,
tested on captured messages in tests/benchmarks/test_wire.py."""

from __future__ import annotations

import itertools
import re
from typing import Any


def describe_request(statements: dict[bytes, str], data: bytes) -> str:
    """One line for the first piece of a request (HTTP, or PostgreSQL on that connection)."""
    if _HTTP_REQUEST.match(data):
        return describe_http_request(data)
    return describe_pg_request(statements, data)


def describe_reply(data: bytes) -> str:
    """One line for the first piece of a reply: the HTTP status, or PostgreSQL's tags."""
    if data.startswith(b"HTTP/"):
        return data.split(b"\r\n", 1)[0].split(b" ")[1].decode(errors="replace")
    return describe_pg_reply(data)


# requests --------------------------------------------------------------------------

_HTTP_REQUEST = re.compile(rb"[A-Z]+ \S+ HTTP/1\.[01]\r\n")
_HEADERS_OF_NOTE = (b"if-none-match", b"if-match", b"range", b"content-length")


def describe_http_request(data: bytes) -> str:
    head = data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    parts = head[0].split(b" ")
    method = parts[0].decode(errors="replace")
    target = parts[1].decode(errors="replace") if len(parts) > 1 else ""
    notes = []
    for line in head[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() in _HEADERS_OF_NOTE:
            label = name.strip().decode()
            if label.lower() == "content-length":
                if value.strip() != b"0":
                    notes.append(f"{value.strip().decode()} B")
            else:
                notes.append(f"{label}: {value.strip().decode(errors='replace')}")
    return f"{method} {target}" + (f" ({', '.join(notes)})" if notes else "")


_PG_STARTUP = {80877103: "SSLRequest", 80877104: "GSSENCRequest", 196608: "StartupMessage"}
_PG_FRONTEND = {
    "B": "Bind", "C": "Close", "D": "Describe", "E": "Execute", "F": "FunctionCall",
    "H": "Flush", "P": "Parse", "Q": "Query", "S": "Sync", "X": "Terminate",
    "p": "Password", "d": "CopyData", "c": "CopyDone", "f": "CopyFail",
}  # fmt: skip


def _sql(text: bytes) -> str:
    return re.sub(r"\s+", " ", text.decode(errors="replace")).strip()[:90]


def pg_messages(data: bytes) -> list[tuple[str, bytes]]:
    """(type, body) of the whole messages at the start of `data`."""
    out, i = [], 0
    while i + 5 <= len(data):
        kind, n = chr(data[i]), int.from_bytes(data[i + 1 : i + 5], "big")
        out.append((kind, data[i + 5 : i + 1 + n]))
        i += 1 + n
    return out


def describe_pg_request(statements: dict[bytes, str], data: bytes) -> str:
    """Message types, SQL text and the first Bind parameters of PostgreSQL frontend messages;
    learns the named prepared statements of the connection into `statements`."""
    if len(data) >= 8 and data[0] == 0:  # length-prefixed, no type byte: connection startup
        return _PG_STARTUP.get(int.from_bytes(data[4:8], "big"), "startup")
    sql, kinds = [], []
    for kind, body in pg_messages(data):
        kinds.append(_PG_FRONTEND.get(kind, kind))
        if kind == "Q":
            sql.append(_sql(body.rstrip(b"\0")))
        elif kind == "P":
            name, query = body.split(b"\0", 2)[:2]
            statements[name] = _sql(query)
            sql.append(_sql(query))
        elif kind == "B":
            stmt = body.split(b"\0", 2)[1]
            if stmt and stmt in statements and "Parse" not in kinds:
                sql.append("prepared: " + statements[stmt])
            if args := bind_args(body):
                sql.append(f"[{args}]")
    collapsed = "/".join(k for k, _ in itertools.groupby(kinds))
    return f"{collapsed} " + " | ".join(sql) if sql else collapsed


def _show(value: bytes | None) -> str:
    if value is None:
        return "NULL"
    if len(value) <= 64 and all(32 <= b < 127 for b in value):
        text = value.decode()
        return re.sub(r"^[0-9a-f]{16}/", "", text)  # a zarrlake partition: drop the repo id
    return f"<{len(value)} B>"


def bind_args(body: bytes, most: int = 3) -> str:
    """The first `most` parameters of a Bind message, shortened (logs: which partition and
    key a metastore statement touches)."""
    try:
        i = body.index(b"\0") + 1
        i = body.index(b"\0", i) + 1
        nformats = int.from_bytes(body[i : i + 2], "big")
        i += 2 + 2 * nformats
        nparams = int.from_bytes(body[i : i + 2], "big")
        i += 2
        shown = []
        for _ in range(min(nparams, most)):
            n = int.from_bytes(body[i : i + 4], "big", signed=True)
            i += 4
            shown.append(_show(None if n < 0 else body[i : i + n]))
            i += max(n, 0)
    except ValueError:
        return ""
    return ", ".join(shown)


def describe_pg_reply(data: bytes) -> str:
    tags = []
    for kind, body in pg_messages(data):
        if kind == "C":
            tags.append(body.rstrip(b"\0").decode(errors="replace"))
        elif kind == "E":
            tags.append("ERROR")
        elif kind == "R":
            tags.append("auth")
    if data[:1] == b"N" and len(data) == 1:
        return "no SSL"
    return ", ".join(tags) or "-"


# windows -----------------------------------------------------------------------------------


def split(window: dict[str, Any], lo: float | None = None, hi: float | None = None) -> dict:
    """The counts of `window` (RelayProcess.window) for the requests and connections that
    started at lo <= time.perf_counter() < hi: {NAME_requests, NAME_rounds,
    NAME_connections, all_rounds}. A request counts as a round if it opened one."""
    names = [k.removesuffix("_requests") for k in window if k.endswith("_requests")]
    out = {f"{n}_{what}": 0 for n in names for what in ("requests", "rounds", "connections")}
    out["all_rounds"] = 0
    for e in window["events"]:
        if (lo is not None and e["at"] < lo) or (hi is not None and e["at"] >= hi):
            continue
        if e.get("conn"):
            out[f"{e['relay']}_connections"] += 1
            continue
        out[f"{e['relay']}_requests"] += 1
        out[f"{e['relay']}_rounds"] += e["new"]
        out["all_rounds"] += e["new_all"]
    return out


def add_marks(window: dict[str, Any], marks: dict[str, float]) -> list[dict[str, Any]]:
    """The window's log with the caller's moments (perf_counter times) put in place."""
    log = list(window.get("log", []))
    log += [{"t": (at - window["t0"]) * 1000, "mark": text} for text, at in marks.items()]
    return sorted(log, key=lambda e: e["t"])


def format_log(entries: list[dict[str, Any]]) -> list[str]:
    """One line per logged request: time, round (* = opens a new round), relay, connection,
    request, reply and the time to the reply's first byte."""
    lines = []
    for e in entries:
        if "mark" in e:
            lines.append(f"{e['t']:8.2f} ms ---- {e['mark']}")
            continue
        if "round" not in e:
            lines.append(f"{e['t']:8.2f} ms        {e['relay']:<3} c{e['conn']:<3} {e['what']}")
            continue
        mark = "*" if e.get("new_round") else " "
        reply = f" -> {e['reply']}" if "reply" in e else ""
        took = f" ({e['ms']:.2f} ms)" if "ms" in e else ""
        lines.append(
            f"{e['t']:8.2f} ms r{e['round']:<3}{mark} {e['relay']:<3} c{e['conn']:<3} "
            f"{e['what']}{reply}{took}"
        )
    return lines
