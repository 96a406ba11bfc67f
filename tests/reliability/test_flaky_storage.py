"""Suite 4: the multi-process workload with fault injection (ZARRLAKE_FAULTS) around both
object storage and the metastore: transient errors, lost responses to writes (conditional
ones included) and latency. No acknowledged write may be lost, no failed one may land, and
no ConflictError may come from a lost response to a write that did land."""

from __future__ import annotations

import threading

import pytest

import zarrlake as zl
from tests.helpers.reliability import size
from tests.reliability.workers import check_history, run_workers, setup_repo
from zarrlake.errors import TransientError
from zarrlake.metastore.base import MetaStore, WrapperMetaStore

FAULTS = "error_rate=0.07,lost_response_rate=0.07,latency=0.002"


def _faults(results: list[dict]) -> int:
    return sum(sum(r["faults"].values()) for r in results)


def test_concurrent_writers_on_flaky_storage(tmp_path, figures):
    procs, txns = size(4, 16), size(10, 40)
    location = str(tmp_path / "repo")
    repo = setup_repo(location)
    head = repo.resolve("main")

    results = run_workers(location, None, procs, txns, tmp_path, faults=FAULTS)

    found = check_history(repo, results, head)
    assert found["commits acknowledged"] == procs * txns
    injected = _faults(results)
    # faults of both kinds were injected (per run: a process's dice are seeded, but the
    # order of its operations varies with the other writers, so one may draw none)
    assert sum(r["faults"]["storage_lost"] for r in results) > 0
    assert sum(r["faults"]["meta_lost"] for r in results) > 0
    figures["flaky: processes"] += procs
    figures["flaky: transactions run"] += procs * txns + found["attempts failed by conflict"]
    figures["flaky: faults injected"] += injected
    figures["lost commits"] += found["lost"]
    figures["phantom commits"] += found["phantom"]


def test_lone_writer_on_flaky_storage_never_sees_a_false_conflict(tmp_path, figures):
    """With no other writer every ConflictError would be false, caused by a fault."""
    txns = size(25, 150)
    location = str(tmp_path / "repo")
    repo = setup_repo(location)
    head = repo.resolve("main")

    results = run_workers(location, None, 1, txns, tmp_path, faults=FAULTS)

    assert results[0]["fails"] == []
    found = check_history(repo, results, head)
    assert found["commits acknowledged"] == txns
    assert results[0]["faults"]["meta_lost"] > 0 and results[0]["faults"]["storage_errors"] > 0
    figures["flaky: processes"] += 1
    figures["flaky: transactions run"] += txns
    figures["flaky: faults injected"] += _faults(results)


class _LoseCasThenInterleave(WrapperMetaStore):
    """Lets the first branch compare-and-swap land, lets another writer commit on top of it,
    then reports the swap's response as lost: the worst case for the retrying committer."""

    def __init__(self, inner: MetaStore, interloper) -> None:
        super().__init__(inner)
        self.interloper = interloper
        self.armed = True

    def write_if(self, partition, writes, checks):  # a ref write (vc/refs.py)
        writes = list(writes)
        versions = self.inner.write_if(partition, writes, checks)
        if self.armed and writes[0][0] == b"branch/main" and checks.get(b"branch/main"):
            self.armed = False
            self.interloper()
            raise TransientError("injected fault: branch CAS response lost")
        return versions


@pytest.mark.parametrize("store", ["postgres", "sqlite"])
def test_lost_branch_cas_response_then_concurrent_commit(tmp_path, figures, store, request):
    """Our commit landed, its response was lost and another commit landed on top before the
    retry looked: the commit must be reported as made (not a ConflictError with itself).
    On SQLite the swap is one transaction with the fence and the record's finish, so the
    other commit (another thread here, as another process would) lands once it ends."""
    meta = request.getfixturevalue("pg_metastore_url") if store == "postgres" else None
    location = str(tmp_path / "repo")
    repo = setup_repo(location, meta)
    other = zl.Repo.open(location, metastore=meta)
    elsewhere: list[threading.Thread] = []

    def commit_other() -> None:
        s = other.create_session()
        s.write("counters/c/7", (5).to_bytes(8, "little"))
        s.commit("interloper")

    def interloper() -> None:
        if meta is not None:  # inside the swap's call: its reply is not back yet
            commit_other()
            return
        elsewhere.append(threading.Thread(target=commit_other, daemon=True))
        elsewhere[0].start()

    repo._context.meta.inner = _LoseCasThenInterleave(repo._context.meta.inner, interloper)
    s = repo.create_session()
    s.write("counters/c/0", (1).to_bytes(8, "little"))
    cid = s.commit("ours")
    for t in elsewhere:
        t.join(60)
        assert not t.is_alive()

    log = [c.id for c in repo.log("main")]
    assert cid in log and log.index(cid) == 1, "our commit, then the interloper's on top"
    assert s.state == "committed"
    assert repo.readonly_session("main").read("counters/c/0") == (1).to_bytes(8, "little")
    figures["flaky: faults injected"] += 1
