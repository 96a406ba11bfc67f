"""Running check rules on a change: each chunk is read once for all the chunkwise checks
of its array, results are recorded against the (commit, base) pair they were computed on,
and a recorded result is reused only for that same pair and rule."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from zarrlake.errors import ChecksFailedError, NotFoundError
from zarrlake.vc.checks.context import ChangeView, Coords, Outcome
from zarrlake.vc.checks.kinds import Chunkwise, Custom, Tally, tallied
from zarrlake.vc.checks.rules import CheckResults, CheckRule


@dataclass(frozen=True)
class CheckResult:
    """The answer of one check on the change from `base` to `commit`."""

    name: str
    kind: str
    passed: bool
    message: str
    commit: str
    base: str
    array: str | None = None
    chunks: list[Coords] = field(default_factory=list)
    """A few failing chunk coordinates (`failing` counts them all)."""
    failing: int = 0
    reused: bool = False
    """Read back from the results recorded for this pair, not computed again."""
    chunks_read: int = 0
    """Chunks the run that computed it read (shared by the checks computed together)."""
    chunks_from_stats: int = 0
    """Chunks this check decided from their statistics, without reading them."""

    def to_json(self) -> dict:
        """The result as recorded and printed."""
        doc = asdict(self)
        doc["chunks"] = [list(c) for c in self.chunks]
        return doc

    @classmethod
    def from_json(cls, doc: dict, reused: bool = False) -> CheckResult:
        """A result from its recorded form."""
        fields_ = {k: doc[k] for k in cls.__dataclass_fields__ if k in doc}
        fields_["chunks"] = [tuple(c) for c in doc.get("chunks", [])]
        fields_["reused"] = reused
        return cls(**fields_)

    def __str__(self) -> str:
        state = "passed" if self.passed else "FAILED"
        return f"check {self.name!r} ({self.kind}) {state}: {self.message}"


def evaluate(rules: list[CheckRule], view: ChangeView) -> dict[str, Outcome]:
    """Every rule's outcome on `view`; the chunkwise checks of one array share one read
    of each changed chunk."""
    out: dict[str, Outcome] = {}
    tallies: dict[str, list[tuple[str, Tally]]] = defaultdict(list)
    for rule in rules:
        check = rule.check
        if isinstance(check, Chunkwise):
            tally = check.tally(view)
            if isinstance(tally, Outcome):
                out[rule.name] = tally
            else:
                tallies[check.array].append((rule.name, tally))
            continue
        try:
            out[rule.name] = check.evaluate(view)
        except NotFoundError as e:
            if not isinstance(check, Custom):
                raise
            out[rule.name] = Outcome(False, str(e))  # a gate fails closed
    for array, group in tallies.items():
        outcomes = tallied(view, array, [tally for _, tally in group])
        for (name, _), outcome in zip(group, outcomes, strict=True):
            out[name] = outcome
    return out


def recorded_results(
    rules: list[CheckRule], commit: str, base: str, results: CheckResults
) -> dict[str, CheckResult]:
    """{rule name: result} of the rules whose result on (commit, base) is recorded, for the
    rule as it is now (a changed rule's old result does not count); nothing is computed."""
    if not rules:
        return {}
    recorded = results.for_pair(commit, base)
    found = {}
    for rule in rules:
        doc = recorded.get(rule.name)
        if doc is not None and doc.get("fingerprint") == rule.fingerprint:
            found[rule.name] = CheckResult.from_json(doc, reused=True)
    return found


def run_rules(
    rules: list[CheckRule],
    commit: str,
    base: str,
    make_view: Callable[[], ChangeView],
    results: CheckResults,
    reuse: bool = True,
    record: bool = True,
) -> list[CheckResult]:
    """The results of `rules` on the change from `base` to `commit`, in rule order: those
    recorded for this pair (and rule) reused, the others computed on one view and recorded
    (unless `record` is False: a reader such as a web page writes nothing)."""
    found = recorded_results(rules, commit, base, results) if reuse else {}
    todo = [r for r in rules if r.name not in found]
    if todo:
        view = make_view()
        outcomes = evaluate(todo, view)
        read = int(getattr(view, "chunk_reads", 0))
        computed = []
        for rule in todo:
            o = outcomes[rule.name]
            res = CheckResult(
                rule.name,
                rule.check.kind,
                o.passed,
                o.message,
                commit,
                base,
                o.array if o.array is not None else rule.check.array_name,
                list(o.chunks),
                o.failing,
                chunks_read=read,
                chunks_from_stats=o.from_stats,
            )
            computed.append((rule, res.to_json()))
            found[rule.name] = res
        if record:
            results.put(commit, base, computed)
    return [found[r.name] for r in rules]


def failure(results: list[CheckResult], what: str) -> ChecksFailedError | None:
    """The error refusing `what` (e.g. "commit abc on 'main'") if a result failed."""
    failed = [r for r in results if not r.passed]
    if not failed:
        return None
    lines = "; ".join(str(r) for r in failed)
    return ChecksFailedError(
        f"{what} refused: {len(failed)} of {len(results)} checks failed: {lines}. The branch "
        "was not moved",
        failed,
    )
