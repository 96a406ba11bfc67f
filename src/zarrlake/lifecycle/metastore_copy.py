"""Moving a repository between metastores (SQLite, PostgreSQL, its own bucket): copy its refs,
session records, garbage-collection records and any staged records still kept, check the
copy key by key, then record the new metastore's kind in the repository's config, so the
repository opens with the new one from then on (and refuses the old one, whose copy stays
as it was). Offline: no session may be open or committing, and no collector running.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from zarrlake.connection import CONFIG_KEY, RepoContext
from zarrlake.errors import (
    AlreadyExistsError,
    CorruptionError,
    InvalidInputError,
    ZarrLakeError,
)
from zarrlake.metastore.base import MetaStore
from zarrlake.metastore.choice import BUCKET, kind_of, open_for
from zarrlake.session_records import Status
from zarrlake.storage.base import ObjectStore
from zarrlake.vc.gc_protocol import LOCK

BATCH = 1000
"""Keys written per set_many (one transaction; on the bucket, one head swap)."""


@dataclass(frozen=True)
class CopyReport:
    """What `copy_metastore` copied and checked."""

    source: str
    target: str
    refs: int
    sessions: int
    gc_records: int
    staged_records: int
    partitions: int
    switched: bool
    """Whether the repository's config now names the target's kind."""
    seconds: float

    def to_dict(self) -> dict:
        """The report as a plain dict, for `--json` output."""
        return asdict(self)


def _pages(meta: MetaStore, partition: str) -> Iterator[list[tuple[bytes, bytes]]]:
    batch: list[tuple[bytes, bytes]] = []
    for key, value, _ in meta.scan(partition):
        batch.append((key, value))
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _copy(source: MetaStore, target: MetaStore, partition: str) -> int:
    n = 0
    for batch in _pages(source, partition):
        target.set_many(partition, batch)
        n += len(batch)
    return n


def _verify(source: MetaStore, target: MetaStore, partition: str) -> None:
    theirs = target.scan(partition)
    for key, value, _ in source.scan(partition):
        got = next(theirs, None)
        if got is None or got[0] != key or got[1] != value:
            raise CorruptionError(
                f"the copy of {partition}/{key!r} in {target.url} differs from the original; "
                "the repository still uses its old metastore"
            )
    extra = next(theirs, None)
    if extra is not None:
        raise CorruptionError(f"the copy of {partition} in {target.url} has extra key {extra[0]!r}")


def _check_offline(ctx: RepoContext) -> list[str]:
    """The ids of every session; raises unless the repository is offline."""
    now = ctx.clock()
    ids, busy = [], []
    for rec in ctx.records.scan():
        ids.append(rec.id)
        live = rec.status == Status.OPEN and rec.expires_at > now
        if live or rec.status == Status.COMMITTING:
            busy.append(rec.id)
    if busy:
        raise ZarrLakeError(
            f"{len(busy)} session(s) are open or committing ({', '.join(busy[:3])}...): commit "
            "or abandon them first; the metastore is copied offline"
        )
    if ctx.meta.get(ctx.partition("gc"), LOCK) is not None:
        raise ZarrLakeError(
            "a garbage collector holds its lock (or died holding it: `zarrlake gc` takes it "
            "over): the metastore is copied offline"
        )
    return ids


def _switch(store: ObjectStore, kind: str) -> None:
    """Record `kind` in the config, refusing if the config changed meanwhile."""
    try:
        data, tag = store.get_tagged(CONFIG_KEY)
    except ZarrLakeError:  # a local directory: no conditional updates, one machine
        data, tag = store.get(CONFIG_KEY), None
    config = json.loads(data)
    config["metastore"] = kind
    new = json.dumps(config).encode()
    if tag is None:
        store.put(CONFIG_KEY, new)
    else:
        store.put_if(CONFIG_KEY, new, tag)


def open_target(ctx: RepoContext, to: str) -> MetaStore:
    """The metastore `to` names for this repository ("bucket": the one in its storage)."""
    if not isinstance(to, str) or not to:
        raise InvalidInputError(f"target metastore must be a URL or 'bucket', not {to!r}")
    if to == BUCKET and ctx.spec.is_local:
        raise InvalidInputError(
            "a repository in a local directory cannot keep its metastore in a bucket (no "
            "conditional writes there): copy its objects to s3:// first, then open it there"
        )
    if to == ctx.spec.metastore:
        raise InvalidInputError(f"the repository already uses {to}")
    return open_for(ctx.spec.location, dict(ctx.spec.storage_options), to)


def copy_metastore(ctx: RepoContext, to: str, switch: bool = True) -> CopyReport:
    """Copy the repository's metastore records to `to`, verify them, and (if `switch`)
    make the repository use `to` from now on; see the module docstring."""
    began = time.monotonic()
    target = open_target(ctx, to)
    try:
        refs = ctx.partition("refs")
        if any(target.scan(refs, limit=1)):
            raise AlreadyExistsError(
                f"{to} already holds refs of repository {ctx.repo_id}: copy into an empty one"
            )
        sessions = _check_offline(ctx)
        stages = [ctx.stage_partition(sid) for sid in sessions]
        with ThreadPoolExecutor(8) as pool:  # which sessions still keep staged records
            kept = list(pool.map(lambda p: any(ctx.meta.scan(p, limit=1)), stages))
        stages = [p for p, k in zip(stages, kept, strict=True) if k]
        counts = {}
        # Refs last: a copy that stops half-way holds no refs, so it can be run again.
        for partition in [ctx.partition("sessions"), ctx.partition("gc"), *stages, refs]:
            counts[partition] = _copy(ctx.meta, target, partition)
            _verify(ctx.meta, target, partition)
        if switch:
            _switch(ctx.object_store, kind_of(to))
    finally:
        target.close()
    return CopyReport(
        source=kind_of(ctx.spec.metastore),
        target=kind_of(to),
        refs=counts[refs],
        sessions=counts[ctx.partition("sessions")],
        gc_records=counts[ctx.partition("gc")],
        staged_records=sum(counts[p] for p in stages),
        partitions=len(counts),
        switched=switch,
        seconds=time.monotonic() - began,
    )
