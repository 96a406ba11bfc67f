"""Whether an unfinished writer's part was written again: the rule that lets a commit leave
out a failed or dead worker's work once a finished worker of the same session rewrote it
(a new worker re-running the part, Dask retrying the task, a job re-run after a crash).

A key the unfinished writer staged counts as rewritten when a finished writer's change of
it is the same (the same bytes, or both deletes) or was made at or after the unfinished
writer's own (fragments and markers carry the time they were made; metadata documents the
metastore's version). What it never flushed is known only by the first keys of each
unflushed batch (its marker records them, a failing writer records those it gives up):
those are checked like the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from zarrlake.format.fragment import FragmentIndex, FragmentRecord
from zarrlake.format.shard import SEP, shard_key_of
from zarrlake.txn.staging import State, WriterState, counts

_Change = tuple[float, tuple[bytes, int] | None]
"""(when, (digest, length) of the bytes written, or None for a delete)."""


@dataclass(frozen=True)
class Part:
    """What one failed or gone writer staged, against what finished writers wrote since."""

    writer: str
    staged: int  # chunk changes and documents it made durable
    missing: list[str] = field(default_factory=list)  # its keys nobody wrote again since
    unknown: bool = False  # it held unflushed writes whose keys were never recorded
    unflushed: bool = False  # it held writes it never flushed (lost, whatever is chosen)
    rewritten_keys: int = 0  # of its keys, those written again

    @property
    def superseded(self) -> bool:
        """Every key it staged was written again: its work can be left out."""
        return not self.missing and not self.unknown


def parts(
    state: State, writers: Iterable[str], read_index: Callable[[FragmentRecord], FragmentIndex]
) -> dict[str, Part]:
    """The `Part` of each of `writers` (failed or gone ones), reading the indexes of their
    fragments and of the fragments of finished writers that touch the same keys."""
    wanted = set(writers)
    if not wanted:
        return {}
    finished = {
        w
        for w, rec in state.writers.items()
        if rec.state == WriterState.FINISHED and w not in wanted
        if counts(w, rec.tag, state.accepted)
    }
    own = {w: _changes(state, w, read_index) for w in wanted}
    firsts = {w: _first_keys(state, w) for w in wanted}
    keys = {k for c in own.values() for k in c} | {k for f in firsts.values() for k in f[0]}
    later = _latest(state, finished, keys, read_index)
    shards = _by_shard(later)
    out = {}
    for w in wanted:
        missing: set[str] = set()
        for key, (at, sig) in own[w].items():
            got = later.get(key)
            if got is None or (got[0] < at and got[1] != sig):
                missing.add(key)
        meta = state.meta_by_writer.get(w, {})
        for key, (content, version) in meta.items():
            if not _document_rewritten(state, finished, key, content, version):
                missing.add(key)
        first, since, unknown = firsts[w]
        for key in first:
            at = shards.get(shard_key_of(key))
            if at is None or at < since[key]:
                missing.add(key)
        rec = state.writers.get(w)
        unflushed = any(m.writer == w for m in state.unflushed) or bool(rec and rec.dropped)
        known = len(set(own[w]) | set(meta) | set(first))
        out[w] = Part(
            w, len(own[w]) + len(meta), sorted(missing), unknown, unflushed, known - len(missing)
        )
    return out


def _changes(
    state: State, writer: str, read_index: Callable[[FragmentRecord], FragmentIndex]
) -> dict[str, _Change]:
    """`writer`'s latest change of each chunk key it flushed."""
    out: dict[str, _Change] = {}
    for rec in sorted((r for r in state.fragments if r.writer == writer), key=lambda r: r.seq):
        index = read_index(rec)
        w = index.writes
        for k, digest, length in zip(w.keys.tolist(), w.digest, w.length.tolist(), strict=True):
            out[k.decode()] = (rec.at, (digest.tobytes(), length))
        for k in index.deletes.tolist():
            out[k.decode()] = (rec.at, None)
    return out


def _first_keys(state: State, writer: str) -> tuple[list[str], dict[str, float], bool]:
    """(keys, when each was written, unknown?) of the writes `writer` never flushed: the
    first keys of each unflushed batch, and those a failing writer gave up."""
    keys: list[str] = []
    since: dict[str, float] = {}
    unknown = False
    for m in state.unflushed:
        if m.writer != writer:
            continue
        if m.keys is None:
            unknown = True
            continue
        for k in m.keys:
            keys.append(k)
            since[k] = max(since.get(k, 0.0), m.since)
    rec = state.writers.get(writer)
    if rec is not None and rec.dropped:
        for k in rec.dropped:
            keys.append(k)
            since[k] = max(since.get(k, 0.0), rec.since)
    return keys, since, unknown


def _latest(
    state: State,
    writers: set[str],
    keys: set[str],
    read_index: Callable[[FragmentRecord], FragmentIndex],
) -> dict[str, _Change]:
    """The latest change `writers` made of each key of `keys`, or of an inner chunk of a
    shard key among them (inner chunks are what a shard's write stages)."""
    if not keys or not writers:
        return {}
    wanted = np.array(sorted({k.encode() for k in keys} | {shard_key_of(k).encode() for k in keys}))
    out: dict[str, _Change] = {}

    def note(key: str, change: _Change) -> None:
        old = out.get(key)
        if old is None or change[0] >= old[0]:
            out[key] = change

    for rec in state.fragments:
        if rec.writer not in writers:
            continue
        index = read_index(rec)
        written = index.writes.keys
        hit = np.isin(written, wanted)
        if len(written) and np.char.count(written, SEP.encode()).any():  # inner chunks
            shards = np.array([shard_key_of(bytes(k).decode()).encode() for k in written])
            hit |= np.isin(shards, wanted)
        w = index.writes
        for i in np.flatnonzero(hit).tolist():
            note(bytes(written[i]).decode(), (rec.at, (w.digest[i].tobytes(), int(w.length[i]))))
        for k in index.deletes[np.isin(index.deletes, wanted)]:
            note(bytes(k).decode(), (rec.at, None))
    return out


def _by_shard(changes: dict[str, _Change]) -> dict[str, float]:
    """When each key (an inner chunk counting for its shard) was last written."""
    out: dict[str, float] = {}
    for key, (at, _) in changes.items():
        shard = shard_key_of(key)
        out[shard] = max(out.get(shard, at), at)
    return out


def _document_rewritten(
    state: State, finished: set[str], key: str, content: bytes, version: int
) -> bool:
    """Whether a finished writer staged metadata document `key` alike, or after."""
    for w in finished:
        got = state.meta_by_writer.get(w, {}).get(key)
        if got is not None and (got[0] == content or got[1] > version):
            return True
    return False
