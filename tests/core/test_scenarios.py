"""The consistency scenarios that motivate zarrlake (DESIGN.md, "The problem it solves"),
each client a real separate process (tests/core/clients.py) on local + SQLite. Processes
are coordinated through their command queues and a flag file, never by sleeping."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.core.clients import Client, Failed


@pytest.fixture(scope="module")
def clients() -> Iterator[list[Client]]:
    started = [Client(f"client-{i}") for i in range(4)]
    try:
        yield started
    finally:
        for c in started:
            c.stop()


def make_repo(path: Path, shape: int = 30, value: float = 0.0, name: str = "x") -> zl.Repo:
    """A repository whose main holds array `name` (chunks of 10) filled with `value`."""
    repo = zl.Repo.create(path)
    s = repo.create_session()
    root = zarr.open_group(s.store, mode="a")
    root.create_array(name, shape=(shape,), chunks=(10,), dtype="f8", fill_value=-1)[:] = value
    s.commit("create x")
    return repo


def head_array(repo: zl.Repo, path: str = "x") -> np.ndarray:
    return zarr.open_array(repo.readonly_session("main").store, path=path, mode="r")[:]


def open_all(location: Path, *cs: Client) -> None:
    for c in cs:
        c.send("open", str(location))
    for c in cs:
        c.result()


def test_a_reader_stays_consistent_while_another_client_commits(tmp_path, clients):
    reader, writer = clients[0], clients[1]
    repo = make_repo(tmp_path / "repo", shape=50, value=0.0)
    open_all(tmp_path / "repo", reader, writer)
    reader.call("readonly", "pinned", "main")
    flag = tmp_path / "writer-done"
    reader.send("watch", "x", 0.0, str(flag))
    for value in (1.0, 2.0, 3.0):  # three commits, each overwriting every chunk
        writer.call("create_session", "w")
        writer.call("write", "w", "x", 0, 50, value)
        assert not isinstance(writer.call("commit", "w", f"all {value}"), Failed)
    flag.touch()
    seen = reader.result()
    assert "error" not in seen, seen["error"]
    assert seen["reads"] >= 1
    assert 3.0 in seen["fresh_values"]  # its last read came after the final commit
    assert seen["fresh_values"] <= {0.0, 1.0, 2.0, 3.0}
    # the pinned session still reads the old values for every chunk
    assert (reader.call("read", "pinned", "x") == 0.0).all()
    assert (head_array(repo) == 3.0).all()


def test_b_disjoint_chunks_both_commits_land(tmp_path, clients):
    a, b = clients[0], clients[1]
    repo = make_repo(tmp_path / "repo")
    start = repo.resolve("main")
    open_all(tmp_path / "repo", a, b)
    for c, name in ((a, "a"), (b, "b")):
        c.call("create_session", name)  # both based on the same head
    a.send("write", "a", "x", 0, 10, 1.0)
    b.send("write", "b", "x", 10, 20, 2.0)
    a.result(), b.result()
    a.send("commit", "a", "a's chunk")
    b.send("commit", "b", "b's chunk")
    ids = [a.result(), b.result()]
    assert not any(isinstance(i, Failed) for i in ids), ids
    log = repo.log("main")
    assert {c.id for c in log[:2]} == set(ids)
    assert log[2].id == start
    np.testing.assert_array_equal(head_array(repo), [1.0] * 10 + [2.0] * 10 + [0.0] * 10)


def test_c_overlapping_writes_one_conflicts_then_retry_lands(tmp_path, clients):
    a, b = clients[0], clients[1]
    repo = make_repo(tmp_path / "repo")
    open_all(tmp_path / "repo", a, b)
    a.call("create_session", "a")
    b.call("create_session", "b")
    a.send("write", "a", "x", 0, 20, 1.0)
    b.send("write", "b", "x", 15, 30, 2.0)
    a.result(), b.result()
    a.send("commit", "a", "a: [0:20]")
    b.send("commit", "b", "b: [15:30]")
    results = {"a": a.result(), "b": b.result()}
    failed = {k: v for k, v in results.items() if isinstance(v, Failed)}
    assert len(failed) == 1, results
    ((loser, err),) = failed.items()
    winner = "b" if loser == "a" else "a"
    assert err.error == "ConflictError"
    assert err.conflicts == (("x", "chunk", ((1,),)),)
    assert repo.resolve("main") == results[winner]
    # the losing session is still open and still reads its own staged data
    client = a if loser == "a" else b
    assert client.call("status", loser) == "open"
    mine = client.call("read", loser, "x")
    np.testing.assert_array_equal(
        mine[0:20] if loser == "a" else mine[15:30], 1.0 if loser == "a" else 2.0
    )
    # a retry from the new head lands
    client.call("abandon", loser)
    client.call("create_session", "retry")
    span, value = ((0, 20), 1.0) if loser == "a" else ((15, 30), 2.0)
    client.call("write", "retry", "x", *span, value)
    retry_id = client.call("commit", "retry", "retry")
    assert not isinstance(retry_id, Failed), retry_id
    assert repo.log("main")[0].id == retry_id
    expected = np.zeros(30)
    for who in (winner, loser):  # the retry lands last, so its values win the overlap
        lo, hi, v = (0, 20, 1.0) if who == "a" else (15, 30, 2.0)
        expected[lo:hi] = v
    np.testing.assert_array_equal(head_array(repo), expected)


def test_d_write_racing_a_shrink_conflicts(tmp_path, clients):
    writer, shrinker = clients[0], clients[1]
    repo = make_repo(tmp_path / "repo")
    open_all(tmp_path / "repo", writer, shrinker)
    writer.call("create_session", "w")
    shrinker.call("create_session", "s")
    writer.send("write", "w", "x", 20, 30, 5.0)
    shrinker.send("resize", "s", "x", (15,))
    writer.result(), shrinker.result()
    writer.send("commit", "w", "write the tail")
    shrinker.send("commit", "s", "shrink")
    results = [writer.result(), shrinker.result()]
    failed = [r for r in results if isinstance(r, Failed)]
    assert len(failed) == 1, results
    assert failed[0].error == "ConflictError"
    assert any(path == "x" and kind == "resized" for path, kind, _ in failed[0].conflicts)
    arr = zarr.open_array(repo.readonly_session("main").store, path="x", mode="r")
    if isinstance(results[0], Failed):  # the shrink won: 15 elements, none written
        assert arr.shape == (15,)
        np.testing.assert_array_equal(arr[:], np.zeros(15))
    else:  # the write won: the tail holds it, the array keeps its size
        assert arr.shape == (30,)
        np.testing.assert_array_equal(arr[20:30], np.full(10, 5.0))


def test_e_four_processes_one_session_one_commit(tmp_path, clients):
    repo = make_repo(tmp_path / "repo", shape=10)
    before = repo.log("main")
    driver = repo.create_session(message="cooperative")
    root = zarr.open_group(driver.store, mode="a")
    root.create_array("y", shape=(1000,), chunks=(10,), dtype="i4", fill_value=-1)
    open_all(tmp_path / "repo", *clients)
    handle = pickle.dumps(driver)
    for i, c in enumerate(clients):  # half join by pickled session, half by id
        if i % 2:
            assert c.call("adopt", "job", handle) == driver.id
        else:
            c.call("join", "job", driver.id)
    regions = [(r * 10, r * 10 + 10, r) for r in range(100)]
    for i, c in enumerate(clients):
        c.send("write_regions", "job", "y", regions[i::4])
    pids = {c.result() for c in clients}
    assert len(pids) == 4
    cid = driver.commit("100 regions from 4 processes")
    after = repo.log("main")
    assert len(after) == len(before) + 1
    assert after[0].id == cid and after[0].session_id == driver.id
    assert after[1].id == before[0].id
    np.testing.assert_array_equal(head_array(repo, "y"), np.repeat(np.arange(100), 10))


def test_f_abandon_leaves_nothing(tmp_path, clients):
    client = clients[2]
    repo = make_repo(tmp_path / "repo")
    head = repo.resolve("main")
    open_all(tmp_path / "repo", client)
    sid = client.call("create_session", "doomed")
    client.call("write", "doomed", "x", 0, 30, 9.0)
    assert any(True for _ in repo._context.meta.scan(repo._context.stage_partition(sid)))
    assert client.call("abandon", "doomed") is None
    assert repo.resolve("main") == head
    assert len(repo.log("main")) == 2
    assert list(repo._context.meta.scan(repo._context.stage_partition(sid))) == []
    assert repo.list_sessions() == []
    np.testing.assert_array_equal(head_array(repo), np.zeros(30))
    assert client.call("status", "doomed") == "abandoned"
    late = client.call("commit", "doomed", "too late")
    assert isinstance(late, Failed) and late.error == "SessionClosedError"
    assert repo.resolve("main") == head


def expire_now(repo: zl.Repo, session_id: str) -> None:
    """Rewrite the session record's deadline into the past (no waiting for the clock)."""
    repo._context.records.update(session_id, lambda r: replace(r, expires_at=r.created - 1))


