"""Pull requests: a branch proposed for merging into another, with reviews, comments and the
checks guarding the target, merged once the target's rules are met (write-audit-publish).

`Repo.create_pull_request`, `Repo.pull_request` and `Repo.list_pull_requests` hand out
`PullRequest` objects; the records and their state machine are in `zarrlake.vc.pulls`.
There is no authentication (as in lakeFS open source): reviewers and authors are names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from zarrlake._util import crashpoints
from zarrlake._util.deprecation import renamed_arguments
from zarrlake._util.validate import check_ref_name
from zarrlake.errors import (
    ExpiredHistoryError,
    InvalidInputError,
    NotFoundError,
    PullRequestBlockedError,
    PullRequestChecksFailedError,
    PullRequestError,
    ZarrLakeError,
)
from zarrlake.present import iso
from zarrlake.vc import pulls as records
from zarrlake.vc.protection import Protection, pull_request_merge
from zarrlake.vc.pulls import APPROVE, MERGING, REQUEST_CHANGES, PullRecord, PullRequests
from zarrlake.vc.refs import BRANCH

if TYPE_CHECKING:
    from zarrlake.connection import RepoContext
    from zarrlake.vc.checks.rules import CheckRule
    from zarrlake.vc.checks.run import CheckResult


class Repo(Protocol):
    """What a pull request uses of its repository (`zarrlake.Repo`, which sits above this
    module and hands pull requests out)."""

    @property
    def _context(self) -> RepoContext: ...

    def list_branches(self) -> dict[str, str]: ...

    def list_checks(self) -> list[CheckRule]: ...

    def log(self, ref: str = "main", *, limit: int | None = None) -> list[Any]: ...

    def merge_base(self, a: str, b: str) -> str: ...

    def merge(
        self,
        source: str,
        *,
        target: str = "main",
        message: str | None = None,
        author: str | None = None,
        fast_forward: Any = "allow",
    ) -> str: ...

    def run_checks(
        self, ref: str, *, base: str | None = None, names: list[str] | None = None
    ) -> list[CheckResult]: ...


__all__ = ["PullRequest"]


def records_of(repo: Repo) -> PullRequests:
    """The pull request records of `repo`."""
    return PullRequests(repo._context.meta, repo._context.refs.partition)


def _protection(repo: Repo) -> Protection:
    return Protection(repo._context.meta, repo._context.refs.partition)


def guarding_checks(repo: Repo, branch: str) -> list[str]:
    """The names of the checks that guard `branch` (the ones its pull requests must pass)."""
    return [rule.name for rule in repo.list_checks() if rule.guards(branch)]


def merged_at(repo: Repo, target: str, head: str) -> str | None:
    """The commit of branch `target` that brought commit `head` in (a merge commit with
    `head` as a parent, or `head` itself); None if `target` does not contain `head`."""
    got = repo._context.refs.get(BRANCH, target)
    if got is None:
        return None
    tip = got[0]
    if tip == head:
        return tip
    try:
        if repo.merge_base(tip, head) != head:
            return None
    except (NotFoundError, ExpiredHistoryError):
        return None
    for c in repo.log(tip, limit=10_000):
        if c.id == head or head in c.parent_ids:
            return c.id
    return tip


def create(
    repo: Repo, source: str, target: str, title: str | None, description: str, author: str | None
) -> PullRequest:
    """A new open pull request of branch `source` into branch `target`."""
    for ref, what in ((source, "source branch"), (target, "target branch")):
        if not isinstance(ref, str):
            raise InvalidInputError(f"the {what} must be a branch name, not {ref!r}")
        check_ref_name(ref, what)
    if source == target:
        raise InvalidInputError(
            f"a pull request merges one branch into another: source and target are both {source!r}"
            "; open it from another branch"
        )
    branches = repo.list_branches()
    unknown = [b for b in (source, target) if b not in branches]
    if unknown:
        raise InvalidInputError(
            f"no branch {' or '.join(repr(b) for b in unknown)}: a pull request is between two "
            f"existing branches (create it with create_branch)"
        )
    if title is None:
        title = f"Merge {source} into {target}"
    records.check_text(title, "title", empty=False)
    records.check_text(description, "description")
    if author is not None:
        author = records.check_name(author, "author")
    rec = records_of(repo).create(source, target, title, description, author)
    return PullRequest(repo, rec)


class PullRequest:
    """A pull request of branch `source` into branch `target`, as last read.

    `refresh` re-reads it; every action returns with the record it wrote. `checks`,
    `approvals` and `blockers` are worked out for the source branch's current head when asked.
    """

    def __init__(self, repo: Repo, record: PullRecord) -> None:
        self._repo = repo
        self._rec = record

    def __repr__(self) -> str:
        r = self._rec
        return f"<zarrlake.PullRequest #{r.id} {r.source} -> {r.target} ({r.state})>"

    # the record ---------------------------------------------------------------------------

    @property
    def id(self) -> int:
        """The pull request's number."""
        return self._rec.id

    @property
    def state(self) -> str:
        """ "open", "merging" (a merge is under way), "merged" or "closed"."""
        return self._rec.state

    @property
    def source(self) -> str:
        """The branch to merge."""
        return self._rec.source

    @property
    def target(self) -> str:
        """The branch it merges into."""
        return self._rec.target

    @property
    def title(self) -> str:
        """Its title."""
        return self._rec.title

    @property
    def description(self) -> str:
        """Its description."""
        return self._rec.description

    @property
    def author(self) -> str | None:
        """Who opened it (a name as given)."""
        return self._rec.author

    @property
    def created(self) -> datetime:
        """When it was opened (UTC)."""
        return datetime.fromtimestamp(self._rec.created, UTC)

    @property
    def updated(self) -> datetime:
        """When its record last changed (UTC)."""
        return datetime.fromtimestamp(self._rec.updated, UTC)

    @property
    def comments(self) -> list[records.Comment]:
        """Its comments, oldest first (text, by, time in POSIX seconds)."""
        return list(self._rec.comments)

    @property
    def reviews(self) -> list[records.Review]:
        """Every review given, oldest first.

        Each is (verdict, by, time, the source head reviewed, text); a reviewer's latest one is
        the one that stands.
        """
        return list(self._rec.reviews)

    @property
    def merge_commit(self) -> str | None:
        """The commit its merge made on the target (None until merged)."""
        return self._rec.merge_commit

    @property
    def merged_by(self) -> str | None:
        """Who merged it."""
        return self._rec.merged_by

    # worked out now -------------------------------------------------------------------------

    @property
    def source_head(self) -> str:
        """The source branch's current head; PullRequestError if the branch is gone."""
        got = self._repo._context.refs.get(BRANCH, self._rec.source)
        if got is None:
            raise PullRequestError(
                f"pull request #{self.id}: its source branch {self._rec.source!r} no longer exists"
            )
        return got[0]

    @property
    def base(self) -> str:
        """The merge base of the target and the source's current head."""
        return self._repo.merge_base(self._rec.target, self.source_head)

    def _policy(self) -> tuple[int, bool]:
        return _protection(self._repo).pull_request_policy(self._rec.target)

    @property
    def approvals(self) -> list[str]:
        """Who approves it now: reviewers whose latest review approves.

        Only reviews of the current source head count where the target's rule dismisses stale
        approvals.
        """
        return self._rec.approvers(self.source_head, self._policy()[1])

    @property
    def requested_changes(self) -> list[str]:
        """Reviewers whose request for changes stands (until they approve)."""
        return self._rec.requesting_changes()

    @property
    def required_approvals(self) -> int:
        """How many approvals the target's protection rules require."""
        return self._policy()[0]

    @property
    def checks(self) -> list[CheckResult]:
        """The recorded results of the checks guarding the target, for the source's current
        head against its merge base with the target; a check not run on that pair yet is
        not listed. Reading it runs nothing and writes nothing: `run_checks()` does."""
        return self._checks(self.source_head, run=False)

    def run_checks(self) -> list[CheckResult]:
        """Run the checks guarding the target on the source's current head against its merge
        base with the target, record their results and return them ([] when none guard
        it); results recorded for that pair are reused (`Repo.run_checks`)."""
        return self._checks(self.source_head)

    def _checks(self, head: str, record: bool = True, run: bool = True) -> list[CheckResult]:
        """The guarding checks' results for `head` against its merge base with the target:
        computed where not recorded (and then recorded, with `record`), or with `run` False
        the recorded ones only."""
        rules = [r for r in self._repo.list_checks() if r.guards(self._rec.target)]
        if not rules:
            return []
        base = self._repo.merge_base(self._rec.target, head)
        if not run:
            from zarrlake.txn.checks import recorded_checks

            return recorded_checks(self._repo._context, rules, head, base)
        if record:
            return self._repo.run_checks(head, base=base, names=[r.name for r in rules])
        from zarrlake.txn.checks import run_checks

        return run_checks(self._repo._context, rules, head, base, record=False)

    def blockers(self) -> list[str]:
        """Why a merge would be refused now, one line each ([] when it may merge)."""
        if self._rec.state != records.OPEN:
            return [f"it is {self._rec.state}"]
        return self._blockers(self.source_head)

    def _blockers(self, head: str, failed: list[CheckResult] | None = None) -> list[str]:
        """Why a merge of `head` is refused: the failing checks (`failed`, or those run now),
        then what the record says (approvals, change requests)."""
        if failed is None:
            failed = [c for c in self._checks(head) if not c.passed]
        out = [f"check {c.name!r} failed: {c.message}" for c in failed]
        needed, dismiss = self._policy()
        return out + self._rec.blockers(head, needed, dismiss)

    def to_json(self, checks: bool = True, record: bool = False) -> dict:
        """The pull request as the CLI's and the web UI's JSON show it.

        With `checks`, the checks' results, approvals and blockers for the source's current
        head too (results not recorded yet are computed; with `record` they are recorded).
        """
        r = self._rec
        out: dict[str, Any] = {
            "id": r.id,
            "state": r.state,
            "source": r.source,
            "target": r.target,
            "title": r.title,
            "description": r.description,
            "author": r.author,
            "created": iso(r.created),
            "updated": iso(r.updated),
            "merge_commit": r.merge_commit,
            "merged_by": r.merged_by,
            "comments": [{"text": c.text, "by": c.by, "time": iso(c.time)} for c in r.comments],
            "reviews": [
                {
                    "verdict": v.verdict,
                    "by": v.by,
                    "time": iso(v.time),
                    "head": v.head,
                    "text": v.text,
                }
                for v in r.reviews
            ],
            "requested_changes": r.requesting_changes(),
        }
        if not checks:
            return out
        head = self._repo._context.refs.get(BRANCH, r.source)
        out["source_head"] = head[0] if head else None
        if head is None or r.state != records.OPEN:
            return out
        results = self._checks(head[0], record)
        needed, dismiss = self._policy()
        out["checks"] = [
            {"name": c.name, "passed": c.passed, "message": c.message, **_located(c)}
            for c in results
        ]
        out["approvals"] = r.approvers(head[0], dismiss)
        out["required_approvals"] = needed
        failing = [f"check {c.name!r} failed: {c.message}" for c in results if not c.passed]
        out["blockers"] = failing + r.blockers(head[0], needed, dismiss)
        return out

    # actions ----------------------------------------------------------------------------------

    def refresh(self) -> PullRequest:
        """Re-read the record (another client may have changed it); returns self."""
        self._rec = records_of(self._repo).get(self.id)[0]
        return self

    def _update(self, change: Callable[[PullRecord], PullRecord | None]) -> PullRequest:
        self._rec = records_of(self._repo).update(self.id, change)
        return self

    @renamed_arguments(by="author")
    def comment(self, text: str, *, author: str | None = None) -> PullRequest:
        """Add a comment by `author` (allowed in any state); returns self."""
        records.check_text(text, "comment", empty=False)
        who = None if author is None else records.check_name(author, "author")
        return self._update(lambda r: records.add_comment(r, text, who))

    @renamed_arguments(by="author")
    def approve(self, *, author: str, text: str = "") -> PullRequest:
        """Approve the source's current head, as reviewer `author`.

        This also lifts that reviewer's request for changes. Whoever opened the pull request
        cannot approve it.
        """
        return self._review(APPROVE, author, text)

    @renamed_arguments(by="author")
    def request_changes(self, *, author: str, text: str = "") -> PullRequest:
        """Ask for changes, as reviewer `author`: merging is refused until they approve."""
        return self._review(REQUEST_CHANGES, author, text)

    def _review(self, verdict: str, author: str, text: str) -> PullRequest:
        who = records.check_name(author, "author")
        records.check_text(text, "review text")
        head = self.source_head
        return self._update(lambda r: records.add_review(r, verdict, who, head, text))

    @renamed_arguments(by="author")
    def close(self, *, author: str | None = None) -> PullRequest:
        """Close it without merging, as `author` (`reopen` opens it again); returns self."""
        self.recover()
        return self._update(lambda r: records.close(r, author))

    def reopen(self) -> PullRequest:
        """Open a closed pull request again; returns self.

        PullRequestError if another pull request of the same branches is open (it holds their
        index record).
        """
        prs = records_of(self._repo)
        self.refresh()
        records.reopen(self._rec)  # refuses early unless closed
        prs.claim(self._rec)
        self._update(records.reopen)
        if prs.holder(self.source, self.target) != self.id:  # a creator took it meanwhile
            with contextlib.suppress(ZarrLakeError):
                self._update(lambda r: records.close(r, r.closed_by) if r.state == "open" else None)
            raise PullRequestError(
                f"cannot reopen pull request #{self.id}: another pull request of "
                f"{self.source!r} into {self.target!r} was opened meanwhile"
                "; use that pull request (`zarrlake pr list` shows it)"
            )
        return self

    def recover(self) -> PullRequest:
        """Settle a "merging" state whose merger died or whose lease ran out; returns self.

        Merged if the target holds the source commit it was merging, else open again.
        """
        self.refresh()
        rec = self._rec
        if not records.stale(rec):
            return self
        held = rec.merging
        assert held is not None
        landed = merged_at(self._repo, rec.target, held.head)

        def settle(r: PullRecord) -> PullRecord | None:
            if r.state != MERGING or r.merging != held:
                return None  # settled by someone else meanwhile
            if landed is not None:
                return records.finish_merge(r, landed, held.by)
            return replace(r, state=records.OPEN, merging=None)

        return self._update(settle)

    @renamed_arguments(by="author")
    def merge(self, *, author: str | None = None, message: str | None = None) -> str:
        """Merge the source's current head into the target; returns the merge commit id.

        It uses `Repo.merge`, always making a merge commit.

        Raises
        ------
        PullRequestNotOpenError
            If it is merged, closed or being merged by another client.
        PullRequestChecksFailedError
            If a check guarding the target fails: a PullRequestBlockedError and a
            ChecksFailedError (`results` holds the failing checks, `reasons` every reason).
        PullRequestBlockedError
            If approvals are missing or a request for changes stands (`reasons` lists
            each).
        ConflictError
            If the merge conflicts; the pull request stays open.
        """
        who = None if author is None else records.check_name(author, "author")
        self.recover()
        records.require_open(self._rec, "merge")
        head = self.source_head
        failed = [c for c in self._checks(head) if not c.passed]
        reasons = self._blockers(head, failed)
        if reasons:
            why = f"pull request #{self.id} cannot be merged: {'; '.join(reasons)}"
            if failed:
                raise PullRequestChecksFailedError(why, reasons, failed)
            raise PullRequestBlockedError(why, reasons)
        needed, dismiss = self._policy()
        self._update(lambda r: records.begin_merge(r, head, who, needed, dismiss))
        assert self._rec.merging is not None
        token = self._rec.merging.token
        crashpoints.reached("pr_after_merging")
        r = self._rec
        text = message or f"Merge pull request #{r.id} from {r.source}\n\n{r.title}"
        try:
            with pull_request_merge(r.target):
                commit = self._repo.merge(
                    head,
                    target=r.target,
                    message=text,
                    author=who or r.author,
                    fast_forward="never",
                )
        except BaseException:
            with contextlib.suppress(ZarrLakeError):  # the merge's own error is the one to see
                self._update(lambda cur: records.abort_merge(cur, token))
            raise
        crashpoints.reached("pr_after_merge")
        self._update(lambda cur: records.finish_merge(cur, commit, who))
        return commit


def _located(result: CheckResult) -> dict:
    """The array and a few failing chunk coordinates a check result reports, if any."""
    if not result.chunks or result.array is None:
        return {}
    return {
        "array": result.array,
        "chunks": [list(c) for c in result.chunks],
        "failing": result.failing,
    }
