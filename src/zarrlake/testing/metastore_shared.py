"""Conformance tests for metastores shared by processes (sqlite, postgres): races between
spawned processes, many first opens at once, and use after fork. Mix into a MetaStoreTests
subclass."""

from __future__ import annotations

import multiprocessing
import os
import threading
import warnings

from zarrlake.metastore import MetaStore, open_metastore
from zarrlake.testing.metastore import P, keys, race_round
from zarrlake.testing.metastore_retries import stored

RACE_PROCESSES = 4
RACE_PROCESS_ROUNDS = 100


def race_process(url: str, partition: str, rounds: int, barrier, results, index: int) -> None:
    """One racing process (spawned): reports the rounds it won, or the error it hit."""
    meta = open_metastore(url)
    won: list[int] = []
    try:
        for r in range(rounds):
            if race_round(meta, partition, barrier):
                won.append(r)
        results.put((index, won, None))
    except BaseException as e:
        barrier.abort()
        results.put((index, won, repr(e)))
    finally:
        meta.close()


def _use_after_fork(meta: MetaStore) -> None:
    """Child of a fork: write with the inherited store, then close it."""
    meta.set(P, b"child", str(os.getpid()).encode())
    assert stored(meta.get(P, b"child"))[0] == str(os.getpid()).encode()
    meta.close()  # must leave the parent's connections alone


class SharedMetaStoreTests:
    """For backends that processes share; needs MetaStoreTests' fixtures."""

    def test_cas_race_processes(self, store_url: str, store: MetaStore):
        """Processes racing compare-and-swap increments of one counter never lose an update."""
        store.set(P, b"counter", b"0")
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(RACE_PROCESSES, timeout=120)
        results = ctx.Queue()
        procs = [
            ctx.Process(
                target=race_process,
                args=(store_url, P, RACE_PROCESS_ROUNDS, barrier, results, i),
            )
            for i in range(RACE_PROCESSES)
        ]
        try:
            for p in procs:
                p.start()
            reports = [results.get(timeout=180) for _ in procs]
            for p in procs:
                p.join(timeout=60)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join()
        assert [err for _, _, err in reports if err] == []
        assert all(p.exitcode == 0 for p in procs)
        rounds_won = sorted(r for _, won, _ in reports for r in won)
        assert rounds_won == list(range(RACE_PROCESS_ROUNDS)), "each round needs exactly one winner"
        successes = sum(len(won) for _, won, _ in reports)
        assert int(stored(store.get(P, b"counter"))[0]) == successes == RACE_PROCESS_ROUNDS

    def test_concurrent_first_opens_create_the_schema_once(self, store_url: str):
        """Many clients opening a brand-new database at once must not trip over each other."""
        n = 12
        barrier = threading.Barrier(n, timeout=60)
        opened: list[MetaStore] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def opener(i: int) -> None:
            try:
                barrier.wait()
                meta = open_metastore(store_url)
                with lock:
                    opened.append(meta)
                meta.set(P, f"{i:02d}".encode(), b"v")
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=opener, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        try:
            assert errors == []
            assert len(keys(opened[0].scan(P))) == n
        finally:
            for meta in opened:
                meta.close()

    def test_store_survives_fork(self, store: MetaStore):
        """A forked child can use its parent's store, and the parent still can afterwards."""
        store.set(P, b"parent", b"before")  # the parent now holds open connections
        ctx = multiprocessing.get_context("fork")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded fork" notice
            child = ctx.Process(target=_use_after_fork, args=(store,))
            child.start()
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
            child.join()
        assert child.exitcode == 0
        assert stored(store.get(P, b"child"))[0] == str(child.pid).encode()
        # The parent's own connections still work after the child used and closed the store.
        for i in range(10):
            store.set(P, b"parent", str(i).encode())
        assert stored(store.get(P, b"parent"))[0] == b"9"
