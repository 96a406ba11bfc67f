"""Branch protection rules, held in the metastore next to the refs (`protect/<pattern>` in
the refs partition), so every client (CLI, Python, Spark tasks) sees the same rules.

A rule names a branch or a glob (`release/*`). A protected branch refuses direct commits
from sessions unless a rule allows them, and refuses deletion unless a rule allows it;
merges, reverts and resets into it are allowed. When several rules match, the strictest
wins. `main` can never be deleted unless a rule matching it allows deletion.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase

from zarrlake.errors import CASFailedError, InvalidInputError, NotFoundError, ProtectedBranchError
from zarrlake.metastore.base import MetaStore
from zarrlake.validate import check_ref_name

PREFIX = b"protect/"


@dataclass(frozen=True)
class Rule:
    """A protection rule: which branches (name or glob) and what stays allowed."""

    pattern: str
    allow_direct_commits: bool = False
    allow_delete: bool = False

    def matches(self, branch: str) -> bool:
        """Whether this rule's glob pattern matches `branch`."""
        return fnmatchcase(branch, self.pattern)

    def to_json(self) -> dict:
        """The rule as stored and printed (a dict of its fields)."""
        return asdict(self)


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
        self, pattern: str, *, allow_direct_commits: bool = False, allow_delete: bool = False
    ) -> Rule:
        """Add or replace the rule for `pattern`."""
        rule = Rule(check_pattern(pattern), bool(allow_direct_commits), bool(allow_delete))
        self.meta.set(
            self.partition, PREFIX + pattern.encode(), json.dumps(rule.to_json()).encode()
        )
        return rule

    def unprotect(self, pattern: str) -> None:
        """Remove the rule for `pattern`; raises NotFoundError when there is none."""
        key = PREFIX + check_pattern(pattern).encode()
        got = self.meta.get(self.partition, key)
        if got is None:
            raise NotFoundError(f"no protection rule for {pattern!r}")
        with contextlib.suppress(CASFailedError):  # replaced or removed meanwhile: theirs stays
            self.meta.delete_if(self.partition, key, got[1])

    def rules(self) -> list[Rule]:
        """Every protection rule, by pattern."""
        out = []
        for _, value, _ in self.meta.scan(self.partition, prefix=PREFIX):
            out.append(Rule(**json.loads(value)))
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

    def check_delete(self, branch: str) -> None:
        """ProtectedBranchError if `branch` may not be deleted."""
        rules = self.matching(branch)
        blocking = [r for r in rules if not r.allow_delete]
        if blocking:
            raise ProtectedBranchError(
                f"branch {branch!r} is protected (rule {blocking[0].pattern!r}) and cannot be "
                "deleted"
            )
        if branch == "main" and not rules:
            raise ProtectedBranchError(
                "branch 'main' cannot be deleted (add protect_branch('main', allow_delete=True) "
                "first)"
            )


def check_direct_commit(meta: MetaStore, refs_partition: str, branch: str) -> None:
    """The commit-time check: call before a session's commit lands on `branch`."""
    Protection(meta, refs_partition).check_direct_commit(branch)
