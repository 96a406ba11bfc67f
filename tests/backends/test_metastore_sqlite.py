"""The SQLite metastore passes the conformance suites; its own URL, pragma, file and lock
behaviour."""

from __future__ import annotations

import pickle
import sqlite3
import threading

import pytest

from zarrlake.errors import CASFailedError, ConfigurationError, TransientError
from zarrlake.metastore import MetaStore, open_metastore
from zarrlake.metastore.sqlite import SqliteMetaStore
from zarrlake.testing.metastore import MetaStoreTests, P
from zarrlake.testing.metastore_shared import SharedMetaStoreTests


class TestSqliteMetaStore(MetaStoreTests, SharedMetaStoreTests):
    @pytest.fixture
    def store_url(self, tmp_path) -> str:
        return f"sqlite:///{tmp_path}/meta.db"


def _pragma(meta: MetaStore, name: str):
    return meta._conn().execute(f"PRAGMA {name}").fetchone()[0]  # type: ignore[attr-defined]


def test_sqlite_pragmas(tmp_path):
    normal = open_metastore(f"sqlite:///{tmp_path}/a.db")
    full = open_metastore(f"sqlite:///{tmp_path}/b.db?synchronous=full")
    try:
        assert _pragma(normal, "journal_mode") == "wal"
        assert _pragma(normal, "synchronous") == 1  # NORMAL
        assert _pragma(full, "synchronous") == 2  # FULL
        assert _pragma(normal, "busy_timeout") == 30000
        assert _pragma(normal, "auto_vacuum") == 2  # INCREMENTAL
    finally:
        normal.close()
        full.close()


def test_a_dropped_partition_gives_its_pages_back(tmp_path):
    """Staged records of a committed session are dropped: the file shrinks at once, not only
    at the next gc's VACUUM."""
    path = tmp_path / "m.db"
    store = open_metastore(f"sqlite:///{path}")
    try:
        store.set_many("stage/s1", [(b"k%06d" % i, b"x" * 2000) for i in range(5000)])
        _pragma(store, "wal_checkpoint(TRUNCATE)")
        grown = path.stat().st_size
        assert grown > 10_000_000
        store.drop_partition("stage/s1")
        _pragma(store, "wal_checkpoint(TRUNCATE)")
        assert path.stat().st_size < grown // 10
        assert list(store.scan("stage/s1")) == []
    finally:
        store.close()


def test_partitions_dropped_in_one_batch_give_their_pages_back_once(tmp_path):
    """Two partitions dropped in one batch (a commit's clean-up drops its uploads and its
    staging records): both sets of pages go back to the file system, with one incremental
    vacuum as the transaction ends, and a write of the batch made after them stays."""
    path = tmp_path / "m.db"
    store = open_metastore(f"sqlite:///{path}")
    statements: list[str] = []
    try:
        for name in ("uploads/s1", "stage/s1"):
            store.set_many(name, [(b"k%06d" % i, b"x" * 2000) for i in range(2500)])
        _pragma(store, "wal_checkpoint(TRUNCATE)")
        grown = path.stat().st_size
        assert grown > 10_000_000
        store._conn().set_trace_callback(statements.append)  # type: ignore[attr-defined]
        with store.batch():
            store.drop_partition("uploads/s1")
            store.drop_partition("stage/s1")
            store.set_many("other", [(b"k", b"v")])
        store._conn().set_trace_callback(None)  # type: ignore[attr-defined]
        assert [s.split(" ", 1)[0] for s in statements].count("PRAGMA") == 1
        _pragma(store, "wal_checkpoint(TRUNCATE)")
        assert path.stat().st_size < grown // 10
        assert list(store.scan("uploads/s1")) == [] and list(store.scan("stage/s1")) == []
        assert [(k, v) for k, v, _ in store.scan("other")] == [(b"k", b"v")]
    finally:
        store.close()


def test_sqlite_relative_and_absolute_urls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rel = open_metastore("sqlite:///rel.db")
    try:
        version = rel.set(P, b"k", b"v")
        assert (tmp_path / "rel.db").exists()
        absolute = open_metastore(f"sqlite:///{tmp_path}/rel.db")  # four slashes
        assert absolute.get(P, b"k") == (b"v", version)
        absolute.close()
        monkeypatch.chdir("/")
        clone = pickle.loads(pickle.dumps(rel))  # reopens by absolute path
        assert clone.get(P, b"k") == (b"v", version)
        clone.close()
    finally:
        rel.close()


