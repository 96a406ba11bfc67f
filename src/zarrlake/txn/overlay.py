"""Reads inside a session: its staged writes (of every worker) over its base snapshot."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING

from cachetools import LRUCache

from zarrlake._util.validate import check_prefix, check_zarr_key
from zarrlake.errors import InvalidInputError
from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.format.shard import SEP, ShardLayout, ShardRef, layout_of
from zarrlake.format.snapshot import is_meta_key, meta_keys_above
from zarrlake.txn.buffer import WriteBuffer
from zarrlake.vc.chunk_keys import is_array_doc
from zarrlake.vc.ranges import Span

if TYPE_CHECKING:
    from zarrlake.format.fragment import FragmentRecord
    from zarrlake.txn.fragments import StagedFragments
    from zarrlake.txn.staging import Staging
    from zarrlake.vc.objects import Objects
    from zarrlake.vc.snapshot_view import SnapshotView

V2_METADATA = frozenset({".zarray", ".zattrs", ".zgroup", ".zmetadata"})
"""zarr v2's metadata keys: not data of a zarr v3 node."""
READ_HERE_MAX = 1 << 20
"""Ranged reads of up to this many bytes from a local directory run on zarr's event loop
(a shard's index, an inner chunk): a hop to a thread costs more."""
ASSEMBLED_SHARDS = 256
"""Shards a read-only handle keeps assembled: zarr reads a shard's index, then its inner
chunks, each a lookup."""
SEEN_SHARDS = 4096
"""Shards whose inner chunks a writable handle remembers from its last read of them."""


@lru_cache(maxsize=256)
def _is_array(doc: bytes) -> bool:
    """is_array_doc, parsed once per document (looked up for every chunk key)."""
    return is_array_doc(doc)


def check_byte_range(byte_range: object) -> tuple[int, int | None]:
    """A (start, end) byte range: 0 <= start, end None or >= start."""
    if isinstance(byte_range, tuple) and len(byte_range) == 2:
        start, end = byte_range
        if (
            isinstance(start, int)
            and not isinstance(start, bool)
            and start >= 0
            and (
                end is None or (isinstance(end, int) and not isinstance(end, bool) and end >= start)
            )
        ):
            return start, end
    raise InvalidInputError(
        f"byte range must be (start, end) with 0 <= start <= end (or end None), not {byte_range!r}"
    )


