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

_CRASH_AT = os.environ.get("ZARRLAKE_CRASH_AT")


def reached(point: str) -> None:
    if point == _CRASH_AT:
        os.kill(os.getpid(), signal.SIGKILL)