def test_sqlite_connection_per_thread(tmp_path):
    meta = open_metastore(f"sqlite:///{tmp_path}/t.db")
    try:
        conns = []
        t = threading.Thread(target=lambda: conns.append(meta._conn()))
        t.start()
        t.join()
        assert conns[0] is not meta._conn()
    finally:
        meta.close()


def test_sqlite_in_a_missing_directory(tmp_path):
    path = tmp_path / "no" / "such" / "dir" / "meta.db"
    with pytest.raises(ConfigurationError, match="does not exist") as info:
        open_metastore(f"sqlite:///{path}")
    assert str(path.parent) in str(info.value)


def test_sqlite_path_is_a_directory(tmp_path):
    (tmp_path / "adir").mkdir()
    with pytest.raises(ConfigurationError) as info:
        open_metastore(f"sqlite:///{tmp_path}/adir")
    assert str(tmp_path / "adir") in str(info.value)


def test_sqlite_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ConfigurationError, match="not a database") as info:
        open_metastore(f"sqlite:///{path}")
    assert str(path) in str(info.value)


def test_sqlite_locked_past_the_timeout_is_transient(tmp_path, monkeypatch):
    import sqlite3

    import zarrlake.metastore.sqlite as sqlite_backend

    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT", 0.2)
    path = tmp_path / "meta.db"
    meta = open_metastore(f"sqlite:///{path}")
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        with pytest.raises(TransientError, match="locked") as info:
            meta.set("p", b"k", b"v")
        assert str(path) in str(info.value)
        assert meta.get("p", b"k") is None  # WAL: readers are not blocked
        holder.execute("ROLLBACK")
        assert meta.set("p", b"k", b"v") > 0
    finally:
        holder.close()
        meta.close()


def _started(store: MetaStore, worker, ready: threading.Event):
    """Start `worker` on a thread; once it set `ready`, that thread and its connection."""
    t = threading.Thread(target=worker)
    t.start()
    assert ready.wait(30)
    return t, next(s for s in store._conns.get().slots if s.thread is t)  # type: ignore[attr-defined]


def test_closing_closes_an_idle_threads_connection_and_the_thread_is_refused(tmp_path):
    # Every connection the store opened is closed with it, those of live threads between
    # calls too (a pool's idle workers): the last one closed removes the write-ahead log.
    store = open_metastore(f"sqlite:///{tmp_path}/m.db")
    store.set(P, b"k", b"v")
    opened, closed, outcome = threading.Event(), threading.Event(), []

    def worker() -> None:
        store.get(P, b"k")  # this thread's connection
        opened.set()
        closed.wait(10)
        try:
            store.get(P, b"k")
        except ConfigurationError as e:
            outcome.append(e)

    t, slot = _started(store, worker, opened)
    conns, theirs = store._conns.get(), slot.conn
    store.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        theirs.execute("SELECT 1")
    assert conns.slots == []
    closed.set()
    t.join(10)
    assert len(outcome) == 1 and "closed" in str(outcome[0])
    assert not (tmp_path / "m.db-wal").exists()


def test_closing_leaves_the_connection_of_a_thread_inside_a_call(tmp_path):
    # A thread inside a call when the store closes (the release thread finishing a
    # collected writer while a test closes its repository) crashed the interpreter: its
    # connection was closed under it. It keeps it; its call returns, and it closes it
    # itself at its next call, which the closed store refuses.
    store = open_metastore(f"sqlite:///{tmp_path}/m.db")
    version = store.set(P, b"k", b"v")
    ready, traced, inside, go = (threading.Event() for _ in range(4))
    got: list[object] = []

    def hold(sql: str) -> None:  # SQLite's trace hook: runs inside the statement's step
        if sql.startswith("SELECT"):
            inside.set()
            go.wait(30)

    def worker() -> None:
        store.get(P, b"k")  # this thread's connection
        ready.set()
        traced.wait(30)
        try:
            got.append(store.get(P, b"k"))  # held inside by `hold`
            got.append(store.get(P, b"k"))
        except ConfigurationError as e:
            got.append(e)

    conns = store._conns.get()
    t, theirs = _started(store, worker, ready)
    assert theirs.conn is not None
    theirs.conn.set_trace_callback(hold)
    traced.set()
    assert inside.wait(30)  # the worker's call is inside SQLite now
    store.close()
    assert theirs in conns.slots and theirs.conn is not None  # not closed under it
    go.set()
    t.join(30)
    assert got[0] == (b"v", version)
    assert isinstance(got[1], ConfigurationError) and "closed" in str(got[1])
    assert conns.slots == [] and theirs.conn is None  # it closed its own


