"""A session store's writes skip zarr's empty-chunk check of a whole chunk whose first value
is not the fill value (zarr compares every value of a chunk whose first axis is 1 long);
what is stored is what zarr stores: an all-fill chunk is left out, a chunk whose first
value is the fill value is checked by zarr as before, -0.0 is not 0.0, NaN is any NaN.
Other stores keep zarr's check for every chunk."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.core.buffer import cpu

import zarrlake as zl
from tests.helpers.fill_chunks import fill_chunks


@pytest.fixture
def checked(monkeypatch) -> list[float]:
    """The first value of each chunk zarr's empty-chunk check (`all_equal`) looks at."""
    seen: list[float] = []
    original = cpu.NDBuffer.all_equal

    def spy(self, other, equal_nan=True):
        seen.append(float(self.as_numpy_array().reshape(-1)[0]))
        return original(self, other, equal_nan)

    monkeypatch.setattr(cpu.NDBuffer, "all_equal", spy)
    return seen


def _values(fill: float) -> np.ndarray:
    """Six chunks of (1, 4, 4): random; all fill; fill first, then not; -0.0 first, then
    fill; NaN first, then random; fill everywhere but the last value."""
    return fill_chunks(fill, 4)


@pytest.mark.parametrize("fill", [0.0, float("nan")])
def test_only_chunks_whose_first_value_is_the_fill_value_get_zarrs_check(tmp_path, checked, fill):
    values = _values(fill)
    repo = zl.Repo.create(tmp_path / "repo")
    s = repo.create_session()
    zarr.create_array(
        s.store, name="a", shape=values.shape, chunks=(1, 4, 4), dtype="f4", fill_value=fill
    )
    zarr.open_array(s.store, path="a")[...] = values
    s.commit("values")
    firsts = values[:, 0, 0]
    is_fill = (
        np.isnan(firsts) if np.isnan(fill) else firsts.view("u4") == np.float32(fill).view("u4")
    )
    assert len(checked) == int(is_fill.sum())  # zarr's check only where the first value is fill
    store = repo.readonly_session("main").store
    got = zarr.open_array(store, path="a", mode="r")[...]
    assert np.array_equal(got.view("u4")[~np.isnan(values)], values.view("u4")[~np.isnan(values)])
    assert np.array_equal(np.isnan(got), np.isnan(values))
    assert [k for k in range(6) if not _has_key(store, k)] == [1]  # only the all-fill one


def _has_key(store, k: int) -> bool:
    import asyncio

    return asyncio.run(store.exists(f"a/c/{k}/0/0"))


def test_other_stores_keep_zarrs_check_of_every_chunk(checked):
    values = _values(0.0)
    store = zarr.storage.MemoryStore()
    zarr.create_array(
        store, name="a", shape=values.shape, chunks=(1, 4, 4), dtype="f4", fill_value=0.0
    )
    zarr.open_array(store, path="a")[...] = values
    assert len(checked) == 6
