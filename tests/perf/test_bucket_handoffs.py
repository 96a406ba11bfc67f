"""Hand-offs to threads on the bucket-only commit path: `Objects.map` (behind `together`
and `put_all`) runs its first call on the calling thread, which would only wait otherwise,
so a one-chunk begin + write + commit hands 14 calls to pool threads, not 20."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zarr

import zarrlake as zl
from zarrlake.vc.objects import Objects

CHUNK = (64, 64)

HANDOFFS = 15
"""ThreadPoolExecutor submissions of one begin + write one chunk + commit on the bucket
metastore, its background clean-up included (20 when every call of a `map` went to the
pool and the caller waited; 14 before the premade commit's objects and fence went out
with the gather: each round runs its first call on the caller, and two rounds are now
one)."""


def test_map_runs_the_first_call_on_the_caller_and_keeps_the_order(
    any_metastore: dict,
) -> None:
    repo = zl.Repo.create(**any_metastore)
    objects: Objects = repo._context.objects
    me = threading.get_ident()
    ran = objects.map(lambda i: (i, threading.get_ident() == me), [0, 1, 2, 3])
    assert [i for i, _ in ran] == [0, 1, 2, 3]
    assert ran[0][1] and not any(here for _, here in ran[1:])

    def fails(i: int) -> int:
        if i in (1, 2):
            raise ValueError(f"item {i}")
        return i

    with pytest.raises(ValueError, match="item 1"):  # the first failure in order
        objects.map(fails, [0, 1, 2, 3])
    repo.close()


@pytest.mark.parametrize("any_metastore", ["s3-bucket"], indirect=True)
def test_a_one_chunk_commit_hands_fewer_calls_to_threads(
    any_metastore: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = zl.Repo.create(**any_metastore)
    s = repo.create_session()
    zarr.create_array(s.store, name="a", shape=(8, *CHUNK), chunks=(1, *CHUNK), dtype="f4")
    s.commit("array")
    submitted = [0]
    submit = ThreadPoolExecutor.submit

    def counted(self, *args, **kwargs):
        submitted[0] += 1
        return submit(self, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolExecutor, "submit", counted)
    counts = []
    for i in range(3):  # the first warms the process's caches
        submitted[0] = 0
        s = repo.create_session()
        zarr.open_array(s.store, path="a")[i] = np.full(CHUNK, i + 1, dtype="f4")
        s.commit(f"chunk {i}")
        s._txn.wait()
        counts.append(submitted[0])
    assert max(counts[1:]) <= HANDOFFS, counts
    got = zarr.open_array(repo.readonly_session().store, path="a", mode="r")[:3]
    assert np.array_equal(got, np.stack([np.full(CHUNK, i + 1, dtype="f4") for i in range(3)]))
    repo.close()
