"""Pull request records and their state machine, held in the metastore next to the refs
(`pr/<id>` in the refs partition), so every client sees the same pull requests.

Ids are increasing numbers (1, 2, 3...): short, readable, and said aloud in a review
("merge #12"). Each is allocated by compare-and-swap on one counter key (`pr-seq`), so two
clients creating pull requests at once never get the same number; a lost reply may skip a
number, which is harmless. Every change to a record is a compare-and-swap against the
version read, retried with jittered backoff on a lost race (`PullRequests.update`).

One open pull request per (source, target): an index record `pr-open/<digest of the
pair>` names the pull request holding the pair, taken by compare-and-swap before its
record is written. A holder that is merged or closed no longer holds it; a holder whose
record is missing (its creator claimed the pair and has not written it, or never will) is
voided (`pr/<id>` written as a void record, so that creator's write fails and it tries
again). Repositories from before the index are indexed once, by the first creation that
finds no `pr-indexed` marker (`PullRequests.index_old`).

States: open -> merging -> merged, open -> closed -> open. "merging" is held by one merger
(a random token, its process identity and a lease), so two merges of one pull request cannot
both run; a merger that died leaves a "merging" record that `recover` settles.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace

from zarrlake._util import runtime
from zarrlake._util.retry import RetryPolicy, backoff
from zarrlake.errors import (
    CASFailedError,
    InvalidInputError,
    PullRequestBlockedError,
    PullRequestError,
    PullRequestExistsError,
    PullRequestNotFoundError,
    PullRequestNotOpenError,
)
from zarrlake.metastore.base import MetaStore

PREFIX = b"pr/"
SEQ_KEY = b"pr-seq"
INDEX = b"pr-open/"
INDEXED = b"pr-indexed"
VOID = b'{"void": true}'
"""What `pr/<id>` holds when its creator claimed the pair and never wrote it."""
OPEN, MERGING, MERGED, CLOSED = "open", "merging", "merged", "closed"
STATES = (OPEN, MERGING, MERGED, CLOSED)
APPROVE, REQUEST_CHANGES = "approve", "request_changes"
MERGE_LEASE = 600.0
"""Seconds a merger holds "merging" before another client may take it back (sooner when its
process is known to be dead)."""
UPDATE_POLICY = RetryPolicy(attempts=40, base_delay=0.005, max_delay=0.2)
MAX_TEXT = 65536


@dataclass(frozen=True)
class Comment:
    """A comment on a pull request: its text, who wrote it and when (POSIX seconds)."""

    text: str
    by: str | None
    time: float


@dataclass(frozen=True)
class Review:
    """A review: "approve" or "request_changes", by whom, when, with what text, and the
    source branch's head it was given at (an approval of an older head is stale)."""

    verdict: str
    by: str
    time: float
    head: str
    text: str = ""


@dataclass(frozen=True)
class Merging:
    """Who holds a pull request's "merging" state: token, process identity, lease end
    (POSIX seconds) and the source commit being merged."""

    token: str
    identity: str
    lease_until: float
    head: str
    by: str | None = None


