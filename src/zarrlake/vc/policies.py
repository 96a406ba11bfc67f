"""The option values users pass as strings, defined once: how a commit or a merge resolves
chunk conflicts, when a merge may fast-forward, and what a commit does about writes a worker
has not flushed. Each is a `Literal` type for type checkers and a tuple for the checks made
at run time (a bad value raises InvalidInputError naming the valid ones)."""

from __future__ import annotations

from typing import Literal, get_args

ConflictPolicy = Literal["fail", "ours", "theirs"]
"""`on_conflict` of a commit or a merge: raise, keep our chunk, or take theirs."""

FastForward = Literal["allow", "never", "only"]
"""`fast_forward` of a merge: move the branch when it can, always make a merge commit, or
raise unless the branch can move."""

UnflushedPolicy = Literal["wait", "discard"]
"""`unflushed` of a commit: wait for live workers' unflushed writes, or commit without them."""

CONFLICT_POLICIES: tuple[ConflictPolicy, ...] = get_args(ConflictPolicy)
FAST_FORWARD: tuple[FastForward, ...] = get_args(FastForward)
UNFLUSHED_POLICIES: tuple[UnflushedPolicy, ...] = get_args(UnflushedPolicy)

UnfinishedPolicy = Literal["discard", "include"]
"""`unfinished` of a commit, when a worker failed or died: leave out everything it staged,
or keep what it flushed (the values of `txn.writers.Unfinished`)."""

IsolationLevel = Literal["snapshot", "serializable"]
"""`isolation` of a session: check written keys for conflicts, or read ones too (the values
of `session_records.Isolation`)."""