class Overlay:
    """Key lookups and listings of one session: this handle's buffered writes, then what
    every worker staged (metadata records and flushed fragments), then the base snapshot.
    Serializable sessions record what they read."""

    def __init__(
        self,
        objects: Objects,
        view: SnapshotView,
        staging: Staging | None,
        fragments: StagedFragments | None = None,
        serializable: bool = False,
    ) -> None:
        self.objects = objects
        self.view = view
        self.staging = staging
        self.fragments = fragments
        self.buffer = WriteBuffer()
        self.serializable = serializable and staging is not None
        self.record_reads: Callable[[list[str], list[str]], None] | None = None
        self._reads_recorded: set[str] = set()
        self._docs: dict[str, bytes | None] = {}  # metadata key -> document, as last read
        self._seen: LRUCache[str, dict[str, bytes]] = LRUCache(SEEN_SHARDS)
        self._shards: LRUCache[str, ShardRef | None] = LRUCache(ASSEMBLED_SHARDS)
        self._seen_lock = threading.Lock()
        self._last: tuple[str, ChunkRef | None] | None = None  # a read-only view's last
        # whole-key lookup: a read asks twice (`reads_here`, then `read`)

    def staged(self, key: str) -> tuple[bool, ChunkRef | None]:
        """(staged?, ref) of `key` in this session (ref None: deleted)."""
        if self.staging is None:
            return False, None
        if is_meta_key(key):
            return self.staging.lookup_meta(key)
        found = self.buffer.lookup(key)
        if found[0] or self.fragments is None:
            return found
        return self.fragments.lookup(self.staging.visible_fragments(), key)

    def peek(self, key: str) -> tuple[bool, bytes | None]:
        """(answered, bytes or None) when the answer is in memory: a read-only view's
        metadata documents, and zarr v2's metadata keys probed beside a zarr v3 node of the
        base commit (zarr looks for `.zarray` and `.zattrs` when it opens an array), which
        a writable snapshot-isolation session answers too unless this handle wrote the key
        (opening an array then reads no staged records for them; a serializable session
        reads, and records, them as before)."""
        meta = self.view.root.meta
        if self.staging is None and is_meta_key(key):
            return True, meta.get(key)
        parent, _, name = key.rpartition("/")
        node_doc = f"{parent}/zarr.json" if parent else "zarr.json"
        if name not in V2_METADATA or node_doc not in meta:
            return False, None
        if self.staging is None or not (self.serializable or self.buffer.lookup(key)[0]):
            return True, None
        return False, None

    def reads_here(self, key: str, spans: list[Span] | None = None) -> bool:
        """Whether `key` (or its `spans`) is cheaper to read on the caller's thread (the
        zarr store's event loop) than on another: a read-only view on a local object store,
        since a local read takes less than a hop to a thread and back. Not for writable
        sessions, remote stores, virtual references (their bytes are in files outside,
        possibly remote), a whole shard assembled from inner chunks, or spans of more than
        READ_HERE_MAX bytes (reads of many shards run side by side on threads)."""
        if self.staging is not None or self.objects.store.remote:
            return False
        ref = self.lookup(key)
        if ref is None:
            return True
        if spans is not None:
            wanted = (s.resolve(ref.length) for s in spans)
            if sum(end - start for start, end in wanted) > READ_HERE_MAX:
                return False
        if isinstance(ref, ChunkRef):
            return ref.kind != RefKind.VIRTUAL
        return spans is not None and (ref.whole is not None or not ref.any_virtual())

    def lookup(self, key: str) -> ChunkRef | ShardRef | None:
        """The reference `key` resolves to in this session, or None. A shard stored as
        inner chunks resolves to the shard assembled from them (a whole entry, written
        before shards were split or for a layout not split, wins)."""
        check_zarr_key(key)
        ref = self.whole(key)
        if ref is not None or is_meta_key(key):
            return ref
        if self.staging is None:  # a commit's shards never change
            with self._seen_lock:
                if key in self._shards:
                    return self._shards[key]
        layout = self.layout_of(key)
        shard = None if layout is None else self._assemble(key, layout)
        if self.staging is None:
            with self._seen_lock:
                self._shards[key] = shard
        return shard

    def _assemble(self, key: str, layout: ShardLayout) -> ShardRef | None:
        """Shard `key` assembled from its inner chunks: from the base's manifest columns
        (no reference object per inner chunk) unless this session staged some of them."""
        prefix = key + SEP
        staged = None if self.staging is None else self._staged_inner(prefix)
        if staged is None or not staged[0]:
            return ShardRef.of_entries(layout, self.view.entries_under(prefix.encode(), False))
        return ShardRef.assemble(layout, self.inner(key, staged))

    def _staged_inner(self, prefix: str) -> tuple[dict[str, bool], list[FragmentRecord] | None]:
        """(key -> deleted?, the visible fragment records) of what this session staged
        under `prefix` (a shard's key and SEP)."""
        assert self.staging is not None
        staged = dict(self.buffer.keys(prefix))
        records = None
        if self.fragments is not None:
            records = self.staging.visible_fragments()
            staged = dict(self.fragments.keys(records, prefix)) | staged
        return staged, records

    def whole(self, key: str) -> ChunkRef | None:
        """The entry stored under `key` itself (staged over base), or None."""
        if self.staging is None:  # (a commit's entries never change; a read-only view
            # writes nothing, so it never needs the statistics a commit carries forward)
            last = self._last
            if last is not None and last[0] == key:
                return last[1]
            ref = self.view.get(key, stats=False)
            self._last = (key, ref)
            return ref
        staged, ref = self.staged(key)
        return ref if staged else self.view.get(key)

    def inner(
        self,
        shard_key: str,
        staged_inner: tuple[dict[str, bool], list[FragmentRecord] | None] | None = None,
    ) -> dict[str, ChunkRef]:
        """name -> reference of the inner chunks of shard `shard_key`, staged over base
        (`staged_inner`: its `_staged_inner`, if read already)."""
        out = self.view.inner(shard_key)
        if self.staging is None:
            return out
        prefix = shard_key + SEP
        staged, records = staged_inner or self._staged_inner(prefix)
        for k, deleted in staged.items():
            name = k[len(prefix) :]
            if deleted:
                out.pop(name, None)
                continue
            found, ref = self.buffer.lookup(k)
            if not found and self.fragments is not None and records is not None:
                found, ref = self.fragments.lookup(records, k)
            if ref is None:
                out.pop(name, None)
            else:
                out[name] = ref
        return out

    def array_doc(self, key: str) -> bytes | None:
        """The zarr.json of the array chunk key `key` belongs to (`array_meta`)."""
        found = self.array_meta(key)
        return None if found is None else found[1]

    def array_meta(self, key: str) -> tuple[str, bytes] | None:
        """(metadata key, zarr.json) of the array chunk key `key` belongs to: as the base
        commit has it if the array exists there (no metastore read per chunk; a session
        that re-creates an array differently stages its shards whole, or split by the
        layout they had), else as this session staged it (read once per handle;
        `forget_docs` drops them).
        Ancestors are tried from the top: an array has no child nodes, so the first array
        found is the one, and a new array's chunks all find its document cached at once
        (from the bottom, each chunk's own parent paths would be read first)."""
        metas = meta_keys_above(key)
        base = self.view.root.meta
        for meta in metas:  # in memory: an array of the base commit
            doc = base.get(meta)
            if doc is not None and _is_array(doc):
                return meta, doc
        walked: dict[str, bytes | None] = {}
        for meta in metas:
            doc = self._docs[meta] if meta in self._docs else self._read_doc(meta)
            walked[meta] = doc
            if doc is not None and _is_array(doc):
                self._docs.update(walked)  # arrays have no child nodes: what was walked stays
                return meta, doc
        return None

    def current_array_meta(self, key: str) -> tuple[str, bytes] | None:
        """(metadata key, zarr.json) of the array chunk key `key` belongs to as the session
        has it now (staged by any worker over the base), read afresh: `array_meta` prefers
        the base commit's, which a session re-creating the array (other codecs) replaced."""
        for meta in meta_keys_above(key):
            doc = self._read_doc(meta)
            if doc is not None and _is_array(doc):
                return meta, doc
        return None

    def _read_doc(self, meta: str) -> bytes | None:
        if self.staging is None:
            return self.view.root.meta.get(meta)
        ref = self.whole(meta)
        return None if ref is None else bytes(self.objects.read_ref(ref, f"key {meta!r}"))

    def forget_docs(self) -> None:
        """Metadata was written: read documents again when next needed."""
        self._docs.clear()

    def layout_of(self, key: str) -> ShardLayout | None:
        """The shard layout of the array chunk key `key` belongs to, if it is sharded in a
        way zarrlake splits (format/shard.py)."""
        return layout_of(self.array_doc(key)) if self.maybe_sharded(key) else None

    def maybe_sharded(self, key: str) -> bool:
        """Whether `key` may be a shard of an array with a sharding codec (so entries of
        inner chunks may exist under it)."""
        if SEP in key or is_meta_key(key):
            return False
        doc = self.array_doc(key)
        return doc is not None and b"sharding_indexed" in doc

    def take_seen(self, shard_key: str) -> dict[str, bytes] | None:
        """name -> digest of the inner chunks this handle last read of `shard_key` (zarr
        reads a shard, changes some inner chunks and writes it back), forgotten once taken;
        None if it did not read it."""
        with self._seen_lock:
            return self._seen.pop(shard_key, None)

    def _remember(self, key: str, ref: ChunkRef | ShardRef | None) -> None:
        """Note what a writable handle read of a shard (see `take_seen`)."""
        if self.staging is None or isinstance(ref, ChunkRef):
            return
        if ref is None and self.layout_of(key) is None:
            return
        seen = {} if ref is None else ref.digests()
        with self._seen_lock:
            self._seen[key] = seen

    def read(
        self, key: str, byte_range: tuple[int, int | None] | None = None
    ) -> bytes | memoryview | None:
        """The bytes of `key` as the session sees it (staged over base), or None if absent.

        A serializable session records the read, so a commit can check nobody changed the key."""
        span = check_byte_range(byte_range) if byte_range is not None else None
        ref = self.lookup(key)
        if self.serializable and key not in self._reads_recorded and self.record_reads:
            self.record_reads([key], [])
            self._reads_recorded.add(key)
        if span is None:
            self._remember(key, ref)
        if ref is None:
            return None
        if span is None:
            return self.objects.read_ref(ref, f"key {key!r}")
        return self.objects.read_ranges(ref, f"key {key!r}", [Span(*span)])[0]

    def read_ranges(self, key: str, spans: list[Span]) -> list[bytes] | None:
        """Byte ranges of `key` as the session sees it, fetching only what they need
        (Objects.read_ranges), or None if absent; recorded like `read`."""
        ref = self.lookup(key)
        if self.serializable and key not in self._reads_recorded and self.record_reads:
            self.record_reads([key], [])
            self._reads_recorded.add(key)
        return None if ref is None else self.objects.read_ranges(ref, f"key {key!r}", spans)

    def exists(self, key: str) -> bool:
        """Whether `key` exists as the session sees it."""
        return self.lookup(key) is not None

    def staged_keys(self, prefix: str) -> dict[str, bool]:
        """key -> deleted? of everything staged under `prefix` (the newest change wins)."""
        if self.staging is None:
            return {}
        out = dict(self.staging.meta_keys(prefix))
        if self.fragments is not None:
            out.update(self.fragments.keys(self.staging.visible_fragments(), prefix))
        out.update(self.buffer.keys(prefix))
        return out

    def list_prefix(self, prefix: str = "") -> list[str]:
        """Every key under `prefix` as the session sees it, sorted (recorded for serializable
        sessions)."""
        check_prefix(prefix)
        keys = set(self.view.keys(prefix))
        shards = set()
        for k, deleted in self.staged_keys(prefix).items():
            if SEP in k:
                shards.add(k.partition(SEP)[0])
            else:
                (keys.discard if deleted else keys.add)(k)
        for k in shards:  # a shard is listed while it holds an inner chunk
            (keys.add if self.lookup(k) is not None else keys.discard)(k)
        if self.serializable and self.record_reads:
            self.record_reads([], [prefix])
        return sorted(keys)

    def metadata_documents(self) -> dict[str, bytes]:
        """Every node's `zarr.json` (key -> document) as this session sees it."""
        docs = dict(self.view.root.meta)
        if self.staging is not None:
            for k, deleted in self.staging.meta_keys(""):
                if is_meta_key(k):
                    ref = None if deleted else self.lookup(k)
                    if ref is None:
                        docs.pop(k, None)
                    else:
                        docs[k] = bytes(self.objects.read_ref(ref, f"key {k!r}"))
        return dict(sorted(docs.items()))

    def list_dir(self, prefix: str = "") -> list[str]:
        """The names directly under `prefix` (keys and sub-directories), as the session sees
        them."""
        prefix = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
        check_prefix(prefix)
        if self.staging is None:
            return sorted(self.view.children(prefix))
        return sorted({k[len(prefix) :].split("/", 1)[0] for k in self.list_prefix(prefix)})
