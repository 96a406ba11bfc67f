"""What every command shares: the repository options, opening the repository, output."""

from __future__ import annotations

import json
import os
import re
import sys
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from zarrlake.errors import InvalidInputError

PANEL_SETUP = "Set up"
PANEL_HISTORY = "History"
PANEL_REFS = "Branches, tags and merges"
PANEL_DATA = "Data"
PANEL_SESSIONS = "Sessions"
PANEL_MAINTENANCE = "Maintenance"
PANEL_VIRTUAL = "Virtual chunks"
PANEL_TOOLS = "Tools"
PANELS = [
    PANEL_SETUP,
    PANEL_HISTORY,
    PANEL_REFS,
    PANEL_DATA,
    PANEL_SESSIONS,
    PANEL_MAINTENANCE,
    PANEL_VIRTUAL,
    PANEL_TOOLS,
]
"""The help panels `zarrlake --help` groups its commands in, in this order."""


class _LazyConsole:
    """rich's Console on stdout, made on first use: importing rich.console is a good part of
    the start-up of a command that prints no table (`--version`, `--json` output)."""

    def __init__(self) -> None:
        self._real: Any = None

    def __getattr__(self, name: str) -> Any:  # what the proxy lacks: the Console's own
        if self._real is None:
            from rich.console import Console

            self._real = Console(
                highlight=False,
                soft_wrap=not sys.stdout.isatty(),  # lines piped to a file or a program stay whole
                width=None if sys.stdout.isatty() else 120,
            )
        return getattr(self._real, name)


console: Any = _LazyConsole()
"""Where commands print for people (rich's Console, made when first used)."""


def escape(text: str) -> str:
    """Text with rich markup escaped (rich.markup is imported when first needed)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


AsOfOpt = Annotated[
    str | None,
    typer.Option(
        "--as-of",
        metavar="DATE",
        help="Time travel: the newest commit of the ref made at or before DATE "
        "(ISO 8601, e.g. 2024-05-01 or 2024-05-01T12:00:00Z; UTC unless it says).",
    ),
]

REF_HELP = "Branch, tag, commit id (or a unique prefix of one) or ref expression, e.g. main~2."
"""What a ref is, said once for every command that takes one."""
RefArg = Annotated[str, typer.Argument(metavar="REF", help=REF_HELP)]
"""The ref a reading command looks at: its first argument (cat, ls, log, show)."""
RefOpt = Annotated[str, typer.Option("--ref", metavar="REF", help=REF_HELP)]
"""The same ref as an option, where the first arguments name something else (blame)."""


@dataclass
class Options:
    """The repository location and how to reach it, from the global flags or environment."""

    repo: str = "."
    metastore: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    debug: bool = False

    def open(self):
        """The repository; NotFoundError (one clear line) when there is none."""
        from zarrlake.repo import Repo

        return Repo.open(
            self.repo, metastore=self.metastore, storage_options=self.storage_options or None
        )

    def create(self):
        """A new repository here; AlreadyExistsError when there is one."""
        from zarrlake.repo import Repo

        return Repo.create(
            self.repo, metastore=self.metastore, storage_options=self.storage_options or None
        )


def describe_metastore(url: str) -> str:
    """The metastore URL as shown to users: password masked, and for SQLite the file."""
    from zarrlake.cli.redact import redact

    shown = redact(url)
    if url.lower().startswith("sqlite://"):
        from zarrlake.metastore.sqlite import parse_sqlite_url

        with suppress(InvalidInputError):
            shown += f" (file {parse_sqlite_url(url)[0]})"
    return shown


def options(ctx: typer.Context) -> Options:
    """The global options of this invocation, held on the root context (created on first use)."""
    root = ctx.find_root()
    if not isinstance(root.obj, Options):
        root.obj = Options()
    return root.obj


def print_json(value: Any) -> None:
    """Machine-readable output: plain JSON on stdout, never wrapped or coloured."""
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
    sys.stdout.flush()


def when(value: datetime | float | None) -> str:
    """A time as printed in tables (UTC, to the second); "-" for none."""
    if value is None:
        return "-"
    if not isinstance(value, datetime):
        value = datetime.fromtimestamp(value, UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_duration(text: str) -> timedelta:
    """'2d', '12h', '30m', '45s' or combinations such as '1d12h'."""
    compact = text.strip().lower().replace(" ", "")
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise InvalidInputError(
            f"bad duration {text!r}: use a number and a unit d, h, m or s, e.g. 2d, 12h, 30m"
        )
    total = timedelta()
    for number, unit in parts:
        total += timedelta(**{_UNITS[unit]: float(number)})
    return total


def parse_when(text: str | None) -> datetime | None:
    """An --as-of DATE: ISO 8601, UTC unless it names an offset; None for None."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInputError(
            f"bad date {text!r}: use ISO 8601, e.g. 2024-05-01 or 2024-05-01T12:00:00Z"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def parse_storage_option(text: str) -> tuple[str, Any]:
    """(key, value) of a `--storage-option KEY=VALUE`; the value is parsed as JSON when it is."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise InvalidInputError(f"bad storage option {text!r}: use KEY=VALUE")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def env_flag(name: str) -> bool:
    """Whether the environment variable `name` is set to a true value (1, true, yes, on)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
