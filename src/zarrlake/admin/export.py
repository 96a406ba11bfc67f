"""Exporting a version as a plain Zarr v3 hierarchy (`Repo.export`, `zarrlake export`).

The tree at a commit (or the arrays chosen, with the groups above them) is written to a
directory or an object-store prefix under the keys zarr itself uses, so zarr-python and
xarray open it with no zarrlake installed. Chunk bytes are copied as they are stored, never
decoded and encoded again; each is checked against its digest on the way (a damaged chunk
fails the export rather than reaching the copy). A sharded array stored as inner chunks is
written as the shards zarr reads: the present inner chunks and an index made for them, as
the repository's own reads assemble them. Virtual chunks are refused (nothing is written),
or read from their sources (checked against the identity taken at import) and written.

Chunks go first, side by side on a thread pool (between local stores, at most two threads a
core and small chunks a batch to a task; each checked on its worker, where the hash runs
without the GIL), then the metadata
documents, the root group's last: a reader that opens the destination while an export runs
finds no hierarchy, or a partial one without the chunks' arrays, never an array whose chunks
are not all there.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from zarrlake.connection import CONFIG_KEY, RepoContext
from zarrlake.errors import AlreadyExistsError, InvalidInputError, NotFoundError
from zarrlake.format.chunk_ref import ChunkRef, RefKind
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.shard import SEP, ShardRef, layout_of
from zarrlake.format.snapshot import SnapshotRoot, node_path
from zarrlake.metastore.checks import prefix_upper_bound
from zarrlake.storage import open_storage
from zarrlake.storage.base import ObjectStore
from zarrlake.vc.chunk_keys import load_doc
from zarrlake.vc.objects import Objects
from zarrlake.vc.snapshot_view import SnapshotView

Virtual = Literal["refuse", "materialize"]
Progress = Callable[[int, int], None] | None
"""Called as progress(bytes written so far, bytes in all)."""
WORKERS = 16
"""Chunks copied at once by default."""
LOCAL_PER_CORE = 2
"""Between local stores, chunks copied at once per core, at most: the copy is CPU work there
(memory copies and the hash; the bytes are mostly in the page cache), and more threads than
that only switch among themselves and push each other's bytes out of the CPU's cache (with
16 threads on 2 cores, an export of 1 MiB chunks spent 5-8% more CPU than with 4: EXPORT)."""


@dataclass(frozen=True)
class ExportReport:
    """What `Repo.export` wrote."""

    commit: str
    dest: str
    arrays: int
    documents: int
    chunks: int
    """Chunk (or shard) objects written."""
    bytes: int
    """Bytes of the chunk objects written."""
    materialized: int
    """Virtual chunks read from their sources and written."""
    seconds: float

    def to_json(self) -> dict:
        """The report as a plain dict, for `--json` output."""
        return asdict(self)


@dataclass(frozen=True)
class Part:
    """One array's share of the chunk entries of a snapshot: ranges [start, stop) of its
    range index under the array's prefix (a unit of work for a thread or a Spark task)."""

    path: str
    start: int
    stop: int
    bytes: int


def selected_documents(root: SnapshotRoot, arrays: list[str] | None) -> dict[str, bytes]:
    """The metadata documents to write: every node's, or the chosen nodes', the nodes below
    them, and the groups above them (so the hierarchy opens from its root)."""
    if arrays is None:
        return dict(root.meta)
    out: dict[str, bytes] = {}
    for path in arrays:
        key = f"{path}/zarr.json"
        if key not in root.meta:
            raise NotFoundError(
                f"no node {path!r} in this version; run `zarrlake ls REF` to see the tree"
            )
        parts = path.split("/")
        for n in range(len(parts)):
            above = "/".join(parts[:n])
            above_key = f"{above}/zarr.json" if above else "zarr.json"
            if above_key in root.meta:
                out[above_key] = root.meta[above_key]
        for k, doc in root.meta.items():
            if k == key or k.startswith(f"{path}/"):
                out[k] = doc
    return out


def array_paths(documents: dict[str, bytes]) -> list[str]:
    """The arrays among the documents' nodes."""
    return sorted(
        node_path(k) for k, doc in documents.items() if load_doc(doc).get("node_type") == "array"
    )


