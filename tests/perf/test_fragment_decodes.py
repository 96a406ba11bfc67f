"""A one-chunk session's final flush builds its fragment's index; the commit's gather and
the clean-up after it (which names the fragment's chunk objects for gc) read that index
back from the record just written. Counts, not seconds: neither parses the record nor
hashes and parses the index again in the process that made them (an index's id is its
content's hash, a record is its bytes)."""

from __future__ import annotations

import numpy as np
import zarr

import zarrlake as zl
from zarrlake.format import envelope
from zarrlake.format.fragment import FragmentRecord


def test_a_commit_and_its_clean_up_decode_no_fragment_index_they_built(
    one_chunk_repo: zl.Repo, monkeypatch
) -> None:
    repo = one_chunk_repo
    decoded: list[int] = []
    decode = envelope.decode

    def counted(kind: int, oid: str, data: bytes) -> memoryview:
        decoded.append(kind)
        return decode(kind, oid, data)

    parsed: list[bytes] = []
    partition = bytes.partition

    class Seen(bytes):  # a record's bytes whose head is parsed are partitioned first
        def partition(self, sep: bytes) -> tuple[bytes, bytes, bytes]:
            parsed.append(bytes(self))
            return partition(self, sep)

    decode_record = FragmentRecord.decode.__func__

    def seen(cls: type[FragmentRecord], data: bytes) -> FragmentRecord:
        return decode_record(cls, Seen(data))

    monkeypatch.setattr(envelope, "decode", counted)
    monkeypatch.setattr(FragmentRecord, "decode", classmethod(seen))
    values = np.random.default_rng(5).random((64, 64), dtype=np.float32)
    s = repo.create_session()
    zarr.open_array(s.store, path="a")[2] = values
    s.commit("one chunk")
    s.wait()  # the clean-up
    assert envelope.KIND_FRAGMENT not in decoded, decoded
    assert parsed == []
    head = zarr.open_array(repo.readonly_session().store, path="a")
    np.testing.assert_array_equal(head[2], values)
    np.testing.assert_array_equal(head[1], np.zeros((64, 64), np.float32))
