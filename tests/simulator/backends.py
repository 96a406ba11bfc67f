"""The simulated world's storage: one in-memory object store and one metastore shared by every
simulated process, each process reaching them through wrappers that stop at every call for
the scheduler and inject the fault it drew.

The object store is a dict (sorted listings, no threads). The metastore is any `MetaStore`
made by the run's `meta_factory` (the in-memory one by default), so another backend (the
bucket-only metastore) runs under the same simulation. Processes open the repository at
`sim://<run>` like any other: the `sim` scheme is registered for both kinds of backend and
hands out wrappers over the current run's stores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, cast

from tests.simulator.faults import Fault
from zarrlake import metastore, storage
from zarrlake.errors import CASFailedError, NotFoundError, TransientError
from zarrlake.metastore.base import Call, MetaStore, T, WrapperMetaStore
from zarrlake.metastore.bucket.store import BucketMetaStore
from zarrlake.storage.base import ByteRange, ObjectStoreBackend, WrapperObjectStore

if TYPE_CHECKING:
    from tests.simulator.protocols import World


class DictObjectStore(ObjectStoreBackend):
    """Objects in a dict; listings in key order. Conditional writes and deletes as S3 has
    them (an ETag is the MD5 of the bytes, with "-1" for an upload in parts; put-if-match,
    put-if-absent, delete-if-match), and each object's last-modified time from the
    service's clock (`clock`: the simulated time, which no process's skew moves)."""

    def __init__(self, url: str, clock: Callable[[], float] = lambda: 0.0) -> None:
        self.url = url
        self.objects: dict[str, bytes] = {}
        self.modified: dict[str, float] = {}
        self.parts: set[str] = set()  # keys last written in parts (see `_retag`)
        self.clock = clock

    def _stored(self, key: str, data: bytes, parts: bool = False) -> None:
        self.objects[key] = bytes(data)
        self.modified[key] = self.clock()
        if parts:
            self.parts.add(key)
        else:
            self.parts.discard(key)

    def _etag(self, key: str) -> str | None:
        data = self.objects.get(key)
        if data is None:
            return None
        return hashlib.md5(data).hexdigest() + ("-1" if key in self.parts else "")

    def _get_tagged(self, key: str) -> tuple[bytes, str]:
        data = self._get(key, None)
        return data, self._etag(key) or ""

    def _put_if(self, key: str, data: bytes, tag: str | None) -> str:
        current = self._etag(key)
        if tag is None:
            if current is not None:
                raise CASFailedError(f"object {key!r} exists")
        elif current != tag:
            raise CASFailedError(f"object {key!r} changed since it was read")
        self._stored(key, data)
        return self._etag(key) or ""

    def _tag(self, key: str) -> str:
        tag = self._etag(key)
        if tag is None:
            raise NotFoundError(f"object {key!r} not found in {self.url}")
        return tag

    def _delete_if(self, key: str, tag: str) -> bool:
        if self._etag(key) != tag:
            return False
        self._delete(key)
        return True

    def _retag(self, key: str) -> str:
        self._stored(key, self._get(key, None), parts=key not in self.parts)
        return self._tag(key)

    def _list_modified(self, prefix: str) -> Iterator[tuple[str, float]]:
        return iter([(k, self.modified[k]) for k in self._list(prefix)])

    def _get(self, key: str, byte_range: ByteRange | None) -> bytes:
        try:
            data = self.objects[key]
        except KeyError:
            raise NotFoundError(f"object {key!r} not found in {self.url}") from None
        return data if byte_range is None else data[byte_range[0] : byte_range[1]]

    def _put(self, key: str, data: bytes) -> None:
        self._stored(key, data)

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        if key in self.objects:
            return False
        self._stored(key, data)
        return True

    def _delete(self, key: str) -> None:
        self.objects.pop(key, None)
        self.modified.pop(key, None)
        self.parts.discard(key)

    def _list(self, prefix: str) -> Iterator[str]:
        return iter(sorted(k for k in self.objects if k.startswith(prefix)))

    def _exists(self, key: str) -> bool:
        return key in self.objects


class _Stops:
    """What both wrappers share: stop at the scheduler, then apply its fault."""

    world: World

    def _call(self, what: str, fn: Callable[[], Any], write: bool) -> Any:
        sched = self.world.sched
        if not sched.inside():
            return fn()  # setup and the observer
        fault = sched.point(what)
        actor = sched._me()
        self.world.trace.call(sched, actor, what)
        if fault == Fault.ERROR:
            raise TransientError(f"sim: {what} failed before it ran")
        if fault == Fault.CRASH_IN_FLIGHT:  # sent: it lands later, the sender is gone

            def deliver() -> None:
                self.world.after_call(actor, what, fn())

            sched.in_flight(self.world.faults.in_flight_for(sched.rng), deliver)
        try:
            result = fn()
        except CASFailedError:
            if fault == Fault.LOST:
                raise TransientError(f"sim: the reply of {what} was lost") from None
            raise
        self.world.after_call(actor, what, result)
        if write and fault == Fault.LOST:
            raise TransientError(f"sim: the reply of {what} was lost (it ran)")
        if write and fault == Fault.CRASH_AFTER:
            sched.crash_me(f"after {what}")
        return result


class SimObjectStore(_Stops, WrapperObjectStore):
    """The object store as actors see it: every call stops at the scheduler and may get a fault."""

    inner: DictObjectStore

    def __init__(self, inner: DictObjectStore, world: World) -> None:
        super().__init__(inner)
        self.world = world

    def get(self, key: str, byte_range: ByteRange | None = None) -> bytes:
        """Read, after the scheduler lets this call run (and maybe faults it)."""
        return self._call(f"get {key}", lambda: self.inner.get(key, byte_range), False)

    def put(self, key: str, data: bytes) -> None:
        """Write, after the scheduler lets this call run (and maybe faults it)."""
        self._call(f"put {key}", lambda: self.inner.put(key, data), True)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create, after the scheduler lets this call run (and maybe faults it)."""
        return self._call(f"put_if_absent {key}", lambda: self.inner.put_if_absent(key, data), True)

    def delete(self, key: str) -> None:
        """Delete, telling the world what was deleted (the model checks it was garbage)."""

        def delete() -> None:
            existed = self.inner.exists(key)
            born = self.inner.modified.get(key)
            self.inner.delete(key)
            if existed:
                self.world.deleted(key, born)

        self._call(f"delete {key}", delete, True)

    def delete_many(self, keys: list[str]) -> None:
        """Delete the keys, telling the world which existed (the model checks them)."""

        def delete_many() -> None:
            existed = [
                (key, self.inner.modified.get(key)) for key in keys if key in self.inner.objects
            ]
            self.inner.delete_many(keys)
            for key, born in existed:
                self.world.deleted(key, born)

        self._call(f"delete_many {len(keys)} keys", delete_many, True)

    def list(self, prefix: str = "") -> Iterator[str]:
        """List, after the scheduler lets this call run (and maybe faults it)."""
        return iter(self._call(f"list {prefix}", lambda: list(self.inner.list(prefix)), False))

    def list_modified(self, prefix: str = "") -> Iterator[tuple[str, float]]:
        """List with last-modified times, after the scheduler lets this call run."""
        what = f"list {prefix}"
        return iter(self._call(what, lambda: list(self.inner.list_modified(prefix)), False))

    def get_tagged(self, key: str) -> tuple[bytes, str]:
        """Read with the ETag, after the scheduler lets this call run (and maybe faults it)."""
        return self._call(f"get {key}", lambda: self.inner.get_tagged(key), False)

    def put_if(self, key: str, data: bytes, tag: str | None) -> str:
        """Conditional write (its reply may be lost: it ran), at a scheduling point."""
        return self._call(f"put_if {key}", lambda: self.inner.put_if(key, data, tag), True)

    def exists(self, key: str) -> bool:
        """Ask, after the scheduler lets this call run (and maybe faults it)."""
        return self._call(f"exists {key}", lambda: self.inner.exists(key), False)

    def tag(self, key: str) -> str:
        """Read the entity tag, after the scheduler lets this call run."""
        return self._call(f"tag {key}", lambda: self.inner.tag(key), False)

    def delete_if(self, key: str, tag: str) -> bool:
        """Delete while the tag holds, telling the world what was deleted."""

        def delete_if() -> bool:
            born = self.inner.modified.get(key)
            done = self.inner.delete_if(key, tag)
            if done:
                self.world.deleted(key, born)
            return done

        return self._call(f"delete_if {key}", delete_if, True)

    def retag(self, key: str) -> str:
        """Write the object again under a new tag, at a scheduling point."""
        return self._call(f"retag {key}", lambda: self.inner.retag(key), True)

    def close(self) -> None:
        """Nothing: the world's store outlives every actor's handle."""
        pass


