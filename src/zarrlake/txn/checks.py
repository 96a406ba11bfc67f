"""Checks on a repository: running them on a change (with a CheckContext reading the
commit), and the gate every branch move passes through (commits, merges, reverts,
resets): the checks guarding the branch run on the proposed commit against the head it
replaces, and a failure refuses the move with ChecksFailedError."""

from __future__ import annotations

from collections.abc import Callable

from zarrlake.connection import RepoContext
from zarrlake.txn.check_view import CheckContext
from zarrlake.vc.checks.changes import change_between
from zarrlake.vc.checks.rules import CheckResults, CheckRule, read_guards
from zarrlake.vc.checks.run import CheckResult, failure, recorded_results, run_rules


def run_checks(
    ctx: RepoContext,
    rules: list[CheckRule],
    commit: str,
    base: str,
    reuse: bool = True,
    record: bool = True,
) -> list[CheckResult]:
    """The results of `rules` on the change from `base` to `commit` (recorded ones for
    this pair reused unless `reuse` is False; the others recorded unless `record` is
    False)."""
    results = CheckResults(ctx.meta, ctx.refs.partition)

    def view() -> CheckContext:
        return CheckContext(ctx, change_between(ctx.objects, commit, base))

    return run_rules(rules, commit, base, view, results, reuse, record)


def recorded_checks(
    ctx: RepoContext, rules: list[CheckRule], commit: str, base: str
) -> list[CheckResult]:
    """The recorded results of `rules` on the change from `base` to `commit`, in rule order;
    rules not run on that pair yet are left out. Nothing is computed or written."""
    found = recorded_results(rules, commit, base, CheckResults(ctx.meta, ctx.refs.partition))
    return [found[r.name] for r in rules if r.name in found]


def enforce(
    ctx: RepoContext, rules: list[CheckRule], branch: str, new: str, head: str, what: str
) -> None:
    """ChecksFailedError unless every rule passes on `new` against `head` (nothing to do
    when no rule guards the branch, or the branch would not move)."""
    if not rules or new == head:
        return
    error = failure(run_checks(ctx, rules, new, head), f"{what} {new[:12]} on branch {branch!r}")
    if error is not None:
        raise error


def branch_gate(ctx: RepoContext, what: str) -> Callable[[str, str, str], None]:
    """A gate for History (merge, revert, reset): (branch, new, head) -> None or raise.
    The rules are read once per gate (one scan), at its first use."""
    cache: dict[str, list[CheckRule]] = {}

    def gate(branch: str, new: str, head: str) -> None:
        if new == head:
            return
        if branch not in cache:
            cache[branch] = read_guards(ctx.meta, ctx.refs.partition).checks_for(branch)
        enforce(ctx, cache[branch], branch, new, head, what)

    return gate
