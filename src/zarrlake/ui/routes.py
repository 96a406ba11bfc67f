"""The pages: each handler builds one JSON-able dict, shown as HTML or, with `?format=json`
(or under /api/), as JSON. Every handler only reads."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import zarr
from starlette.requests import Request
from starlette.responses import Response

from zarrlake.errors import ExpiredHistoryError, InvalidInputError, NotFoundError
from zarrlake.present import iso
from zarrlake.ui import chunkmap, preview
from zarrlake.ui.model import LRU, Model, array_info, chunk_grid, storage_chunks

MAX_MAPS = 24
"""Chunk maps drawn inline on a commit or diff page; the rest are linked."""
MAX_PARAM = 1024


def param(request: Request, name: str, default: str | None = None) -> str:
    """A query parameter, at most MAX_PARAM characters; a missing required one is a 400."""
    value = request.query_params.get(name)
    if value is None or value == "":
        if default is None:
            raise InvalidInputError(f"missing query parameter {name!r}; add it to the URL")
        return default
    if len(value) > MAX_PARAM:
        raise InvalidInputError(
            f"query parameter {name!r} is longer than {MAX_PARAM} characters; shorten it"
        )
    return value


def float_param(request: Request, name: str) -> float | None:
    """The query parameter `name` as a finite float, or None when absent."""
    text = request.query_params.get(name)
    if text in (None, ""):
        return None
    try:
        value = float(text)
    except ValueError:
        raise InvalidInputError(f"{name} {text[:40]!r} is not a number; give a number") from None
    if not math.isfinite(value):
        raise InvalidInputError(f"{name} must be a finite number")
    return value


def jumps(m: dict) -> dict[str, list[dict]]:
    """Links to the other slices of a chunk map that hold changes."""
    items = m["slice"].split(",")
    out: dict[str, list[dict]] = {}
    for d, indices in m["changed_indices_of_other_dims"].items():
        out[d] = []
        for i in indices:
            moved = list(items)
            moved[int(d)] = str(i)
            out[d].append({"index": i, "slice": ",".join(moved)})
    return out


class Pages:
    """Handlers over one Model; `render(request, template, data)` turns data into a page."""

    def __init__(self, model: Model, render: Callable[[Request, str, dict], Response]) -> None:
        self.model = model
        self.render = render
        self.previews = LRU(128)

    # home and history -----------------------------------------------------------------------

    def home(self, request: Request) -> Response:
        """The home page: branches and tags."""
        return self.render(request, "home.html", self.model.home())

    def log(self, request: Request) -> Response:
        """A page of a ref's commit log."""
        ref = param(request, "ref", "main")
        page_text = param(request, "page", "0")
        if not page_text.isdigit() or len(page_text) > 9:
            raise InvalidInputError(f"page {page_text!r} must be a non-negative integer")
        return self.render(request, "log.html", self.model.log(ref, int(page_text)))

    def commit(self, request: Request) -> Response:
        """One commit and its changes against its first parent."""
        commit_id = self.model.resolve(request.path_params["ref"])
        c = self.model.commit(commit_id)
        parent = c.parent_ids[0] if c.parent_ids else None
        data: dict[str, Any] = {"commit": c.to_json(), "parent_expired": None}
        try:
            data.update(self._changes(parent, commit_id))
        except ExpiredHistoryError as e:  # expire dropped the parent: its change set says
            data["parent_expired"] = {"commit": e.commit, "expired_at": iso(e.expired_at)}
            data.update(self._changes(None, commit_id))
        return self.render(request, "commit.html", data)

    def diff(self, request: Request) -> Response:
        """The changes between two refs."""
        a_ref, b_ref = param(request, "from"), param(request, "to")
        a, b = self.model.resolve(a_ref), self.model.resolve(b_ref)
        data = {"from_ref": a_ref, "to_ref": b_ref}
        data.update(self._changes(a, b))
        return self.render(request, "diff.html", data)

    def _changes(self, a: str | None, b: str) -> dict:
        """Per-node changes and chunk maps from commit `a` to `b` (ids: cached, immutable)."""
        return self.model.cache.get(("changes", a, b), lambda: self._changes_now(a, b))

    def _changes_now(self, a: str | None, b: str) -> dict:
        data = dict(self.model.changes(a, b))
        d = self.model.diff(a, b)
        maps = []
        changed = [n["path"] for n in data["nodes"] if n["chunks_written"] or n["chunks_deleted"]]
        for path in changed[:MAX_MAPS]:
            maps.append(self._map(a, b, path, d, None))
        data["chunk_maps"] = maps
        data["more_maps"] = changed[MAX_MAPS:]
        return data

    def _map(self, a: str | None, b: str, path: str, d: Any, where: str | None) -> dict:
        arr = self._array_either(a, b, path)
        grid = chunk_grid(arr) if arr is not None else ()
        per_shard = getattr(d, "chunks_per_shard", {}).get(path)
        if arr is not None and per_shard is not None and len(per_shard) == arr.ndim:
            # stored as inner chunks: the diff names inner chunks; shards drawn as lines
            grid = tuple(-(-n // c) for n, c in zip(arr.shape, arr.chunks, strict=True))
        written = d.chunks_written.get(path, set())
        deleted = d.chunks_deleted.get(path, set())
        if arr is None:  # not an array at either side: keys drawn as a 1-D list
            grid = (max(len(written) + len(deleted), 1),)
        ms = chunkmap.parse_slice(where, grid) if where is not None else None
        virtual = self.model.virtual_chunks(b, path, arr) if arr is not None and written else ()
        m = chunkmap.build_map(grid, written, deleted, ms, virtual)
        if arr is not None and per_shard is not None and len(per_shard) == arr.ndim:
            chunkmap.shard_lines(m, tuple(per_shard))
        m.update({"path": path, "from": a, "to": b})
        if arr is not None:
            names = array_info(arr, path)["dimension_names"]
            m["dimension_names"] = names
            # the grid statistics are kept on: the array's chunks (inner chunks if sharded)
            m["statistics_grid"] = list(grid) == [
                -(-n // c) for n, c in zip(arr.shape, arr.chunks, strict=True)
            ]
        return m

    def _array_either(self, a: str | None, b: str, path: str) -> zarr.Array | None:
        for commit_id in (b, a):
            if commit_id is None:
                continue
            try:
                node = self.model.node(commit_id, path)
            except NotFoundError:
                continue
            if isinstance(node, zarr.Array):
                return node
        return None

    def chunk_map(self, request: Request) -> Response:
        """The map of chunks of one array changed between two commits."""
        b_ref = param(request, "to")
        b = self.model.resolve(b_ref)
        a_text = request.query_params.get("from") or ""
        if a_text:
            a: str | None = self.model.resolve(a_text[:MAX_PARAM])
        else:  # the commit's own change
            c = self.model.commit(b)
            if not c.parent_ids:
                raise InvalidInputError(
                    f"{b_ref!r} is the first commit: nothing to compare with; pick a later commit"
                )
            a = c.parent_ids[0]
        path = param(request, "path")
        where = request.query_params.get("slice") or None
        try:
            d = self.model.diff(a, b)
        except ExpiredHistoryError:  # its parent was expired: its change set says
            a, d = None, self.model.diff(None, b)
        by = request.query_params.get("colour") or None
        if by is not None:
            chunkmap.check_colour(by[:MAX_PARAM])
        m = self._map(a, b, path, d, where[:MAX_PARAM] if where else None)
        if m["written_total"] + m["deleted_total"] == 0:
            since = f"from {a[:12]}" if a else "in"
            raise NotFoundError(
                f"no chunks of {path!r} changed {since} {b[:12]}; pick another commit"
            )
        if by is not None and m.get("statistics_grid"):
            try:
                table = self.model.cache.get(
                    ("chunk_stats", b, path), lambda: self.model.repo.chunk_stats(path, b)
                )
            except NotFoundError:  # the array is gone at `to`: nothing to colour by
                table = None
            if table is not None:
                chunkmap.colour(m, table, by)
        m.update(
            {
                "from_ref": a_text or a,
                "to_ref": b_ref,
                "jumps": jumps(m),
                "colours": chunkmap.COLOURS,
            }
        )
        return self.render(request, "chunkmap.html", m)

    # tree and arrays ------------------------------------------------------------------------

    def tree(self, request: Request) -> Response:
        """The groups and arrays under a path at a ref."""
        ref = param(request, "ref", "main")
        commit_id = self.model.resolve(ref)
        data = {"ref": ref, "commit": commit_id}
        data.update(self.model.tree(commit_id, param(request, "path", "/")))
        return self.render(request, "tree.html", data)

    def _preview(self, commit_id: str, path: str, text: str | None) -> tuple[dict, Any]:
        arr = self.model.array(commit_id, path)
        shape = tuple(arr.shape)
        sel = preview.parse_selection(text, shape) if text else preview.default_selection(shape)

        def make() -> preview.Preview:
            session = self.model.repo.readonly_session(commit_id)
            encode = arr.metadata.encode_chunk_key
            prefix = f"{arr.path}/" if arr.path else ""

            def exists(coords: tuple[int, ...]) -> bool:
                return session.exists(prefix + encode(coords))

            try:
                return preview.read_preview(arr, sel, exists, storage_chunks(arr))
            except Exception as e:  # a codec's error: a virtual chunk's source may have changed
                from zarrlake.virtual.decoding import explained

                found = explained(session, arr.path, e)
                if found is e:
                    raise
                raise found from e

        p = self.previews.get((commit_id, arr.path, sel.text()), make)
        return {"slice": sel.text(), "drawn": sel.drawn, **p.summary()}, p

    def array(self, request: Request) -> Response:
        """One array's metadata, with a preview of a slice (and optionally a comparison)."""
        ref = param(request, "ref", "main")
        path = param(request, "path")
        commit_id = self.model.resolve(ref)
        arr = self.model.array(commit_id, path)
        info = array_info(arr, arr.path)
        text = request.query_params.get("slice") or None
        if text is not None and len(text) > MAX_PARAM:
            raise InvalidInputError("slice text is longer than 1024 characters; shorten it")
        compare_ref = request.query_params.get("compare") or None
        data: dict[str, Any] = {"ref": ref, "commit": commit_id, "array": info}
        views = [(ref, commit_id)]
        if compare_ref:
            views.append((compare_ref, self.model.resolve(compare_ref[:MAX_PARAM])))
        previews = []
        for r, cid in views:
            if arr.ndim == 0:
                break
            summary, _ = self._preview(cid, arr.path, text)
            summary.update({"ref": r, "commit": cid})
            previews.append(summary)
        lows = [p["min"] for p in previews if p["min"] is not None]
        highs = [p["max"] for p in previews if p["max"] is not None]
        data["range"] = [min(lows, default=None), max(highs, default=None)]
        data["previews"] = previews
        data["slice"] = previews[0]["slice"] if previews else ""
        data["compare"] = compare_ref
        data["limits"] = {"max_pixels": preview.MAX_PIXELS, "max_chunks": preview.MAX_CHUNKS}
        return self.render(request, "array.html", data)

    def preview_png(self, request: Request) -> Response:
        """The preview of an array slice as a PNG image."""
        commit_id = self.model.resolve(param(request, "ref", "main"))
        _, p = self._preview(
            commit_id, param(request, "path"), request.query_params.get("slice") or None
        )
        summary = p.summary()
        vmin, vmax = float_param(request, "vmin"), float_param(request, "vmax")
        rgb = preview.colorize(
            p,
            summary["min"] if vmin is None else vmin,
            summary["max"] if vmax is None else vmax,
        )
        return Response(
            preview.png(rgb), media_type="image/png", headers={"Cache-Control": "no-store"}
        )

    def colorbar_png(self, request: Request) -> Response:
        """The preview's colour scale as a PNG image."""
        return Response(preview.colorbar_png(), media_type="image/png")