class SimMetaStore(_Stops, WrapperMetaStore):
    """The metastore as actors see it: every call stops at the scheduler and may get a fault."""

    def __init__(self, inner: MetaStore, world: World) -> None:
        super().__init__(inner)
        self.world = world

    def clock(self) -> float:
        """The metastore's clock: the service's for the bucket metastore (it measures its
        storage's), the simulated time for the in-memory one (which no process's skew
        moves)."""
        if isinstance(self.inner, BucketMetaStore):
            return self.inner.clock()
        return self.world.sched.now

    def _around(self, call: Call, run: Callable[[], T]) -> T:
        """Stop at the scheduler (and maybe get a fault) before the call runs; a scan is read
        whole there."""
        keys = call.keys
        shown = ", ".join(map(repr, keys[:3])) + (" ..." if len(keys) > 3 else "")
        what = f"meta.{OPS.get(call.op, call.op)} {_short(call.partition)} {shown}".rstrip()
        if call.op == "scan":
            return iter(self._call(what, lambda: list(cast(Iterator[Any], run())), False))
        return self._call(what, run, call.write)

    def batch(self) -> AbstractContextManager[None]:
        """No batch: every actor is a greenlet of one thread, where a backend's batch (one
        transaction per thread) would take in other actors' writes; each write runs alone,
        which a batch's writes may always do (see MetaStore.batch)."""
        return nullcontext()

    def close(self) -> None:
        """Nothing: the world's store outlives every actor's handle."""
        pass


OPS = {"drop_partition": "drop"}
"""The names the world's checks know some metastore calls by (`world.META_WRITES`)."""


def _short(partition: str) -> str:
    """The partition without the repository id."""
    return partition.split("/", 1)[-1]


_WORLD: list[World] = []


def install(world: World) -> None:
    """Make `sim://` locations open the stores of `world` (one run at a time)."""
    _WORLD[:] = [world]


def uninstall() -> None:
    """Stop `sim://` locations from opening a world's stores."""
    _WORLD.clear()


def _world() -> World:
    if not _WORLD:
        raise RuntimeError("no simulation is running: sim:// opens nothing")
    return _WORLD[0]


def _open_storage(location: str, options: dict[str, Any]) -> SimObjectStore:
    world = _world()
    return SimObjectStore(world.store, world)


def _open_metastore(url: str) -> SimMetaStore:
    world = _world()
    inner = world.meta_factory(world.name, SimObjectStore(world.store, world))
    return SimMetaStore(inner, world)


storage.register("sim", _open_storage)
metastore.register("sim", _open_metastore)
