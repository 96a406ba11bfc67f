"""What the pages show, gathered from the public API as plain JSON-able dicts.

Every page's template and its `?format=json` twin render the same dict, so the two never
disagree. Results that depend only on commit ids (immutable) are cached.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import zarr
from cachetools import LRUCache

from zarrlake._util.validate import check_zarr_key
from zarrlake.errors import InvalidInputError, NotFoundError
from zarrlake.present import iso
from zarrlake.repo import Commit, Repo
from zarrlake.vc.diff import Diff

LOG_PAGE = 50


def epoch(value: datetime | float) -> float:
    """POSIX seconds of a datetime or a number."""
    return value.timestamp() if isinstance(value, datetime) else float(value)


class LRU:
    """A small thread-safe cache for results keyed by immutable commit ids."""

    def __init__(self, size: int = 64) -> None:
        self.items: LRUCache[Any, Any] = LRUCache(size)
        self.lock = threading.Lock()  # cachetools caches are not thread-safe

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        """The cached value for `key`, made by `make` (outside the lock) on a miss."""
        with self.lock:
            if key in self.items:
                return self.items[key]
        value = make()
        with self.lock:
            self.items[key] = value
        return value


def check_path(path: str) -> str:
    """A node path from a URL: '' (the root) or a store key as the API validates it."""
    path = path.strip("/")
    if path:
        check_zarr_key(path)
    return path


def repo_stats(repo: Repo, commit_id: str) -> dict:
    """Commits, arrays, stored chunks and their bytes at one commit: `Repo.stats` where the
    core has it, else counted here through the public session API."""
    if hasattr(repo, "stats"):
        s = repo.stats(commit_id)
        return {
            "commits": s.commits,
            "arrays": s.arrays,
            "chunks": s.chunks,
            "bytes": s.bytes,
            "virtual_chunks": s.virtual_chunks,
            "virtual_bytes": s.virtual_bytes,
        }
    session = repo.readonly_session(commit_id)
    every = session.list_prefix("")
    keys = [k for k in every if not (k == "zarr.json" or k.endswith("/zarr.json"))]
    size = 0
    for k in keys:
        ref = session._engine.lookup(k)
        size += ref.length if ref is not None else 0
    arrays = sum(1 for k in every if _is_array_doc(session, k))
    return {
        "commits": len(repo.log(commit_id)),
        "arrays": arrays,
        "chunks": len(keys),
        "bytes": size,
    }


def _is_array_doc(session: Any, key: str) -> bool:
    if not (key == "zarr.json" or key.endswith("/zarr.json")):
        return False
    data = session.read(key)
    return data is not None and json.loads(data).get("node_type") == "array"


class Model:
    """Read-only views of one repository for the pages."""

    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self.cache = LRU()

    # refs ---------------------------------------------------------------------------------

    def resolve(self, ref: str) -> str:
        """The commit id a ref names; InvalidInputError for an empty or overlong ref."""
        if not isinstance(ref, str) or not ref or len(ref) > 1024:
            raise InvalidInputError("a ref must be a non-empty string of at most 1024 characters")
        return self.repo.resolve(ref)

    def commit(self, commit_id: str) -> Commit:
        """The commit `commit_id` (cached)."""
        return self.cache.get(("commit", commit_id), lambda: self.repo.log(commit_id, limit=1)[0])

    def group(self, commit_id: str) -> zarr.Group:
        """The root group of the repository at `commit_id`, read-only."""
        session = self.repo.readonly_session(commit_id)
        return zarr.open_group(session.store, mode="r")

    # pages --------------------------------------------------------------------------------

    def home(self) -> dict:
        """The home page's data: branches and tags with their head commits."""
        branches = []
        for name, head in sorted(self.repo.list_branches().items()):
            c = self.commit(head)
            branches.append(
                {"name": name, "head": head, "message": c.message, "time": iso(c.timestamp)}
            )
        tags = []
        for name, target in sorted(self.repo.list_tags().items()):
            tags.append(
                {"name": name, "commit": target, "time": iso(self.commit(target).timestamp)}
            )
        now = time.time()
        sessions = [
            {
                "id": s.id,
                "branch": s.branch,
                "base": s.base_commit,
                "author": s.author,
                "message": s.message,
                "created": iso(s.created),
                "expires_at": iso(s.expires_at),
                "expires_in_s": round(epoch(s.expires_at) - now),
            }
            for s in self.repo.list_sessions()
        ]
        default = "main" if any(b["name"] == "main" for b in branches) else None
        if default is None and branches:
            default = branches[0]["name"]
        stats = None
        if default is not None:
            head = self.resolve(default)
            stats = {"ref": default, "commit": head}
            stats.update(self.cache.get(("stats", head), lambda: repo_stats(self.repo, head)))
        return {
            "location": self.repo.spec.location,
            "branches": branches,
            "tags": tags,
            "sessions": sessions,
            "stats": stats,
        }

    def log(self, ref: str, page: int) -> dict:
        """One page of `ref`'s log, and where history was expired if it ends there."""
        head = self.resolve(ref)
        commits = self.repo.log(head, limit=(page + 1) * LOG_PAGE + 1)
        shown = commits[page * LOG_PAGE : (page + 1) * LOG_PAGE]
        if page and not shown:
            raise NotFoundError(f"{ref!r} has no page {page} of its log; go back to page 1")
        last = commits[-1]
        ended = None
        if len(commits) <= (page + 1) * LOG_PAGE and last.parent_ids:  # not the root: expired
            when = self.repo.expired_at(last.parent_ids[0])
            ended = {"commit": last.id, "expired_at": iso(when)} if when else None
        return {
            "history_expired": ended,
            "ref": ref,
            "head": head,
            "page": page,
            "per_page": LOG_PAGE,
            "has_next": len(commits) > (page + 1) * LOG_PAGE,
            "commits": [c.to_json() for c in shown],
        }

    def diff(self, a: str | None, b: str) -> Diff:
        """From commit `a` to `b`; for None, what `b` changed against its first parent."""
        if a is None:
            return self.cache.get(("changes", b), lambda: self.repo.commit_changes(b))
        return self.cache.get(("diff", a, b), lambda: self.repo.diff(a, b))

    def changes(self, a: str | None, b: str) -> dict:
        """What changed from commit `a` (None: b's own change) to commit `b`, per node."""
        d = self.diff(a, b)
        nodes = [
            {
                "path": p,
                "change": c,
                "chunks_written": w,
                "chunks_deleted": x,
                "metadata": d.metadata_lines(p),
            }
            for p, c, w, x in d.summary()
        ]
        return {"from": a, "to": b, "nodes": nodes, "diff": d.to_json()}

    # tree and arrays ----------------------------------------------------------------------

    def node(self, commit_id: str, path: str) -> zarr.Group | zarr.Array:
        """The group or array at `path` of commit `commit_id`; NotFoundError if absent."""
        path = check_path(path)
        if not self.repo.readonly_session(commit_id).exists("zarr.json"):
            shown = path or "/"
            raise NotFoundError(
                f"no group or array {shown!r} at commit {commit_id[:12]}"
                "; go back to the tree of the commit"
            )
        group = self.group(commit_id)
        if not path:
            return group
        try:
            return group[path]
        except KeyError:
            raise NotFoundError(
                f"no group or array {path!r} at commit {commit_id[:12]}"
                "; go back to the tree of the commit"
            ) from None

    def array(self, commit_id: str, path: str) -> zarr.Array:
        """The array at `path`; InvalidInputError if it is a group."""
        node = self.node(commit_id, path)
        if not isinstance(node, zarr.Array):
            raise InvalidInputError(f"{path!r} is a group, not an array; open it as a group")
        return node

    def tree(self, commit_id: str, path: str) -> dict:
        """The tree page's data: a group's attributes, child groups and arrays."""
        try:
            node = self.node(commit_id, path)
        except NotFoundError:
            if check_path(path):
                raise
            return {"path": "", "attributes": {}, "groups": [], "arrays": []}  # empty commit
        if isinstance(node, zarr.Array):
            raise InvalidInputError(f"{path!r} is an array, not a group; open it as an array")
        prefix = node.path
        groups, arrays = [], []
        for name, child in sorted(node.members(max_depth=None)):
            full = f"{prefix}/{name}" if prefix else name
            if isinstance(child, zarr.Array):
                arrays.append(array_info(child, full))
            else:
                groups.append({"path": full, "attributes": dict(child.attrs)})
        return {
            "path": prefix,
            "attributes": dict(node.attrs),
            "groups": groups,
            "arrays": arrays,
        }

    def virtual_chunks(self, commit_id: str, path: str, arr: zarr.Array) -> set[tuple]:
        """Grid coordinates of the chunks of `path` that are virtual at `commit_id`."""
        from zarrlake.vc.stats import virtual_keys

        prefix = f"{path}/" if path else ""
        keys = virtual_keys(self.repo._context.objects, commit_id, prefix + "c")
        decode = arr.metadata.chunk_key_encoding.decode_chunk_key
        return {tuple(decode(k[len(prefix) :])) for k in keys}


def storage_chunks(arr: zarr.Array) -> tuple[int, ...]:
    """The shape of one stored object: the shard if the array is sharded, else the chunk."""
    shards = getattr(arr, "shards", None)
    return tuple(shards or arr.chunks)


def chunk_grid(arr: zarr.Array) -> tuple[int, ...]:
    """Number of stored objects along each dimension."""
    return tuple(math.ceil(n / c) for n, c in zip(arr.shape, storage_chunks(arr), strict=True))


def array_info(arr: zarr.Array, path: str) -> dict:
    """What the array page shows of `arr`: shape, chunking, dtype, codecs, attributes."""
    meta = arr.metadata.to_dict()
    fill = arr.fill_value
    return {
        "path": path,
        "shape": list(arr.shape),
        "chunks": list(arr.chunks),
        "shards": list(arr.shards) if getattr(arr, "shards", None) else None,
        "chunk_grid": list(chunk_grid(arr)),
        "dtype": str(arr.dtype),
        "fill_value": fill.item() if hasattr(fill, "item") else fill,
        "dimension_names": list(meta.get("dimension_names") or [None] * arr.ndim),
        "codecs": meta.get("codecs", []),
        "attributes": dict(arr.attrs),
    }
