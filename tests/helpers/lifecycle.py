"""Helpers for the lifecycle tests: an independent mark-and-sweep, fsck, guarded writes."""

from __future__ import annotations

import os

import numpy as np

import zarrlake as zl
from zarrlake.format.chunk_ref import RefKind, chunk_object_key
from zarrlake.format.fragment import FragmentIndex, FragmentRecord
from zarrlake.format.manifest import ManifestRange
from zarrlake.format.snapshot import SnapshotRoot
from zarrlake.vc.gc_protocol import WriteGuard

PREFIXES = (
    "chunks/",
    "packs/",
    "fragments/",
    "manifests/",
    "snapshots/",
    "changes/",
    "commits/",
)


def all_objects(repo: zl.Repo) -> set[str]:
    store = repo._context.object_store
    return {k for p in PREFIXES for k in store.list(p)}


def reachable(repo: zl.Repo) -> set[str]:
    """What a full mark computes, written independently of zarrlake.vc.reach: everything
    reachable from branches, tags and open sessions (bases and staged chunk objects)."""
    ctx = repo._context
    objects = ctx.objects
    live: set[str] = set()
    starts = list(repo.list_branches().values()) + list(repo.list_tags().values())
    now = ctx.clock()
    for rec in ctx.records.scan():
        if rec.status == "committing" or (rec.status == "open" and rec.expires_at > now):
            starts.append(rec.base)
            live |= staged_objects(repo, rec.id)
    while starts:
        cid = starts.pop()
        if f"commits/{cid}" in live or objects.is_expired(cid):
            continue
        rec = objects.read_commit(cid)
        live |= {f"commits/{cid}", f"changes/{rec.changes}", f"snapshots/{rec.snapshot}"}
        starts.extend(rec.parents)
        root = objects.read(SnapshotRoot, rec.snapshot)
        for mid in root.ranges.ids:
            live.add(f"manifests/{mid}")
            rng = objects.read(ManifestRange, mid)
            for i in range(len(rng)):
                ref = rng.ref_at(i)
                if ref.kind == RefKind.OBJECT:
                    live.add(chunk_object_key(ref.digest))
                elif ref.kind == RefKind.LOCATION:
                    live.add(ref.location)
    return live


def staged_objects(repo: zl.Repo, session_id: str) -> set[str]:
    """The objects a session's staged fragments name: the fragment objects and the chunk
    objects their indexes refer to."""
    ctx = repo._context
    out: set[str] = set()
    for _, v, _ in ctx.meta.scan(ctx.stage_partition(session_id), prefix=b"f"):
        rec = FragmentRecord.decode(v)
        if rec.blob is None:
            data = ctx.object_store.get(rec.location, rec.span)
            out.add(rec.location)
        else:
            data = rec.blob[rec.index_offset :]
        writes = FragmentIndex.decode(rec.index_id, data).writes
        for i in range(len(writes)):
            ref = writes.ref_at(i)
            if ref.kind == RefKind.OBJECT:
                out.add(chunk_object_key(ref.digest))
    return out


def unreachable(repo: zl.Repo) -> set[str]:
    return all_objects(repo) - reachable(repo)


def fsck(repo: zl.Repo) -> list[str]:
    """The repository check's problems, as strings. Missing parents that were expired are
    left out until the check itself learns about expiry (requested from the lead)."""
    problems = repo.fsck()
    objects = repo._context.objects
    return [
        str(p)
        for p in problems
        if not (
            p.kind == "missing"
            and p.object.startswith("commits/")
            and objects.is_expired(p.object.split("/", 1)[1])
        )
    ]


def chunk(seed: int, size: int = 20_000) -> bytes:
    """Deterministic incompressible bytes (big enough to be a chunk object)."""
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def guarded_write(session: zl.Session, items: list[tuple[str, bytes]]) -> None:
    """A write that follows the sweep protocol: phase read before uploading, settle after
    staging and flushing (what the session write path is asked to do itself)."""
    guard = WriteGuard(session._engine.context)
    token = guard.begin()
    changes = [session._engine.prepare(k, d) for k, d in items]
    session._engine.stage(changes)
    session.flush()
    uploads = [
        (chunk_object_key(ref.digest), data)
        for (_, ref), (_, data) in zip(changes, items, strict=True)
        if ref is not None and ref.kind == RefKind.OBJECT
    ]
    guard.settle(token, uploads)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
