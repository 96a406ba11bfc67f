"""Suite 2: many processes run isolated read-modify-write and blind-write transactions on
one branch, on SQLite and on PostgreSQL; the history checker proves the result is a serial
order of exactly the acknowledged transactions (0 lost, 0 phantom)."""

from __future__ import annotations

import pytest

from tests.helpers.reliability import size
from tests.reliability.workers import check_history, run_workers, setup_repo

PROCS = size(4, 16)
TXNS = size(12, 40)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_transactions_are_serializable(backend, tmp_path, request, figures):
    location = str(tmp_path / "repo")
    metastore = request.getfixturevalue("pg_metastore_url") if backend == "postgres" else None
    repo = setup_repo(location, metastore)
    setup_head = repo.resolve("main")

    results = run_workers(location, metastore, PROCS, TXNS, tmp_path)

    found = check_history(repo, results, setup_head)
    assert found["commits acknowledged"] == PROCS * TXNS
    assert found["lost"] == found["phantom"] == 0
    figures["concurrency: processes"] += PROCS
    figures["concurrency: transactions run"] += (
        found["commits acknowledged"] + found["attempts failed by conflict"]
    )
    figures["concurrency: commits acknowledged"] += found["commits acknowledged"]
    figures["concurrency: conflicts (retried)"] += found["attempts failed by conflict"]
    figures["lost commits"] += found["lost"]
    figures["phantom commits"] += found["phantom"]
