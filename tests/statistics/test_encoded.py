"""Large chunks written through zarr (TILES_MAX elements or more) get their statistics just
before zarr's codecs encode them and their digest just after, on the encoding thread: the
statistics equal numpy's on each chunk's values (NaN, fill values, integer, unsigned,
boolean and float dtypes, the array's edge chunks, a shard's inner chunks, chunks merged
with what they held), each chunk is taken once and not again at its upload, and each object
is named by the repository's hash of the bytes stored (BLAKE3 or SHA-256), with statistics
on or off."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import blake3
import numpy as np
import pytest
import zarr

import zarrlake as zl
from tests.statistics.model import Spec, assert_matches, chunk_values, random_values
from zarrlake.format.chunk_ref import chunk_object_key
from zarrlake.vc import statistics as vs
from zarrlake.vc.objects import Objects
from zarrlake.zarr_store import pipeline

SIDE = 128  # 128 x 128 = 16,384 values a chunk: TILES_MAX, taken as zarr encodes it


def _values(dtype: str, shape: tuple[int, ...], fill: object, seed: int) -> np.ndarray:
    out = random_values(dtype, shape, fill, seed)
    if out.dtype.kind == "f":
        out[0] = np.nan  # a chunk of NaN only
    return out


def _all_fill(block: np.ndarray, fill: object) -> bool:
    if isinstance(fill, float) and math.isnan(fill):
        return bool(np.isnan(block).all())
    return bool((block == fill).all())


class _Taken:
    """Counts the chunks whose statistics are taken as zarr encodes them, and later."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.encoding = 0
        self.later = 0
        real = vs.of_chunk

        def at_encode(values, fill):
            self.encoding += 1
            return real(values, fill)

        def later(values, fill):
            self.later += 1
            return real(values, fill)

        monkeypatch.setattr(pipeline, "of_chunk", at_encode)
        monkeypatch.setattr(vs, "of_chunk", later)


CASES = [
    Spec("a", (5, SIDE, SIDE), (1, SIDE, SIDE), "float32", 0.0),
    Spec("a", (4, SIDE, SIDE), (1, SIDE, SIDE), "float32", float("nan")),
    Spec("a", (3, SIDE, SIDE + 20), (1, SIDE, SIDE), "float64", 1.5),  # edge chunks
    Spec("a", (4, SIDE, SIDE), (1, SIDE, SIDE), "int16", -1),
    Spec("a", (4, SIDE, SIDE), (1, SIDE, SIDE), "uint8", 7),
    Spec("a", (4, SIDE, SIDE), (1, SIDE, SIDE), "bool", False),
    Spec("a", (2, 2 * SIDE, SIDE), (1, SIDE, SIDE), "float32", 0.0, shards=(1, 2 * SIDE, SIDE)),
]


@pytest.mark.parametrize("spec", CASES, ids=lambda s: f"{s.dtype}-{s.shape[2]}-{s.fill}")
def test_large_chunks_get_numpys_statistics_as_zarr_encodes_them(tmp_path, monkeypatch, spec):
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    spec.create(s.store)
    values = _values(spec.dtype, spec.shape, spec.fill, seed=len(spec.dtype))
    taken = _Taken(monkeypatch)
    zarr.open_array(s.store, path=spec.name)[...] = values
    stored = [  # (a chunk all fill value is not stored: zarr's write_empty_chunks)
        k for k in np.ndindex(*spec.grid) if not _all_fill(chunk_values(spec, values, k), spec.fill)
    ]
    assert (taken.encoding, taken.later) == (len(stored), 0)
    s.commit("large")
    assert_matches(repo.chunk_stats(spec.name), spec, values, spec.dtype)
    assert repo.fsck(decode=True) == []


def test_chunks_merged_with_what_they_held_get_the_merged_values_statistics(tmp_path, monkeypatch):
    spec = Spec("a", (3, SIDE, SIDE), (1, SIDE, SIDE), "float32", 0.0)
    repo = zl.Repo.create(tmp_path / "r")
    s = repo.create_session()
    spec.create(s.store)
    values = _values("float32", spec.shape, 0.0, seed=5)
    zarr.open_array(s.store, path="a")[...] = values
    s.commit("base")
    s = repo.create_session()
    taken = _Taken(monkeypatch)
    region = (slice(0, 3), slice(10, 50), slice(0, SIDE))
    new = _values("float32", spec.shape, 0.0, seed=6)
    zarr.open_array(s.store, path="a")[region] = new[region]
    assert (taken.encoding, taken.later) == (3, 0)
    s.commit("region")
    values[region] = new[region]
    assert_matches(repo.chunk_stats("a"), spec, values)


@pytest.mark.parametrize("statistics", [True, False])
@pytest.mark.parametrize(
    ("name", "hasher"),
    [
        ("blake3", lambda d: blake3.blake3(d).digest()),
        ("sha256", lambda d: hashlib.sha256(d).digest()),
    ],
)
def test_large_chunks_are_hashed_once_as_zarr_encodes_them(
    tmp_path, monkeypatch, statistics, name, hasher
):
    repo = zl.Repo.create(
        tmp_path / "r", content_hash=name, settings={"chunk_statistics": statistics}
    )
    s = repo.create_session()
    arr = zarr.create_array(
        s.store, name="a", shape=(6, SIDE, SIDE), chunks=(1, SIDE, SIDE), dtype="f4"
    )
    values = _values("float32", (6, SIDE, SIDE), 0.0, seed=8)
    values[0] = np.linspace(0, 1, SIDE * SIDE).reshape(SIDE, SIDE)  # (not NaN only: an object)
    hashed: list[int] = []
    real = Objects.digest

    def counted(self, data, *, spread=True):
        if len(data) > 4096:
            hashed.append(spread)
        return real(self, data, spread=spread)

    monkeypatch.setattr(Objects, "digest", counted)
    arr[...] = values
    assert hashed == [False] * 6  # once each, alone on an encoding thread
    s.commit("hashed")
    root = Path(tmp_path / "r")
    for k in range(6):
        ref = repo.readonly_session()._engine.lookup(f"a/c/{k}/0/0")
        stored = (root / chunk_object_key(ref.digest)).read_bytes()
        assert hasher(stored) == ref.digest  # named by the repository's hash of its bytes
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[...]
    assert np.array_equal(got, values, equal_nan=True)
    assert repo.chunk_stats("a")["known"].to_pylist() == [statistics] * 6
