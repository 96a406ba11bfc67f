"""The manifest range algebra a commit runs (take_from, RangeView, apply) against a plain
dict of references: every kind of reference (object, inline, pack location, virtual with
its identity), one or several source ranges, keys of different lengths. The fast paths
for one source and for two ranges laid end to end must give what the dict says, and what
is encoded must hold no inline byte or location that no entry uses."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from zarrlake.format import columns
from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.format.manifest import ManifestRange, RangeView, take_from

KEYS = [f"a/c/{i}/{j}".encode() for i in range(12) for j in range(0, 30, 7)]


@st.composite
def refs(draw: st.DrawFn) -> ChunkRef:
    kind = draw(st.sampled_from(["object", "inline", "pack", "virtual"]))
    digest = draw(st.binary(min_size=32, max_size=32))
    if kind == "object":
        return ChunkRef.object(digest, draw(st.integers(1, 1 << 20)))
    if kind == "inline":
        return ChunkRef.inline(draw(st.binary(min_size=1, max_size=9)), digest)
    n = draw(st.integers(0, 3))
    if kind == "pack":
        return ChunkRef(RefKind.LOCATION, digest, 5, draw(st.integers(0, 99)), f"packs/p{n}")
    return ChunkRef.virtual(f"file:///d/f{n}.nc", draw(st.integers(0, 99)), 7, f"size={n}")


@st.composite
def ranges(draw: st.DrawFn) -> dict[bytes, ChunkRef]:
    keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=12))
    return {k: draw(refs()) for k in keys}


def build(entries: dict[bytes, ChunkRef]) -> ManifestRange:
    keys = sorted(entries)
    return ManifestRange.from_refs(keys, [entries[k] for k in keys])


def as_dict(r: ManifestRange) -> dict[bytes, ChunkRef]:
    return {bytes(k): r.ref_at(i) for i, k in enumerate(r.keys)}


def assert_compact(r: ManifestRange) -> None:
    inline = r.kind == 1
    assert int(r.length[inline].sum()) == len(r.inline)
    assert sorted(set(r.loc[r.loc >= 0].tolist())) == list(range(len(r.locations)))


@settings(max_examples=150, deadline=None)
@given(st.lists(ranges(), min_size=1, max_size=6), st.data())
def test_take_from_picks_what_the_dict_holds(sources: list[dict], data: st.DataObject) -> None:
    built = [build(s) for s in sources]
    laid = [ref for s in sources for _, ref in sorted(s.items())]
    keys = [k for s in sources for k in sorted(s)]
    if not laid:
        return
    positions = data.draw(st.lists(st.integers(0, len(laid) - 1), max_size=8))
    got = take_from(built, np.array(positions, np.int64))
    assert [bytes(k) for k in got.keys] == [keys[p] for p in positions]
    assert [got.ref_at(i) for i in range(len(got))] == [laid[p] for p in positions]
    assert int(got.length[got.kind == 1].sum()) == len(got.inline)  # only picked bytes


@settings(max_examples=150, deadline=None)
@given(ranges(), ranges(), ranges(), st.data())
def test_apply_sets_and_deletes_as_the_dict_does(
    base: dict, first: dict, second: dict, data: st.DataObject
) -> None:
    """Writes from one or two staged ranges (a view in key order, later wins as the gather
    leaves it: one entry per key), deletes of keys present or not."""
    writes = dict(first) | {k: v for k, v in second.items() if k not in first}
    sources = [build(first), build(second)]
    order = sorted(writes)
    pos = [
        sorted(first).index(k) if k in first else len(first) + sorted(second).index(k)
        for k in order
    ]
    view = RangeView(sources, np.array(pos, np.int64), columns.keys_array(order))
    deletes = sorted(set(data.draw(st.lists(st.sampled_from(KEYS), max_size=5))) - set(writes))
    expected = {k: v for k, v in base.items() if k not in deletes} | writes
    pieces = list(build(base).apply(view, columns.keys_array(deletes)))
    got: dict[bytes, ChunkRef] = {}
    for piece in pieces:
        assert_compact(piece)
        got |= as_dict(piece)
    assert got == expected
    for piece in pieces:  # what is stored reads back the same
        oid, blob = piece.encode()
        assert as_dict(ManifestRange.decode(oid, blob)) == as_dict(piece)


def _staged(values: list[np.ndarray], start: int) -> ManifestRange:
    """A staged fragment's writes (as a commit reads them back: plain statistics) of chunks
    holding `values`, under keys numbered from `start`."""
    from zarrlake.format import statistics as sf
    from zarrlake.format.fragment import FragmentIndex

    keys = [f"a/c/{start + i:05d}".encode() for i in range(len(values))]
    refs = [
        ChunkRef(
            RefKind.OBJECT,
            bytes([i % 256]) * 32,
            v.nbytes,
            stats=sf.ChunkStats(
                sf.FLOAT,
                v.size,
                0,
                int((v == 0).sum()),
                int(sf.bits(sf.FLOAT, v.min())),
                int(sf.bits(sf.FLOAT, v.max())),
                float(v.astype(np.float64).sum()),
            ),
        )
        for i, v in enumerate(values)
    ]
    oid, data = FragmentIndex(ManifestRange.from_refs(keys, refs)).encode()
    return FragmentIndex.decode(oid, data).writes


def test_a_pick_reads_only_the_fragments_holding_its_entries() -> None:
    """Entries picked from some of many staged fragments: their statistics are gathered as
    the fragments store them (not decoded and encoded again) when those fragments share a
    layout, whatever the layout of fragments the pick does not read; the records are the
    chunks' own, computed here with numpy."""
    from zarrlake.format import statistics as sf

    rng = np.random.default_rng(7)
    chunks = [rng.random(16, dtype=np.float32) + 1 for _ in range(60)]
    chunks[25][3] = 0.0  # a fill value: the middle fragments store `fill` as a column
    fragments = [_staged(chunks[i : i + 10], i) for i in range(0, 60, 10)]
    assert fragments[2].stored_stats.layout_key() != fragments[0].stored_stats.layout_key()
    positions = np.array([59, 1, 0, 58, 5, 52], np.int64)  # the first and last fragment's
    got = take_from(fragments, positions)
    assert isinstance(got.stored_stats, sf.Stored)  # as stored: nothing decoded
    records = got.stats
    assert records is not None
    for row, p in enumerate(positions.tolist()):
        v = chunks[p]
        assert bytes(got.keys[row]) == f"a/c/{p:05d}".encode()
        assert records["count"][row] == v.size and records["fill"][row] == 0
        assert sf.values(sf.FLOAT, records["min"][row : row + 1])[0] == v.min()
        assert sf.values(sf.FLOAT, records["max"][row : row + 1])[0] == v.max()
        assert records["sum"][row] == v.astype(np.float64).sum()
    both = take_from(fragments, np.array([0, 25, 59], np.int64))  # the middle one too
    assert both.stats is not None and both.stats["fill"].tolist() == [0, 1, 0]