def test_closing_leaves_a_batch_open_on_another_thread_to_commit(tmp_path):
    # A write transaction between its statements is in use too: closing the connection
    # would roll back the writes that returned. The batch's next write is refused (the
    # store is closed), its end commits the first, then the connection is closed.
    path = tmp_path / "m.db"
    store = open_metastore(f"sqlite:///{path}")
    written, go, outcome = threading.Event(), threading.Event(), []

    def worker() -> None:
        try:
            with store.batch():
                store.set(P, b"first", b"1")
                written.set()
                go.wait(30)
                store.set(P, b"second", b"2")
        except ConfigurationError as e:
            outcome.append(e)
        try:
            store.get(P, b"first")
        except ConfigurationError as e:
            outcome.append(e)

    t, theirs = _started(store, worker, written)
    conns = store._conns.get()
    store.close()
    assert theirs.conn is not None and theirs.conn.in_transaction
    go.set()
    t.join(30)
    assert len(outcome) == 2 and all("closed" in str(e) for e in outcome)
    assert theirs.conn is None and conns.slots == []
    with sqlite3.connect(path) as check:
        rows = check.execute("SELECT key, value FROM kv WHERE partition = ?", (P,)).fetchall()
    assert rows == [(b"first", b"1")]


def test_the_close_at_exit_leaves_the_store_usable(tmp_path):
    # The exit close (an atexit hook; a multiprocessing child's finalizer) closes what no
    # thread is using but not the store: a writer finishing after it opens a new one.
    from zarrlake.metastore.sqlite import close_at_exit

    store = SqliteMetaStore(f"sqlite:///{tmp_path}/m.db")
    version = store.set(P, b"k", b"v")
    slot = store._conns.get().slots[0]
    close_at_exit()
    assert slot.conn is None
    assert not (tmp_path / "m.db-wal").exists()
    assert store.get(P, b"k") == (b"v", version)
    assert store.set(P, b"k2", b"w") > version
    store.close()


def test_a_slot_closed_between_its_lookup_and_its_call_is_transient(tmp_path):
    # The close on another thread may land between a thread's look at its connection and
    # its call: the call raises TransientError (the retrying wrapper looks again, and opens
    # a new connection, or is refused if the store closed), never a closed-database error.
    store = SqliteMetaStore(f"sqlite:///{tmp_path}/m.db")
    try:
        slot = store._slot()
        store._conns.get().close()
        with pytest.raises(TransientError, match="closed"), slot:
            pass
        assert store.get(P, b"k") is None  # a new connection
    finally:
        store.close()


def test_a_guarded_write_with_more_checks_than_one_statement_reads(tmp_path):
    # The checks' versions are read with one SELECT per 500 keys: 1,200 checks take three,
    # and a stale one among them, in any of the three, still refuses the whole write.
    from zarrlake.errors import CASFailedError

    meta = open_metastore(f"sqlite:///{tmp_path}/meta.db")
    try:
        keys = [b"k%04d" % i for i in range(1200)]
        meta.set_many("p", [(k, b"v") for k in keys])
        versions = {k: v for k, _, v in meta.scan("p")}
        for stale in (keys[3], keys[700], keys[1199]):
            checks = {**versions, stale: versions[stale] + 10_000}
            with pytest.raises(CASFailedError, match=repr(stale)):
                meta.write_if("p", [(b"new", b"x")], checks)
            assert meta.get("p", b"new") is None
        checks = {**versions, b"absent": None}
        assert meta.write_if("p", [(b"new", b"x")], checks)[0] > max(versions.values())
        assert meta.get("p", b"new")[0] == b"x"
    finally:
        meta.close()


