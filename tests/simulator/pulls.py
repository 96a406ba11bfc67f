"""Pull-request actors for the simulator, and the invariants about checks and pull requests.

In one seed in seven (`EVERY`, drawn from a stream of its own: the other seeds run as before)
a `pulls` actor joins the run. It declares a check guarding `main` (at most N chunks
changed, N drawn), then opens pull requests of `dev` into `main`, writes to `dev`, approves,
closes, and merges: through the pull request (sometimes with a second process merging the
same one at once) and now and then straight with `Repo.merge`, racing the other actors'
commits to `main`.

`PullWatch` checks, after every step that changed refs:

- no move of a guarded branch lands a change its check refuses: once the rule's
  declaration was acknowledged, every commit, merge, revert or reset that began later and
  moved `main` changed at most N chunks (counted on the model's own contents of the old
  and new heads, which never exceed what the library counts);
- a pull request's state is open, merging, merged or closed; merged and closed never
  change again (the actor never reopens), and a merged record keeps its merge commit;
- a pull request produced at most one merge commit, and once merged its record names it.
"""

from __future__ import annotations

import random
from functools import partial
from typing import TYPE_CHECKING

from tests.simulator.actors import (
    Actor,
    _history_op,
    _said,
    begin_session,
    commit_with_retries,
)
from tests.simulator.model import Intent, Outcome, Violation
from zarrlake.errors import (
    ChecksFailedError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PullRequestBlockedError,
    PullRequestError,
    ZarrLakeError,
)
from zarrlake.vc.checks.kinds import MaxChangedChunks
from zarrlake.vc.checks.rules import PREFIX as RULE_PREFIX
from zarrlake.vc.pulls import CLOSED, MERGED, PREFIX, STATES, VOID, PullRecord

if TYPE_CHECKING:
    from tests.simulator.model import Model
    from tests.simulator.protocols import World

EVERY = 7
"""One seed in this many gets a `pulls` actor (unless `Config.actors` says who runs)."""
SOURCE, TARGET = "dev", "main"
CHECK = "sim-max-chunks"
REVIEWER = "rev"


def drawn(seed: int) -> list[str]:
    """The pull-request actors seed `seed` adds to the drawn ones ([] in most seeds)."""
    return ["pulls"] if random.Random(f"{seed}/pulls").randrange(EVERY) == 0 else []


class PullWatch:
    """The invariants of checks and pull requests, judged after each step's ref moves."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.model: Model = world.model
        self.limit: int | None = None  # the check's N, once its declaration was acknowledged
        self.since = 0  # model.seq when it was acknowledged
        self.head = self.model.heads.get(TARGET)
        self.states: dict[int, PullRecord] = {}
        self.merges: dict[int, list[Intent]] = {}  # pull request -> its merge attempts
        self.model.watchers.append(self.step)

    def declared(self, n: int) -> None:
        """The check guarding TARGET was declared (acknowledged) with limit `n`."""
        self.model.seq += 1
        self.limit, self.since = n, self.model.seq

    def step(self) -> None:
        """Judge this step's move of TARGET and the pull request records."""
        new = self.model.heads.get(TARGET)
        old, self.head = self.head, new
        if old is not None and new is not None and new != old:
            self._judge_move(old, new)
        self._judge_records()

    def _judge_move(self, old: str, new: str) -> None:
        if self.limit is None:
            return
        movers = [i for i in self.model.intents if i.branch == TARGET and i.landed == new]
        if not movers or any(i.began < self.since for i in movers):
            return  # it may have read the rules before the check was declared
        self.model.counts["moves of a guarded branch checked"] += 1
        before, after = self.model.commits[old].state, self.model.commits[new].state
        # Chunks of an array, as the check counts them: a key under `<array>/c/` whose
        # array's document is in either state (a revert may have taken it away).
        docs = {k for k in set(before) | set(after) if k.endswith("zarr.json")}
        changed = sorted(
            k
            for k in set(before) | set(after)
            if "/c/" in k
            and f"{k.split('/c/')[0]}/zarr.json" in docs
            and before.get(k) != after.get(k)
        )
        if len(changed) > self.limit:
            i = movers[0]
            raise Violation(
                f"{i.kind} {i.id} by {i.actor} landed {new[:12]} on the guarded branch "
                f"{TARGET!r} although check {CHECK!r} fails on it: it changes {len(changed)} "
                f"chunks {changed} against {old[:12]}, more than {self.limit}"
            )

    def _judge_records(self) -> None:
        obs = self.world.obs
        for _, value, _ in obs.meta.scan(obs.refs.partition, prefix=PREFIX):
            if value == VOID:  # a number whose creator was taken for dead: never a request
                continue
            rec = PullRecord.decode(value)
            before = self.states.get(rec.id)
            self.states[rec.id] = rec
            self.model.counts["pull request records checked"] += 1
            if rec.state not in STATES:
                raise Violation(f"pull request #{rec.id} is in the unknown state {rec.state!r}")
            settled = before is not None and before.state in (MERGED, CLOSED)
            if (
                settled
                and before is not None
                and (rec.state, rec.merge_commit) != (before.state, before.merge_commit)
            ):
                raise Violation(
                    f"pull request #{rec.id} went from {before.state} "
                    f"({(before.merge_commit or '')[:12]}) to {rec.state} "
                    f"({(rec.merge_commit or '')[:12]}): a settled state came back"
                )
            landed = [i.landed for i in self.merges.get(rec.id, ()) if i.landed]
            if len(set(landed)) > 1:
                raise Violation(
                    f"pull request #{rec.id} produced {len(set(landed))} merge commits: "
                    f"{sorted(c[:12] for c in set(landed))}"
                )
            if rec.state == MERGED and landed and rec.merge_commit != landed[0]:
                raise Violation(
                    f"pull request #{rec.id} is merged as {(rec.merge_commit or '?')[:12]}, "
                    f"but its merge landed {landed[0][:12]}"
                )
            if rec.state == MERGED:
                self.model.counts["merged pull requests checked"] += 1


