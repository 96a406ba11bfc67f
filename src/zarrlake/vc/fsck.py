"""Repository integrity check (`zarrlake fsck`): re-read and verify every reachable object.

Walks every commit reachable from one ref (or from all branches and tags), and for each
reads the commit record, change set, snapshot root and manifest ranges straight from
object storage (bypassing the decoded-object cache) and verifies every chunk reference
against its content hash: chunk objects, slices of pack objects and inline bytes. Virtual
chunks are checked by their source's identity (size and mtime, or ETag) against the one taken
at import, once per source. Every node metadata document (`zarr.json`) is parsed the way a
write checks it (with zarr's own metadata classes), so one zarr could not open is reported
with the commit and ref it was found from. Each problem names the object it was found in, so
a damaged repository can be diagnosed and repaired.

Chunk objects read by range (those of sharded arrays, TABLE_MIN bytes or more: a shard
zarrlake stored as one object, or a chunk of an array with a sharding codec) need their
block table (format/blocks.py): a missing `blocks/<digest>` is reported (ranged reads of the
object then read it whole), and so is one that does not decode, belongs to another object,
or whose block digests do not match the object's bytes.

With `decode`, every chunk of the arrays checked (all, or those `arrays` names) is also
decoded with its array's codecs, as zarr reads it, on a pool of threads, once per distinct
bytes and array document; each one that does not decode is reported ("undecodable"), with
the array, its coordinates and the codec's message. Intact checksums say the bytes are as
written; decoding says zarr can read what was written. The value statistics a manifest
stores with a chunk are compared with those of its decoded values ("inconsistent" when
they differ).
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from cachetools import LRUCache

from zarrlake._util.zarr_chunks import decode as decode_chunk
from zarrlake._util.zarr_chunks import inner_doc
from zarrlake._util.zarr_metadata import check_metadata
from zarrlake.errors import (
    CorruptionError,
    InvalidInputError,
    NotFoundError,
    ZarrLakeError,
    on_date,
)
from zarrlake.format import statistics as sf
from zarrlake.format.blocks import TABLE_MIN, BlockTable, table_key
from zarrlake.format.changes import ChangeSet
from zarrlake.format.chunk_ref import ChunkRef, RefKind, chunk_object_key
from zarrlake.format.commit import CommitRecord
from zarrlake.format.digest import Hash, digest
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.shard import split_inner_key
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.format.statistics import ChunkStats
from zarrlake.storage.base import ObjectStore
from zarrlake.storage.sources import SourceReader
from zarrlake.vc.chunk_keys import KeyNamer
from zarrlake.vc.objects import describe, prefix_of
from zarrlake.vc.statistics import decode_values, fill_of, layout_of, of_chunk, usable

CHUNKS = "chunks/"
_PACK_CACHE = 16
"""Whole pack objects kept while checking, so each pack is read once, not once per slice."""


@dataclass(frozen=True)
class Problem:
    """One integrity problem: the object it concerns, what kind, and a readable detail."""

    object: str  # e.g. "commits/<id>", "chunks/<digest>", "packs/<id>[0:100]", "branch main"
    kind: str  # "missing", "corrupt", "inconsistent", "stale" (a changed virtual source),
    # "invalid" (a metadata document zarr cannot open) or "undecodable" (chunk bytes the
    # array's codecs cannot decode: `decode`)
    detail: str

    def __str__(self) -> str:
        return f"{self.object}: {self.kind}: {self.detail}"


@dataclass(frozen=True)
class ExpiredHistory:
    """Not a problem: where `expire` ended a history. `commit` is the oldest commit kept,
    `parent` its expired parent, `expired_at` when (POSIX seconds)."""

    commit: str
    parent: str
    expired_at: float

    def __str__(self) -> str:
        return f"history before {self.commit[:12]} was expired on {on_date(self.expired_at)}"


_Target = tuple[str, tuple[int, ...], bytes, str, tuple[int, ...]]
DECODE_IN_FLIGHT = 256
"""Chunks queued for decoding at once (their bytes are held until decoded)."""


class _Decoder:
    """Decodes chunks on a pool of threads, once per (bytes, array document), and reports
    those that fail to `report`, and each chunk whose stored statistics differ from its
    values'. `arrays`: the array paths (glob patterns) to decode, all if None;
    `on_decoded(done, queued)` follows the progress."""

    def __init__(
        self,
        report: Callable[[str, str, str], None],
        arrays: list[str] | None,
        on_decoded: Callable[[int, int], None] | None,
    ) -> None:
        self.report = report
        self.arrays = arrays
        self.matched: set[str] = set()  # patterns that named an array met
        self.on_decoded = on_decoded
        self.pool = ThreadPoolExecutor(min(8, 2 * (os.cpu_count() or 1)), "zarrlake-fsck")
        self.pending: deque[Future[None]] = deque()
        self.done: set[tuple[bytes, int, bytes]] = set()
        self.queued = self.decoded = 0
        # (bytes, document) -> the statistics entries store for them, with one entry each
        self.claims: dict[tuple[bytes, int, bytes], dict[ChunkStats, tuple[str, str]]] = {}
        self.values_stats: dict[tuple[bytes, int, bytes], ChunkStats | None] = {}

    def wanted(self, node: str) -> bool:
        """Whether the chunks of array `node` are decoded."""
        if self.arrays is None:
            return True
        hit = [p for p in self.arrays if fnmatch.fnmatchcase(node, p.strip("/"))]
        self.matched.update(hit)
        return bool(hit)

    def _target(
        self, namer: KeyNamer, key: str
    ) -> tuple[str, tuple[int, ...], bytes, str, tuple[int, ...]] | None:
        """(array, coordinates, document, key and coordinates to decode as) of chunk `key`
        if it is to be decoded: an inner chunk stored apart from its shard decodes as a
        chunk of its own (`inner_doc`)."""
        node, coords = namer.name(key)
        doc = namer.docs.get(f"{node}/zarr.json" if node else "zarr.json")
        if doc is None or coords is None or not self.wanted(node):
            return None
        if split_inner_key(key) is None:
            return node, coords, doc, key[len(node) + 1 :] if node else key, coords
        inner = inner_doc(doc)
        if inner is None:
            return None
        return node, coords, inner, "c/" + "/".join("0" for _ in coords), (0,) * len(coords)

    def needs(self, namer: KeyNamer, key: str, digest_: bytes, size: int) -> bool:
        """Whether chunk `key` with these bytes is still to be decoded."""
        target = self._target(namer, key)
        return target is not None and (digest_, size, target[2]) not in self.done

    def claim(self, obj: str, key: str, namer: KeyNamer, ref: ChunkRef) -> None:
        """Note the statistics chunk `key` (found in `obj`) carries, to compare with those
        of its values once decoded; statistics of another dtype or chunk shape than the
        array's now are not used by reads, and not compared."""
        target = None if ref.stats is None else self._target(namer, key)
        if target is None or ref.stats is None:
            return
        node = target[0]
        try:
            layout = layout_of(namer.docs[f"{node}/zarr.json" if node else "zarr.json"])
        except Exception:
            return
        column = sf.records([ref.stats])
        if column is None or not usable(layout, column)[0]:  # None: unknown statistics
            return
        ident = (ref.digest, ref.length, target[2])
        self.claims.setdefault(ident, {}).setdefault(ref.stats, (obj, key))

    def submit(self, obj: str, key: str, namer: KeyNamer, digest_: bytes, data: bytes) -> None:
        """Decode chunk `key` (bytes `data`, found in `obj`) if its array is wanted and
        these bytes were not decoded for its document yet."""
        target = self._target(namer, key)
        if target is None or (digest_, len(data), target[2]) in self.done:
            return
        node, shown, doc, suffix, coords = target
        ident = (digest_, len(data), doc)
        self.done.add(ident)
        while len(self.pending) >= DECODE_IN_FLIGHT:
            self.pending.popleft().result()
        self.queued += 1
        array_doc = namer.docs[f"{node}/zarr.json" if node else "zarr.json"]
        self.pending.append(
            self.pool.submit(
                self._one, obj, key, node, shown, (doc, array_doc), suffix, coords, data, ident
            )
        )

    def _one(
        self,
        obj: str,
        key: str,
        node: str,
        shown: tuple[int, ...],
        docs: tuple[bytes, bytes],
        suffix: str,
        coords: tuple[int, ...],
        data: bytes,
        ident: tuple[bytes, int, bytes],
    ) -> None:
        doc, array_doc = docs
        inner = split_inner_key(key) is not None
        try:
            try:  # the whole chunk's values, for their statistics
                values = decode_values(array_doc, data, inner)
            except Exception:
                values = None  # (zarr's own read below says why)
            if values is None:
                decode_chunk(doc, suffix, coords, data)
            else:
                self.values_stats[ident] = of_chunk(values, fill_of(array_doc, inner))
        except Exception as e:
            text = str(e).strip().splitlines()
            reason = f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
            self.report(
                obj,
                "undecodable",
                f"chunk {shown} of array {node!r} (key {key!r}) does not decode: {reason}",
            )
        finally:
            self.decoded += 1
            if self.on_decoded is not None:
                self.on_decoded(self.decoded, self.queued)

    def finish(self) -> None:
        """Wait for every decode, then compare the statistics stored with those of the
        values; InvalidInputError if an `arrays` pattern named nothing."""
        try:
            while self.pending:
                self.pending.popleft().result()
        finally:
            self.pool.shutdown()
        for ident, stored in self.claims.items():
            actual = self.values_stats.get(ident)
            if ident not in self.values_stats:
                continue  # not decoded (it does not decode: reported), or not here
            for stats, (obj, key) in stored.items():
                why = _stats_differ(stats, actual)
                if why is not None:
                    self.report(
                        obj,
                        "inconsistent",
                        f"the statistics stored with key {key!r} differ from its values': {why}",
                    )
        missed = [p for p in self.arrays or () if p not in self.matched]
        if missed:
            raise InvalidInputError(
                f"no array matching {', '.join(repr(p) for p in missed)} has chunks in the "
                "commits checked (--arrays names array paths, e.g. weather/t2m)"
                "; check the --arrays names"
            )


