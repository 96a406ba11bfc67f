"""The statistics columns of a manifest range: what they cost in bytes and that every
layout zarrlake has written still reads (a range written in the first layout, kept as a
file, decodes to numpy's statistics of its chunks)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.format.manifest import ManifestRange

DATA = Path(__file__).parent / "data"


def fixture_values() -> list[tuple[str, object, np.ndarray]]:
    """(key, fill value, values) of the chunks the kept ranges hold: float32 with NaN and
    fill values, an all-NaN chunk, int16 and bool chunks (numpy decides their statistics)."""
    rng = np.random.default_rng(51)
    out: list[tuple[str, object, np.ndarray]] = []
    for k in range(6):
        v = (280 + 10 * rng.standard_normal(64)).astype("f4")
        v[rng.random(64) < 0.1 * k] = np.nan
        v[: k * 3] = -1.0
        out.append((f"f/c/{k}", -1.0, v))
    out.append(("f/c/6", -1.0, np.full(64, np.nan, "f4")))
    out.append(("f/c/7", -1.0, np.arange(32, dtype="f4")))  # another element count
    for k in range(4):
        out.append((f"i/c/{k}", 0, rng.integers(-300, 300, 50).astype("i2")))
    out.append(("b/c/0", False, rng.random(40) < 0.3))
    return out


def _expected(fill: object, v: np.ndarray) -> dict[str, object]:
    """numpy's statistics of one chunk's values."""
    nan = np.isnan(v) if v.dtype.kind == "f" else np.zeros(v.shape, bool)
    real = v[~nan]
    return {
        "count": v.size,
        "nan": int(nan.sum()),
        "fill": int((v == fill).sum()),
        "low": None if not real.size else real.min().item(),
        "high": None if not real.size else real.max().item(),
        "sum": float(real.astype("f8").sum()),
    }


def _check(r: ManifestRange, prefix: str = "") -> None:
    """`r` holds the chunks of `fixture_values` whose keys start with `prefix`, with numpy's
    statistics."""
    want = {
        name.encode(): _expected(fill, v)
        for name, fill, v in fixture_values()
        if name.startswith(prefix)
    }
    assert sorted(want) == [bytes(k) for k in r.keys]
    for i, key in enumerate(r.keys):
        got = r.ref_at(i).stats
        assert got is not None
        exp = want[bytes(key)]
        assert (got.count, got.nan, got.fill) == (exp["count"], exp["nan"], exp["fill"]), key
        assert (got.low, got.high) == (exp["low"], exp["high"]), key
        assert got.sum == exp["sum"] or abs(got.sum - exp["sum"]) <= 1e-12 * abs(exp["sum"])


def test_a_range_written_in_the_first_statistics_layout_still_reads():
    """data/manifest-stats-v1.bin: the chunks of `fixture_values` as inline references with
    their statistics, encoded by zarrlake at 527995c (statistics format 1, uncompressed)."""
    data = (DATA / "manifest-stats-v1.bin").read_bytes()
    oid = hashlib.sha256(data).hexdigest()[:40]
    r = ManifestRange.decode(oid, data)
    _check(r)
    again = ManifestRange.decode(*r.encode())  # and is written again in the current layout
    _check(again)


@pytest.mark.parametrize(
    ("name", "prefix"), [("manifest-stats-v2.bin", ""), ("manifest-stats-v2-float.bin", "f/")]
)
def test_a_range_written_in_the_second_statistics_layout_still_reads(name, prefix):
    """data/manifest-stats-v2*.bin: the chunks of `fixture_values` (all, and the float32
    ones alone, whose min and max are stored as float32) encoded by zarrlake at 1a2340c
    (statistics format 2, a Blosc frame per column); written again in the current layout,
    they read the same and take fewer bytes."""
    data = (DATA / name).read_bytes()
    r = ManifestRange.decode(hashlib.sha256(data).hexdigest()[:40], data)
    _check(r, prefix)
    oid, again = r.encode()
    _check(ManifestRange.decode(oid, again), prefix)
    assert len(again) < len(data)


def test_counts_that_are_mostly_zero_cost_next_to_nothing():
    """4096 chunks of which 20 hold NaN and 40 fill values: the nan and fill columns add
    under 0.3 byte per entry to the compressed records (2 and 4 bytes uncompressed), and
    counts that are all 0 are not stored at all; the range decodes to the same records."""
    from zarrlake.format import columns
    from zarrlake.format import statistics as sf

    n = 4096
    rng = np.random.default_rng(5)
    rec = sf.unknown(n)
    rec["kind"], rec["count"] = sf.FLOAT, 262144
    rec["min"] = sf.bits(sf.FLOAT, rng.normal(230, 5, n).astype("f4"))
    rec["max"] = sf.bits(sf.FLOAT, rng.normal(310, 5, n).astype("f4"))
    rec["sum"] = rng.normal(7e7, 1e5, n)
    plain_rec = rec.copy()
    plain_head, plain = sf.encode(plain_rec)
    assert plain_head is not None
    assert [name for name, _ in plain_head["cols"]] == ["min", "max", "sum"]
    rec["nan"][rng.choice(n, 20, replace=False)] = rng.integers(1, 1000, 20)
    rec["fill"][rng.choice(n, 40, replace=False)] = rng.integers(1, 70000, 40)
    head, cols = sf.encode(rec)
    assert head is not None and head["v"] == sf.VERSION
    assert cols[sf.COLUMN].nbytes - plain[sf.COLUMN].nbytes < 0.3 * n
    assert plain[sf.COLUMN].nbytes <= 16 * n  # min and max as float32, the sum as float64
    for h, c, want in ((head, cols, rec), (plain_head, plain, plain_rec)):
        back = sf.decode(h, c, n, "test")
        assert back is not None and back.tobytes() == want.tobytes()
    refs = [ChunkRef(RefKind.INLINE, bytes(32), 1, data=b"x") for _ in range(3)]
    r = ManifestRange.from_refs([b"k/0", b"k/1", b"k/2"], refs)
    meta, _ = r.columns()  # a range without statistics keeps its earlier encoding
    assert "stats" not in meta
    _, packed = columns.unpack(columns.pack(*r.columns()), "test")
    assert not any(name.startswith("s.") for name in packed)


def test_a_staged_fragment_keeps_the_records_uncompressed():
    """A fragment's index holds its statistics narrowed but not compressed (its commit
    reads them with a copy per field, no decompression) and reads back numpy's."""
    from zarrlake.format import columns, envelope
    from zarrlake.format import statistics as sf
    from zarrlake.format.digest import Hash, digest
    from zarrlake.format.fragment import FragmentIndex
    from zarrlake.vc.statistics import of_chunk

    values = sorted(fixture_values(), key=lambda t: t[0])
    refs = [
        ChunkRef.inline(v.tobytes(), digest(Hash.SHA256, v.tobytes()), of_chunk(v, fill))
        for _, fill, v in values
    ]
    writes = ManifestRange.from_refs([k.encode() for k, _, _ in values], refs)
    oid, data = FragmentIndex(writes).encode()
    meta, cols = columns.unpack(envelope.decode(envelope.KIND_FRAGMENT, oid, data), "test")
    head = meta["writes"]["stats"]
    assert head["plain"] == 1
    width = sum(np.dtype(dt).itemsize for _, dt in head["cols"])
    assert cols["w." + sf.COLUMN].nbytes == width * len(values)
    _check(FragmentIndex.decode(oid, data).writes)


