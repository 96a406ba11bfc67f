"""What every command shares: the repository options, opening the repository, output, the
values the command line takes (refs, durations, dates, coordinates) and how it says no
(usage errors exit 2, deprecation notices, which errors are the user's)."""

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

from zarrlake.errors import InvalidInputError, ZarrLakeError

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


class UsageError(typer.BadParameter):
    """A usage error (exit 2, nothing attempted): the command line itself does not parse or
    contradicts itself. Said as is, or as click says a bad value when it names the option or
    argument at fault."""

    def format_message(self) -> str:
        """The message alone, or click's 'Invalid value for X: ...' when it names X."""
        if self.param_hint is None and self.param is None:
            return self.message
        return super().format_message()


def usage_error(message: str, hint: str | None = None) -> UsageError:
    """A usage error to raise; `hint` names the option or argument at fault ('--older-than')."""
    return UsageError(message, param_hint=hint)


def deprecated(old: str, new: str) -> None:
    """Say on stderr, in one line, that `old` (a form of the command line) still works but
    goes in the next release, and what to write instead."""
    sys.stderr.write(
        f"zarrlake: warning: '{old}' is deprecated and goes in the next release; use '{new}'\n"
    )
    sys.stderr.flush()


def renamed_option(new: object, old: object, new_flag: str, old_flag: str) -> object:
    """The value of an option given by its new flag or, deprecated, its old one (which says
    so on stderr); both given is a usage error."""
    if old is None:
        return new
    if new is not None:
        raise typer.BadParameter(f"give {new_flag} only ({old_flag} is its old name)")
    deprecated(old_flag, new_flag)
    return old


def is_user_error(error: BaseException) -> bool:
    """Whether an error is about the user's input, repository or machine: zarrlake's own
    errors and the operating system's. Anything else (a bare ValueError, KeyError, ...) is a
    bug, shown as an internal error."""
    return isinstance(error, ZarrLakeError | OSError)


def error_line(error: BaseException) -> str:
    """The one line an error prints as: its first line for a user error, else an internal
    error naming its type, with the hint to rerun with --debug for the traceback."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    if is_user_error(error):
        return first
    return f"internal error: {type(error).__name__}: {first} (run with --debug for the traceback)"


def usage_line(arguments: str) -> type:
    """A command class whose usage line shows its positional arguments as `arguments`
    ('[REF] {ARRAY}'), for commands that read their positional words themselves."""

    class Command(typer.core.TyperCommand):
        def collect_usage_pieces(self, ctx: Any) -> list[str]:
            return [self.options_metavar or "[OPTIONS]", arguments]

    return Command


_DURATION_PART = r"(\d+(?:\.\d+)?)([wdhms])"
_UNITS = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
DURATION_FORMS = "a number and a unit s, m, h, d or w: 90s, 15m, 2h, 7d, 1w (or combined: 1d12h)"
"""The durations the command line accepts, as its errors and help say."""


def parse_duration(text: str | timedelta) -> timedelta:
    """'90s', '15m', '2h', '7d', '1w' or combinations such as '1d12h' (a timedelta passes
    through); a usage error naming the accepted forms otherwise."""
    if isinstance(text, timedelta):
        return text
    compact = text.strip().lower().replace(" ", "")
    parts = re.findall(_DURATION_PART, compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise usage_error(f"bad duration {text!r}: use {DURATION_FORMS}")
    total = timedelta()
    for number, unit in parts:
        total += timedelta(**{_UNITS[unit]: float(number)})
    return total


def duration_text(delta: timedelta) -> str:
    """A duration as the command line writes it: '2h', '1d12h', '90s' -> '1m30s', '0s'."""
    seconds = delta.total_seconds()
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        n, seconds = divmod(seconds, size)
        if n:
            parts.append(f"{n:.0f}{unit}")
    if seconds or not parts:
        parts.append(f"{seconds:g}s")
    return "".join(parts)


def parse_when(text: str | datetime | None) -> datetime | None:
    """An --as-of DATE: ISO 8601, UTC unless it names an offset (a datetime or None passes
    through); a usage error otherwise."""
    if text is None or isinstance(text, datetime):
        return text
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise usage_error(
            f"bad date {text!r}: use ISO 8601, e.g. 2024-05-01 or 2024-05-01T12:00:00Z"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


_COORDS = r"\d+(,\d+)*,?"


def is_coords(text: str) -> bool:
    """Whether `text` is written as chunk coordinates: '9', '9,1,2'."""
    return re.fullmatch(_COORDS, text.strip()) is not None


def parse_coords(words: list[str] | tuple[str, ...]) -> tuple[int, ...]:
    """Chunk coordinates written '9,1,2', '9 1 2' (separate words) or both; a usage error
    naming a word that is not coordinates."""
    coords: list[int] = []
    for word in words:
        if not is_coords(word):
            raise usage_error(
                f"bad chunk coordinates {word!r}: write them as 9,1,2 or 9 1 2", "'COORD'"
            )
        coords += [int(c) for c in word.strip().rstrip(",").split(",")]
    return tuple(coords)


def duration_option(help: str, name: str = "--older-than", default: str | None = None) -> Any:
    """An option taking a duration (a timedelta; a bad one is a usage error); `default` is
    the default as help shows it (give the timedelta as the parameter's default)."""
    shown = f"; default {default}" if default else ""
    return typer.Option(
        name,
        metavar="DURATION",
        parser=parse_duration,
        help=f"{help} (e.g. 90s, 2h, 7d, 1w{shown}).",
        show_default=False,
    )


AsOfOpt = Annotated[
    datetime | None,
    typer.Option(
        "--as-of",
        metavar="DATE",
        parser=parse_when,
        help="Time travel: the newest commit of the ref made at or before DATE "
        "(ISO 8601, e.g. 2024-05-01 or 2024-05-01T12:00:00Z; UTC unless it says).",
    ),
]

REF_HELP = "Branch, tag, commit id (or a unique prefix of one) or ref expression, e.g. main~2."
"""What a ref is, said once for every command that takes one."""
RefArg = Annotated[str, typer.Argument(metavar="REF", help=REF_HELP)]
"""The ref a reading command looks at: its first argument (ls, log, show, stats, ...)."""


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


def parse_storage_option(text: str) -> tuple[str, Any]:
    """(key, value) of a `--storage-option KEY=VALUE`; the value is parsed as JSON when it is."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise usage_error(f"bad storage option {text!r}: use KEY=VALUE")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def env_flag(name: str) -> bool:
    """Whether the environment variable `name` is set to a true value (1, true, yes, on)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