def ranges_under(root: SnapshotRoot, prefix: bytes) -> range:
    """Positions in the snapshot's range index of the ranges that may hold keys under
    `prefix`."""
    idx = root.ranges
    if not len(idx):
        return range(0)
    stop = prefix_upper_bound(prefix)
    lo = idx.locate(prefix)
    hi = len(idx) if stop is None else int(np.searchsorted(idx.first_keys, stop, side="left"))
    return range(lo, max(hi, lo + 1))


def plan_parts(
    objects: Objects, root: SnapshotRoot, arrays: list[str], virtual: Virtual, ranges_per: int = 1
) -> list[Part]:
    """The work of exporting `arrays`: `ranges_per` ranges of each array's keys per part.
    Reads every range once (its kinds and lengths): virtual chunks with `virtual="refuse"`
    raise here, before anything is written."""
    parts = []
    virtual_found = 0
    for path in arrays:
        prefix = f"{path}/".encode()
        stop = prefix_upper_bound(prefix)
        todo = list(ranges_under(root, prefix))
        for at in range(0, len(todo), ranges_per):
            chosen = todo[at : at + ranges_per]
            size = 0
            for i in chosen:
                rng = objects.read(ManifestRange, root.ranges.ids[i])
                sl = rng.key_slice(prefix, stop)
                size += int(np.asarray(rng.length)[sl].sum())
                virtual_found += int((np.asarray(rng.kind)[sl] == RefKind.VIRTUAL).sum())
            parts.append(Part(path, chosen[0], chosen[-1] + 1, size))
    if virtual_found and virtual == "refuse":
        raise InvalidInputError(
            f"{virtual_found} chunk(s) of this version are virtual (their bytes are in files "
            "outside the repository): export with virtual='materialize' (--materialize) to "
            "read them from their sources and write them"
        )
    return parts


def part_items(
    objects: Objects, root: SnapshotRoot, sid: str, part: Part
) -> Iterator[tuple[str, ChunkRef | ShardRef]]:
    """The (key, reference) a reader of the array sees, for every key whose first entry
    lies in the part's ranges: an entry of its own, or a shard assembled from its inner
    chunks (read on into later ranges when they continue there), as the repository's reads
    resolve them (a whole entry wins over inner chunks)."""
    view = SnapshotView(objects, root, sid)
    doc = root.meta[f"{part.path}/zarr.json"]
    layout = layout_of(doc)
    prefix = f"{part.path}/".encode()
    stop = prefix_upper_bound(prefix)
    group: str | None = None
    refs: dict[str, ChunkRef] = {}
    whole: str | None = None  # the last key with an entry of its own
    first = True
    for i in range(part.start, part.stop):
        rng = view.range(i)
        sl = rng.key_slice(prefix, stop)
        for j in range(sl.start, sl.stop):
            key = bytes(rng.keys[j]).decode()
            shard, sep, name = key.partition(SEP)
            started_here = not first
            first = False
            if not sep:
                if group is not None:
                    yield from _assembled(layout, group, refs)
                    group, refs = None, {}
                whole = key
                yield key, rng.ref_at(j)
                continue
            if shard == whole:
                continue  # a whole entry wins over inner chunks
            if shard != group:
                if group is not None:
                    yield from _assembled(layout, group, refs)
                group, refs = shard, {}
                if not started_here and _began_before(view, shard, rng.first_key, part):
                    group = None
                    whole = shard  # skip its entries: the part before handles it
                    continue
            refs[name] = rng.ref_at(j)
    if group is not None:  # it may go on into the next part's ranges: read it whole
        yield from _assembled(layout, group, view.inner(group))


def _began_before(view: SnapshotView, shard: str, first_key: bytes, part: Part) -> bool:
    """Whether the shard whose inner entry opens this part has entries (or a whole entry)
    in earlier ranges: the part before handles it."""
    if part.start == 0:
        return False
    if view.get(shard) is not None:
        return True
    names = view.inner(shard)
    return any(f"{shard}{SEP}{n}".encode() < first_key for n in names)


def _assembled(
    layout: Any, shard: str, refs: dict[str, ChunkRef]
) -> Iterator[tuple[str, ShardRef]]:
    if layout is None or not refs:
        return  # (inner chunks of an array not split: no reader sees them)
    ref = ShardRef.assemble(layout, refs)
    if ref is not None:
        yield shard, ref