def test_a_constant_sum_keeps_its_sign_and_zero_counts_read_as_zero():
    """Sums of -0.0 in every entry (chunks of negative zeros) and of 0.0 beside them read
    back bit for bit; so do records whose counts are 0 everywhere (not stored)."""
    from zarrlake.format import statistics as sf

    for sums in ([-0.0] * 4, [0.0, -0.0, 0.0, 0.0], [0.0] * 4):
        rec = sf.unknown(4)
        rec["kind"], rec["count"] = sf.FLOAT, 8
        rec["min"] = rec["max"] = sf.bits(sf.FLOAT, np.array(sums))
        rec["sum"] = sums
        head, cols = sf.encode(rec)
        back = sf.decode(head, cols, 4, "test")
        assert back is not None and back.tobytes() == rec.tobytes(), sums
        assert np.signbit(back["sum"]).tolist() == np.signbit(sums).tolist()


def test_a_range_written_in_the_third_statistics_layout_still_reads():
    """data/manifest-stats-v3.bin: the chunks of `fixture_values` encoded by zarrlake at
    517e75c (statistics format 3, the varying fields in one Blosc frame); written again
    they read the same."""
    data = (DATA / "manifest-stats-v3.bin").read_bytes()
    r = ManifestRange.decode(hashlib.sha256(data).hexdigest()[:40], data)
    _check(r)
    oid, again = r.encode()
    _check(ManifestRange.decode(oid, again))


