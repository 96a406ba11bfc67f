"""The pull request pages: the list, and one pull request with its checks (failing chunks
marked on the chunk maps of its diff), reviews and comments. Like every page they only
read: the checks' results for the source's current head are the recorded ones where a
commit, merge or `Repo.run_checks` recorded them, else computed for the page and not
written (a GET writes nothing to the metastore)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from zarrlake.errors import InvalidInputError
from zarrlake.ui import chunkmap
from zarrlake.ui.routes import Pages, param

STATES = ("open", "merging", "merged", "closed", "all")


class PullPages:
    """Handlers of /pulls and /pull/{id}, drawing chunk maps through `pages`."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages
        self.repo = pages.model.repo

    def pulls(self, request: Request) -> Response:
        """The pull requests in one state (default: open)."""
        state = param(request, "state", "open")
        if state not in STATES:
            raise InvalidInputError(f"state must be one of {', '.join(STATES)}, not {state[:40]!r}")
        prs = self.repo.list_pull_requests(None if state == "all" else state)
        data = {"state": state, "states": list(STATES), "pulls": [p.to_json(False) for p in prs]}
        return self.pages.render(request, "pulls.html", data)

    def pull(self, request: Request) -> Response:
        """One pull request: what it changes, its checks, reviews and comments."""
        pr = self.repo.pull_request(request.path_params["id"][:20])
        data = pr.to_json(record=False)
        a, b = self._range(pr, data)
        data.update({"diff_from": a, "diff_to": b, "nodes": [], "chunk_maps": [], "more_maps": []})
        if a is not None and b is not None:
            data.update(self.pages._changes(a, b))
            data["chunk_maps"] = [dict(m) for m in data["chunk_maps"]]  # the cached ones stay
            for m in data["chunk_maps"]:
                m["cells"] = [dict(c) for c in m["cells"]]
                m["failing"] = chunkmap.mark_failing(m, self._failing(data, m["path"]))
        return self.pages.render(request, "pull.html", data)

    def _range(self, pr, data: dict) -> tuple[str | None, str | None]:
        """The commits whose difference the page shows: merge base to source head while
        open, the merge commit's own change once merged."""
        if data["merge_commit"]:
            commit = self.pages.model.commit(data["merge_commit"])
            parent = commit.parent_ids[0] if commit.parent_ids else None
            return parent, data["merge_commit"]
        head = data.get("source_head")
        if head is None:
            return None, None
        return self.repo.merge_base(pr.target, head), head

    @staticmethod
    def _failing(data: dict, path: str) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        for c in data.get("checks", []):
            if not c["passed"] and c.get("array", "").strip("/") == path:
                out.extend(tuple(x) for x in c["chunks"])
        return out
