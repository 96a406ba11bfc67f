"""Reading chunk statistics: the table `Repo.chunk_stats` gives, `zl.select` against numpy's
mask (statistics used, ignored, unknown), the filter grammar's refusals, backfill of
unknown statistics, the `zarrlake stats` command, checks that decide from statistics, the
web UI's coloured chunk map, and `fsck --decode` comparing stored statistics."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import zarr
from starlette.testclient import TestClient

import zarrlake as zl
from tests.helpers.cli import run
from tests.statistics.model import Spec, assert_matches

SPEC = Spec("t", (20, 30), (10, 10), "float32", float("nan"))


def _values() -> np.ndarray:
    """Chunk (i, j) holds values near 100*i + 10*j; chunk (1, 2) is never written."""
    rng = np.random.default_rng(3)
    out = np.add.outer(np.arange(20) // 10 * 100.0, np.arange(30) // 10 * 10.0)
    out = np.round(out + rng.normal(0, 2, out.shape), 2).astype("f4")
    out[rng.random(out.shape) < 0.1] = np.nan
    out[10:20, 20:30] = np.nan  # all fill: not stored
    return out


def _repo(tmp_path, *, statistics: bool = True) -> zl.Repo:
    repo = zl.Repo.create(tmp_path / "repo", settings={"chunk_statistics": statistics})
    s = repo.create_session()
    SPEC.create(s.store)
    zarr.open_array(s.store, path="t")[:] = _values()
    s.commit("t")
    return repo


def test_the_table_has_a_column_per_dimension_then_the_statistics(tmp_path):
    repo = _repo(tmp_path)
    table = repo.chunk_stats("t")
    assert table.column_names == [
        *("d0", "d1"),
        *("count", "nan_count", "fill_count", "min", "max", "sum", "known"),
    ]
    assert table.schema.field("d0").type == pa.int64()
    assert table.schema.field("min").type == pa.float32()
    assert table["d0"].to_pylist() == [0, 0, 0, 1, 1, 1]
    assert table["d1"].to_pylist() == [0, 1, 2, 0, 1, 2]
    assert_matches(table, SPEC, _values())  # the absent chunk (1, 2): all fill, known
    with pytest.raises(zl.NotFoundError, match="nope"):
        repo.chunk_stats("nope")


def test_without_statistics_every_chunk_is_unknown_until_backfilled(tmp_path):
    repo = _repo(tmp_path, statistics=False)
    table = repo.chunk_stats("t")
    assert table["known"].to_pylist() == [False] * 5 + [True]  # the absent one is all fill
    assert table["min"].to_pylist()[:5] == [None] * 5
    head = repo.resolve("main")
    report = repo.backfill_chunk_stats("t")
    assert (report.chunks, report.skipped) == (5, 0) and report.commit == repo.resolve("main")
    d = repo.diff(head, "main")  # the commit changes no chunk and no document
    assert not (d.chunks_written or d.chunks_deleted or d.metadata_changed)
    assert_matches(repo.chunk_stats("t"), SPEC, _values())
    assert repo.backfill_chunk_stats("t").commit is None  # nothing left to do


@pytest.mark.parametrize("statistics", ["use", "ignore", "unknown"])
def test_select_yields_the_chunks_numpy_says_match(tmp_path, statistics):
    repo = _repo(tmp_path, statistics=statistics != "unknown")
    values = _values()
    for where, mask_of in {
        "t > 105": lambda v: v > 105,
        "t <= 5 OR t >= 120": lambda v: (v <= 5) | (v >= 120),
        "isnan(t)": np.isnan,
        "t IN (0, 1e6)": lambda v: np.isin(v, [0, 1e6]),
        "t > 1e6": lambda v: v > 1e6,
    }.items():
        got = dict(
            zl.select(
                repo, "t", where=where, statistics="ignore" if statistics == "ignore" else "use"
            )
        )
        mask = mask_of(values)
        want = {
            (i, j): values[i * 10 : i * 10 + 10, j * 10 : j * 10 + 10]
            for i in range(2)
            for j in range(3)
            if mask[i * 10 : i * 10 + 10, j * 10 : j * 10 + 10].any()
        }
        assert sorted(got) == sorted(want), where
        for at, block in want.items():
            np.testing.assert_array_equal(got[at], block, err_msg=where)


def test_select_reads_only_the_chunks_statistics_may_match(tmp_path, monkeypatch):
    import zarrlake.query as query

    repo = _repo(tmp_path)
    asked: list[int] = []
    real = query.read_boxes
    monkeypatch.setattr(
        query, "read_boxes", lambda a, boxes: asked.append(len(boxes)) or real(a, boxes)
    )
    assert [at for at, _ in zl.select(repo, "t", where="t > 105")] == [(1, 0), (1, 1)]
    assert sum(asked) == 2  # of 6 chunks; (1, 0) may hold a value > 105 by its max
    asked.clear()
    list(zl.select(repo, "t", where="t > 105", statistics="ignore"))
    assert sum(asked) == 6


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        ("u > 1", "'u'"),
        ("t >", "end"),
        ("t > 1 AND", "end"),
        ("t ~ 3", "~"),
        ("t > 'a'", "'a'"),
        ("t IN ()", "IN"),
    ],
)
def test_a_bad_filter_says_what_is_wrong(tmp_path, where, problem):
    repo = _repo(tmp_path)
    with pytest.raises(zl.InvalidInputError, match=problem):
        list(zl.select(repo, "t", where=where))
    with pytest.raises(zl.InvalidInputError, match="'use' or 'ignore'"):
        list(zl.select(repo, "t", where="t > 1", statistics="maybe"))


def test_the_stats_command(tmp_path):
    repo = _repo(tmp_path, statistics=False)
    loc = str(tmp_path / "repo")
    res = run("-r", loc, "stats", "main", "t")
    assert res.code == 0, res.stderr
    assert "6 chunks (1 with statistics, 5 unknown)" in res.stdout and "--backfill" in res.stdout
    res = run("-r", loc, "stats", "t", "--backfill", "--json")
    assert res.code == 0, res.stderr
    assert res.json() == {"commit": repo.resolve("main"), "chunks": 5, "skipped": 0}
    rows = run("-r", loc, "stats", "t", "--chunks", "--json").json()
    assert rows == repo.chunk_stats("t").to_pylist()
    assert [r["known"] for r in rows] == [True] * 6
    summary = run("-r", loc, "stats", "main", "t", "--json").json()
    values = _values()
    assert summary["nan_count"] == int(np.isnan(values).sum())
    assert summary["min"] == pytest.approx(float(np.nanmin(values)))
    assert summary["mean"] == pytest.approx(float(np.nanmean(values.astype("f8"))), rel=1e-6)
    text = run("-r", loc, "stats", "t", "--chunks", "--limit", "2").stdout
    assert len(text.strip().splitlines()) == 3  # header and two chunks
    bad = run("-r", loc, "stats", "t", "--chunks", "--backfill")
    assert bad.code != 0 and "exclude each other" in bad.stderr


def test_checks_decide_from_statistics_and_read_where_unknown(tmp_path):
    from zarrlake.checks import MaxNaNFraction, NoDeletedChunks, ValueRange

    for statistics in (True, False):
        repo = _repo(tmp_path / str(statistics), statistics=statistics)
        repo.add_check("nan", MaxNaNFraction("t", 0.5), branches=("nowhere",))
        repo.add_check("strict", MaxNaNFraction("t", 0.01), branches=("nowhere",))
        repo.add_check("range", ValueRange("t", -50, 150), branches=("nowhere",))
        repo.add_check("tight", ValueRange("t", 0, 100), branches=("nowhere",))
        repo.add_check("nodel", NoDeletedChunks(), branches=("nowhere",))
        got = {r.name: r for r in repo.run_checks("main", reuse=False)}
        # about 10% of each written chunk is NaN; chunk row 1 exceeds 100
        names = ("nan", "strict", "range", "tight", "nodel")
        assert [got[n].passed for n in names] == [True, False, True, False, True]
        for name in ("nan", "range"):
            assert got[name].chunks_from_stats == (5 if statistics else 0), name
            assert got[name].chunks_read == (0 if statistics else 5), name


def test_the_chunk_map_colours_by_statistics(tmp_path):
    from zarrlake.ui.app import create_app

    repo = _repo(tmp_path)
    client = TestClient(create_app(repo))
    params = {"to": "main", "path": "t", "format": "json"}
    for by in ("min", "max", "mean", "nan"):
        m = client.get("/chunkmap", params={**params, "colour": by}).json()
        assert m["colour"]["by"] == by
    m = client.get("/chunkmap", params={**params, "colour": "max"}).json()
    values = _values()
    assert m["colour"]["high"] == pytest.approx(float(np.nanmax(values)))
    assert m["colour"]["low"] == pytest.approx(float(np.nanmax(values[:10, :10])))
    assert client.get("/chunkmap", params={**params, "colour": "median"}).status_code == 400


def test_fsck_decode_finds_the_stored_statistics_true(tmp_path):
    repo = _repo(tmp_path)
    assert repo.fsck(decode=True) == []
