"""The relays' decoders (benchmarks/wire.py) on hand-built messages, and the relay process
(benchmarks/relay.py) counting and describing real traffic to PostgreSQL and moto's S3."""

from __future__ import annotations

import struct
import urllib.request

import psycopg

from benchmarks.relay import Hub, RelayProcess, Rounds
from benchmarks.wire import (
    bind_args,
    describe_http_request,
    describe_pg_reply,
    describe_pg_request,
    describe_reply,
    describe_request,
    format_log,
    pg_messages,
    split,
)
from tests.fixtures.s3 import s3_client


def pg(kind: bytes, body: bytes) -> bytes:
    """One PostgreSQL message: type byte, int32 length (itself included), body."""
    return kind + struct.pack("!i", len(body) + 4) + body


def parse(name: bytes, sql: bytes) -> bytes:
    return pg(b"P", name + b"\0" + sql + b"\0" + struct.pack("!h", 0))


def bind(statement: bytes, *params: bytes | None) -> bytes:
    body = b"\0" + statement + b"\0" + struct.pack("!h", 0) + struct.pack("!h", len(params))
    for p in params:
        body += struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p
    return pg(b"B", body + struct.pack("!h", 0))


EXECUTE_SYNC = pg(b"E", b"\0" + struct.pack("!i", 0)) + pg(b"S", b"")


def test_http_request_line_and_the_headers_of_note():
    data = (
        b"PUT /bucket/repo/chunks/ab HTTP/1.1\r\nHost: 127.0.0.1\r\nIf-None-Match: *\r\n"
        b"Content-Length: 12\r\n\r\nhello world!"
    )
    assert describe_http_request(data) == "PUT /bucket/repo/chunks/ab (If-None-Match: *, 12 B)"
    assert describe_request({}, data) == describe_http_request(data)
    empty = b"GET /b/k HTTP/1.1\r\nContent-Length: 0\r\nRange: bytes=0-9\r\n\r\n"
    assert describe_http_request(empty) == "GET /b/k (Range: bytes=0-9)"


def test_http_reply_is_its_status():
    assert describe_reply(b"HTTP/1.1 412 Precondition Failed\r\nServer: x\r\n\r\n") == "412"


def test_pg_messages_splits_whole_messages_and_leaves_a_partial_one():
    data = pg(b"Q", b"SELECT 1\0") + pg(b"S", b"")
    assert pg_messages(data) == [("Q", b"SELECT 1\0"), ("S", b"")]
    assert pg_messages(data + b"E\0\0") == pg_messages(data)


def test_pg_simple_query_and_startup():
    statements: dict[bytes, str] = {}
    assert describe_pg_request(statements, pg(b"Q", b"SELECT  1\n FROM t\0")) == (
        "Query SELECT 1 FROM t"
    )
    startup = struct.pack("!ii", 8, 80877103)
    assert describe_pg_request(statements, startup) == "SSLRequest"


def test_pg_extended_query_learns_prepared_statements():
    statements: dict[bytes, str] = {}
    first = parse(b"s1", b"SELECT v FROM kv WHERE k = $1") + bind(b"s1", b"k1") + EXECUTE_SYNC
    assert describe_pg_request(statements, first) == (
        "Parse/Bind/Execute/Sync SELECT v FROM kv WHERE k = $1 | [k1]"
    )
    assert statements == {b"s1": "SELECT v FROM kv WHERE k = $1"}
    again = bind(b"s1", b"k2") + EXECUTE_SYNC
    assert describe_pg_request(statements, again) == (
        "Bind/Execute/Sync prepared: SELECT v FROM kv WHERE k = $1 | [k2]"
    )


def test_bind_args_shortens_values():
    body = bind(b"", b"0123456789abcdef/main", None, b"\x00\xff" * 40, b"4th")[5:]
    assert bind_args(body) == "main, NULL, <80 B>"
    assert bind_args(b"truncated") == ""