@dataclass(frozen=True)
class PullRecord:
    """One pull request as stored."""

    id: int
    source: str
    target: str
    title: str
    description: str
    author: str | None
    state: str
    created: float
    updated: float
    comments: tuple[Comment, ...] = ()
    reviews: tuple[Review, ...] = ()
    merge_commit: str | None = None
    merged_by: str | None = None
    merging: Merging | None = None
    closed_by: str | None = None
    extra: dict = field(default_factory=dict)

    def encode(self) -> bytes:
        """The record as stored (JSON)."""
        doc = asdict(self)
        doc.pop("extra")
        return json.dumps({**self.extra, **doc}, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> PullRecord:
        """A stored record; fields a later version added are kept as they are."""
        doc = json.loads(data)
        known = {f.name for f in fields(cls)} - {"extra"}
        kept = {k: v for k, v in doc.items() if k in known}
        kept["comments"] = tuple(_known(Comment, c) for c in kept.get("comments", ()))
        kept["reviews"] = tuple(_known(Review, r) for r in kept.get("reviews", ()))
        if kept.get("merging") is not None:
            kept["merging"] = _known(Merging, kept["merging"])
        return cls(**kept, extra={k: v for k, v in doc.items() if k not in known})

    def standing_reviews(self) -> dict[str, Review]:
        """Each reviewer's latest review (a later one replaces their earlier one)."""
        out: dict[str, Review] = {}
        for r in self.reviews:
            out[r.by] = r
        return out

    def approvers(self, head: str, dismiss_stale: bool) -> list[str]:
        """Who approves, standing: with `dismiss_stale`, only approvals given at `head`."""
        return sorted(
            r.by
            for r in self.standing_reviews().values()
            if r.verdict == APPROVE and (not dismiss_stale or r.head == head)
        )

    def requesting_changes(self) -> list[str]:
        """Reviewers whose latest review asks for changes: their request stands until they
        approve."""
        return sorted(
            r.by for r in self.standing_reviews().values() if r.verdict == REQUEST_CHANGES
        )

    def blockers(self, head: str, needed: int, dismiss_stale: bool) -> list[str]:
        """Why the record itself stops a merge of `head` (approvals, change requests)."""
        out = []
        approvers = self.approvers(head, dismiss_stale)
        if len(approvers) < needed:
            stale = "" if not dismiss_stale else " (approvals of an older head are dismissed)"
            out.append(
                f"{needed} approval(s) required, {len(approvers)} given{stale}"
                + (f": {', '.join(approvers)}" if approvers else "")
            )
        for who in self.requesting_changes():
            out.append(f"{who} requested changes (they must approve before it merges)")
        return out


def _known[T](cls: type[T], doc: dict) -> T:
    """`cls` from a stored dict, leaving out fields a later version added."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in doc.items() if k in names})


def check_text(value: object, what: str, *, empty: bool = True) -> str:
    """A title, description or comment: a string of at most MAX_TEXT characters."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string, not {value!r}")
    if not empty and not value.strip():
        raise InvalidInputError(f"{what} must not be empty")
    if len(value) > MAX_TEXT:
        raise InvalidInputError(f"{what} is longer than {MAX_TEXT} characters; shorten it")
    return value


def check_name(value: object, what: str) -> str:
    """Who did something (there is no authentication: a name as given): a non-empty string."""
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise InvalidInputError(f"{what} must be a non-empty name of at most 200 characters")
    return value.strip()


def parse_id(value: object) -> int:
    """A pull request id: a positive integer, or its text ("12" or "#12")."""
    text = str(value).strip().lstrip("#") if isinstance(value, str | int) else ""
    if isinstance(value, bool) or not text.isdigit() or len(text) > 12 or int(text) < 1:
        raise InvalidInputError(
            f"a pull request id is a positive integer, not {value!r}"
            "; run `zarrlake pr list` for the numbers"
        )
    return int(text)