def _elsewhere(meta: MetaStore, key: bytes) -> bytes | None:
    """`key`'s value as another connection to the file reads it (a plain sqlite3 one: a
    new connection of the store's sets itself up under the write lock a batch holds)."""
    conn = sqlite3.connect(meta.path)  # type: ignore[attr-defined]
    try:
        row = conn.execute("SELECT value FROM kv WHERE partition = ? AND key = ?", (P, key))
        got = row.fetchone()
        return None if got is None else got[0]
    finally:
        conn.close()


def test_a_batch_is_one_transaction_seen_whole_at_its_end(tmp_path):
    """A batch's writes (a plain write, a compare-and-swap, a guarded write, a nested
    batch's) are one write transaction: another connection sees none of them until the
    block ends, then all; a refused compare-and-swap inside undoes only itself."""
    meta = open_metastore(f"sqlite:///{tmp_path}/b.db")
    try:
        v = meta.set(P, b"k", b"0")
        statements: list[str] = []
        meta._conn().set_trace_callback(statements.append)  # type: ignore[attr-defined]
        with meta.batch():
            assert meta.get(P, b"a") is None  # reads before the first write begin nothing
            meta.set(P, b"a", b"1")
            v = meta.set_if(P, b"k", b"2", v)
            with pytest.raises(CASFailedError):
                meta.set_if(P, b"k", b"lost", v - 1)
            with meta.batch():  # joins the outer one
                meta.write_if(P, [(b"b", b"3")], {b"k": v})
            assert meta.get(P, b"a")[0] == b"1"  # this thread reads its own writes
            assert _elsewhere(meta, b"a") is None and _elsewhere(meta, b"k") == b"0"
        assert [meta.get(P, k)[0] for k in (b"a", b"k", b"b")] == [b"1", b"2", b"3"]
        assert _elsewhere(meta, b"b") == b"3"
        assert [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT")] == [
            "BEGIN IMMEDIATE",
            "COMMIT",
        ]
    finally:
        meta.close()


def test_a_batch_keeps_its_writes_after_an_error_and_none_after_an_interrupt(tmp_path):
    """Each write that returned stays when an error ends the block, as if each had been
    its own transaction; an interrupt ends it as a crash would, keeping none. The write
    lock is free again either way."""
    meta = open_metastore(f"sqlite:///{tmp_path}/b.db")
    try:
        with pytest.raises(ValueError), meta.batch():
            meta.set(P, b"kept", b"1")
            raise ValueError("after the write")
        assert meta.get(P, b"kept")[0] == b"1"
        with pytest.raises(KeyboardInterrupt), meta.batch():
            meta.set(P, b"gone", b"1")
            raise KeyboardInterrupt
        assert meta.get(P, b"gone") is None
        assert _elsewhere(meta, b"kept") == b"1"
        t = threading.Thread(target=lambda: meta.set(P, b"later", b"1"))
        t.start()
        t.join()
        assert meta.get(P, b"later")[0] == b"1"
    finally:
        meta.close()


def test_commit_batch_ends_the_transaction_so_far_and_lets_the_write_lock_go(tmp_path):
    """Inside a batch, `commit_batch` makes the writes so far seen by others and frees the
    write lock (a thread blocked on it, here a new thread's write, gets it); the batch's
    later writes are a transaction of their own. Outside a batch it does nothing. A new
    thread's first read does not wait for the batch's write lock."""
    meta = open_metastore(f"sqlite:///{tmp_path}/b.db")
    try:
        meta.commit_batch()
        statements: list[str] = []
        meta._conn().set_trace_callback(statements.append)  # type: ignore[attr-defined]
        other = threading.Thread(target=lambda: meta.set(P, b"other", b"1"), daemon=True)
        with meta.batch():
            meta.set(P, b"a", b"1")
            reader = threading.Thread(target=lambda: meta.get(P, b"a"), daemon=True)
            reader.start()
            reader.join(60)
            assert not reader.is_alive()  # its connection was set up beside the batch
            other.start()  # waits for the write lock
            meta.commit_batch()
            other.join(60)
            assert not other.is_alive() and _elsewhere(meta, b"a") == b"1"
            meta.set(P, b"b", b"2")
            assert _elsewhere(meta, b"b") is None
        assert _elsewhere(meta, b"b") == b"2" and _elsewhere(meta, b"other") == b"1"
        begun = [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT")]
        assert begun == ["BEGIN IMMEDIATE", "COMMIT"] * 2
    finally:
        meta.close()


def test_a_threads_connection_after_the_first_skips_the_set_up_look(tmp_path, monkeypatch):
    """Each thread has its own connection; once one found the file set up (WAL mode, the
    tables), the others open with the synchronous pragma alone before their query (a W6
    writer process opens 8-10 as its pools grow)."""
    store = SqliteMetaStore(f"sqlite:///{tmp_path}/m.db")
    store.set("p", b"k", b"v")
    seen: list[str] = []
    real = sqlite3.connect

    def connect(*args, **kwargs):
        conn = real(*args, **kwargs)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(store.get("p", b"k")))
    reader.start()
    reader.join()
    assert got and got[0] is not None and got[0][0] == b"v"
    assert len(seen) == 2 and seen[0] == "PRAGMA synchronous = NORMAL", seen
    assert seen[1].startswith("SELECT value, version FROM kv"), seen