def open_destination(
    ctx: RepoContext, dest: str | os.PathLike, storage_options: dict | None, overwrite: bool
) -> tuple[str, ObjectStore]:
    """(URL, store) of the destination, checked: never a repository, never inside this
    one, and empty (with `overwrite`, emptied first)."""
    if not isinstance(dest, str | os.PathLike) or not str(dest):
        raise InvalidInputError(f"the export destination must be a path or URL, not {dest!r}")
    url = str(dest)
    if "://" not in url or url.startswith("file://"):
        path = Path(url.removeprefix("file://")).expanduser().absolute()
        path.mkdir(parents=True, exist_ok=True)
        url = str(path)
        inside = ctx.spec.is_local and (
            path == Path(ctx.spec.location) or Path(ctx.spec.location) in path.parents
        )
    else:
        inside = url.rstrip("/") == ctx.spec.location.rstrip("/") or url.startswith(
            ctx.spec.location.rstrip("/") + "/"
        )
    if inside:
        raise InvalidInputError(
            f"cannot export into the repository itself ({url}); give another destination"
        )
    store = open_storage(url, **(storage_options or {}))
    if store.exists(CONFIG_KEY):
        raise AlreadyExistsError(f"{url} holds a zarrlake repository: export elsewhere")
    held = next(iter(store.list("")), None)
    if held is not None:
        if not overwrite:
            raise AlreadyExistsError(
                f"{url} is not empty (it holds {held}): export to an empty place, or pass "
                "overwrite=True (--overwrite) to delete what it holds first"
            )
        keys = list(store.list(""))
        for i in range(0, len(keys), 1000):
            store.delete_many(keys[i : i + 1000])
    return url, store


BATCH_BYTES = 1 << 20
"""Between local stores, consecutive chunks smaller than this go to a worker together, up to
this many bytes and BATCH_ITEMS chunks (a task per chunk costs more than copying a small
one). A remote store gets a task per chunk: each waits on the network, and a batch's
requests would go one after another while other workers sit idle."""
BATCH_ITEMS = 64


def copy_parts(
    objects: Objects,
    root: SnapshotRoot,
    sid: str,
    parts: Iterable[Part],
    dest: ObjectStore,
    pool: ThreadPoolExecutor,
    in_flight: int,
    done: Callable[[int], None] | None = None,
) -> tuple[int, int, int]:
    """Copy the chunks of `parts` to `dest` on `pool`, at most `in_flight` batches at once
    across all the parts (the pool never waits for one part to end before the next starts);
    returns (chunks, bytes, virtual chunks materialized). The first failure stops it."""
    counts = [0, 0, 0]
    slots = threading.Semaphore(in_flight)  # (cheaper than a `wait` over every pending task)
    failed = threading.Event()

    def one(batch: list[tuple[str, ChunkRef | ShardRef]]) -> tuple[int, int, int]:
        size = virtual = 0
        try:
            for key, ref in batch:
                # verified against its digest, here on the worker (the hash runs without the
                # GIL, beside the other workers' reads and writes: one thread per chunk)
                data = objects.read_ref(ref, f"key {key!r}", spread=False)
                dest.put(key, data)  # (bytes or a view of them: no copy made)
                size += len(data)
                virtual += isinstance(ref, ChunkRef) and ref.kind == RefKind.VIRTUAL
                if done is not None:
                    done(len(data))
        except BaseException:
            failed.set()
            raise
        finally:
            slots.release()
        return len(batch), size, virtual

    def add(f: Future[tuple[int, int, int]]) -> None:
        for i, n in enumerate(f.result()):
            counts[i] += n

    local = not (dest.remote or objects.store.remote)
    running: deque[Future[tuple[int, int, int]]] = deque()
    try:
        for batch in _batches(objects, root, sid, parts, BATCH_BYTES if local else 0):
            slots.acquire()
            if failed.is_set():
                break  # (its future raises below)
            running.append(pool.submit(one, batch))
            while running and running[0].done():
                add(running.popleft())
        while running:
            add(running.popleft())
    except BaseException:
        for f in running:
            f.cancel()
        raise
    return counts[0], counts[1], counts[2]


