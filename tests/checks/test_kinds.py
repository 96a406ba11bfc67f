"""Each built-in kind passing and failing on a real change, its JSON form, and the errors
bad parameters get."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.checks.conftest import ROWS, write
from zarrlake.checks import (
    MaxChangedChunks,
    MaxNaNFraction,
    Monotonic,
    NoDeletedChunks,
    RequiredAttrs,
    SchemaUnchanged,
    ValueRange,
    check_from_json,
)


def result(repo: zl.Repo, check: zl.checks.Check, session: zl.Session):
    """The result of `check` on the commit `session` makes on a side branch."""
    cid = session.commit("change")
    repo.add_check("c", check, branches=("nowhere",))
    (res,) = repo.run_checks(cid)
    repo.remove_check("c")
    return res


def side(repo: zl.Repo, **arrays: dict) -> zl.Session:
    name = f"b{len(repo.list_branches())}"
    repo.create_branch(name)
    return write(repo, name, **arrays)


def test_max_nan_fraction(repo):
    ok = result(repo, MaxNaNFraction("t", 0.5), side(repo, t={(0, slice(0, 2)): np.nan}))
    assert ok.passed and "0.5" in ok.message
    bad = side(repo, t={(1, slice(0, 3)): np.nan, (3, 0): np.nan})
    res = result(repo, MaxNaNFraction("t", 0.5), bad)
    assert not res.passed
    assert res.array == "t" and res.chunks == [(1, 0)] and res.failing == 1
    assert "(1, 0)" in res.message and "0.75" in res.message


def test_max_nan_fraction_counts_a_deleted_chunk_as_all_fill(repo):
    s = side(repo)
    zarr.open_group(s.store)["t"][2] = np.nan  # all fill: zarr deletes the chunk
    res = result(repo, MaxNaNFraction("t", 0.9), s)
    assert not res.passed and res.chunks == [(2, 0)]


def test_value_range(repo):
    assert result(repo, ValueRange("t", 0, 50), side(repo, t={0: 49.0})).passed
    res = result(repo, ValueRange("t", 0, 50), side(repo, t={0: 51.0, 5: -1.0, 6: 3.0}))
    assert not res.passed
    assert res.chunks == [(0, 0), (5, 0)] and res.failing == 2
    assert "-1..51 outside [0, 50]" in res.message
    assert result(repo, ValueRange("t", max=50), side(repo, t={0: -1e9})).passed


def test_monotonic_with_and_without_step(repo):
    shifted = side(repo, time={slice(0, ROWS): np.arange(ROWS) + 10})
    assert result(repo, Monotonic("time", step=1), shifted).passed
    gap = side(repo, time={slice(4, 6): [5, 6]})  # 3 then 5: a gap
    res = result(repo, Monotonic("time", step=1), gap)
    assert not res.passed and res.chunks == [(2,)]
    assert result(repo, Monotonic("time"), side(repo, time={slice(4, 8): [4, 6, 9, 10]})).passed
    dup = side(repo, time={slice(2, 4): [1, 3]})  # 1 after 1: a duplicate at the boundary
    res = result(repo, Monotonic("time"), dup)
    assert not res.passed and res.chunks == [(1,)] and "strictly increasing" in res.message


def test_monotonic_on_an_appended_coordinate_reads_the_element_before(repo):
    s = repo.create_session()
    g = zarr.open_group(s.store)
    g["time"].resize((ROWS + 2,))
    g["time"][ROWS:] = [ROWS, ROWS + 1]
    assert result(repo, Monotonic("time", step=1), s).passed
    s = repo.create_session()
    g = zarr.open_group(s.store)
    g["time"].resize((ROWS + 4,))
    g["time"][ROWS + 2 :] = [ROWS + 1, ROWS + 2]  # the last element before is ROWS + 1
    res = result(repo, Monotonic("time", step=1), s)
    assert not res.passed and res.chunks == [(ROWS // 2 + 1,)]


def test_monotonic_needs_a_1d_coordinate(repo):
    res = result(repo, Monotonic("t"), side(repo, t={0: 2.0}))
    assert not res.passed and "1-D" in res.message


def test_required_attrs(repo):
    assert result(repo, RequiredAttrs("t", ["units", "standard_name"]), side(repo, t={0: 2})).passed
    s = side(repo)
    zarr.open_group(s.store)["t"].attrs.update({"units": "K", "long_name": "x"})
    res = result(repo, RequiredAttrs("t", ["units", "comment"]), s)
    assert not res.passed and "'comment'" in res.message and res.array == "t"


def test_schema_unchanged(repo):
    s = side(repo)
    zarr.open_group(s.store)["t"].resize((ROWS + 1, 4))
    assert result(repo, SchemaUnchanged("t", ["time"]), s).passed
    s = side(repo)
    zarr.open_group(s.store)["t"].resize((ROWS + 1, 4))
    assert result(repo, SchemaUnchanged("t", [0]), s).passed
    s = side(repo)
    zarr.open_group(s.store)["t"].resize((ROWS, 5))
    res = result(repo, SchemaUnchanged("t", ["time"]), s)
    assert not res.passed and "'x'" in res.message
    s = side(repo)
    del zarr.open_group(s.store)["t"]
    zarr.create_array(s.store, name="t", shape=(ROWS, 4), chunks=(2, 4), dtype="f8")
    res = result(repo, SchemaUnchanged("t"), s)
    assert not res.passed and "chunk_grid" in res.message


def test_max_changed_chunks(repo):
    assert result(repo, MaxChangedChunks(2), side(repo, t={slice(0, 2): 3.0})).passed
    res = result(repo, MaxChangedChunks(2), side(repo, t={slice(0, 3): 3.0}))
    assert not res.passed and res.failing == 3 and "3 chunks" in res.message


def test_no_deleted_chunks(repo):
    assert result(repo, NoDeletedChunks(), side(repo, t={0: 2.0})).passed
    s = side(repo)
    s.delete("t/c/3/0")
    res = result(repo, NoDeletedChunks(), s)
    assert not res.passed and res.chunks == [(3, 0)] and res.array == "t"


@pytest.mark.parametrize(
    "check",
    [
        MaxNaNFraction("a/b", 0.25),
        ValueRange("t", None, 3.5),
        Monotonic("time", 1),
        RequiredAttrs("t", ("units",)),
        SchemaUnchanged("t", ("time", 1)),
        MaxChangedChunks(10),
        NoDeletedChunks(),
        zl.checks.Custom("my-check", threshold=3, names=["a"]),
    ],
)
def test_every_kind_round_trips_through_json(check):
    doc = check.to_json()
    assert doc["kind"] in zl.checks.KINDS
    assert check_from_json(doc) == check


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: MaxNaNFraction("t", 1.5), "between 0 and 1"),
        (lambda: ValueRange("t"), "min, max or both"),
        (lambda: ValueRange("t", 5, 1), "greater than max"),
        (lambda: ValueRange("", 0, 1), "array path"),
        (lambda: Monotonic("time", step=0), "positive"),
        (lambda: MaxChangedChunks(-1), "non-negative"),
        (lambda: RequiredAttrs("t", []), "attribute names"),
        (lambda: zl.checks.Custom("x", f=object()), "JSON"),
        (lambda: check_from_json({"kind": "nope"}), "unknown check kind 'nope'"),
        (lambda: check_from_json({"kind": "value-range", "arr": "t"}), "value-range"),
    ],
)
def test_bad_parameters_are_named(make, words):
    with pytest.raises(zl.InvalidInputError, match=words):
        make()


def test_every_kind_passes_then_fails_on_each_metastore(where):
    """All seven kinds on SQLite, S3 + PostgreSQL and the bucket alone: a change within
    every rule passes them all; a change that breaks every rule fails each, naming it."""
    repo = zl.Repo.open(**where)
    kinds = {
        "nan": MaxNaNFraction("t", 0.5),
        "range": ValueRange("t", 0, 50),
        "monotonic": Monotonic("time", step=1),
        "attrs": RequiredAttrs("t", ["units"]),
        "schema": SchemaUnchanged("t", ["time"]),
        "count": MaxChangedChunks(2),
        "nodelete": NoDeletedChunks(),
    }
    for name, check in kinds.items():
        repo.add_check(name, check, branches=("nowhere",))
    good = side(repo, t={0: 2.0}, time={slice(0, 2): [0, 1]}).commit("within every rule")
    assert {r.name: r.passed for r in repo.run_checks(good)} == dict.fromkeys(kinds, True)

    s = side(repo, t={(1, slice(0, 3)): np.nan, (2, 0): 99.0}, time={slice(4, 6): [5, 6]})
    g = zarr.open_group(s.store)
    g["t"].attrs.put({"standard_name": "air_temperature"})  # units dropped
    g["t"].resize((ROWS, 5))
    s.delete("t/c/3/0")
    bad = s.commit("breaks every rule")
    results = {r.name: r for r in repo.run_checks(bad)}
    assert {n: r.passed for n, r in results.items()} == dict.fromkeys(kinds, False)
    assert results["range"].array == "t" and (2, 0) in results["range"].chunks
    assert results["nodelete"].chunks == [(3, 0)]
    repo.close()


def test_deleting_an_array_counts_its_chunks(repo):
    """A commit deleting array `t` deletes its chunks too (found by the simulator: the
    change set's keys could not be named once `t`'s document was gone, so no chunk
    counted)."""
    repo.add_check("few", MaxChangedChunks(3), branches=("nowhere",))
    repo.add_check("keep", NoDeletedChunks(), branches=("nowhere",))
    s = repo.create_session()
    del zarr.open_group(s.store)["t"]
    cid = s.commit("drop t")
    few, keep = repo.run_checks(cid)
    assert not few.passed and f"touches {ROWS} chunks" in few.message
    assert not keep.passed and keep.array == "t" and keep.failing == ROWS
    assert keep.chunks[:2] == [(0, 0), (1, 0)]
