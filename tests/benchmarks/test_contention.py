"""benchmarks/contention.py: writers on a bucket-only repository, their requests counted
by kind and partition, run small (2 writers x 2 commits on moto's server)."""

from __future__ import annotations

import sys

from benchmarks import contention


def test_keys_are_counted_by_partition_or_object_prefix() -> None:
    assert contention._kind("meta/0b65a3~2fsessions~2fa/head") == "meta:sessions"
    assert contention._kind("meta/0b65a3~2fstage~2f982d46/pages/x") == "meta:stage"
    assert contention._kind("chunks/87d095e7") == "chunks"


def test_a_small_run_prints_its_requests_per_commit(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["contention", "--writers", "2", "--commits", "2"])
    contention.main()
    out = capsys.readouterr().out
    first, *rows = out.splitlines()
    assert first.startswith("2 writers x 2 commits:") and "requests per commit" in first
    kinds = {tuple(r.split()[:2]) for r in rows}
    assert ("put_if", "meta:sessions") in kinds  # the session records' writes
    assert ("put_if", "meta:refs") in kinds  # the branch's moves
    assert ("put_if_absent", "commits") in kinds
