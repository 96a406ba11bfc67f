"""What a commit makes of writers that failed or are gone: those whose part finished
writers wrote again are left out (txn/superseded.py), and the refusal over the others
names what is still missing and leads with the choice that fits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from zarrlake.errors import UnfinishedWritersError
from zarrlake.format.fragment import FragmentIndex, FragmentRecord
from zarrlake.format.snapshot import is_meta_key
from zarrlake.txn.staging import State, Writer, WriterState
from zarrlake.txn.superseded import Part, parts
from zarrlake.txn.writers import Unfinished, Verdict
from zarrlake.vc.chunk_keys import KeyNamer


def settle(
    verdict: Verdict,
    state: State,
    unfinished: Unfinished | None,
    read_index: Callable[[FragmentRecord], FragmentIndex],
    namer: KeyNamer,
) -> Verdict:
    """The verdict once the unfinished writers whose part finished writers wrote again
    (txn/superseded.py) are left out, whatever `unfinished` chose; each writer left is
    described with what is still missing and the choice that fits."""
    if not verdict.unfinished_ids:
        return verdict
    found = parts(state, verdict.unfinished_ids, read_index)
    gone = frozenset(w for w, p in found.items() if p.superseded)
    left = [w for w in sorted(verdict.unfinished_ids) if w not in gone]
    advice = {w: _advice(found[w], state.writers.get(w), namer) for w in left}
    described = [f"{verdict.described.get(w, f'worker {w}')}: {advice[w][1]}" for w in left]
    choices = {advice[w][0] for w in left}
    choice = choices.pop() if len(choices) == 1 else None
    excluded = gone | (frozenset(left) if unfinished == Unfinished.DISCARD else frozenset())
    return replace(
        verdict,
        unfinished=described,
        unfinished_ids=frozenset(left),
        excluded=excluded,
        superseded=gone,
        choice=choice,
    )


MISSING = "rewrite"
"""The choice of a refusal whose writers' parts are still (partly) missing: write them again."""


def _advice(part: Part, rec: Writer | None, namer: KeyNamer) -> tuple[str, str]:
    """(the choice that fits, why) for an unfinished writer whose part was not rewritten."""
    failed = rec is not None and rec.state == WriterState.FAILED
    if not part.missing:  # every key known was written again; some never were known
        known = (
            f"all {part.rewritten_keys} key(s) known of its part were written again by "
            "finished workers, but it"
            if part.rewritten_keys
            else "it flushed nothing, and"
        )
        return (
            str(Unfinished.DISCARD),
            f"{known} held unflushed writes whose keys were never recorded (a batch that "
            "began with a read)",
        )
    if not failed and not part.unflushed and not part.rewritten_keys and part.staged:
        return (
            str(Unfinished.INCLUDE),
            "it had flushed everything it held when its process ended (as a committer "
            "killed before its commit has), and nobody wrote its part again",
        )
    still = name_keys(namer, part.missing)
    if part.unflushed:
        still += ", and writes it never flushed (only the first of each batch is known)"
    rewritten = f"{part.rewritten_keys} key(s) of its part were written again; " * bool(
        part.rewritten_keys
    )
    return MISSING, f"{rewritten}still missing: {still}"


def name_keys(namer: KeyNamer, keys: list[str], few: int = 3) -> str:
    """Keys as users know them, by array: "array 't': 2 chunk(s), (4, 0), (5, 0)"."""
    chunks: dict[str, list[tuple[int, ...] | str]] = {}
    documents: list[str] = []
    for key in keys:
        if is_meta_key(key):
            documents.append(key)
            continue
        node, coords = namer.name(key)
        chunks.setdefault(node, []).append(coords if coords is not None else key)
    out = []
    for node, where in chunks.items():
        shown = ", ".join(str(c) if isinstance(c, tuple) else repr(c) for c in where[:few])
        more = ", ..." if len(where) > few else ""
        out.append(f"array {node!r}: {len(where)} chunk(s), {shown}{more}")
    if documents:
        out.append(f"metadata {', '.join(repr(d) for d in documents[:few])}")
    return "; ".join(out)


_LEAD = {
    str(Unfinished.INCLUDE): "if that was all of their part, commit(..., "
    "unfinished='include') keeps what they flushed; otherwise write the rest again from a new "
    "worker and commit with unfinished='include' (unfinished='discard' leaves out everything "
    "they staged)",
    str(Unfinished.DISCARD): "if their part was written again, commit(..., "
    "unfinished='discard') leaves out everything they staged (unfinished='include' keeps "
    "what they flushed)",
    MISSING: "write the missing chunks again from a new worker and commit (no choice is needed "
    "then); or choose: commit(..., unfinished='discard') leaves out everything they staged, "
    "unfinished='include' keeps what they flushed",
}


def refuse(session_id: str, verdict: Verdict) -> UnfinishedWritersError:
    """The error of a commit that will not choose for the caller what unfinished writers'
    writes become; it leads with the choice that fits (`verdict.choice`)."""
    lead = _LEAD.get(verdict.choice or "", _LEAD[MISSING])
    error = UnfinishedWritersError(
        f"session {session_id}: {len(verdict.unfinished)} worker(s) did not finish, and "
        f"their part was not written again: {'; '.join(verdict.unfinished)}. Nothing was "
        f"committed. To commit: {lead}",
        verdict.unfinished,
    )
    error.choice = verdict.choice
    return error


def refuse_withdrawn(session_id: str, withdrawn: list[str]) -> UnfinishedWritersError:
    """The error of a commit by a handle some of whose own writes were withdrawn (its
    flush raised for them) and not written again: as PostgreSQL refuses to commit a
    transaction after a failed statement, the commit will not drop them silently."""
    shown = "; ".join(dict.fromkeys(withdrawn))
    error = UnfinishedWritersError(
        f"session {session_id}: writes of this handle were withdrawn and not written again "
        f"({shown}). Nothing was committed. To commit: write those chunks again (in this "
        "handle, or in a new session) and commit; or commit without them on purpose: "
        "commit(..., unfinished='include') (or 'discard') commits this handle's other writes",
        [f"this handle: {w}" for w in dict.fromkeys(withdrawn)],
    )
    error.choice = MISSING
    return error