def _records(n: int, seed: int = 3):
    """`n` float records like a measured field's, a NaN count here and there."""
    from zarrlake.format import statistics as sf

    rng = np.random.default_rng(seed)
    rec = sf.unknown(n)
    rec["kind"], rec["count"] = sf.FLOAT, 4096
    rec["min"] = sf.bits(sf.FLOAT, rng.normal(230, 5, n).astype("f4"))
    rec["max"] = sf.bits(sf.FLOAT, rng.normal(310, 5, n).astype("f4"))
    rec["sum"] = rng.normal(1e6, 1e3, n)
    rec["nan"][:: max(1, n // 3)] = 7
    return rec


@pytest.mark.parametrize("n", [1, 2, 5, 7, 8, 9, 65, 300])
def test_small_ranges_keep_their_records_plain_and_every_size_reads_back(n):
    """Ranges under SMALL entries store their records plain (no Blosc frame: it would take
    more bytes than it saves), larger ones compressed; all decode bit for bit."""
    from zarrlake.format import statistics as sf

    rec = _records(n)
    head, cols = sf.encode(rec)
    assert head is not None and head["v"] == sf.VERSION
    assert bool(head.get("plain")) == (n < sf.SMALL)
    if n < sf.SMALL:
        width = sum(np.dtype(dt).itemsize for _, dt in head["cols"])
        assert sum(c.nbytes for c in cols.values()) == width * n
    back = sf.decode(head, cols, n, "test")
    assert back is not None and back.tobytes() == rec.tobytes()


@pytest.mark.parametrize(
    "total", [0.0, -0.0, 12.5, 1e300, float("inf"), float("-inf"), float("nan")]
)
def test_a_one_entry_range_reads_back_bit_for_bit(total):
    """A one-entry range (a one-chunk commit's fragment) is encoded without numpy's
    per-field passes: constants in the header, a sum JSON cannot hold as a column."""
    from zarrlake.format import statistics as sf

    rec = _records(1)
    rec["sum"] = total
    head, cols = sf.encode(rec)
    back = sf.decode(head, cols, 1, "test")
    assert back is not None and back.tobytes() == rec.tobytes()
    unknown = sf.unknown(1)
    assert sf.encode(unknown) == (None, {})


def test_statistics_read_back_are_decoded_only_when_asked():
    """A range read back holds its statistics as stored: listing the objects it refers to
    decodes none, one reference decodes only as far as its entry, and a range written
    again unchanged keeps the stored bytes (nothing decoded, nothing compressed)."""
    from zarrlake.format import statistics as sf
    from zarrlake.vc.reach import manifest_refs

    n = 300
    rec = _records(n)
    refs = [ChunkRef.object(i.to_bytes(32), 100 + i) for i in range(n)]
    keys = [f"a/c/{i:04d}".encode() for i in range(n)]
    written = ManifestRange.from_refs(keys, refs)
    written = ManifestRange(**{**written.__dict__, "stored_stats": rec})
    oid, data = written.encode()
    r = ManifestRange.decode(oid, data)
    stored = r.stored_stats
    assert isinstance(stored, sf.Stored)
    assert len(manifest_refs(r)) == n
    got = r.ref_at(5).stats
    assert got == sf.at(rec, 5)
    assert stored._records is None  # (nothing decoded whole)
    assert r.encode() == (oid, data)  # carried through as stored
    assert stored._records is None
    assert r.stats is not None and r.stats.tobytes() == rec.tobytes()
    assert [ref.stats for ref in r.refs(slice(290, 300))] == [
        sf.at(rec, i) for i in range(290, 300)
    ]


@pytest.mark.parametrize("same_layout", [True, False])
def test_a_commit_gathers_staged_records_as_stored(same_layout):
    """Entries picked from staged fragments whose records share a layout are gathered
    narrowed, as stored, and compressed without being decoded; fragments whose layouts
    differ are decoded. Either way the manifest range reads back every picked record."""
    from zarrlake.format import statistics as sf
    from zarrlake.format.fragment import FragmentIndex
    from zarrlake.format.manifest import take_from

    n = 200
    parts, records = [], []
    for j in range(3):
        rec = _records(n, seed=j)
        if not same_layout and j == 1:
            rec["fill"][::7] = 3  # a field the other fragments hold as a constant 0
        keys = [f"a/c/{j}.{i:04d}".encode() for i in range(n)]
        refs = [ChunkRef.object((j * n + i).to_bytes(32), 10) for i in range(n)]
        writes = ManifestRange.from_refs(keys, refs)
        writes = ManifestRange(**{**writes.__dict__, "stored_stats": rec})
        index = FragmentIndex.decode(*FragmentIndex(writes).encode())
        parts.append(index.writes)
        records.append(rec)
    positions = np.random.default_rng(1).permutation(3 * n)[:450]
    picked = take_from(parts, positions)
    assert isinstance(picked.stored_stats, sf.Stored) == same_layout
    want = np.concatenate(records)[positions]
    assert picked.stats is not None and picked.stats.tobytes() == want.tobytes()
    oid, data = picked.encode()
    back = ManifestRange.decode(oid, data)
    assert back.stats is not None and back.stats.tobytes() == want.tobytes()
    head = back.stored_stats.head  # type: ignore[union-attr]
    assert not head.get("plain")  # compressed in the manifest


def test_a_reference_for_reading_bytes_decodes_no_statistics(monkeypatch):
    """A reference built for a read of the chunk's bytes (stats=False, as a read-only view
    builds it) leaves the range's statistics as stored; asked with them, it decodes them."""
    from zarrlake.format import statistics as sf

    n = 50
    rec = _records(n)
    keys = [f"a/c/{i:04d}".encode() for i in range(n)]
    written = ManifestRange.from_refs(keys, [ChunkRef.object(i.to_bytes(32), i) for i in range(n)])
    written = ManifestRange(**{**written.__dict__, "stored_stats": rec})
    r = ManifestRange.decode(*written.encode())
    decoded: list[slice] = []
    part = sf.Stored.part
    monkeypatch.setattr(sf.Stored, "part", lambda self, p: decoded.append(p) or part(self, p))
    bare = r.get(keys[7], stats=False)
    assert bare == ChunkRef.object((7).to_bytes(32), 7) and bare.stats is None
    assert decoded == []
    assert r.get(keys[7]).stats == sf.at(rec, 7)
    assert decoded == [slice(7, 8)]


def _range_of(rec: np.ndarray, start: int = 0) -> ManifestRange:
    """A range of len(rec) chunk objects whose statistics are `rec`, keys from `start`."""
    from zarrlake.format import statistics as sf

    keys = [f"a/c/{k:05d}".encode() for k in range(start, start + len(rec))]
    refs = [
        ChunkRef(RefKind.OBJECT, bytes([k % 256]) * 32, 100 + k, stats=sf.at(rec, i))
        for i, k in enumerate(range(start, start + len(rec)))
    ]
    return ManifestRange.from_refs(keys, refs)


@pytest.mark.parametrize("replace", [True, False])
def test_a_range_a_small_commit_rewrote_keeps_its_records_plain(replace):
    """A range of SMALL entries or more is written with its records compressed; a few
    writes set into it (a one-chunk commit's, replacing an entry or adding one) leave
    them plain, as the next small commit would decode and compress them all again; a
    large write compresses them again. Every record reads back bit for bit."""
    from zarrlake.format import statistics as sf

    n = 3 * sf.SMALL
    rec = _records(n + 1, seed=9)
    base = ManifestRange.decode(*_range_of(rec[:n]).encode())
    assert not base.stored_stats.head.get("plain")  # (compressed: n >= SMALL)
    one = _range_of(rec[n:], start=5 if replace else n)
    (piece,) = base.apply(one, np.zeros(0, "S1"))
    got = ManifestRange.decode(*piece.encode())
    assert got.stored_stats.head.get("plain") == 1
    want = rec[:n].copy()
    if replace:
        want[5] = rec[n]
    else:
        want = rec
    assert got.stats.tobytes() == want.tobytes()
    many = _range_of(_records(sf.SMALL + 1, seed=10), start=0)  # more than FEW writes
    (bulk,) = got.apply(many, np.zeros(0, "S1"))
    again = ManifestRange.decode(*bulk.encode())
    assert not again.stored_stats.head.get("plain")
    assert len(again) == len(want)
