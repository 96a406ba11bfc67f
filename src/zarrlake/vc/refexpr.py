"""Ref expressions as git has them: `main~3` (third first-parent ancestor), `main^` (first
parent), `main^2` (second parent of a merge), chained (`v1^2~1`); and merge bases.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime

from zarrlake.errors import ExpiredHistoryError, InvalidInputError, RefNotFoundError
from zarrlake.format.envelope import ID_LENGTH
from zarrlake.vc.objects import Objects
from zarrlake.vc.refs import Refs

_STEP = r"([~^])(\d*)"
"""One step of an expression (compiled on first use: most refs are plain names)."""


def parse(expr: str) -> tuple[str, list[tuple[str, int]]]:
    """Split `expr` into its base name and its steps, e.g. 'main~2^2' -> ('main', [('~', 2),
    ('^', 2)]); a bare `~` or `^` counts 1."""
    cut = min((i for i in (expr.find("~"), expr.find("^")) if i >= 0), default=len(expr))
    base, rest = expr[:cut], expr[cut:]
    if not base:
        raise InvalidInputError(
            f"ref expression {expr!r} has no branch, tag or commit before ~/^"
            "; start it with a branch, tag or commit, e.g. main~2"
        )
    steps, pos = [], 0
    while pos < len(rest):
        m = re.compile(_STEP).match(rest, pos)
        if m is None:
            raise InvalidInputError(
                f"invalid ref expression {expr!r}: expected ~N or ^N at {rest[pos:]!r}"
            )
        digits = m.group(2)
        if len(digits) > 9:
            raise InvalidInputError(
                f"invalid ref expression {expr!r}: step {m.group(0)} too big; give a smaller step"
            )
        steps.append((m.group(1), int(digits) if digits else 1))
        pos = m.end()
    return base, steps


def resolve_expr(expr: str, resolve_name: Callable[[str], str], objects: Objects) -> str:
    """The commit id `expr` names; `resolve_name` resolves the plain name before the steps."""
    base, steps = parse(expr)
    cid = resolve_name(base)
    for op, n in steps:
        if op == "^":
            if n == 0:
                continue
            parents = objects.read_commit(cid).parents
            if n > len(parents):
                raise RefNotFoundError(f"{expr!r}: commit {cid[:12]} has no parent number {n}")
            cid = _step(objects, expr, cid, parents[n - 1])
        else:
            for _ in range(n):
                parents = objects.read_commit(cid).parents
                if not parents:
                    raise RefNotFoundError(
                        f"{expr!r}: the history before {cid[:12]} is too short"
                        "; run `zarrlake log` to see how far it goes"
                    )
                cid = _step(objects, expr, cid, parents[0])
    return cid


def _step(objects: Objects, expr: str, child: str, parent: str) -> str:
    """`parent`, once its record is known to be there (not expired)."""
    try:
        objects.parent(child, parent)
    except ExpiredHistoryError as e:
        raise ExpiredHistoryError(f"{expr!r}: {e}", e.commit, e.expired_at) from None
    return parent


class Walk:
    """Parents of commits, stopping where `expire` dropped the history: `cut` holds each
    commit whose parent was expired, with the error that says so."""

    def __init__(self, objects: Objects) -> None:
        self.objects = objects
        self.cut: dict[str, ExpiredHistoryError] = {}

    def parents(self, cid: str) -> list[str]:
        """The parents of `cid` whose records remain; an expired one is noted in `cut`."""
        kept = []
        for p in self.objects.read_commit(cid).parents:
            try:
                self.objects.parent(cid, p)
            except ExpiredHistoryError as e:
                self.cut.setdefault(cid, e)
                continue
            kept.append(p)
        return kept

    def ancestors(self, head: str) -> set[str]:
        """Every commit reachable from `head` through any parent, `head` included."""
        seen = {head}
        todo = [head]
        while todo:
            for p in self.parents(todo.pop()):
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        return seen


def merge_base(objects: Objects, a: str, b: str) -> str | None:
    """The best common ancestor of commits `a` and `b`: a common ancestor that is not an
    ancestor of another common ancestor (the newest one on a criss-cross); None if the
    histories are unrelated. ExpiredHistoryError if there is none and a walk met history
    that `expire` dropped (the common ancestor may have been in it)."""
    walk = Walk(objects)
    of_a = walk.ancestors(a)
    candidates: set[str] = set()
    seen = {b}
    todo = [b]
    while todo:
        cid = todo.pop()
        if cid in of_a:
            candidates.add(cid)
            continue  # its ancestors are common too, but never better
        for p in walk.parents(cid):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    if len(candidates) > 1:
        below: set[str] = set()
        for c in candidates:
            for p in walk.parents(c):
                below |= walk.ancestors(p)
        candidates -= below
    if not candidates:
        if walk.cut:
            raise max(walk.cut.values(), key=lambda e: e.expired_at)
        return None
    return max(candidates, key=lambda c: (objects.read_commit(c).timestamp, c))


def commit_as_of(objects: Objects, head: str, as_of: datetime, ref: str) -> str:
    """The newest commit of `head`'s first-parent history made at or before `as_of` (naive:
    UTC); `ref` names `head` in errors."""
    if not isinstance(as_of, datetime):
        raise InvalidInputError(f"as_of must be a datetime, not {as_of!r}")
    at = as_of if as_of.tzinfo else as_of.replace(tzinfo=UTC)
    oldest, rec = head, objects.read_commit(head)
    for oldest, rec in objects.history(head):
        # at the microseconds a commit's time is shown with, so its own time finds it
        if datetime.fromtimestamp(rec.timestamp, UTC) <= at:
            return oldest
    message = f"{ref!r} has no commit at or before {as_of.isoformat()}"
    expired = objects.expired(rec.parents[0]) if rec.parents else None
    if expired is None:
        raise RefNotFoundError(message)
    e = ExpiredHistoryError.before(oldest, expired.commit, expired.expired_at)
    raise ExpiredHistoryError(f"{message}: {e}", e.commit, e.expired_at)


def resolve_ref(refs: Refs, objects: Objects, ref: str) -> str:
    """The commit id a branch, tag, (unique prefix of a) commit id or ref expression names."""
    if not isinstance(ref, str) or not ref:
        raise InvalidInputError(f"a ref must be a non-empty string, not {ref!r}")
    if "~" in ref or "^" in ref:  # main~3, main^2
        return resolve_expr(ref, lambda name: resolve_ref(refs, objects, name), objects)
    named = refs.named(ref)
    if named is not None:
        return named
    if 4 <= len(ref) <= ID_LENGTH and all(c in "0123456789abcdef" for c in ref):
        if len(ref) == ID_LENGTH:
            if objects.has_commit(ref):
                return ref
            expired = objects.expired(ref)
            if expired is not None:
                raise expired
        else:
            found = objects.commit_ids(ref)
            if len(found) == 1:
                return found[0]
            if len(found) > 1:
                raise InvalidInputError(f"commit id prefix {ref!r} is ambiguous")
    shown = ref if len(ref) <= 60 else ref[:57] + "..."
    raise refs.missing(f"no branch, tag or commit named {shown!r}")
