"""Checks: rules stored in the repository's metastore that gate what lands on a branch.

Declare one with `Repo.add_check(name, check, branches=("main",))`; every commit, merge,
revert or reset onto a guarded branch runs it on the proposed commit against the head it
replaces, reading only the chunks the change touches, and ChecksFailedError refuses the
move when it fails. `Repo.run_checks(ref, base)` runs them on demand; results are
recorded against the (commit, base) pair they were computed on.

Kinds: MaxNaNFraction, ValueRange, Monotonic, RequiredAttrs, SchemaUnchanged,
MaxChangedChunks, NoDeletedChunks, and Custom (a callable registered under the
entry-point group `zarrlake.checks`, called with a CheckContext and its parameters).
"""

from __future__ import annotations

from zarrlake.txn.check_view import CheckContext
from zarrlake.vc.checks.context import Outcome
from zarrlake.vc.checks.custom import GROUP as ENTRY_POINT_GROUP
from zarrlake.vc.checks.kinds import (
    KINDS,
    Check,
    Custom,
    MaxChangedChunks,
    MaxNaNFraction,
    Monotonic,
    NoDeletedChunks,
    RequiredAttrs,
    SchemaUnchanged,
    ValueRange,
    check_from_json,
)
from zarrlake.vc.checks.rules import CheckRule
from zarrlake.vc.checks.run import CheckResult

__all__ = [
    "ENTRY_POINT_GROUP",
    "KINDS",
    "Check",
    "CheckContext",
    "CheckResult",
    "CheckRule",
    "Custom",
    "MaxChangedChunks",
    "MaxNaNFraction",
    "Monotonic",
    "NoDeletedChunks",
    "Outcome",
    "RequiredAttrs",
    "SchemaUnchanged",
    "ValueRange",
    "check_from_json",
]
