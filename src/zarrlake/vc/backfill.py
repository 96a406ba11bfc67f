"""Statistics for chunks written without them (before statistics existed, with them off,
virtual chunks): read and decode each such chunk of one array, and commit the references
with their statistics on a branch, in one commit that changes no chunk and no document
(its change set is empty: diffs, blame and conflicts see nothing).

The commit lands as a merge does (vc/merge.py): built on the branch head, moved by
compare-and-swap, built again on a moved head, where only chunks not seen yet are read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np

from zarrlake._util import runtime
from zarrlake.errors import NotFoundError
from zarrlake.format import statistics as sf
from zarrlake.format.commit import CommitRecord
from zarrlake.format.manifest import ManifestRange, take_from
from zarrlake.format.shard import split_inner_key
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.vc.chunk_keys import is_array_doc
from zarrlake.vc.commit_protocol import ChangeTable, apply_changes, change_set
from zarrlake.vc.merge import History
from zarrlake.vc.objects import Objects
from zarrlake.vc.snapshot_view import SnapshotView
from zarrlake.vc.statistics import decoded_stats, layout_of, usable

BATCH = 256
"""Chunks read and decoded together."""


@dataclass(frozen=True)
class BackfillReport:
    """What `Repo.backfill_chunk_stats` did: the commit it made (None: no chunk lacked
    statistics, or none could be computed), the chunks it gave statistics, and those it
    could not (bytes their codecs do not decode here)."""

    commit: str | None
    chunks: int
    skipped: int

    def to_json(self) -> dict:
        """The report as a plain dict, for `--json` output."""
        return asdict(self)


def backfill(
    history: History,
    branch: str,
    path: str,
    *,
    message: str,
    author: str | None,
    on_progress: Callable[[int, int], None] | None = None,
) -> BackfillReport:
    """Give the chunks of array `path` on `branch` that lack statistics theirs, in one
    commit (see the module); `on_progress(done, total)` follows the chunks read."""
    objects = history.objects
    found: dict[tuple[bytes, bytes], sf.ChunkStats | None] = {}  # (key, digest): stats
    made: list[BackfillReport] = []

    def build(head: str) -> str:
        root = history.root(head)
        doc = root.meta.get(f"{path}/zarr.json" if path else "zarr.json")
        if doc is None or not is_array_doc(doc):
            raise NotFoundError(
                f"no array {path!r} on branch {branch!r}; run `zarrlake ls {branch}` to see "
                "its arrays"
            )
        todo = _lacking(objects, root, path, doc)
        _compute(objects, doc, todo, found, on_progress)
        stats = [found.get(_ident(todo, i)) for i in range(len(todo))]
        got = [i for i, s in enumerate(stats) if s is not None]
        made[:] = [BackfillReport(None, len(got), len(todo) - len(got))]
        if not got:
            return head
        writes = todo.take(np.array(got, np.int64))
        writes = replace(writes, stored_stats=sf.records([stats[i] for i in got]))
        table = ChangeTable(writes=writes)
        new_root, blobs = apply_changes(objects, root, table)
        snapshot_id, root_blob = objects.encode(new_root)
        changes_id, changes_blob = objects.encode(change_set(ChangeTable(), root.meta))
        record = CommitRecord(
            (head,), snapshot_id, changes_id, message, author, runtime.now(), None
        )
        commit_id, record_blob = objects.encode(record)
        objects.put_all([*blobs, root_blob, changes_blob, record_blob])
        made[:] = [BackfillReport(commit_id, len(got), len(todo) - len(got))]
        return commit_id

    landed = history.land(branch, build)
    done = made[0] if made else BackfillReport(None, 0, 0)
    return replace(done, commit=landed if done.commit is not None else None)


def _lacking(objects: Objects, root: SnapshotRoot, path: str, doc: bytes) -> ManifestRange:
    """The entries of array `path` whose statistics are unknown (or of another dtype or
    chunk shape than the array's now), each a chunk of the array: an inner chunk of a
    sharded one (a shard stored whole has no place for them)."""
    layout = layout_of(doc)
    view = SnapshotView(objects, root, "")
    pieces = [p for p in view.entries_under(f"{path}/".encode() if path else b"") if len(p)]
    if not pieces:
        return ManifestRange.empty()
    picked: list[np.ndarray] = []
    base = 0
    for piece in pieces:
        records = piece.stats if piece.stats is not None else sf.unknown(len(piece))
        lacking = ~usable(layout, records)
        if layout.per_shard is not None:  # only inner chunks (keys holding the separator)
            lacking &= np.char.find(piece.keys, b"\x1f") >= 0
        picked.append(np.flatnonzero(lacking) + base)
        base += len(piece)
    return take_from(pieces, np.concatenate(picked))


def _ident(entries: ManifestRange, i: int) -> tuple[bytes, bytes]:
    return bytes(entries.keys[i]), entries.digest[i].tobytes()


def _compute(
    objects: Objects,
    doc: bytes,
    todo: ManifestRange,
    found: dict[tuple[bytes, bytes], sf.ChunkStats | None],
    on_progress: Callable[[int, int], None] | None,
) -> None:
    """The statistics of each entry of `todo` not in `found` yet, read and decoded a batch
    at a time on the I/O pool, into `found` (None: its bytes do not decode)."""
    new = [i for i in range(len(todo)) if _ident(todo, i) not in found]

    def one(i: int) -> sf.ChunkStats | None:
        key = bytes(todo.keys[i]).decode()
        data = objects.read_ref(todo.ref_at(i), f"key {key!r}")
        return decoded_stats(doc, data, split_inner_key(key) is not None)

    for at in range(0, len(new), BATCH):
        batch = new[at : at + BATCH]
        for i, stats in zip(batch, objects.map(one, batch), strict=True):
            found[_ident(todo, i)] = stats
        if on_progress is not None:
            on_progress(min(at + BATCH, len(new)), len(new))