class PullRequests:
    """Reads and writes the pull request records of one repository."""

    def __init__(self, meta: MetaStore, partition: str) -> None:
        self.meta = meta
        self.partition = partition

    @staticmethod
    def _key(pr_id: int) -> bytes:
        return PREFIX + str(pr_id).encode()

    def _next_id(self) -> int:
        """The next number, taken from the counter by compare-and-swap."""
        for _ in backoff(UPDATE_POLICY):
            got = self.meta.get(self.partition, SEQ_KEY)
            n = int(got[0]) + 1 if got else 1
            try:
                self.meta.set_if(self.partition, SEQ_KEY, str(n).encode(), got[1] if got else None)
                return n
            except CASFailedError:
                continue
        raise PullRequestError("could not allocate a pull request id (too many at once); retry")

    def create(
        self, source: str, target: str, title: str, description: str, author: str | None
    ) -> PullRecord:
        """Store a new open pull request with the next id; PullRequestError if one of
        `source` into `target` is open already (one read of the index, whatever the
        number of pull requests)."""
        self.index_old()
        key = index_key(source, target)
        for _ in backoff(UPDATE_POLICY):
            got = self.meta.get(self.partition, key)
            held = None if got is None else int(json.loads(got[0])["id"])
            if held is not None and self._holds(held):
                raise PullRequestExistsError(
                    f"pull request #{held} of {source!r} into {target!r} is open already; "
                    f"update its source branch, or close it first"
                )
            pr_id = self._next_id()
            claim = json.dumps({"id": pr_id, "source": source, "target": target}).encode()
            try:
                self.meta.set_if(self.partition, key, claim, got[1] if got else None)
            except CASFailedError:
                continue  # another creator (or a reopen) took the pair: look again
            now = runtime.now()
            rec = PullRecord(pr_id, source, target, title, description, author, OPEN, now, now)
            try:  # voided meanwhile by a creator that took this claim for a dead one
                self.meta.set_if(self.partition, self._key(pr_id), rec.encode(), None)
                return rec
            except CASFailedError:
                continue
        raise PullRequestError(
            f"could not open a pull request of {source!r} (too many at once); try again"
        )

    def _holds(self, pr_id: int) -> bool:
        """Whether pull request `pr_id` still holds its pair: open or being merged. A
        missing record is voided (its creator's write then fails): it never will."""
        got = self.meta.get(self.partition, self._key(pr_id))
        if got is None:
            try:
                self.meta.set_if(self.partition, self._key(pr_id), VOID, None)
                return False
            except CASFailedError:
                got = self.meta.get(self.partition, self._key(pr_id))
                if got is None:
                    return False
        if _is_void(got[0]):
            return False
        return PullRecord.decode(got[0]).state in (OPEN, MERGING)

    def claim(self, rec: PullRecord) -> None:
        """Make `rec` (being reopened) the holder of its pair; PullRequestError if another
        open pull request holds it."""
        key = index_key(rec.source, rec.target)
        for _ in backoff(UPDATE_POLICY):
            got = self.meta.get(self.partition, key)
            held = None if got is None else int(json.loads(got[0])["id"])
            if held == rec.id:
                return
            if held is not None and self._holds(held):
                raise PullRequestExistsError(
                    f"cannot reopen pull request #{rec.id}: #{held} of {rec.source!r} into "
                    f"{rec.target!r} is open (close #{held} first)"
                )
            claim = {"id": rec.id, "source": rec.source, "target": rec.target}
            try:
                self.meta.set_if(
                    self.partition, key, json.dumps(claim).encode(), got[1] if got else None
                )
                return
            except CASFailedError:
                continue
        raise PullRequestError(f"pull request #{rec.id}: its index kept changing; try again")

    def holder(self, source: str, target: str) -> int | None:
        """The id the index names for the pair (it may be closed or merged since)."""
        got = self.meta.get(self.partition, index_key(source, target))
        return None if got is None else int(json.loads(got[0])["id"])

    def index_old(self) -> None:
        """Index the open pull requests of a repository from before the index (once: the
        `pr-indexed` marker says it is done)."""
        if self.meta.get(self.partition, INDEXED) is not None:
            return
        for rec in self.list():
            if rec.state in (OPEN, MERGING):
                claim = {"id": rec.id, "source": rec.source, "target": rec.target}
                with contextlib.suppress(CASFailedError):  # indexed already
                    self.meta.set_if(
                        self.partition,
                        index_key(rec.source, rec.target),
                        json.dumps(claim).encode(),
                        None,
                    )
        with contextlib.suppress(CASFailedError):
            self.meta.set_if(self.partition, INDEXED, b"1", None)

    def get(self, pr_id: int) -> tuple[PullRecord, int]:
        """(record, version); NotFoundError when there is no such pull request."""
        got = self.meta.get(self.partition, self._key(pr_id))
        if got is None or _is_void(got[0]):
            raise PullRequestNotFoundError(
                f"no pull request #{pr_id}; run `zarrlake pr list` to see the open ones"
            )
        return PullRecord.decode(got[0]), got[1]

    def list(self, state: str | None = None) -> list[PullRecord]:
        """Every pull request in `state` (None: all), by id."""
        if state is not None and state not in STATES:
            raise InvalidInputError(
                f"state must be one of {', '.join(STATES)} or None, not {state!r}"
            )
        out = [
            PullRecord.decode(v)
            for _, v, _ in self.meta.scan(self.partition, prefix=PREFIX)
            if not _is_void(v)
        ]
        return sorted((r for r in out if state in (None, r.state)), key=lambda r: r.id)

    def update(self, pr_id: int, change: Callable[[PullRecord], PullRecord | None]) -> PullRecord:
        """Apply `change` to the current record until the compare-and-swap wins. `change`
        may raise to refuse, or return None to keep the record as it is."""
        for _ in backoff(UPDATE_POLICY):
            rec, version = self.get(pr_id)
            new = change(rec)
            if new is None:
                return rec
            new = replace(new, updated=runtime.now())
            try:
                self.meta.set_if(self.partition, self._key(pr_id), new.encode(), version)
                return new
            except CASFailedError:
                continue
        raise PullRequestError(f"pull request #{pr_id}: its record kept changing; try again")