def test_pg_reply_tags():
    reply = pg(b"C", b"UPDATE 1\0") + pg(b"Z", b"I")
    assert describe_pg_reply(reply) == "UPDATE 1"
    assert describe_pg_reply(pg(b"E", b"SERROR\0\0")) == "ERROR"
    assert describe_pg_reply(b"N") == "no SSL"
    assert describe_pg_reply(pg(b"Z", b"I")) == "-"


def test_rounds_count_requests_that_start_while_none_is_waiting():
    rounds = Rounds()
    assert rounds.request(("S3", 1)) is True
    assert rounds.request(("S3", 2)) is False  # overlaps the first: same round trip
    rounds.reply(("S3", 1))
    rounds.reply(("S3", 2))
    assert rounds.request(("S3", 1)) is True
    assert rounds.rounds == 2


def test_split_counts_the_events_of_a_time_range():
    window = {
        "S3_requests": 3,
        "events": [
            {"at": 1.0, "relay": "S3", "conn": True},
            {"at": 1.1, "relay": "S3", "new": True, "new_all": True},
            {"at": 2.0, "relay": "S3", "new": False, "new_all": False},
            {"at": 3.0, "relay": "S3", "new": True, "new_all": True},
        ],
    }
    assert split(window, hi=2.5) == {
        "S3_requests": 2,
        "S3_rounds": 1,
        "S3_connections": 1,
        "all_rounds": 1,
    }
    assert split(window, lo=2.5)["S3_rounds"] == 1


def test_hub_counts_a_conversation_turn_as_one_request():
    hub = Hub()

    class Named:
        name = "PG"
        rounds = Rounds()

    hub.relays["PG"] = Named()  # type: ignore[assignment]
    conn = hub.opened(Named())  # type: ignore[arg-type]
    hub.start_window(log=True)
    hub.client_data(Named(), conn, pg(b"Q", b"SELECT 1\0")[:4])  # type: ignore[arg-type]
    hub.client_data(Named(), conn, b"more of the same request")  # type: ignore[arg-type]
    hub.server_data(Named(), conn, pg(b"C", b"SELECT 1\0"))  # type: ignore[arg-type]
    window = hub.window()
    assert window["PG_requests"] == 1 and window["PG_rounds"] == 1
    assert window["log"][0]["reply"] == "SELECT 1"


def test_relay_process_counts_and_logs_real_postgresql_traffic(postgres_url: str):
    host_port = postgres_url.rsplit("@", 1)[1].split("/")[0]
    host, port = host_port.split(":")
    with RelayProcess() as relays:
        local = relays.add("PG", host, int(port))
        relays.start(log=True)
        url = postgres_url.replace(host_port, f"127.0.0.1:{local}")
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT %s || %s", ("zarr", "lake")).fetchone() == ("zarrlake",)
        window = relays.window()
    assert window["PG_connections"] == 1
    assert window["PG_requests"] >= 3  # startup, authentication, the query
    text = "\n".join(format_log(window["log"]))
    assert "SELECT $1 || $2 | [zarr, lake] -> SELECT 1" in text, text


def test_relay_process_delays_and_logs_s3_requests(s3_server: str):
    s3_client(s3_server).create_bucket(Bucket="relay-test")
    s3_client(s3_server).put_object(Bucket="relay-test", Key="k", Body=b"12345")
    host, port = s3_server.removeprefix("http://").split(":")
    with RelayProcess() as relays:
        local = relays.add("S3", host, int(port), delay_ms=2)
        relays.start(log=True)
        url = s3_client(f"http://127.0.0.1:{local}").generate_presigned_url(
            "get_object", Params={"Bucket": "relay-test", "Key": "k"}
        )
        for _ in range(2):  # urllib opens a connection for each
            with urllib.request.urlopen(url) as reply:
                assert reply.read() == b"12345"
        window = relays.window()
    lines = format_log(window["log"])
    assert (window["S3_requests"], window["S3_rounds"], window["S3_connections"]) == (2, 2, 2)
    assert sum("GET /relay-test/k?" in line and "-> 200" in line for line in lines) == 2, lines
    assert all(entry["ms"] >= 4 for entry in window["log"] if "ms" in entry), lines