def test_read_is_one_statement_with_keys_inside_prefixes_and_open_ended_prefixes(tmp_path):
    # A commit's look at its branch, landing fence and protection rules is one SELECT; a
    # key that is also under a prefix is in both answers, and prefixes with no upper bound
    # (b"", b"\xff") cover what `scan` does.
    meta = SqliteMetaStore(f"sqlite:///{tmp_path}/meta.db")
    try:
        meta.set_many("p", [(b"a/1", b"x"), (b"a/2", b"y"), (b"b", b"z"), (b"\xff\xff", b"w")])
        seen: list[str] = []
        meta._conn().set_trace_callback(seen.append)
        keys = [b"a/2", b"nope", b"b", b"a/2"]
        prefixes = [b"a/", b"", b"\xff", b"zz"]
        got, items = meta.read("p", keys, prefixes)
        assert [s.split(" ", 1)[0] for s in seen] == ["SELECT"], seen
        meta._conn().set_trace_callback(None)
        assert got == [meta.get("p", k) for k in keys] and got[1] is None
        assert items == [list(meta.scan("p", prefix=p)) for p in prefixes]
        assert [k for k, _, _ in items[1]] == [b"a/1", b"a/2", b"b", b"\xff\xff"]
        assert [k for k, _, _ in items[2]] == [b"\xff\xff"] and items[3] == []
    finally:
        meta.close()


def test_a_guarded_swap_of_one_key_is_one_statement(tmp_path):
    """A compare-and-swap of one key with more checks (a branch swap with its fences) is
    one `UPDATE` of the row (besides the transaction's versions) that changes it only where
    every check holds; a refusal reads the versions to name the check that failed, and
    changes nothing."""
    meta = open_metastore(f"sqlite:///{tmp_path}/g.db")
    try:
        head = meta.set(P, b"branch", b"c1")
        fence = meta.set(P, b"landing", b"open")
        statements: list[str] = []
        meta._conn().set_trace_callback(statements.append)  # type: ignore[attr-defined]
        head = meta.write_if(
            P, [(b"branch", b"c2")], {b"branch": head, b"moved": None, b"landing": fence}
        )[0]
        assert [s.split(" ", 2)[:2] for s in statements] == [
            ["BEGIN", "IMMEDIATE"],
            ["UPDATE", "counter"],  # the transaction's versions
            ["UPDATE", "kv"],
            ["COMMIT"],
        ], statements
        assert meta.get(P, b"branch") == (b"c2", head)
        meta.set(P, b"moved", b"x")
        refusals = [
            ({b"branch": head, b"moved": None}, "moved"),
            ({b"branch": head, b"landing": fence + 1000}, "landing"),
            ({b"branch": head - 1, b"landing": fence}, "branch"),
        ]
        for checks, named in refusals:
            with pytest.raises(CASFailedError, match=named):
                meta.write_if(P, [(b"branch", b"c3")], checks)
        assert meta.get(P, b"branch") == (b"c2", head)
        assert meta.write_if(P, [(b"branch", b"c4")], {b"branch": head, b"landing": fence})
        assert meta.get(P, b"branch")[0] == b"c4"
    finally:
        meta.close()
