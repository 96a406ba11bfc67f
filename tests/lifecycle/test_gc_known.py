"""GcState.known: the recorded candidates among some keys, from one scan bounded by them,
as the full listing of candidates would give them."""

from __future__ import annotations

import secrets

import zarrlake as zl
from zarrlake.vc.gc_protocol import GcState, _common_prefix


def test_known_gives_the_candidates_among_the_keys() -> None:
    repo = zl.Repo.create(f"memory://{secrets.token_hex(6)}")
    state = GcState(repo._context)
    state.add(
        {},
        [("chunks/aa1", 1), ("chunks/ab2", 2), ("changes/x", None), ("chunks/b", 3)],
        {"chunks/b": (0, 10, "idx")},
    )
    everything = state.candidates()
    for keys in (
        [],
        ["chunks/aa1"],
        ["chunks/ab2", "chunks/zz", "changes/x"],
        ["chunks/b", "chunks/b"],
        ["chunks/a", "chunks/aa"],  # prefixes of a candidate are not it
        list(everything),
    ):
        assert state.known(keys) == {k: everything[k] for k in keys if k in everything}
    assert state.known(["chunks/b"])["chunks/b"].index == (0, 10, "idx")


def test_common_prefix() -> None:
    assert _common_prefix(b"c/chunks/ab", b"c/chunks/b") == b"c/chunks/"
    assert _common_prefix(b"c/x", b"c/x") == b"c/x"
    assert _common_prefix(b"", b"c") == b""
