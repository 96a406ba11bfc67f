"""Writes inside a session: check, upload chunks too big to stage inline, stage durably."""

from __future__ import annotations

import threading
from collections.abc import Callable

from zarrlake import hooks
from zarrlake.errors import Conflict, ConflictError, InvalidInputError
from zarrlake.format.chunk_ref import RefKind, chunk_object_key
from zarrlake.format.snapshot import is_meta_key
from zarrlake.txn.batching import GroupCommit
from zarrlake.txn.context import raise_first
from zarrlake.txn.overlay import Overlay
from zarrlake.txn.staging import Staging
from zarrlake.validate import check_key
from zarrlake.vc.chunk_keys import KeyNamer
from zarrlake.vc.commit_protocol import Change
from zarrlake.vc.gc_protocol import Phase, WriteGuard
from zarrlake.vc.objects import Objects
from zarrlake.zarr_metadata import check_metadata


def check_data(key: str, data: object) -> bytes:
    """Values written to a key must be bytes-like."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidInputError(f"data written to {key!r} must be bytes, not {type(data).__name__}")
    return bytes(data)


class Writes:
    """The write path of one session handle. `check_open` raises unless the session still
    accepts writes; it runs again after staging, so a write racing the commit's seal is
    either in the commit or raises: never acknowledged and lost. Uploaded chunk objects are
    settled with the garbage collector's `WriteGuard` once their references are staged, so
    a deduplicated upload that raced a sweep is written again before it is acknowledged."""

    def __init__(
        self,
        objects: Objects,
        guard: WriteGuard,
        staging: Staging,
        overlay: Overlay,
        check_open: Callable[[], None],
        inline_max: int,
        together: Callable[..., list[object]],
    ) -> None:
        self.together = together
        self.objects = objects
        self.guard = guard
        self.staging = staging
        self._uploads: dict[str, tuple[bytes, Phase]] = {}  # object key -> (bytes, phase)
        self._uploads_lock = threading.Lock()
        self.overlay = overlay
        self.check_open = check_open
        self.inline_max = inline_max
        self._group: GroupCommit[Change] = GroupCommit(self._stage_batch)

    def prepare(self, key: str, data: bytes) -> Change:
        """Check one write and upload its bytes if they are too big to stage inline; it takes
        effect once staged (`stage`)."""
        return self._change_for((check_key(key), check_data(key, data)))

    def _change_for(self, item: tuple[str, bytes]) -> Change:
        key, data = item
        if is_meta_key(key):
            check_metadata(key, data)
            return key, self.objects.inline(bytes(data))
        if len(data) <= self.inline_max:
            return key, self.objects.inline(bytes(data))
        phase = self.guard.begin()
        ref = self.objects.put_chunk(bytes(data))
        object_key = chunk_object_key(ref.digest)
        with self._uploads_lock:
            self._uploads[object_key] = (bytes(data), phase)
        hooks.reached("after_chunk_upload")
        return key, ref

    def stage(self, changes: list[Change]) -> None:
        """Stage prepared writes (concurrent callers share one metastore transaction)."""
        self._group.submit(changes)

    def write_many(self, items: list[tuple[str, bytes]]) -> None:
        """Big chunks are uploaded in parallel, then everything is staged in one metastore
        transaction."""
        checked = [(check_key(key), check_data(key, data)) for key, data in items]
        big = [i for i, (_, data) in enumerate(checked) if len(data) > self.inline_max]
        uploaded = dict(
            zip(big, self.objects.map(self._change_for, [checked[i] for i in big]), strict=True)
        )
        self.stage(
            [uploaded[i] if i in uploaded else self._change_for(c) for i, c in enumerate(checked)]
        )

    def delete_many(self, keys: list[str]) -> None:
        """Delete the keys that exist; deleting a missing key is not an error."""
        present = [k for k in keys if self.overlay.lookup(k) is not None]
        if present:
            self.stage([(k, None) for k in present])

    def _stage_batch(self, items: list[Change]) -> None:
        self.staging.stage_many(items)
        hooks.reached("after_staging")
        # Both read the metastore after staging, and neither needs the other's answer.
        raise_first(self.together(self.check_open, lambda: self._settle(items)))

    def _settle(self, items: list[Change]) -> None:
        """Re-check the uploads these staged references name against a concurrent sweep."""
        with self._uploads_lock:
            if not self._uploads:
                return
            by_phase: dict[Phase, list[tuple[str, bytes]]] = {}
            for _, ref in items:
                if ref is None or ref.kind != RefKind.OBJECT:
                    continue
                got = self._uploads.pop(chunk_object_key(ref.digest), None)
                if got is not None:
                    by_phase.setdefault(got[1], []).append((chunk_object_key(ref.digest), got[0]))
        for phase, uploads in by_phase.items():
            self.guard.settle(phase, uploads)

    def staged_changes(self, meta: dict[str, bytes]) -> list[Change]:
        """Every staged change of every worker; ConflictError if two workers staged
        different bytes for one key (`meta`: the base snapshot's metadata documents)."""
        changes, clashes = self.staging.all()
        if not clashes:
            return changes
        staged_meta = {k: r.data for k, r in changes if is_meta_key(k) and r is not None}
        namer = KeyNamer(meta, {k: d for k, d in staged_meta.items() if d})
        conflicts = []
        for key in clashes:
            node, coords = namer.name(key)
            conflicts.append(
                Conflict(
                    node,
                    "writers",
                    [coords] if coords is not None else None,
                    f"two workers of this session staged different bytes for {key!r}",
                )
            )
        raise ConflictError(conflicts)