def _stats_differ(stored: ChunkStats, actual: ChunkStats | None) -> str | None:
    """How statistics stored for a chunk differ from those of its values (None: they do
    not; a sum within float rounding of the other is the same)."""
    if actual is None:
        return "its values have no statistics (not a numeric dtype)"
    for name in ("kind", "count", "nan", "fill"):
        a, b = getattr(stored, name), getattr(actual, name)
        if a != b:
            return f"{name} {a} stored, {b} computed"
    for name, a, b in (("min", stored.low, actual.low), ("max", stored.high, actual.high)):
        if a != b:
            return f"{name} {a} stored, {b} computed"
    scale = max(abs(actual.low or 0), abs(actual.high or 0), 1) * max(actual.count, 1)
    if not math.isclose(stored.sum, actual.sum, rel_tol=1e-9, abs_tol=1e-12 * scale) and not (
        math.isnan(stored.sum) and math.isnan(actual.sum)
    ):
        return f"sum {stored.sum!r} stored, {actual.sum!r} computed"
    return None


class _Checker:
    def __init__(
        self,
        store: ObjectStore,
        algo: Hash,
        on_read: Callable[[str, int], None] | None = None,
        sources: SourceReader | None = None,
        only_sources: bool = False,
        purged: Callable[[bytes], object | None] | None = None,
        decoder: _Decoder | None = None,
    ) -> None:
        self.purged = purged
        self.purged_refs = 0  # references to bytes a purge removed: not problems
        self.decoder = decoder
        self.lock = threading.Lock()  # decoding threads report too
        self.sources = sources or SourceReader()
        self.only_sources = only_sources
        self.sources_seen: set[tuple[str, str | None]] = set()
        self.store = store
        self.algo = algo
        self.on_read = on_read
        self.found: dict[tuple[str, str], tuple[str, int]] = {}  # (object, kind): detail, more
        self.expired: list[ExpiredHistory] = []
        self.seen: set[str] = set()  # object keys already checked (good or bad)
        self.chunks_ok: set[tuple] = set()
        self.reached_from: dict[str, str] = {}  # commit id -> the ref (label) it was reached from
        self.docs_ok: set[bytes] = set()  # metadata documents that parsed (in this run only)
        self.docs_bad: dict[tuple[str, bytes], str] = {}  # (key, document) -> object reported
        self.packs: LRUCache[str, bytes | Problem] = LRUCache(_PACK_CACHE)
        self.namer = KeyNamer()  # the metadata of the snapshot being checked

    def get(self, key: str) -> bytes:
        data = self.store.get(key)
        if self.on_read is not None:
            self.on_read(key, len(data))
        return data

    def report(self, obj: str, kind: str, detail: str) -> None:
        """Note a problem; one found again (another reference to a bad object) is counted,
        not listed again."""
        with self.lock:
            first, more = self.found.get((obj, kind), (detail, -1))
            self.found[(obj, kind)] = (first, more + 1)

    def reported(self, obj: str, what: str) -> bool:
        """Whether `obj` was already found bad: if so, count this reference (`what`) too."""
        for kind in ("missing", "corrupt"):
            if (obj, kind) in self.found:
                self.report(obj, kind, what)
                return True
        return False

    @property
    def problems(self) -> list[Problem]:
        return [
            Problem(obj, kind, detail + (f" (and {more} more reference(s))" if more else ""))
            for (obj, kind), (detail, more) in self.found.items()
        ]

    def expired_at(self, oid: str) -> float | None:
        """When `expire` dropped commit `oid`, from its marker; None if it was not."""
        try:
            return float(json.loads(self.store.get(f"expired/{oid}"))["expired_at"])
        except NotFoundError:
            return None
        except (ValueError, TypeError, KeyError):
            self.report(f"expired/{oid}", "corrupt", "the expiry marker does not decode")
            return None

    def load[T: (ManifestRange, SnapshotRoot, ChangeSet, CommitRecord)](
        self, cls: type[T], oid: str, referrer: str
    ) -> T | None:
        """The decoded object, or None after reporting why it cannot be read."""
        key = f"{prefix_of(cls)}/{oid}"
        try:
            return cls.decode(oid, self.get(key))
        except NotFoundError:
            self.report(key, "missing", f"referenced by {referrer}, not in object storage")
        except ZarrLakeError as e:
            self.report(key, "corrupt", str(e))
        except Exception as e:  # a decoder tripping over damaged bytes is still damage
            self.report(key, "corrupt", f"cannot decode: {type(e).__name__}: {e}")
        return None

    def first_visit(self, key: str) -> bool:
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    # walking ------------------------------------------------------------------------------

    def commits(self, starts: list[tuple[str, str]]) -> Iterator[tuple[str, CommitRecord]]:
        """Every reachable commit once, following all parents."""
        stack = [(cid, label, label) for cid, label in reversed(starts)]
        while stack:
            cid, referrer, start = stack.pop()
            if not self.first_visit(f"commits/{cid}"):
                continue
            self.reached_from[cid] = start
            rec = self.load(CommitRecord, cid, referrer)
            if rec is None:
                continue
            yield cid, rec
            for p in reversed(rec.parents):
                when = self.expired_at(p)
                if when is None:
                    stack.append((p, f"commits/{cid} (parent)", start))
                else:  # history ends at expired commits
                    self.expired.append(ExpiredHistory(cid, p, when))

    def check_commit(self, cid: str, rec: CommitRecord) -> None:
        who = f"commits/{cid}"
        if self.first_visit(f"changes/{rec.changes}"):
            self.load(ChangeSet, rec.changes, who)
        if not self.first_visit(f"snapshots/{rec.snapshot}"):
            return
        root = self.load(SnapshotRoot, rec.snapshot, who)
        if root is not None:
            if not self.only_sources:
                self.check_documents(cid, root)
            self.check_snapshot(rec.snapshot, root)

    def check_documents(self, cid: str, root: SnapshotRoot) -> None:
        """Report each metadata document of the snapshot zarr could not open (as a write
        would refuse it), once per bad document: later commits keeping it are counted."""
        for key, doc in root.meta.items():
            if doc in self.docs_ok:
                continue
            seen = self.docs_bad.get((key, doc))
            if seen is not None:
                self.report(seen, "invalid", f"commits/{cid}")
                continue
            try:
                check_metadata(key, doc)
            except InvalidInputError as e:
                obj = self.docs_bad[(key, doc)] = f"commits/{cid}:{key}"
                reached = self.reached_from.get(cid)
                self.report(
                    obj, "invalid", f"{e}" + (f" (reached from {reached})" if reached else "")
                )
            else:
                self.docs_ok.add(doc)

    def check_snapshot(self, sid: str, root: SnapshotRoot) -> None:
        who = f"snapshots/{sid}"
        self.namer = KeyNamer(root.meta)
        idx = root.ranges
        for i, mid in enumerate(idx.ids):
            if not self.first_visit(f"manifests/{mid}"):
                continue
            rng = self.load(ManifestRange, mid, who)
            if rng is None:
                continue
            if len(rng) != int(idx.counts[i]) or (len(rng) and rng.first_key != idx.first_keys[i]):
                self.report(
                    f"manifests/{mid}",
                    "inconsistent",
                    f"{who} indexes it with {int(idx.counts[i])} entries from "
                    f"{bytes(idx.first_keys[i])!r}, it holds {len(rng)}",
                )
            self.check_range(mid, rng)

    def check_range(self, mid: str, rng: ManifestRange) -> None:
        refs = []
        for i in range(len(rng)):
            try:
                refs.append((bytes(rng.keys[i]).decode(), rng.ref_at(i)))
            except Exception as e:
                self.report(f"manifests/{mid}", "corrupt", f"entry {i} does not decode: {e}")
        for key, ref in refs:
            self.check_chunk(mid, key, ref)

    def check_source(self, key: str, ref: ChunkRef) -> None:
        """Whether a virtual chunk's source still is what was imported (once per source)."""
        assert ref.location is not None
        if (ref.location, ref.identity) in self.sources_seen:
            return
        self.sources_seen.add((ref.location, ref.identity))
        try:
            now = self.sources.identity(ref.location)
        except InvalidInputError:
            self.report(ref.location, "missing", f"virtual source of key {key!r} is gone")
            return
        except ZarrLakeError as e:
            self.report(ref.location, "missing", f"virtual source of key {key!r}: {e}")
            return
        if now != ref.identity:
            self.report(
                ref.location,
                "stale",
                f"virtual source of key {key!r} changed since import ({ref.identity}, now {now})",
            )

    def check_chunk(self, mid: str, key: str, ref: ChunkRef) -> None:
        if ref.kind == RefKind.VIRTUAL:
            self.check_source(key, ref)
            return
        if self.only_sources:
            return
        if self.decoder is not None:
            self.decoder.claim(f"manifests/{mid}", key, self.namer, ref)
        ident = (ref.kind, ref.location, ref.offset, ref.length, ref.digest)
        if ref.kind != RefKind.INLINE and ident in self.chunks_ok:
            # verified already; read again only to decode it for another array's codecs
            if self.decoder is not None and self.decoder.needs(
                self.namer, key, ref.digest, ref.length
            ):
                self.decode_again(mid, key, ref)
            return
        what = f"key {key!r} of manifests/{mid}"
        if ref.kind == RefKind.INLINE:
            data = ref.data or b""
            obj = f"manifests/{mid}"
        elif ref.kind == RefKind.OBJECT:
            obj = chunk_object_key(ref.digest)
            if self.reported(obj, f"chunk data of {what}"):
                return
            try:
                data = self.get(obj)
            except NotFoundError:
                if not self.was_purged(ref):
                    self.report(obj, "missing", f"chunk data of {what}")
                return
            except ZarrLakeError as e:
                if not self.was_purged(ref):
                    self.report(obj, "corrupt", f"chunk data of {what}: {e}")
                return
        else:
            assert ref.location is not None
            obj = describe(ref)
            if self.reported(ref.location, f"chunk data of {what}"):
                return
            whole = self.pack(ref.location)
            if isinstance(whole, Problem):
                self.report(ref.location, whole.kind, f"{whole.detail}; chunk data of {what}")
                return
            data = whole[ref.offset : ref.offset + ref.length]
        sized = len(data) == ref.length
        good = sized and digest(self.algo, data) == ref.digest
        if not good and self.was_purged(ref):
            return
        if not sized:
            self.report(
                obj, "corrupt", f"chunk data of {what} has {len(data)} bytes, expected {ref.length}"
            )
        elif not good:
            label = self.algo.label.upper()
            self.report(obj, "corrupt", f"chunk data of {what} fails its {label} checksum")
        else:
            if self.decoder is not None:
                self.decoder.submit(obj, key, self.namer, ref.digest, bytes(data))
            if ref.kind != RefKind.INLINE:
                self.chunks_ok.add(ident)
                self.check_tables(obj, key, ref, data, what)

    def decode_again(self, mid: str, key: str, ref: ChunkRef) -> None:
        """Decode a chunk whose bytes were verified under another array (read again)."""
        assert self.decoder is not None
        if ref.kind == RefKind.OBJECT:
            obj = chunk_object_key(ref.digest)
            try:
                data = self.get(obj)
            except ZarrLakeError:
                return  # reported when it was first met
        else:
            assert ref.location is not None
            obj = describe(ref)
            whole = self.pack(ref.location)
            if isinstance(whole, Problem):
                return
            data = whole[ref.offset : ref.offset + ref.length]
        self.decoder.submit(obj, key, self.namer, ref.digest, data)

    def check_tables(self, obj: str, key: str, ref: ChunkRef, data: bytes, what: str) -> None:
        """The block tables a verified chunk object (or the shard it lies in) needs."""
        if ref.kind == RefKind.OBJECT and self.read_by_range(key, ref.length):
            self.check_table(obj, ref.digest, data, what)
        elif ref.location is not None and ref.location.startswith(CHUNKS):
            whole = self.pack(ref.location)  # a shard object (its inner chunks' home)
            if isinstance(whole, bytes) and len(whole) >= TABLE_MIN:
                self.check_table(ref.location, None, whole, what)

    def was_purged(self, ref: ChunkRef) -> bool:
        """Whether a purge removed the bytes of `ref` (counted, not a problem)."""
        if ref.kind == RefKind.INLINE or self.purged is None or self.purged(ref.digest) is None:
            return False
        self.purged_refs += 1
        return True

    def read_by_range(self, key: str, length: int) -> bool:
        """Whether the chunk object of `key` is one zarrlake gives a block table (as
        txn/writes.py decides): TABLE_MIN bytes or more, of an array with a sharding codec."""
        if length < TABLE_MIN:
            return False
        doc = self.namer.docs.get(f"{self.namer.node_of(key)}/zarr.json")
        return doc is not None and b"sharding_indexed" in doc

    def check_table(self, obj: str, object_digest: bytes | None, data: bytes, what: str) -> None:
        """Check the block table of chunk object `obj` (whose bytes are `data`) once: that
        it exists, decodes, is this object's, and its block digests match the bytes. With
        `object_digest` None the object's own digest is checked first (a shard object met
        through its inner chunks); a damaged object is reported by its chunks' checks."""
        if not self.first_visit(f"table of {obj}"):
            return
        if object_digest is None:
            try:
                object_digest = bytes.fromhex(obj[len(CHUNKS) :])
            except ValueError:
                return
            if digest(self.algo, data) != object_digest:
                return
        tkey = table_key(object_digest)
        try:
            raw = self.get(tkey)
        except NotFoundError:
            self.report(
                tkey,
                "missing",
                f"block table of {obj} ({what}): a ranged read of the object reads it whole",
            )
            return
        except ZarrLakeError as e:
            self.report(tkey, "corrupt", f"block table of {obj}: {e}")
            return
        try:
            table = BlockTable.decode(raw, object_digest, len(data), tkey)
        except CorruptionError as e:
            self.report(tkey, "corrupt", f"block table of {obj}: {e}")
            return
        good = BlockTable.build(table.algo, data, object_digest)
        if good.block_size != table.block_size or good.digests != table.digests:
            self.report(
                tkey, "corrupt", f"block table of {obj}: its block digests do not match the object"
            )

    def pack(self, location: str) -> bytes | Problem:
        got = self.packs.get(location)
        if got is None:
            try:
                got = self.get(location)
            except NotFoundError:
                got = Problem(location, "missing", "object not in object storage")
            except ZarrLakeError as e:
                got = Problem(location, "corrupt", str(e))
            self.packs[location] = got
        return got