def index_key(source: str, target: str) -> bytes:
    """The index record of the pair (a digest: branch names may hold any ref character)."""
    pair = json.dumps([source, target]).encode()
    return INDEX + hashlib.sha256(pair).hexdigest()[:40].encode()


def _is_void(value: bytes) -> bool:
    return value == VOID


# transitions: each takes a record and returns the changed one (or raises) -----------------


def require_open(rec: PullRecord, action: str) -> None:
    """PullRequestNotOpenError unless the pull request is open."""
    if rec.state == OPEN:
        return
    detail = {
        MERGED: f"it was merged ({(rec.merge_commit or '')[:12]}); open a new one",
        CLOSED: "it is closed (reopen it first)",
        MERGING: "it is being merged right now; wait for that merge",
    }[rec.state]
    raise PullRequestNotOpenError(f"cannot {action} pull request #{rec.id}: {detail}")


def add_comment(rec: PullRecord, text: str, by: str | None) -> PullRecord:
    """The record with one more comment."""
    return replace(rec, comments=(*rec.comments, Comment(text, by, runtime.now())))


def add_review(rec: PullRecord, verdict: str, by: str, head: str, text: str) -> PullRecord:
    """The record with one more review (of an open pull request, not by its author)."""
    require_open(rec, "review")
    if verdict == APPROVE and rec.author is not None and by == rec.author:
        raise PullRequestError(
            f"{by} opened pull request #{rec.id} and cannot approve it"
            "; ask another reviewer to approve it"
        )
    return replace(rec, reviews=(*rec.reviews, Review(verdict, by, runtime.now(), head, text)))


def close(rec: PullRecord, by: str | None) -> PullRecord:
    """open -> closed."""
    require_open(rec, "close")
    return replace(rec, state=CLOSED, closed_by=by)


def reopen(rec: PullRecord) -> PullRecord:
    """closed -> open."""
    if rec.state != CLOSED:
        raise PullRequestNotOpenError(
            f"cannot reopen pull request #{rec.id}: it is {rec.state}, not closed"
            "; open a new pull request"
        )
    return replace(rec, state=OPEN, closed_by=None)


def begin_merge(
    rec: PullRecord, head: str, by: str | None, needed: int, dismiss_stale: bool
) -> PullRecord:
    """open -> merging, held by a new token, if the record lets `head` merge."""
    require_open(rec, "merge")
    reasons = rec.blockers(head, needed, dismiss_stale)
    if reasons:
        raise PullRequestBlockedError(
            f"pull request #{rec.id} cannot be merged: {'; '.join(reasons)}", reasons
        )
    lease = runtime.now() + MERGE_LEASE
    held = Merging(secrets.token_hex(8), runtime.identity(), lease, head, by)
    return replace(rec, state=MERGING, merging=held)


def holds(rec: PullRecord, token: str) -> bool:
    """Whether the merge holding `token` still holds the record."""
    return rec.state == MERGING and rec.merging is not None and rec.merging.token == token


def finish_merge(rec: PullRecord, commit: str, by: str | None) -> PullRecord:
    """merging (or open again, if a recovery took it back meanwhile) -> merged: the merge
    landed, so the record says so whoever holds it now."""
    if rec.state == MERGED:
        return rec if rec.merge_commit else replace(rec, merge_commit=commit)
    return replace(rec, state=MERGED, merge_commit=commit, merged_by=by, merging=None)


def abort_merge(rec: PullRecord, token: str) -> PullRecord | None:
    """merging -> open when our merge failed (None: someone else holds it now)."""
    if not holds(rec, token):
        return None
    return replace(rec, state=OPEN, merging=None)


def stale(rec: PullRecord) -> bool:
    """Whether a "merging" record's merger is gone: its process is dead, or its lease ran
    out."""
    m = rec.merging
    if rec.state != MERGING or m is None:
        return False
    return runtime.identity_alive(m.identity) is False or runtime.now() > m.lease_until
