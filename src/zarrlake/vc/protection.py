"""Branch protection rules, held in the metastore next to the refs (`protect/<pattern>` in
the refs partition), so every client (CLI, Python, Spark tasks) sees the same rules.

A rule names a branch or a glob (`release/*`). A protected branch refuses direct commits
from sessions unless a rule allows them, and refuses deletion unless a rule allows it;
merges, reverts and resets into it are allowed. When several rules match, the strictest
wins. `main` can never be deleted unless a rule matching it allows deletion.

A rule may also require pull requests (`require_pull_request`: a direct merge or reset
into the branch is refused, only a pull request's merge may land there; a revert, which
undoes a reviewed change, stays allowed), a number of approvals
(`required_approvals`), and that approvals given before the source branch last moved no
longer count (`dismiss_stale_approvals`). A protected branch's history cannot be squashed
unless a rule allows it (`allow_squash`). These fields are stored only when set, so rules
written before they existed load as they were, and clients that predate them still read
every rule that does not use them.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from fnmatch import fnmatchcase

from zarrlake._util.validate import check_ref_name
from zarrlake.errors import CASFailedError, InvalidInputError, NotFoundError, ProtectedBranchError
from zarrlake.metastore.base import MetaStore

PREFIX = b"protect/"


@dataclass(frozen=True)
class Rule:
    """A protection rule: which branches (name or glob) and what stays allowed."""

    pattern: str
    allow_direct_commits: bool = False
    allow_delete: bool = False
    require_pull_request: bool = False
    required_approvals: int = 0
    dismiss_stale_approvals: bool = False
    allow_squash: bool = False

    def matches(self, branch: str) -> bool:
        """Whether this rule's glob pattern matches `branch`."""
        return fnmatchcase(branch, self.pattern)

    def to_json(self) -> dict:
        """The rule as stored and printed: its first three fields always, the later ones
        only when set (older clients then read the rules that do not use them)."""
        out = asdict(self)
        for name in _DEFAULTS:
            if out[name] == _DEFAULTS[name]:
                del out[name]
        return out

    @classmethod
    def from_json(cls, doc: dict) -> Rule:
        """A stored rule; fields a later version added are ignored, missing ones default."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})


PULL_REQUEST_FIELDS = ("require_pull_request", "required_approvals", "dismiss_stale_approvals")
_DEFAULTS = {
    "require_pull_request": False,
    "required_approvals": 0,
    "dismiss_stale_approvals": False,
    "allow_squash": False,
}

_MERGING_PULL_REQUEST: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "zarrlake_merging_pull_request", default=None
)


@contextlib.contextmanager
def pull_request_merge(target: str) -> Iterator[None]:
    """Within this block, merges into branch `target` are a pull request's merge, which a
    `require_pull_request` rule lets through (a context variable: only this thread or task)."""
    token = _MERGING_PULL_REQUEST.set(target)
    try:
        yield
    finally:
        _MERGING_PULL_REQUEST.reset(token)


def check_approvals(value: object) -> int:
    """A number of required approvals: a non-negative integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInputError(f"required_approvals must be a non-negative integer, not {value!r}")
    return value


def check_pattern(pattern: object) -> str:
    """A branch name, or a glob using `*` and `?` that would otherwise be a valid name."""
    if not isinstance(pattern, str):
        raise InvalidInputError(f"a protection pattern must be a string, not {pattern!r}")
    check_ref_name(pattern.replace("*", "x").replace("?", "x"), "protected branch pattern")
    return pattern


