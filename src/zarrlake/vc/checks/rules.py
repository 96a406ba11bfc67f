"""Where check rules and their results live: the refs partition of the metastore, so every
client (CLI, Python, Spark tasks) enforces the same rules.

A rule is stored under `protect:check/<name>`, next to the protection rules (`protect/`),
so the commit path reads both in the one prefix scan it already made for protection: a
branch no check guards costs no extra round trip. A result is stored under
`checkresult/<commit>/<base>/<name>` with the fingerprint of the rule it was computed
with: it is reused only for the same pair and the same rule.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from zarrlake.errors import CASFailedError, CheckExistsError, InvalidInputError, NotFoundError
from zarrlake.metastore.base import Item, MetaStore
from zarrlake.vc.checks.kinds import Check, check_from_json
from zarrlake.vc.protection import PREFIX as PROTECT_PREFIX
from zarrlake.vc.protection import Protection, Rule, check_pattern

GUARDS = b"protect"
"""The prefix both protection rules and check rules start with (one scan reads both)."""
PREFIX = b"protect:check/"
RESULTS = b"checkresult/"
DROP_BATCH = 500
"""Results deleted per metastore write when they are cleaned up."""
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def check_name(name: object) -> str:
    """A check name: letters, digits, '-', '_' and '.', at most 100 characters."""
    if not isinstance(name, str) or not name or len(name) > 100 or set(name) - NAME_CHARS:
        raise InvalidInputError(
            f"a check name must be 1-100 letters, digits, '-', '_' or '.', not {name!r}"
        )
    return name


@dataclass(frozen=True)
class CheckRule:
    """A named check and the branches (names or globs) it guards."""

    name: str
    check: Check
    branches: tuple[str, ...] = ("main",)

    def guards(self, branch: str) -> bool:
        """Whether one of this rule's patterns matches `branch`."""
        return any(fnmatchcase(branch, p) for p in self.branches)

    def to_json(self) -> dict:
        """The rule as stored and printed."""
        return {"name": self.name, "branches": list(self.branches), "check": self.check.to_json()}

    @classmethod
    def from_json(cls, doc: dict) -> CheckRule:
        """The rule a `to_json` document describes."""
        return cls(doc["name"], check_from_json(doc["check"]), tuple(doc["branches"]))

    @property
    def fingerprint(self) -> str:
        """A digest of what the check computes (its kind and parameters).

        A stored result counts only for the rule it was computed with.
        """
        text = json.dumps(self.check.to_json(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Guards:
    """The protection rules and the check rules of a repository, read in one scan."""

    protection: list[Rule] = field(default_factory=list)
    checks: list[CheckRule] = field(default_factory=list)

    def checks_for(self, branch: str) -> list[CheckRule]:
        """The check rules guarding `branch`."""
        return [r for r in self.checks if r.guards(branch)]


class _Known(Protection):
    """Protection over rules already read (by the shared scan)."""

    def __init__(self, rules: list[Rule]) -> None:
        self._known = rules

    def rules(self) -> list[Rule]:
        """The rules read before."""
        return self._known


def read_guards(meta: MetaStore, partition: str) -> Guards:
    """Every protection and check rule, in one prefix scan of the refs partition."""
    return guards_of(meta.scan(partition, prefix=GUARDS))


def guards_of(items: Iterable[Item]) -> Guards:
    """The protection and check rules among the refs partition's items under GUARDS."""
    protection, checks = [], []
    for key, value, _ in items:
        if key.startswith(PROTECT_PREFIX):
            protection.append(Rule(**json.loads(value)))
        elif key.startswith(PREFIX):
            checks.append(CheckRule.from_json(json.loads(value)))
    return Guards(sorted(protection, key=lambda r: r.pattern), sorted(checks, key=lambda r: r.name))


def commit_guards(guards: Guards, branch: str) -> list[CheckRule]:
    """The commit-time check: ProtectedBranchError if a session may not commit straight to
    `branch`; else the check rules guarding it (read with the branch head, `Refs.look`)."""
    _Known(guards.protection).check_direct_commit(branch)
    return guards.checks_for(branch)


class CheckRules:
    """Reads and writes the check rules of one repository."""

    def __init__(self, meta: MetaStore, partition: str) -> None:
        self.meta = meta
        self.partition = partition

    def add(
        self, name: str, check: Check, branches: str | tuple[str, ...] | list[str]
    ) -> CheckRule:
        """Add the rule `name`; CheckExistsError (an AlreadyExistsError) if taken."""
        if not isinstance(check, Check):
            raise InvalidInputError(
                f"a check must be one of zarrlake.checks' kinds (MaxNaNFraction, ValueRange, "
                f"...), not {check!r}"
            )
        if isinstance(branches, str):
            branches = (branches,)
        pats = tuple(check_pattern(p) for p in branches)
        if not pats:
            raise InvalidInputError(f"check {name!r} must guard at least one branch pattern")
        rule = CheckRule(check_name(name), check, pats)
        value = json.dumps(rule.to_json()).encode()
        try:
            self.meta.set_if(self.partition, PREFIX + name.encode(), value, None)
        except CASFailedError:
            raise CheckExistsError(
                f"a check named {name!r} exists already (remove_check({name!r}) first)"
            ) from None
        return rule

    def remove(self, name: str) -> None:
        """Remove the rule `name`; NotFoundError when there is none. Its recorded results
        go at the next gc or expiry that deletes commits (`drop_results`): a rule added
        again meanwhile with the same check finds them still."""
        key = PREFIX + check_name(name).encode()
        got = self.meta.get(self.partition, key)
        if got is None:
            raise NotFoundError(f"no check named {name!r}; run `zarrlake check list` to see them")
        with contextlib.suppress(CASFailedError):  # replaced or removed meanwhile: theirs stays
            self.meta.delete_if(self.partition, key, got[1])

    def rules(self) -> list[CheckRule]:
        """Every check rule, by name."""
        return read_guards(self.meta, self.partition).checks

    def named(self, names: list[str] | tuple[str, ...]) -> list[CheckRule]:
        """The rules called `names`, in that order; NotFoundError naming a missing one."""
        by_name = {r.name: r for r in self.rules()}
        missing = [n for n in names if n not in by_name]
        if missing:
            known = ", ".join(sorted(by_name)) or "none"
            raise NotFoundError(
                f"no check named {missing[0]!r} (checks: {known}); use one of those"
            )
        return [by_name[n] for n in names]


class CheckResults:
    """The recorded results of checks, by (commit, base, check name)."""

    def __init__(self, meta: MetaStore, partition: str) -> None:
        self.meta = meta
        self.partition = partition

    def _key(self, commit: str, base: str, name: str) -> bytes:
        return RESULTS + f"{commit}/{base}/{name}".encode()

    def get(self, commit: str, base: str, rule: CheckRule) -> dict | None:
        """The result recorded for `rule` on this pair, if it was computed with this rule."""
        got = self.meta.get(self.partition, self._key(commit, base, rule.name))
        if got is None:
            return None
        doc = json.loads(got[0])
        return doc if doc.get("fingerprint") == rule.fingerprint else None

    def put(self, commit: str, base: str, computed: list[tuple[CheckRule, dict]]) -> None:
        """Record results, in one write (the last computed wins: each is its rule's answer)."""
        items = [
            (
                self._key(commit, base, rule.name),
                json.dumps({**doc, "fingerprint": rule.fingerprint}).encode(),
            )
            for rule, doc in computed
        ]
        if items:
            self.meta.set_many(self.partition, items)

    def for_pair(self, commit: str, base: str) -> dict[str, dict]:
        """Check name -> result recorded for this pair (one scan)."""
        prefix = RESULTS + f"{commit}/{base}/".encode()
        return {
            k[len(prefix) :].decode(): json.loads(v)
            for k, v, _ in self.meta.scan(self.partition, prefix=prefix)
        }

    def drop(self, commits: Iterable[str], rules: Iterable[str]) -> int:
        """Delete the results computed on or against any of `commits` (expired or
        collected: their pair can never be asked about again) and those of any rule not
        among `rules` (the names declared now: a removed rule's results); one scan of the
        results. Returns how many were deleted."""
        gone, declared = set(commits), set(rules)
        doomed = []
        for key, _, _ in self.meta.scan(self.partition, prefix=RESULTS):
            commit, base, name = key[len(RESULTS) :].decode().split("/", 2)
            if commit in gone or base in gone or name not in declared:
                doomed.append(key)
        for i in range(0, len(doomed), DROP_BATCH):
            self.meta.set_many(self.partition, [(k, None) for k in doomed[i : i + DROP_BATCH]])
        return len(doomed)

    def of_commit(self, commit: str) -> list[dict]:
        """Every result recorded for `commit` (against any base)."""
        prefix = RESULTS + f"{commit}/".encode()
        return [json.loads(v) for _, v, _ in self.meta.scan(self.partition, prefix=prefix)]


def drop_results(meta: MetaStore, partition: str, commits: Iterable[str]) -> int:
    """Delete the results of `commits` (being expired or collected) and of removed rules;
    returns how many (gc and expiry call it: results are a cache that would otherwise
    grow forever)."""
    declared = [r.name for r in read_guards(meta, partition).checks]
    return CheckResults(meta, partition).drop(commits, declared)
