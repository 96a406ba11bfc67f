"""Branches and tags: names pointing at commit ids, held in the metastore.

Branches move only by compare-and-swap; tags are created once (must-not-exist CAS) and
never move. A branch and a tag never share a name, so a name always means one thing.
"""

from __future__ import annotations

from collections.abc import Callable

from zarrlake.errors import AlreadyExistsError, CASFailedError, NotFoundError
from zarrlake.metastore.base import MetaStore
from zarrlake.validate import check_ref_name
from zarrlake.vc.protection import Protection

BRANCH = "branch"
TAG = "tag"


class Refs:
    def __init__(
        self, meta: MetaStore, partition: str, on_drop: Callable[[str], None] | None = None
    ) -> None:
        self.meta = meta
        self.partition = partition
        self.on_drop = on_drop

    def dropped(self, commit_id: str) -> None:
        """A ref stopped pointing at `commit_id` other than by moving to a descendant
        (deleted, reset): its history may have become garbage (tell the collector)."""
        if self.on_drop is not None:
            self.on_drop(commit_id)

    def _key(self, kind: str, name: str) -> bytes:
        return f"{kind}/{name}".encode()

    def get(self, kind: str, name: str) -> tuple[str, int] | None:
        """(commit id, version) or None."""
        got = self.meta.get(self.partition, self._key(kind, name))
        return (got[0].decode(), got[1]) if got else None

    def require(self, kind: str, name: str) -> tuple[str, int]:
        got = self.get(kind, name)
        if got is None:
            raise NotFoundError(f"{kind} {name!r} does not exist")
        return got

    def create(self, kind: str, name: str, commit_id: str) -> None:
        check_ref_name(name, kind)
        other = TAG if kind == BRANCH else BRANCH
        if self.get(other, name) is not None:
            raise AlreadyExistsError(f"a {other} named {name!r} already exists")
        try:
            self.meta.set_if(self.partition, self._key(kind, name), commit_id.encode(), None)
        except CASFailedError:
            raise AlreadyExistsError(f"{kind} {name!r} already exists") from None
        if kind == TAG and self.get(other, name) is not None:  # both created at once:
            self.meta.delete(self.partition, self._key(kind, name))  # the branch stays
            raise AlreadyExistsError(f"a {other} named {name!r} already exists")

    def move(self, name: str, commit_id: str, expected_version: int) -> int:
        """Compare-and-swap a branch; raises CASFailedError if it moved meanwhile."""
        return self.meta.set_if(
            self.partition, self._key(BRANCH, name), commit_id.encode(), expected_version
        )

    def delete(self, kind: str, name: str) -> None:
        check_ref_name(name, kind)
        head, _ = self.require(kind, name)
        if kind == BRANCH:
            Protection(self.meta, self.partition).check_delete(name)
        self.meta.delete(self.partition, self._key(kind, name))
        self.dropped(head)

    def list(self, kind: str) -> dict[str, str]:
        prefix = f"{kind}/".encode()
        return {
            k[len(prefix) :].decode(): v.decode()
            for k, v, _ in self.meta.scan(self.partition, prefix=prefix)
        }
