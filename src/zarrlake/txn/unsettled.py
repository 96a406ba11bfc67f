"""The chunk objects of unfinished writers' fragments, checked by a commit that includes them.

A writer settles each flush with the garbage collector once its fragment is registered
(`WriteGuard.settle`, txn/writes.py): it waits out a sweep that overlapped its uploads and
puts back, or withdraws the write of, an object the sweep deleted, deduplicated ones (an
object found already there, so not uploaded) included. A writer that died or failed between
registering and settling never did, so its fragment may name an object a sweep deleted. A
commit including such a writer (`unfinished="include"`) checks those objects after its own
wait for sweeps: no delete of an earlier sweep can land then, and a later sweep keeps what
the sealed session names. One that is gone cannot be put back (its bytes died with the
writer): the commit refuses, naming the writer and the chunks. Commits without unfinished
writers check nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zarrlake.errors import UnfinishedWritersError
from zarrlake.format.fragment import FragmentIndex, FragmentRecord
from zarrlake.format.manifest import ManifestRange, RangeView
from zarrlake.txn.refusals import name_keys
from zarrlake.vc.chunk_keys import KeyNamer
from zarrlake.vc.objects import Objects
from zarrlake.vc.reach import kind_of, manifest_refs, ref_key


@dataclass(frozen=True)
class Unsettled:
    """The fragments of the unfinished writers a commit includes, with how to name them."""

    fragments: list[FragmentRecord]
    described: dict[str, str]  # writer -> how the refusal names it
    namer: KeyNamer


def check(
    session_id: str,
    unsettled: Unsettled | None,
    objects: Objects,
    read_index: Callable[[FragmentRecord], FragmentIndex],
    writes: ManifestRange | RangeView,
) -> None:
    """Refuse (UnfinishedWritersError) if an object that `unsettled`'s fragments name, and
    the commit's `writes` still name, is missing; call it once no sweep can delete any more."""
    if unsettled is None or not unsettled.fragments:
        return
    indexes = [(rec.writer, read_index(rec).writes) for rec in unsettled.fragments]
    wanted = sorted(  # (fragments' own objects are read by the gather, or held in records)
        {key for _, rng in indexes for key in manifest_refs(rng) if kind_of(key) == "chunks"}
    )
    there = objects.map(objects.store.exists, wanted)
    missing = {k for k, ok in zip(wanted, there, strict=True) if not ok}
    if not missing:
        return
    kept = manifest_refs(writes if isinstance(writes, ManifestRange) else writes.take(slice(None)))
    missing &= kept.keys()  # a later write of the session replaced the reference
    if not missing:
        return
    lost: dict[str, list[str]] = {}  # writer -> chunk keys naming a missing object
    for writer, rng in indexes:
        for i in range(len(rng)):
            if ref_key(rng.ref_at(i)) in missing:
                lost.setdefault(writer, []).append(bytes(rng.keys[i]).decode())
    workers = [
        f"{unsettled.described.get(w, f'worker {w}')}: "
        f"{name_keys(unsettled.namer, sorted(set(keys)))}"
        for w, keys in sorted(lost.items())
    ]
    error = UnfinishedWritersError(
        f"session {session_id}: {len(workers)} worker(s) did not finish, and a garbage "
        "collection deleted chunk objects they staged before they could check them (the "
        f"first: {min(missing)}): {'; '.join(workers)}. Nothing was committed. To commit: "
        "write those workers' part again from a new worker (the commit then leaves them out), "
        "or commit(..., unfinished='discard') to leave out everything they staged",
        workers,
    )
    error.choice = "discard"
    raise error
