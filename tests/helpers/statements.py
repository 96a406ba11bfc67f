"""Counting the SQLite statements a path runs, with SQLite's trace hook."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable

from zarrlake.metastore.sqlite import SqliteMetaStore


def count_statements(monkeypatch, traced: Callable[[], bool]) -> Counter[str]:
    """The statements run from now on on the SQLite connections opened by threads for which
    `traced()` holds when they connect, by their first word (BEGIN, SELECT, ...)."""
    counts: Counter[str] = Counter()
    connect = SqliteMetaStore._connect

    def tracing(self: SqliteMetaStore) -> sqlite3.Connection:
        conn = connect(self)
        if traced():
            conn.set_trace_callback(lambda sql: counts.update([sql.split(" ", 1)[0]]))
        return conn

    monkeypatch.setattr(SqliteMetaStore, "_connect", tracing)
    return counts
