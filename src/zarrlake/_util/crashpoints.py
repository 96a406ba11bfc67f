"""Named points in the write and commit paths where tests can kill the process.

Set ZARRLAKE_CRASH_AT=<point> in a writer process and it SIGKILLs itself when it reaches
that point, so crash-safety tests can stop a real commit between any two of its steps.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "after_chunk_upload",  # chunk object written, nothing staged
    "after_staging",  # staged record written in the metastore
    "after_seal",  # session status is "committing"
    "after_objects_written",  # packs, manifests, snapshot, change set, commit record
    "before_branch_cas",  # every object written, branch about to move
    "after_branch_cas",  # branch moved, session record not yet "committed"
    "after_session_committed",  # session committed, staged records not yet cleared
)

GC_POINTS = (
    "gc_after_register",  # gc: candidates registered (staged records maybe not yet dropped)
    "gc_after_sweep_begins",  # gc: sweep epoch entered, nothing deleted yet
    "gc_before_delete",  # gc: live objects marked again, nothing deleted yet
    "gc_after_delete",  # gc: one batch of objects deleted, not yet dropped from candidates
    "gc_after_sweep_ends",  # gc: sweep epoch left
    "expire_after_markers",  # expire: markers written, commit records not yet deleted
)

FLUSH_POINTS = (
    "after_fragment_upload",  # a flush's fragment object written, not yet registered
)

PULL_REQUEST_POINTS = (
    "pr_after_merging",  # pull request record "merging", target not merged yet
    "pr_after_merge",  # merge landed on the target, record not yet "merged"
)

COPY_POINTS = (
    "pull_after_data_batch",  # clone/pull: a batch of objects copied, no commit record yet
    "purge_after_batch",  # purge: a batch of objects retired, the record still pending
)

WAIT_POINT = "writer_waits_for_sweep"
"""Reached on every poll of a writer or commit waiting for a garbage-collection sweep to end
(tests watch it; crashing there is no different from crashing before the write)."""

_CRASH_AT = os.environ.get("ZARRLAKE_CRASH_AT")


def reached(point: str) -> None:
    """Kill this process (SIGKILL) if ZARRLAKE_CRASH_AT names `point`; otherwise nothing."""
    if point == _CRASH_AT:
        os.kill(os.getpid(), signal.SIGKILL)
