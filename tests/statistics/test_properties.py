"""Property: after any sequence of writes, overwrites, deletes, merges, rebases, reverts and
resets, the statistics of every chunk of every array on main equal numpy's on its values, on
SQLite and on the bucket metastore: float and integer dtypes, NaN and fill values, chunks at
the array's edges, and the inner chunks of shards. The expected values come from a numpy model
of what was written, never from zarrlake."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zarrlake as zl
from tests.statistics.model import Spec, assert_matches

SPECS = (
    Spec("f", (7, 9), (3, 4), "float32", float("nan")),
    Spec("i", (7, 9), (3, 4), "int16", -1),
    Spec("s", (8, 12), (2, 3), "float64", 0.0, shards=(4, 6)),
    Spec("u", (10,), (4,), "uint8", 7),
)
BY_NAME = {s.name: s for s in SPECS}


def _values(spec: Spec, shape: tuple[int, ...], seed: int, kind: str) -> np.ndarray:
    """Values to write: random ones sprinkled with NaN (floats) and the fill value, or all
    fill value ("fill": zarr deletes the chunks that become all fill)."""
    if kind == "fill":
        return np.full(shape, spec.fill, dtype=spec.dtype)
    rng = np.random.default_rng(seed)
    if np.dtype(spec.dtype).kind == "f":
        out = rng.normal(0, 100, shape).astype(spec.dtype)
        out[rng.random(shape) < 0.15] = np.nan
    else:
        info = np.iinfo(spec.dtype)
        out = rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True)
        out = out.astype(spec.dtype)
    out[rng.random(shape) < 0.15] = spec.fill
    return out


@st.composite
def boxes(draw, spec: Spec) -> tuple[slice, ...]:
    out = []
    for n in spec.shape:
        a = draw(st.integers(0, n - 1))
        b = draw(st.integers(a + 1, n))
        out.append(slice(a, b))
    return tuple(out)


@st.composite
def writes(draw) -> tuple[str, tuple[slice, ...], int, str]:
    spec = BY_NAME[draw(st.sampled_from(sorted(BY_NAME)))]
    kind = draw(st.sampled_from(["values", "values", "fill"]))
    return spec.name, draw(boxes(spec)), draw(st.integers(0, 2**32 - 1)), kind


STEPS = st.one_of(
    st.tuples(st.just("write"), writes()),
    st.tuples(st.just("delete"), st.sampled_from(sorted(BY_NAME)), st.integers(0, 99)),
    st.tuples(st.just("merge"), writes(), writes()),
    st.tuples(st.just("rebase"), writes(), writes()),
    st.tuples(st.just("revert"), st.none()),
    st.tuples(st.just("reset"), st.integers(0, 99)),
)

State = dict[str, np.ndarray]


class World:
    """A repository and the numpy model of main: its first-parent history, one state per
    commit, so that a revert (back to the tip's first parent) and a reset are modelled."""

    def __init__(self, repo: zl.Repo) -> None:
        self.repo = repo
        s = repo.create_session()
        for spec in SPECS:
            spec.create(s.store)
        self.history: list[tuple[str, State]] = [
            (s.commit("arrays"), {s.name: s.blank() for s in SPECS})
        ]

    @property
    def now(self) -> State:
        return self.history[-1][1]

    def fork(self) -> State:
        return {k: v.copy() for k, v in self.now.items()}

    def apply(self, state: State, session: zl.Session, write) -> None:
        name, box, seed, kind = write
        spec = BY_NAME[name]
        values = _values(spec, tuple(b.stop - b.start for b in box), seed, kind)
        zarr.open_array(session.store, path=name)[box] = values
        state[name][box] = values

    def step(self, step) -> None:
        op = step[0]
        if op == "write":
            state, s = self.fork(), self.repo.create_session()
            self.apply(state, s, step[1])
            self.commit(s, state)
        elif op == "delete":  # a chunk key deleted through the store (a shard's: its inner chunks)
            spec = BY_NAME[step[1]]
            shard = spec.shards or spec.chunks
            grid = [-(-n // c) for n, c in zip(spec.shape, shard, strict=True)]
            at = np.unravel_index(step[2] % int(np.prod(grid)), grid)
            state, s = self.fork(), self.repo.create_session()
            key = zarr.open_array(s.store, path=spec.name).metadata.encode_chunk_key(at)
            s.delete(f"{spec.name}/{key}")
            box = tuple(slice(k * c, (k + 1) * c) for k, c in zip(at, shard, strict=True))
            state[spec.name][box] = spec.fill
            self.commit(s, state)
        elif op == "merge":  # a branch writes one array while main writes another
            ours, theirs = step[1], step[2]
            if ours[0] == theirs[0]:
                return
            branch = f"b{uuid.uuid4().hex[:8]}"
            self.repo.create_branch(branch)
            on_branch, s = self.fork(), self.repo.create_session(branch)
            self.apply(on_branch, s, theirs)
            if not self.commit(s, on_branch, record=False):
                return
            state, s = self.fork(), self.repo.create_session()
            self.apply(state, s, ours)
            self.commit(s, state)
            merged = {k: v.copy() for k, v in self.now.items()}
            merged[theirs[0]] = on_branch[theirs[0]]
            head = self.repo.merge(branch, target="main", fast_forward="never")
            self.history.append((head, merged))
        elif op == "rebase":  # two sessions from one base; the second commit rebases
            first, second = step[1], step[2]
            if first[0] == second[0]:
                return
            a, b = self.repo.create_session(), self.repo.create_session()
            state_a, state_b = self.fork(), self.fork()
            self.apply(state_a, a, first)
            self.apply(state_b, b, second)
            self.commit(a, state_a)
            both = {k: v.copy() for k, v in self.now.items()}
            both[second[0]] = state_b[second[0]]
            self.commit(b, both)
        elif op == "revert" and len(self.history) > 1:
            head = self.repo.revert("main", target="main")
            self.history.append((head, self.history[-2][1]))
        elif op == "reset":
            k = step[1] % len(self.history)
            self.repo.reset_branch("main", self.history[k][0])
            del self.history[k + 1 :]

    def commit(self, session: zl.Session, state: State, *, record: bool = True) -> bool:
        """Commit `session` (main's history gains `state`); False when it changed nothing."""
        try:
            head = session.commit("step")
        except zl.NoChangesError:
            session.abandon()
            return False
        if record:
            self.history.append((head, state))
        return True

    def check(self, what: str) -> None:
        for spec in SPECS:
            table = self.repo.chunk_stats(spec.name, "main")
            assert_matches(table, spec, self.now[spec.name], f"{spec.name} after {what}")


@pytest.mark.slow(seconds=15)
@pytest.mark.parametrize("metastore", ["sqlite", "s3-bucket"])
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEPS, min_size=1, max_size=6))
def test_statistics_equal_numpy_after_any_history(request, tmp_path, metastore, steps):
    if metastore == "sqlite":
        repo = zl.Repo.create(tmp_path / f"r{uuid.uuid4().hex[:8]}")
    else:
        from tests.fixtures.s3 import s3_client, s3_options

        endpoint = request.getfixturevalue("s3_server")
        bucket = f"zarrlake-stats-{uuid.uuid4().hex[:12]}"
        s3_client(endpoint).create_bucket(Bucket=bucket)
        repo = zl.Repo.create(f"s3://{bucket}/repo", storage_options=s3_options(endpoint))
    world = World(repo)
    world.check("creation")
    for i, step in enumerate(steps):
        world.step(step)
        world.check(f"step {i}: {step[0]}")
    repo.close()
