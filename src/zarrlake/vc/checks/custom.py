"""Custom checks: Python callables registered under the entry-point group `zarrlake.checks`
(importlib.metadata), named by a `Custom` rule.

The callable receives the check's view (zarrlake.checks.CheckContext) and the rule's
parameters as keywords, and returns True/False, (passed, message), or an Outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from zarrlake.errors import InvalidInputError, NotFoundError
from zarrlake.vc.checks.context import Outcome

GROUP = "zarrlake.checks"


def load(name: str) -> Callable[..., Any]:
    """The callable registered as `name` in the `zarrlake.checks` entry-point group;
    NotFoundError naming it (and those registered) when there is none."""
    found = entry_points(group=GROUP)
    for ep in found:
        if ep.name == name:
            fn = ep.load()
            if not callable(fn):
                raise InvalidInputError(
                    f"entry point {name!r} ({ep.value}) is not callable; point it at a function"
                )
            return fn
    known = ", ".join(sorted({ep.name for ep in found})) or "none is installed"
    raise NotFoundError(
        f"no custom check {name!r} in entry-point group {GROUP!r} ({known}); install the "
        "package that registers it"
    )


def as_outcome(name: str, answer: object) -> Outcome:
    """A custom check's answer as an Outcome: bool, (bool, message) or Outcome."""
    if isinstance(answer, Outcome):
        return answer
    if isinstance(answer, bool):
        return Outcome(answer, "" if answer else f"custom check {name!r} failed")
    if (
        isinstance(answer, tuple)
        and len(answer) == 2
        and isinstance(answer[0], bool)
        and isinstance(answer[1], str)
    ):
        return Outcome(answer[0], answer[1])
    raise InvalidInputError(
        f"custom check {name!r} returned {answer!r}; it must return a bool, "
        "(passed, message) or a zarrlake.checks.Outcome"
    )
