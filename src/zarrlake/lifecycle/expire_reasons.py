"""Why `expire` kept commits it was asked to expire: each older than the cutoff, on a
selected branch, that something still needs (see `expire.protected`): a branch head, a
tag, another branch's history, an open session, a history operation under way.

Only read when `expire` kept such commits, so an expiry that keeps nothing pays nothing."""

from __future__ import annotations

from collections.abc import Iterable

from zarrlake.connection import RepoContext
from zarrlake.session_records import Status
from zarrlake.vc.keep import kept
from zarrlake.vc.reach import expired_commits
from zarrlake.vc.refs import BRANCH, TAG

OPERATION = "kept by a history operation under way (a merge, revert, reset or new ref)"


def why_kept(
    ctx: RepoContext, selected: Iterable[str], commits: Iterable[str]
) -> dict[str, list[str]]:
    """Each of `commits` -> the reasons it is kept (those it could find now; a ref or
    operation gone since the expiry looked leaves a commit with none)."""
    out: dict[str, list[str]] = {c: [] for c in commits}
    if not out:
        return out
    chosen = set(selected)
    heads = ctx.refs.list(BRANCH)
    for name, cid in sorted(heads.items()):
        if cid in out:
            out[cid].append(f"head of branch {name!r}")
    for name, cid in sorted(ctx.refs.list(TAG).items()):
        if cid in out:
            out[cid].append(f"tagged {name!r}")
    for cid in kept(ctx):
        if cid in out:
            out[cid].append(OPERATION)
    gone = expired_commits(ctx.objects)
    for name, head in sorted(heads.items()):
        if name in chosen:
            continue
        for cid in _reachable(ctx, head, gone):
            if cid in out and cid != head:  # (its head is named as such)
                out[cid].append(f"shared with branch {name!r}")
    now = ctx.clock()
    for rec in ctx.records.scan():
        live = rec.status == Status.COMMITTING or (
            rec.status == Status.OPEN and rec.expires_at > now
        )
        if not live or rec.branch not in heads:
            continue
        for cid, _ in ctx.objects.history(heads[rec.branch]):
            if cid in out:
                out[cid].append(f"needed by open session {rec.id} on {rec.branch!r}")
            if cid == rec.base:
                break
    return out


def _reachable(ctx: RepoContext, head: str, gone: set[str]) -> set[str]:
    """Every commit of `head`'s history (all parents), down to where it was expired."""
    seen: set[str] = set()
    stack = [head]
    while stack:
        cid = stack.pop()
        if cid in seen or cid in gone:
            continue
        seen.add(cid)
        stack.extend(ctx.objects.read_commit(cid).parents)
    return seen


def summary(kept_: dict[str, list[str]]) -> list[tuple[str, int]]:
    """(reason, how many commits it keeps), most first: what the CLI prints."""
    counts: dict[str, int] = {}
    for reasons in kept_.values():
        for reason in reasons or ["kept by a ref or operation that has ended since"]:
            counts[reason] = counts.get(reason, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))
