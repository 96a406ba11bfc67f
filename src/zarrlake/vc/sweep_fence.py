"""The fence on a garbage collector's deletes: whoever ends a sweep in its collector's place
(the collector died, or stopped renewing its lease) first makes every delete that collector
may still send harmless, so that no object anyone relies on afterwards can be deleted by
a collector that was paused between its last check and its deletes.

Two mechanisms, one per kind of store, behind one interface:

- Object stores with conditional deletes (S3, memory): before its fence check, the
  collector reads each object's entity tag and records the tags of its batch in the gc
  partition (`GcState.record`); it then deletes each object only while it still has that
  tag (`ObjectStore.delete_if`, one request per object, never repeated). Ending the sweep
  in its place, a process writes every recorded object that still has its recorded tag
  again under a new tag (`ObjectStore.retag`): a delete sent later is refused. A delete
  that landed before is final, and a process that needs that object after the sweep finds
  it missing and writes it again (`WriteGuard.settle`, commits' put-if-absent).
- A local directory: the collector moves each object into its sweep's bin by a rename
  (`LocalObjectStore.move_to_bin`), which needs the bin to exist; ending the sweep in its
  place, a process renames the bin away and puts back what it holds (`seal_bin`), so a
  rename sent later fails. The collector empties the bin once it ended its sweep itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from zarrlake.errors import ConfigurationError, GcBusyError, NotFoundError
from zarrlake.storage.base import ObjectStore
from zarrlake.storage.local import LocalObjectStore

PROBE = "gc-sweeps/probe-"
"""Where a sweep checks that the store honours conditional deletes (`Fence.open`)."""
Map = Callable[[Callable[[str], object], list[str]], Iterable[object]]
"""Runs a function over keys (in parallel where the caller can: `Objects.map`)."""


class SweepEnded(GcBusyError):
    """Another process ended this collector's sweep (it was taken for dead or stalled):
    its fence is sealed and it deletes nothing more."""


def _local(store: ObjectStore) -> LocalObjectStore | None:
    """The local directory under `store`'s wrappers, if it is one."""
    while not isinstance(store, LocalObjectStore) and hasattr(store, "inner"):
        store = store.inner
    return store if isinstance(store, LocalObjectStore) else None


def _serial(fn: Callable[[str], object], keys: list[str]) -> list[object]:
    return [fn(k) for k in keys]


@dataclass(frozen=True)
class FencedDeletes:
    """One batch of a sweep's deletes: the sweep (its bin's name) and, per object, the
    entity tag it must still have ("" on a local directory). Picklable: a Spark task runs
    its part where the objects are (`run`)."""

    sweep: str
    tags: dict[str, str]

    def run(
        self, store: ObjectStore, keys: list[str] | None = None, map: Map = _serial
    ) -> list[str]:
        """Delete `keys` (default: all) under the fence; the keys this call deleted.
        SweepEnded if the sweep was ended meanwhile (the rest of the batch stays)."""
        keys = list(self.tags) if keys is None else keys
        local = _local(store)
        if local is not None:
            moved = local.move_to_bin(self.sweep, keys)
            if moved is None:
                raise SweepEnded(f"sweep {self.sweep} was ended by another process; run gc again")
            return moved
        done = map(lambda key: store.delete_if(key, self.tags[key]), keys)
        return [k for k, ok in zip(keys, done, strict=True) if ok]


class Fence:
    """The collector's side of one sweep's fence (see the module docstring)."""

    def __init__(self, store: ObjectStore, sweep: str, map: Map = _serial) -> None:
        self.store = store
        self.sweep = sweep
        self.map = map
        self.local = _local(store)

    def open(self) -> None:
        """Before the sweep's first delete: make its bin (a local directory), or check that
        the store honours a conditional delete (a store that ignored If-Match would delete
        unfenced: ConfigurationError)."""
        if self.local is not None:
            self.local.open_bin(self.sweep)
            return
        probe = f"{PROBE}{self.sweep}"
        self.store.put(probe, b"")
        try:
            honoured = not self.store.delete_if(probe, '"not-its-tag"')
            honoured = honoured and self.store.exists(probe)
        finally:
            self.store.delete(probe)
        if not honoured:
            raise ConfigurationError(
                f"{self.store.url} deleted an object whose entity tag did not match (it "
                "ignores If-Match on DeleteObject): garbage collection's deletes cannot be "
                "fenced there, so it does not delete; use a store that honours If-Match "
                "(AWS S3, MinIO, moto)"
            )

    def prepare(self, keys: list[str]) -> FencedDeletes:
        """The batch of `keys` with what must be recorded before the fence is checked (the
        objects' entity tags; missing ones are left out)."""
        if self.local is not None:
            return FencedDeletes(self.sweep, dict.fromkeys(keys, ""))

        def tag(key: str) -> str | None:
            try:
                return self.store.tag(key)
            except NotFoundError:
                return None

        tags = dict(zip(keys, self.map(tag, keys), strict=True))
        return FencedDeletes(self.sweep, {k: t for k, t in tags.items() if t is not None})

    def delete(self, batch: FencedDeletes) -> list[str]:
        """Delete the batch under the fence; the keys deleted (SweepEnded once sealed)."""
        return batch.run(self.store, map=self.map)

    def close(self) -> None:
        """After the collector ended its sweep itself: empty its bin."""
        if self.local is not None:
            self.local.empty_bin(self.sweep)


def seal(store: ObjectStore, sweep: str, recorded: dict[str, str], map: Map = _serial) -> None:
    """End sweep `sweep`'s fence in its collector's place: after this returns, no delete the
    collector sent or will send can remove an object that exists now. `recorded`: the
    entity tags its batches recorded. Safe to repeat, and to run in several processes."""
    local = _local(store)
    if local is not None:
        local.seal_bin(sweep)
        return

    def protect(key: str) -> None:
        try:
            if store.tag(key) == recorded[key]:
                store.retag(key)
        except NotFoundError:  # its delete landed before: whoever needs it writes it again
            pass

    list(map(protect, sorted(recorded)))


def leftover_bins(store: ObjectStore) -> list[str]:
    """Bins of a local directory left by sweeps that ended (sealed ones included)."""
    local = _local(store)
    return local.bins() if local is not None else []


def clear_bin(store: ObjectStore, name: str, sealed: bool) -> None:
    """Deal with a leftover bin: restore a sealed one's objects, or empty one whose sweep
    ended itself."""
    local = _local(store)
    if local is None:
        return
    if sealed:
        local.seal_bin(name)
    else:
        local.empty_bin(name)