def _declare(a: Actor, watch: PullWatch) -> None:
    """Declare the check guarding TARGET (retried: a lost reply leaves it declared)."""
    repo = a.open()
    n = a.rng.choice((1, 2, 3))
    for _ in range(5):
        try:
            with a.op(f"add check {CHECK} (at most {n} chunks) on {TARGET}"):
                repo.add_check(CHECK, MaxChangedChunks(n), branches=(TARGET,))
            watch.declared(n)
            return
        except InvalidInputError:  # declared by a try whose reply was lost
            if a.world.meta.get(a.world.obs.refs.partition, RULE_PREFIX + CHECK.encode()):
                watch.declared(n)
                return
        except ZarrLakeError:
            a.think()


def _merge(a: Actor, watch: PullWatch, pr_id: int) -> None:
    """Merge pull request `pr_id` through its record, the outcome told to the model."""
    repo = a.open()
    model = a.model
    try:
        with a.op(f"read pull request #{pr_id}"):
            pr = repo.pull_request(pr_id)
    except ZarrLakeError:
        return
    intent = model.begin(Intent(a.world.new_id("p"), "merge", pr.target, a.name))
    watch.merges.setdefault(pr_id, []).append(intent)
    try:
        with a.op(f"merge pull request #{pr_id} ({intent.id})"):
            cid = pr.merge(author=a.name, message=intent.id)
    except (PullRequestBlockedError, PullRequestError, ConflictError, NotFoundError):
        model.end(intent, Outcome.FAILED)
        return
    except ChecksFailedError as e:  # it says the branch did not move
        model.end(intent, Outcome.REPORTED, _said(e))
        return
    except ZarrLakeError as e:
        model.end(intent, Outcome.UNKNOWN, _said(e))
        return
    a.note(f"merged as {cid[:12]}")
    model.end(intent, Outcome.ACKED, cid)


def _write_source(a: Actor) -> None:
    """A session on SOURCE writing a few chunks, committed (the pull request's new head)."""
    w = begin_session(a, SOURCE)
    if w is None:
        return
    for key in a.rng.sample(a.world.keys, k=a.rng.randint(1, 4)):
        w.write(key, a.value())
    commit_with_retries(w, a)


def pull_requests(a: Actor) -> None:
    """The program: declare the check, then open, write, approve, merge and close."""
    repo = a.open()
    watch = PullWatch(a.world)
    _declare(a, watch)
    for _ in range(a.world.ops + 1):
        a.think()
        roll = a.rng.random()
        try:
            with a.op(f"list open pull requests of {SOURCE}"):
                open_ = [p.id for p in repo.list_pull_requests("open") if p.source == SOURCE]
        except ZarrLakeError:
            continue
        if roll < 0.25:
            _write_source(a)
        elif not open_ or roll < 0.35:
            try:
                with a.op(f"open a pull request of {SOURCE} into {TARGET}"):
                    pr = repo.create_pull_request(SOURCE, target=TARGET, author=a.name)
                a.note(f"#{pr.id}")
            except ZarrLakeError:
                pass
        elif roll < 0.5:
            try:
                with a.op(f"approve #{open_[0]}"):
                    repo.pull_request(open_[0]).approve(author=REVIEWER)
            except ZarrLakeError:
                pass
        elif roll < 0.85:
            pr_id = open_[0]
            if a.rng.random() < 0.4:  # a second process merges it at the same time
                racer = Actor(a.world, f"{a.name}.m", random.Random(a.rng.getrandbits(64)))

                def race(me: Actor, n: int = pr_id) -> None:
                    _merge(me, watch, n)

                racer.start(race)
            _merge(a, watch, pr_id)
        elif roll < 0.93:
            head = a.model.heads.get(SOURCE)
            if head is None:
                continue
            intent = Intent(a.world.new_id("m"), "merge", TARGET, a.name, policy="fail")
            intent.source = head
            _history_op(
                a,
                intent,
                f"merge {SOURCE}@{head[:8]} into {TARGET} (no pull request)",
                partial(repo.merge, head, target=TARGET, message=intent.id),
            )
        else:
            try:
                with a.op(f"close #{open_[0]}"):
                    repo.pull_request(open_[0]).close(author=a.name)
            except ZarrLakeError:
                pass


PROGRAMS = {"pulls": pull_requests}
