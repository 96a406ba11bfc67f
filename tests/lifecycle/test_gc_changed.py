"""GcState.changed: the candidates registered again (or anew) since `candidates()` read
them, found by comparing stored rows as bytes: unchanged rows are not decoded (a collector
re-checks every due candidate before deleting)."""

from __future__ import annotations

import secrets

import pytest

import zarrlake as zl
from zarrlake.vc import gc_protocol
from zarrlake.vc.gc_protocol import GcState


def test_changed_decodes_only_rows_written_since_the_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repo = zl.Repo.create(f"memory://{secrets.token_hex(6)}")
    state = GcState(repo._context)
    state.clock = lambda: 100.0
    keys = [f"chunks/{i:04x}" for i in range(50)]
    state.add({}, [(k, 16) for k in keys])
    read = state.candidates()
    assert len(read) == 50
    decoded: list[int] = []
    decode = gc_protocol._decode_candidates

    def counting(rows, out):  # type: ignore[no-untyped-def]
        decoded.append(len(rows))
        decode(rows, out)

    monkeypatch.setattr(gc_protocol, "_decode_candidates", counting)
    assert state.changed(keys) == {}
    assert sum(decoded) == 0  # nothing written since: nothing decoded

    state.clock = lambda: 200.0
    state.add({}, [(keys[7], 16), ("chunks/new", 3)])  # registered again, and anew
    got = state.changed([*keys, "chunks/new"])
    assert sorted(got) == [keys[7], "chunks/new"]
    assert got[keys[7]].first_seen == 200.0 and read[keys[7]].first_seen == 100.0
    assert sum(decoded) == 2
    # known() still decodes every row asked for
    assert state.known(keys[:3]) == {k: read[k] for k in keys[:3]}


def test_changed_reports_the_rows_read_that_were_dropped_since() -> None:
    """A candidate another collector dropped after this one read it (found live by a
    collector whose lock was taken over) is reported in `gone`, not silently left due."""
    repo = zl.Repo.create(f"memory://{secrets.token_hex(6)}")
    state = GcState(repo._context)
    state.clock = lambda: 100.0
    keys = [f"chunks/{i:04x}" for i in range(5)]
    state.add({}, [(k, 16) for k in keys])
    state.candidates()
    other = GcState(repo._context)
    other.drop([keys[1], keys[3]])
    gone: list[str] = []
    assert state.changed([*keys, "chunks/never"], gone) == {}
    assert gone == [keys[1], keys[3]]  # not "chunks/never": this run never read a row for it