def check_objects(
    store: ObjectStore,
    starts: list[tuple[str, str]],
    on_read: Callable[[str, int], None] | None = None,
    algo: Hash = Hash.SHA256,
    on_expired: Callable[[ExpiredHistory], None] | None = None,
    sources: SourceReader | None = None,
    only_sources: bool = False,
    purged: Callable[[bytes], object | None] | None = None,
    decode: bool = False,
    arrays: list[str] | None = None,
    on_decoded: Callable[[int, int], None] | None = None,
) -> list[Problem]:
    """Verify every object reachable from the commits in `starts` ((commit id, label) pairs)
    and return the problems found, each once; an empty list means the repository is intact.
    `on_read(key, size)` is called for each object read, `on_expired` for each place where
    `expire` ended a history (not a problem). `sources` reads virtual sources; with
    `only_sources`, only they are checked (format objects are still read to find them).
    `purged(digest)` names the purge that removed a digest's bytes: references to those
    are not problems (`zarrlake fsck --purges` proves the purges themselves).
    With `decode`, chunks are decoded too (of the arrays whose paths match a pattern of
    `arrays`, every array if None); `on_decoded(done, queued)` follows that."""
    if arrays is not None and not decode:
        raise InvalidInputError("arrays limits the chunks decoded: give it with decode=True")
    checker = _Checker(store, algo, on_read, sources, only_sources, purged)
    if decode and not only_sources:
        checker.decoder = _Decoder(checker.report, arrays, on_decoded)
    try:
        for cid, rec in checker.commits(starts):
            checker.check_commit(cid, rec)
    except BaseException:
        if checker.decoder is not None:
            checker.decoder.pool.shutdown(cancel_futures=True)
        raise
    if checker.decoder is not None:
        checker.decoder.finish()
    for boundary in checker.expired:
        if on_expired is not None:
            on_expired(boundary)
    return checker.problems
