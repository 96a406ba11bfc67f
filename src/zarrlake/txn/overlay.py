"""Reads inside a session: its staged writes (of every worker) over its base snapshot."""

from __future__ import annotations

from zarrlake.errors import InvalidInputError
from zarrlake.format.chunk_ref import ChunkRef
from zarrlake.format.snapshot import is_meta_key
from zarrlake.txn.staging import Staging
from zarrlake.validate import check_key, check_prefix
from zarrlake.vc.objects import Objects
from zarrlake.vc.snapshot_view import SnapshotView


def check_byte_range(byte_range: object) -> tuple[int, int | None]:
    """A (start, end) byte range: 0 <= start, end None or >= start."""
    ok = isinstance(byte_range, tuple) and len(byte_range) == 2
    start, end = byte_range if ok else (None, None)  # type: ignore[misc]
    ok = ok and isinstance(start, int) and not isinstance(start, bool) and start >= 0
    ok = ok and (end is None or (isinstance(end, int) and not isinstance(end, bool)))
    if not ok or (end is not None and end < start):
        raise InvalidInputError(
            f"byte range must be (start, end) with 0 <= start <= end (or end None), "
            f"not {byte_range!r}"
        )
    return start, end  # type: ignore[return-value]


class Overlay:
    """Key lookups and listings of one session; serializable sessions record what they read."""

    def __init__(
        self,
        objects: Objects,
        view: SnapshotView,
        staging: Staging | None,
        serializable: bool = False,
    ) -> None:
        self.objects = objects
        self.view = view
        self.staging = staging
        self.serializable = serializable and staging is not None
        self._reads_recorded: set[str] = set()

    def lookup(self, key: str) -> ChunkRef | None:
        """The reference `key` resolves to in this session, or None."""
        check_key(key)
        if self.staging is not None:
            staged, ref = self.staging.lookup(key)
            if staged:
                return ref
        return self.view.get(key)

    def read(self, key: str, byte_range: tuple[int, int | None] | None = None) -> bytes | None:
        span = check_byte_range(byte_range) if byte_range is not None else None
        ref = self.lookup(key)
        if self.serializable and key not in self._reads_recorded:
            assert self.staging is not None
            self.staging.record_reads([key])
            self._reads_recorded.add(key)
        if ref is None:
            return None
        data = self.objects.read_ref(ref, f"key {key!r}")
        return data if span is None else data[span[0] : span[1]]

    def exists(self, key: str) -> bool:
        return self.lookup(key) is not None

    def list_prefix(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        keys = set(self.view.keys(prefix))
        if self.staging is not None:
            for k, deleted in self.staging.keys(prefix):
                (keys.discard if deleted else keys.add)(k)
            if self.serializable:
                self.staging.record_reads([], [prefix])
        return sorted(keys)

    def metadata_documents(self) -> dict[str, bytes]:
        """Every node's `zarr.json` (key -> document) as this session sees it."""
        docs = dict(self.view.root.meta)
        if self.staging is not None:
            for k, deleted in self.staging.keys(""):
                if is_meta_key(k):
                    ref = None if deleted else self.lookup(k)
                    if ref is None:
                        docs.pop(k, None)
                    else:
                        docs[k] = self.objects.read_ref(ref, f"key {k!r}")
        return dict(sorted(docs.items()))

    def list_dir(self, prefix: str = "") -> list[str]:
        prefix = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
        check_prefix(prefix)
        if self.staging is None:
            return sorted(self.view.children(prefix))
        return sorted({k[len(prefix) :].split("/", 1)[0] for k in self.list_prefix(prefix)})