class Protection:
    """Reads and writes the protection rules of one repository."""

    def __init__(self, meta: MetaStore, partition: str) -> None:
        self.meta = meta
        self.partition = partition

    def protect(
        self,
        pattern: str,
        *,
        allow_direct_commits: bool = False,
        allow_delete: bool = False,
        require_pull_request: bool = False,
        required_approvals: int = 0,
        dismiss_stale_approvals: bool = False,
        allow_squash: bool = False,
    ) -> Rule:
        """Add or replace the rule for `pattern`."""
        rule = Rule(
            check_pattern(pattern),
            bool(allow_direct_commits),
            bool(allow_delete),
            bool(require_pull_request),
            check_approvals(required_approvals),
            bool(dismiss_stale_approvals),
            bool(allow_squash),
        )
        self.meta.set(
            self.partition, PREFIX + pattern.encode(), json.dumps(rule.to_json()).encode()
        )
        return rule

    def unprotect(self, pattern: str) -> None:
        """Remove the rule for `pattern`; raises NotFoundError when there is none."""
        key = PREFIX + check_pattern(pattern).encode()
        got = self.meta.get(self.partition, key)
        if got is None:
            raise NotFoundError(
                f"no protection rule for {pattern!r}"
                "; run `zarrlake branch protect` to list the rules"
            )
        with contextlib.suppress(CASFailedError):  # replaced or removed meanwhile: theirs stays
            self.meta.delete_if(self.partition, key, got[1])

    def rules(self) -> list[Rule]:
        """Every protection rule, by pattern."""
        out = []
        for _, value, _ in self.meta.scan(self.partition, prefix=PREFIX):
            out.append(Rule.from_json(json.loads(value)))
        return sorted(out, key=lambda r: r.pattern)

    def matching(self, branch: str) -> list[Rule]:
        """The rules whose pattern matches `branch`."""
        return [r for r in self.rules() if r.matches(branch)]

    def check_direct_commit(self, branch: str) -> None:
        """ProtectedBranchError if a session may not commit straight to `branch`."""
        for rule in self.matching(branch):
            if not rule.allow_direct_commits:
                raise ProtectedBranchError(
                    f"branch {branch!r} is protected (rule {rule.pattern!r}): commit on another "
                    f"branch and merge it, or allow direct commits with "
                    f"protect_branch({rule.pattern!r}, allow_direct_commits=True)"
                )

    def check_merge(self, branch: str, what: str = "merge") -> None:
        """ProtectedBranchError if a rule requires pull requests into `branch` and this merge
        is not a pull request's (see `pull_request_merge`). A reset (`what`) is refused the
        same way: moved to a descendant, it is a merge without the review."""
        if _MERGING_PULL_REQUEST.get() == branch:
            return
        for rule in self.matching(branch):
            if rule.require_pull_request:
                raise ProtectedBranchError(
                    f"branch {branch!r} is protected (rule {rule.pattern!r}, "
                    f"require_pull_request): {what} into it through a pull request: open one "
                    f"with repo.create_pull_request(source, target={branch!r}) or "
                    f"'zarrlake pr create SOURCE --into {branch}', and merge that"
                )

    def check_squash(self, branch: str) -> None:
        """ProtectedBranchError if a rule protecting `branch` does not allow squashing its
        history (a squash rewrites what readers of the branch have seen)."""
        for rule in self.matching(branch):
            if not rule.allow_squash:
                raise ProtectedBranchError(
                    f"branch {branch!r} is protected (rule {rule.pattern!r}): its history "
                    "cannot be squashed unless the rule allows it (protect_branch("
                    f"{rule.pattern!r}, ..., allow_squash=True), or zarrlake protect "
                    f"{rule.pattern} --allow-squash)"
                )

    def pull_request_policy(self, branch: str) -> tuple[int, bool]:
        """(approvals required, whether stale approvals are dismissed) for pull requests into
        `branch`: the strictest of the matching rules."""
        rules = self.matching(branch)
        needed = max((r.required_approvals for r in rules), default=0)
        return needed, any(r.dismiss_stale_approvals for r in rules)

    def check_delete(self, branch: str) -> None:
        """ProtectedBranchError if `branch` may not be deleted."""
        rules = self.matching(branch)
        blocking = [r for r in rules if not r.allow_delete]
        if blocking:
            raise ProtectedBranchError(
                f"branch {branch!r} is protected (rule {blocking[0].pattern!r}) and cannot be "
                "deleted"
                "; unprotect it first (repo.unprotect_branch)"
            )
        if branch == "main" and not rules:
            raise ProtectedBranchError(
                "branch 'main' cannot be deleted (add protect_branch('main', allow_delete=True) "
                "first)"
            )


def check_direct_commit(meta: MetaStore, refs_partition: str, branch: str) -> None:
    """The commit-time check: call before a session's commit lands on `branch`."""
    Protection(meta, refs_partition).check_direct_commit(branch)