@st.composite
def located(draw: st.DrawFn) -> ChunkRef:
    """A reference into a pack or a chunk object (what a one-chunk commit sets), with the
    chunk's statistics or none."""
    from zarrlake.format import statistics as sf

    digest = draw(st.binary(min_size=32, max_size=32))
    stats = None
    if draw(st.booleans()):
        low, high = sorted(draw(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=2)))
        stats = sf.ChunkStats(
            sf.FLOAT,
            draw(st.integers(1, 4096)),
            0,
            draw(st.integers(0, 3)),
            int(sf.bits(sf.FLOAT, np.float64(low))),
            int(sf.bits(sf.FLOAT, np.float64(high))),
            draw(st.floats(-1e9, 1e9)),
        )
    if draw(st.booleans()):
        return ChunkRef(RefKind.OBJECT, digest, draw(st.integers(1, 1 << 20)), stats=stats)
    n = draw(st.integers(0, 4))
    return ChunkRef(
        RefKind.LOCATION, digest, 5, draw(st.integers(0, 99)), f"packs/p{n}", stats=stats
    )


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(KEYS), located(), min_size=1, max_size=40),
    st.dictionaries(st.sampled_from([*KEYS, b"a/c/99/99"]), located(), min_size=1, max_size=6),
)
def test_a_few_writes_into_a_range_set_what_the_dict_holds(base: dict, writes: dict) -> None:
    """A handful of writes into a range (replacing entries, adding new ones, with or
    without statistics on either side): the entries the dict holds, with their statistics,
    no location left that no entry uses, and the same after encoding."""
    expected = base | writes
    staged = build(writes)
    view = RangeView([staged], np.arange(len(writes), dtype=np.int64), staged.keys)
    (got,) = build(base).apply(view, columns.keys_array([]))
    assert_compact(got)
    assert as_dict(got) == expected
    oid, blob = got.encode()
    assert as_dict(ManifestRange.decode(oid, blob)) == expected


@settings(max_examples=100, deadline=None)
@given(ranges(), st.lists(st.sampled_from([*KEYS, b"a", b"a/c/9/99", b"b/c/0/0"]), max_size=6))
def test_one_key_lookups_find_what_the_dict_holds(entries: dict, probes: list[bytes]) -> None:
    """A lookup of one key (bisecting the key column, keys of several widths, probes that
    sort before, between and after them) finds the reference the dict holds, built with or
    without statistics; so does a key_slice over the same keys."""
    r = build(entries)
    for key in [*entries, *probes]:
        want = entries.get(key)
        assert r.get(key) == want
        bare = r.get(key, stats=False)
        assert bare == want and (bare is None or bare.stats is None)
        part = r.key_slice(key, None)
        assert [bytes(k) for k in r.keys[part]] == sorted(k for k in entries if k >= key)