def _batches(
    objects: Objects, root: SnapshotRoot, sid: str, parts: Iterable[Part], most: int
) -> Iterator[list[tuple[str, ChunkRef | ShardRef]]]:
    """The items of `parts` in order, consecutive ones together up to `most` bytes (and
    BATCH_ITEMS items; `most=0`: one at a time)."""
    batch: list[tuple[str, ChunkRef | ShardRef]] = []
    size = 0
    for part in parts:
        for key, ref in part_items(objects, root, sid, part):
            batch.append((key, ref))
            size += ref.length
            if size >= most or len(batch) >= BATCH_ITEMS:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def threads_for(workers: int, objects: Objects, dest: ObjectStore) -> int:
    """Threads to copy with, given `workers` asked for: all of them to or from a remote
    store (each waits on the network), at most LOCAL_PER_CORE per core between local ones."""
    if dest.remote or objects.store.remote:
        return workers
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(workers, LOCAL_PER_CORE * (cores or 1)))


def write_documents(dest: ObjectStore, documents: dict[str, bytes]) -> None:
    """Write the metadata documents, deepest first and the root group's last."""
    for key in sorted(documents, key=lambda k: (-k.count("/"), k)):
        if key != "zarr.json":
            dest.put(key, documents[key])
    if "zarr.json" in documents:
        dest.put("zarr.json", documents["zarr.json"])


@dataclass(frozen=True)
class Prepared:
    """An export planned and its destination opened (checked, empty)."""

    snapshot: str
    root: SnapshotRoot
    documents: dict[str, bytes]
    arrays: list[str]
    parts: list[Part]
    url: str
    store: ObjectStore

    def report(
        self, commit_id: str, dest: str | os.PathLike, counts: Sequence[int], began: float
    ) -> ExportReport:
        """The report of this export, given its (chunks, bytes, virtual) counts and when it
        began (time.monotonic)."""
        return ExportReport(
            commit=commit_id,
            dest=str(dest),
            arrays=len(self.arrays),
            documents=len(self.documents),
            chunks=counts[0],
            bytes=counts[1],
            materialized=counts[2],
            seconds=time.monotonic() - began,
        )


def prepare(
    ctx: RepoContext,
    commit_id: str,
    dest: str | os.PathLike,
    arrays: list[str] | None,
    storage_options: dict | None,
    virtual: Virtual,
    overwrite: bool,
    ranges_per: int = 1,
) -> Prepared:
    """Plan the export of `commit_id` (raising before anything is written if it cannot
    run) and open its destination."""
    if virtual not in ("refuse", "materialize"):
        raise InvalidInputError(f"virtual must be 'refuse' or 'materialize', not {virtual!r}")
    chosen = None if arrays is None else sorted({str(a).strip("/") for a in arrays})
    sid = ctx.objects.snapshot_of(commit_id)
    root = ctx.objects.read(SnapshotRoot, sid)
    documents = selected_documents(root, chosen)
    paths = array_paths(documents)
    parts = plan_parts(ctx.objects, root, paths, virtual, ranges_per)
    url, store = open_destination(ctx, dest, storage_options, overwrite)
    return Prepared(sid, root, documents, paths, parts, url, store)


def _check_workers(workers: object) -> None:
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise InvalidInputError(f"workers must be a positive integer, not {workers!r}")


def export(
    ctx: RepoContext,
    commit_id: str,
    dest: str | os.PathLike,
    *,
    arrays: list[str] | None = None,
    storage_options: dict | None = None,
    virtual: Virtual = "refuse",
    overwrite: bool = False,
    workers: int = WORKERS,
    progress: Progress = None,
) -> ExportReport:
    """Write the tree at `commit_id` (or `arrays` of it) to `dest`; see the module."""
    began = time.monotonic()
    _check_workers(workers)
    plan = prepare(ctx, commit_id, dest, arrays, storage_options, virtual, overwrite)
    objects, root, sid, store = ctx.objects, plan.root, plan.snapshot, plan.store
    total = sum(p.bytes for p in plan.parts)
    written = [0]
    lock = threading.Lock()

    def done(n: int) -> None:
        assert progress is not None
        with lock:
            written[0] += n
            now = written[0]
        progress(now, max(total, now))

    try:
        threads = threads_for(workers, objects, store)
        with ThreadPoolExecutor(threads, thread_name_prefix="zarrlake-export") as pool:
            tick = None if progress is None else done
            counts = copy_parts(objects, root, sid, plan.parts, store, pool, 4 * threads, tick)
        write_documents(store, plan.documents)
    finally:
        store.close()
    return plan.report(commit_id, dest, counts, began)