def test_g_expiry_and_update_expiration(tmp_path, clients):
    a, b = clients[0], clients[1]
    repo = make_repo(tmp_path / "repo")
    head = repo.resolve("main")
    open_all(tmp_path / "repo", a, b)
    sid = a.call("create_session", "s")
    b.call("join", "s", sid)
    # another process extends the session; everyone sees the new deadline
    new_deadline = b.call("update_expiration", "s", 2 * 86400)
    (listed,) = [r for r in repo.list_sessions() if r.id == sid]
    assert listed.expires_at.timestamp() == pytest.approx(new_deadline)
    too_long = b.call("update_expiration", "s", 7 * 86400 + 5)
    assert isinstance(too_long, Failed) and too_long.error == "InvalidInputError"
    a.call("write", "s", "x", 0, 10, 4.0)
    expire_now(repo, sid)
    for c, op, args in (
        (a, "write", ("s", "x", 10, 20, 4.0)),
        (b, "update_expiration", ("s", 3600)),
        (a, "commit", ("s", "late")),
    ):
        got = c.call(op, *args)
        assert isinstance(got, Failed) and got.error == "SessionExpiredError", (op, got)
    assert a.call("status", "s") == "expired"
    assert repo.resolve("main") == head
    assert sid not in {r.id for r in repo.list_sessions()}


@pytest.mark.parametrize("isolation", ["serializable", "snapshot"])
def test_h_derived_array_and_a_concurrent_change_of_its_source(tmp_path, clients, isolation):
    a, b = clients[0], clients[1]
    repo = make_repo(tmp_path / "repo", value=1.0, name="foo")
    open_all(tmp_path / "repo", a, b)
    a.call("create_session", "derive", "main", isolation)
    a.call("derive", "derive", "foo", "bar")  # reads foo, writes bar
    b.call("create_session", "change")
    b.call("write", "change", "foo", 0, 30, 7.0)
    b_commit = b.call("commit", "change", "change the source")
    assert not isinstance(b_commit, Failed)
    got = a.call("commit", "derive", "derived bar")
    if isolation == "serializable":
        assert isinstance(got, Failed) and got.error == "ConflictError", got
        assert {p for p, _, _ in got.conflicts} == {"foo"}
        assert {k for _, k, _ in got.conflicts} == {"read"}
        assert repo.resolve("main") == b_commit
        assert a.call("status", "derive") == "open"
    else:
        assert not isinstance(got, Failed), got
        assert repo.log("main")[1].id == b_commit
        np.testing.assert_array_equal(head_array(repo, "bar"), np.full(30, 2.0))
